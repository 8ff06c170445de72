#!/usr/bin/env python3
"""Reference greedy tokens and logits for SmolLM2-135M-Instruct, made by Hugging Face transformers.

transformers loads the same GGUF file octet reads (dequantizing Q4_1/Q8_0 to float32 with the
`gguf` package, un-permuting Q/K to the HF half-split RoPE layout) and runs LlamaForCausalLM in
float32. For each fixed prompt we record:
  - prompt_token_ids: the HF tokenizer's ids of the prompt (from the same GGUF),
  - greedy_token_ids: 32 tokens of greedy decoding (argmax, EOS not special),
  - per position of prompt+generated (the full sequence run once, no KV cache): the argmax, the
    top-16 (id, logit) pairs, the logits at 64 fixed vocab ids, and the top1-top2 margin.
The full 49152-wide logits do not fit a small JSON; top-16 plus 64 fixed ids sample the head and
the bulk of the distribution.

Usage: /path/to/venv/bin/python scripts/make_smollm2_reference.py GGUF_PATH OUT_JSON
Needs: torch, transformers, gguf (PyPI).
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    {"name": "plain", "text": "The capital of France is"},
    {"name": "story", "text": "Once upon a time, in a small village by the sea, there lived"},
    {"name": "chatml",
     "text": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
             "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the tallest animal?<|im_end|>\n"
             "<|im_start|>assistant\n"},
]
NUM_NEW = 32
TOP_K = 16
NUM_FIXED = 64


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    d, f = os.path.split(os.path.abspath(gguf_path))
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1234)
    fixed_ids = sorted(torch.randperm(vocab, generator=gen)[:NUM_FIXED].tolist())
    out = {"model": f, "generator": "transformers " + __import__("transformers").__version__
           + ", torch " + torch.__version__ + ", float32", "num_new_tokens": NUM_NEW,
           "fixed_vocab_ids": fixed_ids, "prompts": []}
    for p in PROMPTS:
        ids = tok(p["text"], add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            # Plain greedy argmax with the KV cache, written out: model.generate() applies
            # generation-config processors that are not pure argmax (it picked a different token
            # than argmax at a position with a 0.06 margin).
            step = model(x, use_cache=True)
            new_ids = [int(step.logits[0, -1].argmax())]
            while len(new_ids) < NUM_NEW:
                step = model(torch.tensor([[new_ids[-1]]]), past_key_values=step.past_key_values,
                             use_cache=True)
                new_ids.append(int(step.logits[0, -1].argmax()))
            full = torch.tensor([ids + new_ids])
            logits = model(full).logits[0].float()  # [T, vocab]
        positions = []
        for t in range(logits.shape[0]):
            row = logits[t]
            top = torch.topk(row, TOP_K)
            positions.append({
                "argmax": int(top.indices[0]),
                "top_ids": top.indices.tolist(),
                "top_logits": [round(v, 6) for v in top.values.tolist()],
                "fixed_logits": [round(v, 6) for v in row[fixed_ids].tolist()],
                "margin": round(float(top.values[0] - top.values[1]), 6),
            })
        out["prompts"].append({"name": p["name"], "text": p["text"], "prompt_token_ids": ids,
                               "greedy_token_ids": new_ids,
                               "greedy_text": tok.decode(new_ids), "positions": positions})
        print(p["name"], ids, new_ids, tok.decode(new_ids), file=sys.stderr)
    with open(out_path, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
        fh.write("\n")


if __name__ == "__main__":
    main()
