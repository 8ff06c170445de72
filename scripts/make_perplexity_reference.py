#!/usr/bin/env python3
"""Reference perplexity of SmolLM2-135M-Instruct on the standard corpus, by transformers.

Corpus: the GNU GPL v3 text Debian's base-files installs (/usr/share/common-licenses/GPL-3).
Token ids: the first 2048 ids of the corpus as octet's tokenizer makes them (passed in a file,
so the comparison isolates the model: tokenization has its own golden test). Perplexity =
exp(mean over positions 1..N-1 of -log softmax(logits[t-1])[ids[t]]), one window, float32.

Usage: venv/bin/python scripts/make_perplexity_reference.py GGUF IDS_JSON OUT_JSON
  IDS_JSON: {"token_ids": [...]} (e.g. from `octet perplexity --dump-token-ids`)
"""
import json
import math
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    gguf_path, ids_path, out_path = sys.argv[1:4]
    d, f = os.path.split(os.path.abspath(gguf_path))
    ids = json.load(open(ids_path))["token_ids"]
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    nll = -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    ppl = math.exp(float(nll.mean()))
    out = {"model": f, "corpus": "/usr/share/common-licenses/GPL-3", "tokens": len(ids),
           "token_ids": ids, "perplexity": ppl,
           "generator": "transformers " + __import__("transformers").__version__ + " float32"}
    json.dump(out, open(out_path, "w"))
    print("perplexity", ppl, file=sys.stderr)


if __name__ == "__main__":
    main()
