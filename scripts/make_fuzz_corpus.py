#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer harnesses (tests/fuzz/corpus/<harness>/): valid
and near-valid HTTP requests, OpenAI request bodies, real chat templates (from
tests/server/golden/chat_templates.json) with and without a context, tiny valid GGUF files of
every dequantizable type, and safetensors files. Deterministic; run from the checkout:
    python3 scripts/make_fuzz_corpus.py
Files already in a corpus directory that this script does not write (crash reproducers added
by hand, see tests/fuzz/README.md) are left alone."""
import hashlib
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- http_request: first byte = bytes per read - 1, then the raw request stream ------------
def http(name, raw, step=255):
    put("http_request", name, bytes([step]) + raw.encode())


body = '{"model":"m","prompt":"Once","max_tokens":3}'
http("get_health", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
http("get_health_split", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", step=0)
http("get_metrics_http10", "GET /metrics HTTP/1.0\r\n\r\n")
http("post_completions",
     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-fuzz\r\n"
     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")
http("post_chat_bad_key",
     "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n"
     "Content-Length: 2\r\n\r\n{}")
http("chunked",
     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     "5\r\n{\"pro\r\n1a;ext=1\r\nmpt\":\"Once\",\"max_tokens\":1}\r\n0\r\nTrailer: t\r\n\r\n", step=6)
http("chunked_identity",
     "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
     "2\r\n{}\r\n0\r\n\r\n")
http("pipelined",
     "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-fuzz\r\n\r\n"
     "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n{\"tokens\":[1,2]}"
     "GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
http("expect_continue",
     "POST /v1/completions/ HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
     "Content-Length: 2\r\n\r\n{}")
http("no_host", "GET /health HTTP/1.1\r\n\r\n")
http("cl_and_te",
     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
http("huge_content_length",
     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n")
http("obs_fold", "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n")

# --- openai_request: JSON bodies -------------------------------------------------------------
bodies = {
    "completion_min": {"prompt": "Once"},
    "completion_full": {"model": "m", "prompt": ["a", "b"], "max_tokens": 16, "temperature": 0.7,
                        "top_p": 0.9, "top_k": 40, "min_p": 0.05, "n": 2, "seed": 7,
                        "stop": ["\n", "."], "stream": True,
                        "stream_options": {"include_usage": True}, "logprobs": 2, "echo": True,
                        "presence_penalty": 0.5, "frequency_penalty": -0.5,
                        "repetition_penalty": 1.1, "stop_token_ids": [2], "ignore_eos": False,
                        "min_tokens": 1, "priority": 3, "user": "u", "logit_bias": {"5": -100}},
    "completion_token_ids": {"prompt": [1, 2, 3], "max_tokens": None},
    "completion_batch_ids": {"prompt": [[1, 2], [3]], "prompt_logprobs": 1},
    "completion_bad_penalty": {"prompt": "Once", "max_tokens": 3, "repetition_penalty": 1e-40},
    "completion_huge_max_tokens": {"prompt": "x", "max_tokens": 9223372036854775807,
                                   "seed": 9223372036854775807, "n": 3},
    "completion_unsupported": {"prompt": "x", "suffix": "y", "best_of": 2},
    "chat_min": {"messages": [{"role": "user", "content": "Hi"}]},
    "chat_full": {"model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "name": "bot"},
        {"role": "user", "content": "c"}],
        "max_completion_tokens": 8, "logprobs": True, "top_logprobs": 3,
        "add_generation_prompt": False, "response_format": {"type": "text"},
        "temperature": 0, "unknown_field": 1},
    "chat_tools": {"messages": [{"role": "user", "content": "w"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}]},
    "chat_image": {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:"}}]}]},
}
for name, b in bodies.items():
    put("openai_request", name, json.dumps(b))
put("openai_request", "deep_array", "[" * 64 + "]" * 64)
# A number too large for a double (1e999999) is a finding: tests/fuzz/findings/openai_request/.
put("openai_request", "bad_utf8", b'{"prompt":"\xff\xfe"}')

# --- jinja: TEMPLATE [\0 CONTEXT_JSON] -------------------------------------------------------
golden = json.load(open(os.path.join(ROOT, "tests", "server", "golden", "chat_templates.json")))
convs = golden["conversations"]
for i, t in enumerate(golden["templates"]):
    put("jinja", t["name"], t["source"])
    c = convs[i % len(convs)]
    ctx = {"messages": c["messages"], "add_generation_prompt": True,
           "bos_token": t.get("bos_token", ""), "eos_token": t.get("eos_token", "")}
    ctx.update(c.get("extra", {}))
    put("jinja", t["name"] + "+" + c["name"], t["source"] + "\0" + json.dumps(ctx))
small = {
    "filters": "{{ 'ab' | upper }}{{ [3,1,2] | sort | join(',') }}{{ {'a':1} | tojson }}"
               "{{ 'x' * 3 }}{{ ' t ' | trim }}{{ messages | length }}{{ 'a,b'.split(',') }}",
    "loops": "{% for m in messages %}{% if loop.first %}[{% endif %}{{ loop.index }}:{{ m.role }}"
             "{% if loop.last %}]{% endif %}{% else %}none{% endfor %}",
    "macro_ns": "{% macro f(x, y=2) %}{{ x + y }}{% endmacro %}{% set ns = namespace(n=0) %}"
                "{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ f(ns.n) }}",
    "raise": "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}"
             "{% endif %}",
    "slices_tests": "{{ messages[1:] | map(attribute='role') | list }}{{ 5 is odd }}"
                    "{{ none is none }}{{ 'ab'[::-1] }}{% generation %}g{% endgeneration %}",
    "whitespace": "  {%- for m in messages -%}\n  {{- m.content -}}\n{%- endfor %}\n{# c #}",
    "strftime": "{{ strftime_now('%Y-%m-%d') }}{{ dict(a=1).items() | list }}",
    "power_small": "{{ 2 ** 10 }}{{ 7 // 2 }}{{ 7 % 3 }}{{ -3 / 2 }}",
}
for name, src in small.items():
    put("jinja", "op_" + name, src)
put("jinja", "ctx_array", "{{ messages | tojson }}\0" + json.dumps([{"role": "user", "content": "x"}]))

# --- gguf: tiny valid files ------------------------------------------------------------------
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gkv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


# ggml type -> (block elements, block bytes)
BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
          13: (256, 176), 14: (256, 210)}


def gguf(tensors, kvs, alignment=32, version=3):
    """tensors: list of (name, dims, type); data is deterministic pseudo-random bytes."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    infos, datas, off = b"", b"", 0
    for name, dims, ty in tensors:
        be, bb = BLOCKS[ty]
        n = 1
        for d in dims:
            n *= d
        nbytes = n // be * bb
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(
            struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ty, off)
        seed = hashlib.sha256(name.encode()).digest()
        raw = (seed * (nbytes // len(seed) + 1))[:nbytes]
        if ty in (0, 1, 30):  # keep floats finite: small halves/floats
            raw = bytes(b & 0x3B if i % 2 else b for i, b in enumerate(raw))
        datas += raw + b"\0" * ((-nbytes) % alignment)
        off += nbytes + (-nbytes) % alignment
    out += infos
    out += b"\0" * ((-len(out)) % alignment)
    return out + datas


meta = [gkv("general.architecture", 8, gstr("llama")),
        gkv("general.name", 8, gstr("tiny")),
        gkv("llama.context_length", 4, struct.pack("<I", 64)),
        gkv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        gkv("tokenizer.ggml.model", 8, gstr("llama")),
        gkv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + gstr("<s>") + gstr("a") + gstr("b")),
        gkv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<fff", 0, -1, -2)),
        gkv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, 3) + struct.pack("<iii", 3, 1, 1)),
        gkv("tokenizer.chat_template", 8, gstr("{{ messages[0].content }}")),
        gkv("general.flag", 7, b"\x01"),
        gkv("general.u64", 10, struct.pack("<Q", 2**63)),
        gkv("general.f64", 12, struct.pack("<d", 0.5)),
        gkv("general.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 2) + b"\x01\x02")]
put("gguf", "metadata_only", gguf([], meta))
put("gguf", "f32_2x4", gguf([("w", [4, 2], 0)], meta[:3]))
put("gguf", "v2_f16_bf16", gguf([("a", [8], 1), ("b", [2, 2], 30)], meta[:1], version=2))
put("gguf", "align64", gguf([("w", [32], 8)], meta[:1] + [gkv("general.alignment", 4, struct.pack("<I", 64))],
                           alignment=64))
for ty, name in [(2, "q4_0"), (3, "q4_1"), (6, "q5_0"), (7, "q5_1"), (8, "q8_0"), (9, "q8_1"),
                 (10, "q2_k"), (11, "q3_k"), (12, "q4_k"), (13, "q5_k"), (14, "q6_k")]:
    be = BLOCKS[ty][0]
    put("gguf", "tensor_" + name, gguf([("t." + name, [be, 2], ty)], meta[:1]))

# --- safetensors ------------------------------------------------------------------------------
def safetensors(tensors, metadata=None, pad=0):
    """tensors: list of (name, dtype, shape, nbytes_per_elem)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, size in tensors:
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + n]}
        data += bytes((i * 37 + 11) & 0x3F for i in range(n))
    h = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "f32_bf16", safetensors([("a.weight", "F32", [2, 3], 4),
                                            ("b.weight", "BF16", [4], 2)], {"format": "pt"}))
put("safetensors", "all_dtypes", safetensors(
    [(f"t{i}", dt, [2], sz) for i, (dt, sz) in enumerate(
        [("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2), ("F8_E4M3", 1), ("F8_E5M2", 1),
         ("I64", 8), ("I32", 4), ("I16", 2), ("I8", 1), ("U8", 1), ("BOOL", 1)])]))
put("safetensors", "empty_and_scalar", safetensors([("e", "F32", [0, 4], 4), ("s", "F16", [], 2)],
                                                   pad=7))
put("safetensors", "metadata_only", safetensors([], {"a": "b"}))
put("safetensors", "fp8_scales", safetensors([("w", "F8_E4M3", [4, 4], 1),
                                              ("w_scale", "F32", [4, 1], 4)]))
print("wrote", CORPUS)
