#!/usr/bin/env python3
"""Writes tests/models/golden/gguf_dequant.json: reference dequantized values from gguf-py
(llama.cpp's own Python package, an implementation independent of octet's C++).

  1. random_blocks: for each block type, two blocks of random bytes (fp16 scale fields set to
     chosen finite values, one of them negative and one subnormal) and gguf-py's float32 output.
  2. smollm2: sampled elements and row sums of a few tensors of SmolLM2-135M-Instruct.Q4_1.gguf.

Usage: /work/venv/bin/python scripts/make_gguf_dequant_golden.py [path/to/SmolLM2.gguf]
(needs `pip install gguf numpy`; written with gguf 0.19.0).
"""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGML_QUANT_SIZES
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden", "gguf_dequant.json")
SMOLLM2 = sys.argv[1] if len(sys.argv) > 1 else "/root/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf"

# Byte offsets of the fp16 scale fields in one block (ggml-common.h layouts).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
# Scale values per block: block 0 ordinary (one negative), block 1 with a subnormal fp16.
SCALES = [[0.0123, -0.00456], [np.float16(2.0 ** -20), 0.75]]


def random_blocks(rng):
    out = []
    for qtype, fields in FP16_FIELDS.items():
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(2, block_bytes), dtype=np.uint8)
        for b in range(2):
            for i, off in enumerate(fields):
                raw[b, off:off + 2] = np.array([SCALES[b][i]], dtype=np.float16).view(np.uint8)
        values = dequantize(raw.reshape(-1), qtype).reshape(-1)
        assert values.size == 2 * block_elems
        out.append({"type": qtype.name, "bytes": raw.reshape(-1).tobytes().hex(),
                    "values": [float(v) for v in values.astype(np.float32)]})
    # BF16: plain bit patterns, including a negative, a subnormal and the largest finite value
    # (JSON has no infinity).
    bits = np.array([0x3f80, 0xc040, 0x0001, 0x7f7f, 0x4049, 0x8000], dtype=np.uint16)
    out.append({"type": "BF16", "bytes": bits.view(np.uint8).tobytes().hex(),
                "values": [float(v) for v in dequantize(bits.view(np.uint8), T.BF16)]})
    return out


def smollm2(path):
    r = GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}
    rng = np.random.default_rng(1)
    out = []
    for name in ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight",
                 "blk.29.attn_v.weight", "output_norm.weight"]:
        t = tensors[name]
        x = dequantize(t.data, t.tensor_type).astype(np.float32)
        ne0 = int(t.shape[0])
        flat = x.reshape(-1)
        idx = sorted(set([0, 1, 31, 32, flat.size - 1] +
                         [int(i) for i in rng.integers(0, flat.size, size=8)]))
        rows = flat.reshape(-1, ne0)
        out.append({"name": name, "type": t.tensor_type.name,
                    "dims": [int(d) for d in t.shape],
                    "samples": [[i, float(flat[i])] for i in idx],
                    "row0_sum": float(rows[0].astype(np.float64).sum()),
                    "last_row_sum": float(rows[-1].astype(np.float64).sum())})
    return out


def main():
    rng = np.random.default_rng(0)
    doc = {"generator": "scripts/make_gguf_dequant_golden.py (gguf-py dequantize)",
           "random_blocks": random_blocks(rng), "smollm2": smollm2(SMOLLM2)}
    with open(OUT, "w") as f:  # one entry per line: small and diffable
        f.write('{"generator": %s,\n' % json.dumps(doc["generator"]))
        for key in ["random_blocks", "smollm2"]:
            f.write(' "%s": [\n' % key)
            f.write(",\n".join("  " + json.dumps(e, allow_nan=False) for e in doc[key]))
            f.write("\n ]" + (",\n" if key == "random_blocks" else "\n"))
        f.write("}\n")
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
