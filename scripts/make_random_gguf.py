#!/usr/bin/env python3
"""A random-weight GGUF at a real model's shape, on a real tokenizer, for speed comparisons.

    scripts/make_random_gguf.py smollm2-1.7b|llama-3.2-1b OUT.gguf [--tokenizer-from GGUF]
                                [--seed N] [--dtype f16|bf16]

The trunk is llama.cpp's "llama" architecture with the named model's shape (layers, heads, KV
heads, FFN width, RoPE base, RMSNorm epsilon, tied embeddings); the vocabulary and every
tokenizer.* key are copied from --tokenizer-from (default: SmolLM2-135M-Instruct's GGUF in
~/.cache/octet, vocabulary 49152), so both presets run on SmolLM2's tokenizer. Weights are
normal with std 0.02 (the usual initialiser's scale) from a fixed seed, so the file is the same
bytes on every machine; norm weights are 1 (their initial value). Linear weights and the
embedding are F16 (default) or BF16: both octet (models/gguf_dequant.cpp) and llama.cpp's
llama-quantize read them. The figures it gives are speed only: the outputs are noise.

Needs `gguf` and `numpy` from PyPI; when they are not importable the script makes a virtualenv
in ~/.cache/octet/gguf-venv (OCTET_GGUF_VENV), installs them there with pip, and re-runs itself
in it. Written to OUT.tmp, then renamed, so a cached OUT is never half written.
"""
import argparse
import os
import subprocess
import sys
import time

PRESETS = {
    # HuggingFaceTB/SmolLM2-1.7B config.json.
    "smollm2-1.7b": dict(name="SmolLM2-1.7B (random weights)", hidden=2048, layers=24, heads=32,
                         kv_heads=32, ffn=8192, rope_theta=130000.0, rms_eps=1e-5,
                         context=8192, size_label="1.7B"),
    # meta-llama/Llama-3.2-1B config.json, without its 128256-token vocabulary (SmolLM2's
    # 49152 instead) and without its llama3 RoPE scaling (a speed comparison does not see it).
    "llama-3.2-1b": dict(name="Llama-3.2-1B trunk (random weights)", hidden=2048, layers=16,
                         heads=32, kv_heads=8, ffn=8192, rope_theta=500000.0, rms_eps=1e-5,
                         context=131072, size_label="1B"),
}


def ensure_gguf():
    try:
        import gguf  # noqa: F401
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("OCTET_GGUF_VENV_ACTIVE"):
        sys.exit("make_random_gguf: gguf/numpy still missing inside the venv")
    venv = os.environ.get("OCTET_GGUF_VENV",
                          os.path.expanduser("~/.cache/octet/gguf-venv"))
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
    subprocess.check_call([py, "-m", "pip", "install", "-q", "gguf", "numpy"])
    env = dict(os.environ, OCTET_GGUF_VENV_ACTIVE="1")
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("out")
    ap.add_argument("--tokenizer-from",
                    default=os.path.expanduser("~/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", choices=("f16", "bf16"), default="f16")
    args = ap.parse_args()
    ensure_gguf()
    import gguf
    import numpy as np

    p = PRESETS[args.preset]
    hidden, heads, kv_heads = p["hidden"], p["heads"], p["kv_heads"]
    head_dim = hidden // heads

    src = gguf.GGUFReader(args.tokenizer_from)
    tok = {k: f for k, f in src.fields.items() if k.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in tok:
        sys.exit("make_random_gguf: %s has no tokenizer.ggml.tokens" % args.tokenizer_from)
    vocab = len(tok["tokenizer.ggml.tokens"].contents())

    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(p["name"])
    w.add_type("model")
    w.add_size_label(p["size_label"])
    w.add_block_count(p["layers"])
    w.add_context_length(p["context"])
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(p["ffn"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(p["rope_theta"])
    w.add_layer_norm_rms_eps(p["rms_eps"])
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if args.dtype == "f16"
                    else gguf.LlamaFileType.MOSTLY_BF16)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for k, f in tok.items():  # the tokenizer, key for key with its GGUF value types
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(k, f.contents(), f.types[0], sub)

    # Tensors in llama.cpp's order; numpy shapes are (rows = outputs, columns = inputs).
    # No output.weight: the embedding is tied, as in both models.
    tensors = [("token_embd.weight", (vocab, hidden), "w")]
    for i in range(p["layers"]):
        b = "blk.%d." % i
        tensors += [
            (b + "attn_norm.weight", (hidden,), "norm"),
            (b + "attn_q.weight", (heads * head_dim, hidden), "w"),
            (b + "attn_k.weight", (kv_heads * head_dim, hidden), "w"),
            (b + "attn_v.weight", (kv_heads * head_dim, hidden), "w"),
            (b + "attn_output.weight", (hidden, heads * head_dim), "w"),
            (b + "ffn_norm.weight", (hidden,), "norm"),
            (b + "ffn_gate.weight", (p["ffn"], hidden), "w"),
            (b + "ffn_up.weight", (p["ffn"], hidden), "w"),
            (b + "ffn_down.weight", (hidden, p["ffn"]), "w"),
        ]
    tensors.append(("output_norm.weight", (hidden,), "norm"))

    wtype = gguf.GGMLQuantizationType.F16 if args.dtype == "f16" else gguf.GGMLQuantizationType.BF16
    for name, shape, kind in tensors:
        n = int(np.prod(shape))
        if kind == "norm":
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
        elif args.dtype == "f16":
            w.add_tensor_info(name, shape, np.dtype(np.float16), n * 2)
        else:  # raw bytes: the writer takes the byte shape and the GGML type
            w.add_tensor_info(name, shape[:-1] + (shape[-1] * 2,), np.dtype(np.uint8), n * 2,
                              raw_dtype=wtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    params = 0
    for name, shape, kind in tensors:
        if kind == "norm":
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
            continue
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= 0.02
        params += x.size
        if args.dtype == "f16":
            w.write_tensor_data(x.astype(np.float16))
        else:  # BF16: round to nearest even on the top 16 bits, stored as bytes
            u = x.view(np.uint32)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            w.write_tensor_data(u.view(np.uint8).reshape(shape[:-1] + (shape[-1] * 2,)))
    w.close()
    os.replace(tmp, args.out)
    print("make_random_gguf: %s: %s, %.2fB parameters, vocab %d, %s, seed %d, %.0f s" % (
        args.out, args.preset, params / 1e9, vocab, args.dtype, args.seed, time.time() - t0),
        file=sys.stderr)


if __name__ == "__main__":
    main()
