#!/usr/bin/env python3
"""Long-context needle check against a running octet (or any OpenAI-compatible) server.

A 5-digit pass key is stated near the start of a prompt of about --tokens tokens (default 8000)
and asked for at the end, with filler in between: on a sliding-window model (Gemma 3: 512-token
window) the key lies far outside every window layer's reach, so only the global layers can
retrieve it. The answer must contain the key. Prints PASS/FAIL per trial, the prompt tokens the
server counted (usage.prompt_tokens), the latency, and exits 0 only if every trial passed.

Tasks (--task):
  passkey  natural language: "The pass key is 12345. Remember it." ... filler ... "What is the
           pass key? The pass key is" (the classic passkey-retrieval prompt).
  kv       copy / induction: lines "key-name: 12345" with random keys and values (the filler is
           more such lines); the prompt ends with the key of a line near the start followed by
           ':' and the model completes the value. Small models that cannot follow a question
           can still do this one (it is what an induction head does).
APIs (--api): completions (default: the prompt as is) or chat (one user message).

Standard library only:
  scripts/needle_check.py --url http://127.0.0.1:8230 --tokens 8000 [--task kv] [--trials 3]
"""
import argparse
import json
import random
import sys
import time
import urllib.error
import urllib.request

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
          "There and back again. ")
WORDS = ("amber basil cedar delta ember fable garnet harbor indigo juniper kestrel lantern "
         "meadow nectar onyx pebble quartz raven saffron thistle umber velvet willow yarrow "
         "zephyr anchor birch comet dune falcon glacier heron iris jasper lotus maple "
         "nimbus orchid prairie quill reef sierra tundra violet walnut").split()


def post(url, body, timeout):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url, timeout):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(base, seconds):
    """Polls GET /health until it answers 200 (octet answers 503 while the model loads, and
    /v1/models before that); True when ready."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=10) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(2)


def count_tokens(base, model, text, timeout):
    """Tokens of `text` by the server's /tokenize (None if the server has no such route)."""
    try:
        r = post(base + "/tokenize", {"model": model, "prompt": text}, timeout)
    except (urllib.error.URLError, ValueError):
        return None
    if "count" in r:
        return int(r["count"])
    return len(r.get("tokens", [])) or None


def passkey_prompt(rng, n_units):
    key = f"{rng.randint(10000, 99999)}"
    head = ("There is an important pass key hidden inside a lot of irrelevant text. Find it and "
            "memorize it. I will quiz you about the pass key.\n"
            f"The pass key is {key}. Remember it. {key} is the pass key.\n")
    tail = "\nWhat is the pass key? The pass key is"
    return head + FILLER * n_units + tail, key


def kv_prompt(rng, n_lines, position=1):
    """Lines 'word-word-NNN: VVVVV'; the needle is line `position` (near the start)."""
    keys, lines = set(), []
    while len(lines) < n_lines + 2:
        k = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{rng.randint(100, 999)}"
        if k in keys:
            continue
        keys.add(k)
        lines.append((k, f"{rng.randint(10000, 99999)}"))
    needle_key, key = lines[position]
    body = "".join(f"{k}: {v}\n" for k, v in lines)
    head = "A list of keys and their 5-digit values.\n"
    return head + body + f"{needle_key}:", key


def build(task, rng, n_units):
    return passkey_prompt(rng, n_units) if task == "passkey" else kv_prompt(rng, n_units)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    ap.add_argument("--tokens", type=int, default=8000, help="approximate prompt length")
    ap.add_argument("--task", choices=["passkey", "kv"], default="passkey")
    ap.add_argument("--api", choices=["completions", "chat"], default="completions")
    ap.add_argument("--model", default=None, help="model name (default: the server's first)")
    ap.add_argument("--trials", type=int, default=1, help="prompts with different keys")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=12, help="answer length")
    ap.add_argument("--timeout", type=float, default=1800, help="per request, seconds")
    ap.add_argument("--wait", type=float, default=600,
                    help="seconds to wait for GET /health to answer 200 (model loaded)")
    a = ap.parse_args()
    base = a.url.rstrip("/")
    if not wait_ready(base, a.wait):
        print(f"FAIL: {base}/health did not answer 200 within {a.wait:.0f} s")
        return 1
    model = a.model or get(base + "/v1/models", 60)["data"][0]["id"]

    # Size the filler with the server's tokenizer: tokens per unit from two probe prompts.
    rng = random.Random(a.seed)
    probe_small, _ = build(a.task, random.Random(0), 10)
    probe_big, _ = build(a.task, random.Random(0), 60)
    t_small = count_tokens(base, model, probe_small, 60)
    t_big = count_tokens(base, model, probe_big, 60)
    if t_small and t_big and t_big > t_small:
        per_unit = (t_big - t_small) / 50.0
        units = max(1, int((a.tokens - t_small) / per_unit) + 10)
    else:  # no /tokenize: about 4 characters a token
        per_unit = len(probe_big) - len(probe_small)
        units = max(1, int(a.tokens * 4 / (per_unit / 50.0)))

    passed = 0
    for trial in range(a.trials):
        prompt, key = build(a.task, rng, units)
        if a.api == "chat":
            url = base + "/v1/chat/completions"
            body = {"model": model, "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": a.max_tokens, "temperature": 0}
        else:
            url = base + "/v1/completions"
            body = {"model": model, "prompt": prompt, "max_tokens": a.max_tokens,
                    "temperature": 0}
        t0 = time.monotonic()
        try:
            r = post(url, body, a.timeout)
        except urllib.error.HTTPError as e:
            print(f"trial {trial}: FAIL HTTP {e.code}: {e.read().decode(errors='replace')[:300]}")
            continue
        except (urllib.error.URLError, TimeoutError) as e:
            print(f"trial {trial}: FAIL request error: {e}")
            continue
        dt = time.monotonic() - t0
        choice = r["choices"][0]
        answer = choice["message"]["content"] if a.api == "chat" else choice["text"]
        ok = key in (answer or "")
        passed += ok
        usage = r.get("usage", {})
        print(f"trial {trial}: {'PASS' if ok else 'FAIL'} task={a.task} api={a.api} "
              f"key={key} answer={answer!r} prompt_tokens={usage.get('prompt_tokens')} "
              f"latency_s={dt:.2f}")
        sys.stdout.flush()
    print(f"{'PASS' if passed == a.trials else 'FAIL'}: {passed}/{a.trials} trials "
          f"(task {a.task}, ~{a.tokens} tokens, {a.api})")
    return 0 if passed == a.trials else 1


if __name__ == "__main__":
    sys.exit(main())
