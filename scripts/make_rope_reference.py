#!/usr/bin/env python3
"""RoPE inverse frequencies from Hugging Face transformers' ROPE_INIT_FUNCTIONS, for the tests
of ModelConfig::rope_inv_freq (default, linear and llama3 scaling).

Usage: /path/to/venv/bin/python scripts/make_rope_reference.py OUT_JSON   (needs transformers, torch)
"""
import json
import sys

from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

CASES = [
    {"name": "default", "head_dim": 64, "rope_theta": 100000.0, "rope_scaling": None},
    {"name": "linear", "head_dim": 128, "rope_theta": 10000.0,
     "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    {"name": "llama3", "head_dim": 128, "rope_theta": 500000.0,
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
]


def main():
    out = []
    for c in CASES:
        heads = 8
        kw = dict(hidden_size=c["head_dim"] * heads, num_attention_heads=heads,
                  rope_theta=c["rope_theta"], max_position_embeddings=131072)
        if c["rope_scaling"]:
            kw["rope_scaling"] = dict(c["rope_scaling"])
        cfg = LlamaConfig(**kw)
        rope_type = (c["rope_scaling"] or {}).get("rope_type", "default")
        if rope_type == "default":
            import torch
            d = c["head_dim"]
            inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        else:
            inv, _ = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
        out.append({**c, "inv_freq": [float(v) for v in inv.tolist()]})
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
        fh.write("\n")


if __name__ == "__main__":
    main()
