#!/usr/bin/env python3
"""Long-context references for SmolLM2-135M-Instruct by transformers (float32, no FP8 anywhere).

1. Perplexity of the GPL-3 text (/usr/share/common-licenses/GPL-3, Debian's base-files) over its
   first N tokens for N = 2048, 4096 and all of it (7639 tokens: nearly the model's 8192-token
   context), one window: exp(mean over t = 1..N-1 of -log softmax(logits[t-1])[ids[t]]).
2. kv-report's long-context copy task (engine/kv_report.cpp): L/2 token ids from the same LCG
   (state = 0x9E3779B97F4A7C15 ^ L; state = state * 6364136223846793005 + 1442695040888963407;
   id = lo + (state >> 33) % span, lo = vocab / 10, span = vocab / 2 - lo), then the same ids
   again; accuracy = the fraction of positions p in [L/2, L-1) whose argmax logit is ids[p + 1].

The model is loaded from the GGUF itself (transformers dequantizes it), so the reference does not
pass through octet's own converter. Tokens: the HF tokenizer of HF_DIR (its tokenizer.json).

Usage: venv/bin/python scripts/make_long_context_reference.py GGUF HF_DIR OUT_JSON
"""
import json
import math
import os
import sys

import torch
import transformers

GPL3 = "/usr/share/common-licenses/GPL-3"


def copy_task_ids(length, vocab):
    state, mask = 0x9E3779B97F4A7C15 ^ length, (1 << 64) - 1
    lo = max(3, vocab // 10)
    span = max(1, vocab // 2 - lo)
    half = length // 2
    ids = []
    for _ in range(half):
        state = (state * 6364136223846793005 + 1442695040888963407) & mask
        ids.append(lo + (state >> 33) % span)
    return ids + ids[: length - half]


def main():
    gguf_path, hf_dir, out_path = sys.argv[1:4]
    torch.set_num_threads(os.cpu_count() or 1)
    d, f = os.path.split(os.path.abspath(gguf_path))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=f, dtype=torch.float32, attn_implementation="sdpa").eval()
    vocab = model.config.vocab_size
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    ids = tok(open(GPL3).read())["input_ids"]
    out = {"model": f, "corpus": GPL3, "corpus_tokens": len(ids), "perplexity": {},
           "copy_task_accuracy": {},
           "generator": "transformers " + transformers.__version__ + " float32, sdpa"}
    with torch.no_grad():
        for n in (2048, 4096, len(ids)):
            logits = model(torch.tensor([ids[:n]])).logits[0].double()
            logp = torch.log_softmax(logits[:-1], dim=-1)
            nll = -logp[torch.arange(n - 1), torch.tensor(ids[1:n])]
            out["perplexity"][str(n)] = math.exp(float(nll.mean()))
            print("perplexity", n, out["perplexity"][str(n)], file=sys.stderr, flush=True)
        for length in (256, 512, 1024, 2048, 4096, 8192):
            x = copy_task_ids(length, vocab)
            pred = model(torch.tensor([x])).logits[0].argmax(-1).tolist()
            half = length // 2
            right = sum(pred[p] == x[p + 1] for p in range(half, length - 1))
            out["copy_task_accuracy"][str(length)] = right / (length - 1 - half)
            print("copy", length, out["copy_task_accuracy"][str(length)], file=sys.stderr,
                  flush=True)
    json.dump(out, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
