"""Parity with vLLM's OpenAI server (issue 25, item 3), end to end with the official OpenAI
client and raw HTTP: the vLLM fields octet honours (prompt_logprobs on chat, logprobs -1 and
--max-logprobs, return_token_ids, return_tokens_as_token_ids, truncate_prompt_tokens /
truncation_side, stream_options.continuous_usage_stats, continue_final_message, chat echo,
/tokenize return_token_strs), vLLM's response keys, its error texts, and the routes without /v1.
Expectations follow vLLM's protocol.py and serving_*.py; token ids are checked against /tokenize.
"""
import re

import openai
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME, Server
from test_openai_e2e import chunks_of, post_json, request, sse

PROMPT = "The capital of France is"
COUNT_MESSAGES = [{"role": "user", "content": "Count from 1 to 10."},
                  {"role": "assistant", "content": "1, 2, 3, 4,"}]


def tokenize(server, **body):
    status, r = post_json(server, "/tokenize", {"model": MODEL_NAME, **body})
    assert status == 200, r
    return r


def detokenize(server, ids):
    status, r = post_json(server, "/detokenize", {"model": MODEL_NAME, "tokens": ids})
    assert status == 200, r
    return r["prompt"]


def completion(server, **body):
    status, r = post_json(server, "/v1/completions",
                          {"model": MODEL_NAME, "prompt": PROMPT, "temperature": 0, **body})
    assert status == 200, r
    return r


def chat(server, **body):
    body = {"model": MODEL_NAME, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hi."}], **body}
    status, r = post_json(server, "/v1/chat/completions", body)
    assert status == 200, r
    return r


def error_of(server, path, body=None, raw_body=None):
    status, _, data = request(server, "POST", path, body, raw_body=raw_body)
    assert status == 400, data
    import json
    return json.loads(data)["error"]


# ---- response shape (item 2) -----------------------------------------------------------------

def test_null_keys_as_vllm(server):
    r = completion(server, max_tokens=2)
    for key in ("service_tier", "system_fingerprint"):
        assert key in r and r[key] is None, r
    choice = r["choices"][0]
    for key in ("prompt_logprobs", "token_ids", "prompt_token_ids"):
        assert key in choice and choice[key] is None, choice
    c = chat(server, max_tokens=2)
    for key in ("service_tier", "system_fingerprint", "prompt_logprobs", "prompt_token_ids"):
        assert key in c and c[key] is None, c
    assert "token_ids" in c["choices"][0] and c["choices"][0]["token_ids"] is None
    message = c["choices"][0]["message"]
    assert "reasoning" in message and message["reasoning"] is None, message


# ---- prompt_logprobs on chat (item 1) --------------------------------------------------------

def test_chat_prompt_logprobs(server, client):
    r = chat(server, max_tokens=2, prompt_logprobs=2, return_token_ids=True)
    ids = r["prompt_token_ids"]
    lps = r["prompt_logprobs"]
    assert len(lps) == len(ids) == r["usage"]["prompt_tokens"]
    assert lps[0] is None
    for i, entry in enumerate(lps[1:], start=1):
        # The prompt token itself, plus the 2 most likely ids (ranks 1 and 2).
        assert str(ids[i]) in entry, (i, entry)
        assert 2 <= len(entry) <= 3
        assert {1, 2} <= {v["rank"] for v in entry.values()}, entry
        assert all(v["logprob"] <= 0 for v in entry.values())
    # The same through the OpenAI client (a vLLM extra: extra_body).
    resp = client.chat.completions.create(model=MODEL_NAME, max_tokens=1, temperature=0,
                                          messages=[{"role": "user", "content": "Say hi."}],
                                          extra_body={"prompt_logprobs": 0})
    assert len(resp.model_extra["prompt_logprobs"]) == len(ids)
    # Not with stream, as vLLM.
    e = error_of(server, "/v1/chat/completions",
                 {"model": MODEL_NAME, "messages": COUNT_MESSAGES[:1], "stream": True,
                  "prompt_logprobs": 1})
    assert e["param"] == "prompt_logprobs"


# ---- logprob order: the chosen token first (vLLM) --------------------------------------------

def test_logprobs_chosen_token_first(server):
    """vLLM orders each top_logprobs dict with the sampled (or echoed prompt) token first, then the
    top entries by rank; its test_return_tokens_as_ids reads that first key. The peer finding:
    " world" at the 5th token came after " World"."""
    import json
    status, _, data = request(server, "POST", "/v1/completions",
                              {"model": MODEL_NAME, "prompt": "Say 'Hello, world!'", "echo": True,
                               "temperature": 0, "max_tokens": 3, "logprobs": 1})
    assert status == 200, data
    # object_pairs_hook: the keys in wire order (a dict keeps it too, but say so).
    lp = json.loads(data, object_pairs_hook=lambda pairs: pairs)
    lp = dict(dict(lp)["choices"][0])["logprobs"]
    lp = dict(lp)
    tokens, top = lp["tokens"], lp["top_logprobs"]
    assert top[0] is None and len(tokens) == len(top) > 4
    for i in range(1, len(tokens)):
        keys = [k for k, _ in top[i]]
        assert keys[0] == tokens[i], (i, tokens[i], keys)
        assert 1 <= len(keys) <= 2
    # prompt_logprobs: the prompt token's id first.
    r = completion(server, prompt="Say 'Hello, world!'", max_tokens=1, prompt_logprobs=1,
                   return_token_ids=True)
    ids = r["choices"][0]["prompt_token_ids"]
    for i, entry in enumerate(r["choices"][0]["prompt_logprobs"][1:], start=1):
        assert next(iter(entry)) == str(ids[i]), (i, entry)
    # Chat: top_logprobs is a list; the sampled token comes first there too.
    r = chat(server, max_tokens=4, logprobs=True, top_logprobs=3, temperature=1.0, seed=3)
    for entry in r["choices"][0]["logprobs"]["content"]:
        assert entry["top_logprobs"][0]["token"] == entry["token"], entry
        assert len(entry["top_logprobs"]) == 3


# ---- error texts (items 3, 4, 9) -------------------------------------------------------------

def test_logit_bias_names_every_bad_key(server):
    e = error_of(server, "/v1/completions",
                 {"model": MODEL_NAME, "prompt": "x", "logit_bias": {"abc": 1, "-1": 1, "5": 1}})
    assert e["param"] == "logit_bias"
    assert '"abc"' in e["message"] and '"-1"' in e["message"], e
    e = error_of(server, "/v1/completions",
                 {"model": MODEL_NAME, "prompt": "x", "logit_bias": {"60000": 1, "70000": 2}})
    assert "60000" in e["message"] and "70000" in e["message"], e
    assert "Vocabulary size: 49152" in e["message"]


@pytest.mark.parametrize("field,literal", [("seed", "1e30"), ("seed", "-9223372036854775809"),
                                           ("max_tokens", "1e20"),
                                           ("n", "99999999999999999999")])
def test_out_of_range_integers_quoted_as_sent(server, field, literal):
    raw = ('{"model": "%s", "prompt": "x", "%s": %s}' % (MODEL_NAME, field, literal)).encode()
    e = error_of(server, "/v1/completions", raw_body=raw)
    assert e["param"] == field
    assert "got " + literal in e["message"], e
    assert "e+" not in e["message"]


def test_logprobs_minus_one_and_max_logprobs(server):
    # -1 is the whole vocabulary (49152 ids), beyond the default --max-logprobs 20: 400 (vLLM).
    e = error_of(server, "/v1/chat/completions",
                 {"model": MODEL_NAME, "messages": COUNT_MESSAGES[:1], "logprobs": True,
                  "top_logprobs": -1})
    assert e["param"] == "top_logprobs"
    assert "Requested sample logprobs of 49152, which is greater than max allowed: 20" in \
        e["message"], e
    e = error_of(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "logprobs": -1})
    assert e["param"] == "logprobs"
    e = error_of(server, "/v1/completions",
                 {"model": MODEL_NAME, "prompt": "x", "prompt_logprobs": -1})
    assert e["param"] == "prompt_logprobs"
    assert "Requested prompt logprobs of 49152" in e["message"]
    e = error_of(server, "/v1/chat/completions",
                 {"model": MODEL_NAME, "messages": COUNT_MESSAGES[:1], "logprobs": True,
                  "top_logprobs": 21})
    assert e["param"] == "top_logprobs"


def test_max_logprobs_flag():
    s = Server("--max-logprobs", "2")
    try:
        e = error_of(s, "/v1/chat/completions",
                     {"model": MODEL_NAME, "messages": COUNT_MESSAGES[:1], "logprobs": True,
                      "top_logprobs": 3})
        assert "greater than max allowed: 2" in e["message"], e
        e = error_of(s, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "logprobs": 3})
        assert e["param"] == "logprobs"
        r = completion(s, max_tokens=2, logprobs=2)
        assert all(len(t) <= 3 for t in r["choices"][0]["logprobs"]["top_logprobs"])
    finally:
        assert s.stop() == 0


# ---- return_token_ids / return_tokens_as_token_ids (item 5) ----------------------------------

def test_return_token_ids_completions(server):
    prompt_ids = tokenize(server, prompt=PROMPT)["tokens"]
    r = completion(server, max_tokens=5, return_token_ids=True)
    choice = r["choices"][0]
    assert choice["prompt_token_ids"] == prompt_ids
    assert len(choice["token_ids"]) == r["usage"]["completion_tokens"] == 5
    assert detokenize(server, choice["token_ids"]) == choice["text"]
    # Streaming: the first chunk of the choice has the prompt ids, each chunk its new ids.
    status, _, payloads = sse(server, "/v1/completions",
                              {"model": MODEL_NAME, "prompt": PROMPT, "temperature": 0,
                               "max_tokens": 5, "return_token_ids": True, "stream": True})
    assert status == 200
    chunks = [c for c in chunks_of(payloads) if c["choices"]]
    assert chunks[0]["choices"][0]["prompt_token_ids"] == prompt_ids
    assert all("prompt_token_ids" not in c["choices"][0] for c in chunks[1:])
    assert sum((c["choices"][0]["token_ids"] for c in chunks), []) == choice["token_ids"]


def test_return_token_ids_chat(server):
    prompt_ids = tokenize(server, messages=[{"role": "user", "content": "Say hi."}])["tokens"]
    r = chat(server, max_tokens=4, return_token_ids=True)
    assert r["prompt_token_ids"] == prompt_ids
    token_ids = r["choices"][0]["token_ids"]
    assert len(token_ids) == r["usage"]["completion_tokens"]
    status, _, payloads = sse(server, "/v1/chat/completions",
                              {"model": MODEL_NAME, "temperature": 0, "max_tokens": 4,
                               "messages": [{"role": "user", "content": "Say hi."}],
                               "return_token_ids": True, "stream": True})
    assert status == 200
    chunks = chunks_of(payloads)
    assert chunks[0]["prompt_token_ids"] == prompt_ids  # vLLM: top level, first chunk
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = sum((c["choices"][0].get("token_ids") or [] for c in chunks[1:]), [])
    assert streamed == token_ids


def test_return_tokens_as_token_ids(server):
    r = completion(server, max_tokens=3, logprobs=1, return_tokens_as_token_ids=True,
                   return_token_ids=True)
    lp = r["choices"][0]["logprobs"]
    assert lp["tokens"] == ["token_id:%d" % t for t in r["choices"][0]["token_ids"]]
    for top in lp["top_logprobs"]:
        assert all(re.fullmatch(r"token_id:\d+", k) for k in top), top
    c = chat(server, max_tokens=3, logprobs=True, top_logprobs=2,
             return_tokens_as_token_ids=True, return_token_ids=True)
    content = c["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == \
        ["token_id:%d" % t for t in c["choices"][0]["token_ids"]]
    assert all(re.fullmatch(r"token_id:\d+", t["token"])
               for e in content for t in e["top_logprobs"])


# ---- truncate_prompt_tokens / truncation_side (item 6) ---------------------------------------

def test_truncate_prompt_tokens(server):
    text = "one two three four five six seven eight nine ten"
    ids = tokenize(server, prompt=text)["tokens"]
    left = completion(server, prompt=text, max_tokens=1, truncate_prompt_tokens=3,
                      return_token_ids=True)
    assert left["choices"][0]["prompt_token_ids"] == ids[-3:]
    assert left["usage"]["prompt_tokens"] == 3
    right = completion(server, prompt=text, max_tokens=1, truncate_prompt_tokens=3,
                       truncation_side="right", return_token_ids=True)
    assert right["choices"][0]["prompt_token_ids"] == ids[:3]
    # Echo shows the prompt that was kept.
    echo = completion(server, prompt=text, max_tokens=1, truncate_prompt_tokens=3, echo=True)
    assert echo["choices"][0]["text"].startswith(detokenize(server, ids[-3:]))
    # Chat: the rendered conversation's last tokens.
    msgs = [{"role": "user", "content": text}]
    chat_ids = tokenize(server, messages=msgs)["tokens"]
    c = chat(server, messages=msgs, max_tokens=1, truncate_prompt_tokens=5, return_token_ids=True)
    assert c["prompt_token_ids"] == chat_ids[-5:]
    # Above max_model_len - max_tokens: 400 (vLLM's message).
    e = error_of(server, "/v1/completions",
                 {"model": MODEL_NAME, "prompt": text, "max_tokens": 16,
                  "truncate_prompt_tokens": MAX_MODEL_LEN})
    assert e["param"] == "truncate_prompt_tokens"
    assert "cannot be greater than max_model_len - max_tokens = %d" % (MAX_MODEL_LEN - 16) in \
        e["message"], e


def test_truncate_minus_one_fits_a_long_prompt(server):
    long_text = "word " * 3000  # > MAX_MODEL_LEN tokens
    e = error_of(server, "/v1/completions",
                 {"model": MODEL_NAME, "prompt": long_text, "max_tokens": 4})
    assert e["code"] == "context_length_exceeded"
    r = completion(server, prompt=long_text, max_tokens=4, truncate_prompt_tokens=-1)
    assert r["usage"]["prompt_tokens"] == MAX_MODEL_LEN - 4


# ---- continuous_usage_stats (item 7) ---------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_continuous_usage_stats(server, path):
    body = {"model": MODEL_NAME, "temperature": 0, "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "Say hi."}]
    else:
        body["prompt"] = PROMPT
    status, _, payloads = sse(server, path, body)
    assert status == 200
    chunks = chunks_of(payloads)
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] >= 1
    with_choices = [c for c in chunks if c["choices"]]
    counts = [c["usage"]["completion_tokens"] for c in with_choices]
    assert counts == sorted(counts)
    assert counts[-1] == final["usage"]["completion_tokens"]
    for c in with_choices:
        u = c["usage"]
        assert u["prompt_tokens"] == final["usage"]["prompt_tokens"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    # Without it: "usage": null on each chunk, as before.
    body["stream_options"] = {"include_usage": True}
    _, _, payloads = sse(server, path, body)
    assert all(c["usage"] is None for c in chunks_of(payloads) if c["choices"])


# ---- continue_final_message and chat echo (item 8) -------------------------------------------

def test_continue_final_message(server):
    cont = tokenize(server, messages=COUNT_MESSAGES, add_generation_prompt=False,
                    continue_final_message=True)["tokens"]
    closed = tokenize(server, messages=COUNT_MESSAGES, add_generation_prompt=False)["tokens"]
    # The open message is the closed one without its end of turn.
    assert len(cont) < len(closed) and closed[:len(cont)] == cont
    assert detokenize(server, cont).endswith("1, 2, 3, 4,")
    r = chat(server, messages=COUNT_MESSAGES, add_generation_prompt=False,
             continue_final_message=True, max_tokens=3, return_token_ids=True)
    assert r["prompt_token_ids"] == cont
    # vLLM: add_generation_prompt defaults to true, and both true is a 400.
    e = error_of(server, "/v1/chat/completions",
                 {"model": MODEL_NAME, "messages": COUNT_MESSAGES,
                  "continue_final_message": True})
    assert e["param"] == "continue_final_message"
    status, body = post_json(server, "/tokenize",
                             {"model": MODEL_NAME, "messages": COUNT_MESSAGES,
                              "continue_final_message": True})
    assert status == 400, body


def test_chat_echo(server):
    body = dict(messages=COUNT_MESSAGES, add_generation_prompt=False,
                continue_final_message=True, max_tokens=3)
    plain = chat(server, **body)
    echoed = chat(server, echo=True, **body)
    # vLLM: echo scores the prompt (top_logprobs 0: each prompt token's own logprob).
    assert len(echoed["prompt_logprobs"]) == echoed["usage"]["prompt_tokens"]
    assert plain["prompt_logprobs"] is None
    assert echoed["choices"][0]["message"]["content"] == \
        "1, 2, 3, 4," + plain["choices"][0]["message"]["content"]
    # Streaming: one chunk repeating the message after the role chunk.
    status, _, payloads = sse(server, "/v1/chat/completions",
                              {"model": MODEL_NAME, "temperature": 0, "stream": True,
                               "echo": True, **body})
    assert status == 200
    chunks = chunks_of(payloads)
    assert chunks[1]["choices"][0]["delta"] == {"content": "1, 2, 3, 4,"}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == echoed["choices"][0]["message"]["content"]
    # A last message from the user is not echoed with add_generation_prompt (roles differ).
    r = chat(server, echo=True, max_tokens=2)
    assert not r["choices"][0]["message"]["content"].startswith("Say hi.")


# ---- /tokenize return_token_strs (item 10) ---------------------------------------------------

def test_tokenize_return_token_strs(server):
    r = tokenize(server, prompt=PROMPT, add_special_tokens=False, return_token_strs=True)
    assert len(r["token_strs"]) == r["count"]
    # vLLM: convert_ids_to_tokens, the byte-level pieces (a leading space is "Ġ").
    assert "".join(r["token_strs"]) == PROMPT.replace(" ", "\u0120")
    assert tokenize(server, prompt=PROMPT)["token_strs"] is None


# ---- routes without /v1 (item 11) ------------------------------------------------------------

def test_routes_without_v1(server):
    status, _, data = request(server, "GET", "/models")
    assert status == 200 and MODEL_NAME.encode() in data
    r = post_json(server, "/completions", {"model": MODEL_NAME, "prompt": PROMPT,
                                           "max_tokens": 2})
    assert r[0] == 200 and r[1]["object"] == "text_completion"
    r = post_json(server, "/chat/completions",
                  {"model": MODEL_NAME, "max_tokens": 2,
                   "messages": [{"role": "user", "content": "hi"}]})
    assert r[0] == 200 and r[1]["object"] == "chat.completion"
    # The OpenAI client pointed at the server root.
    root = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)
    assert [m.id for m in root.models.list().data] == [MODEL_NAME]
    assert root.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2).choices


def test_root_path_and_return_tokens_as_token_ids_flags():
    # vLLM's --root-path (behind a proxy: /llm/v1/... and /v1/... both answer, with the API key
    # still required) and --return-tokens-as-token-ids (every request's logprob tokens as ids).
    s = Server("--root-path", "/llm", "--return-tokens-as-token-ids", "--api-key", "k")
    try:
        for base in ("/llm/v1", "/v1"):
            client = openai.OpenAI(base_url=s.base_url + base, api_key="k", max_retries=0,
                                   timeout=300)
            r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2,
                                          logprobs=1)
            assert all(re.fullmatch(r"token_id:\d+", t) for t in r.choices[0].logprobs.tokens)
            wrong = openai.OpenAI(base_url=s.base_url + base, api_key="x", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                wrong.models.list()
        status, _, _ = request(s, "GET", "/llmx/v1/models", headers={"Authorization": "Bearer k"})
        assert status == 404
    finally:
        assert s.stop() == 0
