#!/usr/bin/env python3
"""Reference logits and greedy tokens of Gemma 3 270M (gemma-3-270m-q4_k_m.gguf, fetched by
scripts/setup.sh) from Hugging Face transformers' Gemma3ForCausalLM in float32, eager attention,
loaded from the same GGUF (transformers dequantizes it with the `gguf` package and undoes
llama.cpp's +1 on the norm weights; its config comes from the GGUF: sliding_window 512, every
6th layer full, RoPE 1e6 full / 1e4 sliding, query_pre_attn_scalar 256).

Writes tests/models/golden/gemma3_270m_reference.json:
  model_sha256, fixed_ids (8 vocab ids), per prompt:
    text, token_ids (transformers' GGUF tokenizer, BOS included),
    positions: the prompt positions whose logits are kept (all of a short prompt; of the long
      one every 16th and the last 8, beyond the 512-token window included),
    fixed_logits [pos][8], top5_ids / top5_logits [pos][5],
    greedy_token_ids: NUM_NEW tokens of greedy decoding with the KV cache (checked equal to the
      argmax of a full recompute), greedy_min_margin: the smallest top1 - top2 gap on that path,
    nll: mean next-token negative log-likelihood over the prompt (natural log).

Usage: scripts/make_gemma3_reference.py [GGUF] [REPO_ROOT]
       scripts/make_gemma3_reference.py --save-hf OUT_DIR [GGUF]
  --save-hf: only write the same dequantized model as a Hugging Face float32 checkpoint
  (Gemma3ForCausalLM save_pretrained + its tokenizer; ~1.1 GB) for test_gemma3's HF case
  (default place: ~/.cache/octet/hf/gemma-3-270m-f32).
  (python: a venv with torch, transformers 5.24.0, gguf 0.19.0, numpy; scripts/make_reference_venv.sh)
"""
import hashlib
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

NUM_NEW = 20
TOP_K = 5
FIXED_IDS = [0, 1, 2, 106, 107, 1000, 50000, 262143]
LONG_TEXT = (
    "The history of the printing press begins in the fifteenth century. Johannes Gutenberg, a "
    "goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden press adapted "
    "from those used for wine and olive oil. Books had been copied by hand for centuries, and a "
    "single Bible could take a scribe more than a year. With the press, a workshop could produce "
    "hundreds of copies in the same time. ")
PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily. She",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<start_of_turn>user\nWhat is the boiling point of water in Celsius?<end_of_turn>\n"
    "<start_of_turn>model\n",
    # Longer than the 512-token window: only the full layers (5, 11, 17) see its start.
    LONG_TEXT * 8 + "In summary, the printing press",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_hf(out, gguf):
    d, name = os.path.dirname(gguf), os.path.basename(gguf)
    loaded = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained: copy its (dequantized) weights into a plain one.
    config = loaded.config
    config.quantization_config = None
    model = type(loaded)(config).to(torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out + ".part")
    AutoTokenizer.from_pretrained(d, gguf_file=name).save_pretrained(out + ".part")
    os.rename(out + ".part", out)
    print("wrote", out, file=sys.stderr)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--save-hf":
        default = os.path.expanduser("~/.cache/octet/gemma-3-270m-q4_k_m.gguf")
        return save_hf(os.path.abspath(sys.argv[2]),
                       os.path.abspath(sys.argv[3] if len(sys.argv) > 3 else default))
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                           os.path.join(os.path.dirname(__file__), ".."))
    gguf = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.expanduser("~/.cache/octet/gemma-3-270m-q4_k_m.gguf"))
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    d, name = os.path.dirname(gguf), os.path.basename(gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    cfg = model.config
    print(type(model).__name__, "layer_types", cfg.layer_types, "window", cfg.sliding_window,
          file=sys.stderr)
    out = {"generator": "scripts/make_gemma3_reference.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "model": name, "model_sha256": sha256(gguf),
           "fixed_ids": FIXED_IDS, "prompts": []}
    for text in PROMPTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        assert ids[0] == 2, ids[:4]  # BOS
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0].float()
            gen = model.generate(x, max_new_tokens=NUM_NEW, do_sample=False, top_k=None,
                                 top_p=None, pad_token_id=0, eos_token_id=None)[0, len(ids):]
            full = model(torch.cat([x[0], gen]).unsqueeze(0)).logits[0].float()
        n = len(ids)
        recomputed = full[n - 1:n - 1 + NUM_NEW].argmax(-1)
        assert torch.equal(recomputed, gen), (recomputed.tolist(), gen.tolist())
        top2 = full[n - 1:n - 1 + NUM_NEW].topk(2, -1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        nll = float(torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:]))
        positions = list(range(n)) if n <= 64 else sorted(set(list(range(0, n, 16)) +
                                                              list(range(n - 8, n))))
        sel = logits[positions]
        top = sel.topk(TOP_K, -1)
        out["prompts"].append({
            "text": text, "token_ids": ids, "positions": positions,
            "fixed_logits": [[round(float(v), 5) for v in row] for row in sel[:, FIXED_IDS]],
            "top5_ids": top.indices.tolist(),
            "top5_logits": [[round(float(v), 5) for v in row] for row in top.values],
            "greedy_token_ids": gen.tolist(), "greedy_min_margin": round(margin, 5),
            "greedy_text": tok.decode(gen), "nll": nll})
        print(f"{n} tokens, nll {nll:.4f}, margin {margin:.3f}: {tok.decode(gen)!r}",
              file=sys.stderr)
    path = os.path.join(root, "tests/models/golden/gemma3_270m_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, file=sys.stderr)


if __name__ == "__main__":
    main()
