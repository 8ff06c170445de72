#!/usr/bin/env python3
"""Tiny random-weight Llama, Mistral, Qwen2 and Qwen3 checkpoints with sliding-window attention,
and their
reference logits, made by Hugging Face transformers (float32, eager attention).

Each model is saved under tests/models/golden/tiny_<arch>/ as a Hugging Face directory WITHOUT
its weights (config.json, generation_config.json, the stories260K tokenizer, vocab 512, from
tests/models/golden/hf_stories260K_tokenizer*.json) plus weights.json: the recipe (seed, tensor
names, shapes, init rule) from which tests/tiny_models.h writes model.safetensors at test time,
bit-identical to the weights used here (portable_values). No weight file is committed. Shapes:
hidden 32, 4 layers, 4 heads, 2 KV heads, intermediate 64, vocab 512, window 8,
max_position_embeddings 256.

  tiny_llama   LlamaForCausalLM, full attention everywhere (the control).
  tiny_mistral MistralForCausalLM, sliding_window 8 on EVERY layer: transformers' Mistral applies
               config.sliding_window to all layers and ignores layer_types (MistralConfig warns
               "use Ministral classes for alternating attention"), so it cannot alternate.
               head_dim 16 != hidden/heads (8), as Mistral-Nemo does.
  tiny_qwen3   Qwen3ForCausalLM: per-head q_norm / k_norm (RMSNorm over head_dim before RoPE), no
               biases, head_dim 16, untied, layer_types [full, sliding, full, sliding].
  tiny_qwen2   Qwen2ForCausalLM, use_sliding_window true, sliding_window 8, layer_types
               [sliding, full, sliding, full] (alternating; max_window_layers alone can only make
               the LAST layers slide: layer i slides iff i >= max_window_layers), q/k/v biases,
               tied embeddings, rope_theta 1e6.

Every parameter (biases included, which transformers initialises to zero) is drawn from a fixed
seed (a SplitMix64 recipe the C++ tests repeat) with magnitudes that give O(1) logits and clear argmax margins. Window semantics
(transformers masking_utils.sliding_window_overlay): query at position p sees keys kv with
kv > p - W, i.e. max(0, p-W+1)..p, W keys including itself.

The JSON (tests/models/golden/sliding_window_reference.json) holds, per model:
  layer_sliding_window: per layer, the window transformers' config resolves (0 = full),
  prompt_token_ids: 40 ids (BOS + a TinyStories sentence; longer than the window),
  fixed_ids / fixed_logits: the logits at 8 fixed vocab ids, every prompt position,
  top5_ids / top5_logits: per prompt position,
  full_attention_fixed_logits: the same model with the window removed (every layer full), to
      show the window changes the logits (asserted here: identical before position W, different
      after),
  greedy_token_ids: 16 tokens of greedy decoding with the KV cache (checked against argmax of a
      full-sequence recompute), greedy_min_margin: smallest top1-top2 logit gap on that path.

Usage: $(scripts/make_reference_venv.sh) scripts/make_sliding_window_reference.py [REPO_ROOT]
"""
import json
import math
import os
import shutil
import sys

import numpy as np
import safetensors.numpy
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

WINDOW = 8
NUM_NEW = 16
NUM_FIXED = 8
TOP_K = 5
PROMPT_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
               "in the park with her friends. One day, she saw a big red ball.")

COMMON = dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

MODELS = [
    ("tiny_llama", LlamaConfig, LlamaForCausalLM,
     dict(tie_word_embeddings=False)),
    ("tiny_mistral", MistralConfig, MistralForCausalLM,
     dict(tie_word_embeddings=False, head_dim=16, sliding_window=WINDOW,
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    ("tiny_qwen2", Qwen2Config, Qwen2ForCausalLM,
     dict(tie_word_embeddings=True, use_sliding_window=True, sliding_window=WINDOW,
          max_window_layers=0,
          layer_types=["sliding_attention", "full_attention", "sliding_attention",
                       "full_attention"],
          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ("tiny_qwen3", Qwen3Config, Qwen3ForCausalLM,
     dict(tie_word_embeddings=False, head_dim=16, use_sliding_window=True,
          sliding_window=WINDOW, max_window_layers=0,
          layer_types=["full_attention", "sliding_attention", "full_attention",
                       "sliding_attention"],
          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
]


def full_attention_twin(name, cfg_cls, model_cls, kwargs):
    """The same architecture with every layer full attention."""
    kw = dict(kwargs)
    if name == "tiny_mistral":
        kw["sliding_window"] = None
    if name in ("tiny_qwen2", "tiny_qwen3"):
        kw["layer_types"] = ["full_attention"] * COMMON["num_hidden_layers"]
    return model_cls(cfg_cls(**COMMON, **kw, attn_implementation="eager"))


MASK64 = (1 << 64) - 1


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def portable_values(name, shape, rule, seed):
    """The weights of one tensor from a recipe the C++ tests repeat (tests/tiny_models.h), so no
    weight file is committed: SplitMix64 seeded with seed ^ fnv1a64(name), u = top 24 bits / 2^24,
    z = sqrt(3) * (2u - 1) (uniform, unit variance), then in float64, rounded once to float32:
    norm 1 + 0.2 z, bias 0.5 z, embed z, linear z * 0.7 / sqrt(in)."""
    n = int(np.prod(shape))
    state = np.uint64((seed ^ fnv1a64(name)) & MASK64)
    with np.errstate(over="ignore"):
        z = state + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)
    v = math.sqrt(3.0) * (2.0 * u - 1.0)
    if rule == "norm":
        v = 1.0 + 0.2 * v
    elif rule == "bias":
        v = 0.5 * v
    elif rule == "linear":
        v = v * (0.7 / math.sqrt(shape[1]))
    return v.astype(np.float32).reshape(shape)


def rule_of(pname):
    if pname.endswith("norm.weight"):
        return "norm"
    if pname.endswith(".bias"):
        return "bias"
    if "embed_tokens" in pname:
        return "embed"
    return "linear"  # [out, in] (lm_head included)


def randomize(model, seed):
    """Fixed-seed weights (portable_values): norms near 1, linears with std 0.7/sqrt(in),
    embeddings std 1, biases std 0.5. Linear std 0.7/sqrt(in) keeps the 4-layer stack from
    amplifying perturbations: at 1.5/sqrt(in) FP8 W8A8 rounding changed the greedy tokens from
    the first step; at 0.7 it leaves them unchanged while the window still moves the logits."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.from_numpy(portable_values(pname, list(p.shape), rule_of(pname), seed)))


def resolved_windows(cfg, name):
    """Per-layer window as transformers' modeling code applies it (0 = full)."""
    n = cfg.num_hidden_layers
    if name == "tiny_llama":
        return [0] * n  # LlamaAttention has no window
    if name == "tiny_mistral":  # MistralModel: one mask for all layers
        return [cfg.sliding_window or 0] * n
    return [cfg.sliding_window if t == "sliding_attention" else 0 for t in cfg.layer_types]


def greedy(model, ids):
    """Argmax decoding with the KV cache (sliding layers keep the last W-1 keys)."""
    step = model(torch.tensor([ids]), use_cache=True)
    out = [int(step.logits[0, -1].argmax())]
    while len(out) < NUM_NEW:
        step = model(torch.tensor([[out[-1]]]), past_key_values=step.past_key_values,
                     use_cache=True)
        out.append(int(step.logits[0, -1].argmax()))
    return out


def r6(values):
    return [round(float(v), 6) for v in values]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    golden = os.path.join(root, "tests", "models", "golden")
    tok_src = {"tokenizer.json": os.path.join(golden, "hf_stories260K_tokenizer.json"),
               "tokenizer_config.json": os.path.join(golden,
                                                     "hf_stories260K_tokenizer_config.json")}
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_src["tokenizer.json"])
    prompt = [1] + tok(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
    assert len(prompt) > 2 * WINDOW, len(prompt)
    assert len(prompt) >= 40, len(prompt)
    prompt = prompt[:40]
    gen = torch.Generator().manual_seed(1234)
    fixed_ids = sorted(torch.randperm(COMMON["vocab_size"], generator=gen)[:NUM_FIXED].tolist())

    out = {"generator": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                        "float32, eager attention",
           "window": WINDOW, "fixed_ids": fixed_ids, "models": []}
    for seed, (name, cfg_cls, model_cls, kwargs) in enumerate(MODELS):
        torch.manual_seed(seed)
        cfg = cfg_cls(**COMMON, **kwargs, attn_implementation="eager")
        model = model_cls(cfg).eval()
        randomize(model, 100 + seed)
        twin = full_attention_twin(name, cfg_cls, model_cls, kwargs).eval()
        twin.load_state_dict(model.state_dict())

        with torch.no_grad():
            logits = model(torch.tensor([prompt])).logits[0]   # [T, vocab]
            full = twin(torch.tensor([prompt])).logits[0]
            new_ids = greedy(model, prompt)
            seq = torch.tensor([prompt + new_ids])
            recompute = model(seq).logits[0]
        # The cached greedy path equals argmax of a full-sequence recompute.
        n = len(prompt)
        re_ids = [int(recompute[n - 1 + i].argmax()) for i in range(NUM_NEW)]
        assert re_ids == new_ids, (name, re_ids, new_ids)
        top2 = torch.topk(recompute[n - 1:n - 1 + NUM_NEW], 2).values
        min_margin = float((top2[:, 0] - top2[:, 1]).min())
        assert min_margin > 1e-3, (name, min_margin)

        windows = resolved_windows(model.config, name)
        diff = (logits - full).abs().max(dim=1).values  # [T]
        if any(windows):
            assert float(diff[:WINDOW].max()) < 1e-5, (name, diff[:WINDOW])
            assert float(diff[WINDOW:].min()) > 1e-2, (name, diff[WINDOW:])
        else:
            assert float(diff.max()) == 0.0
        top = torch.topk(logits, TOP_K)

        # The directory holds everything but the weights; weights.json is the recipe the tests
        # materialize model.safetensors from (checked here to equal what transformers saves).
        d = os.path.join(golden, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        model.save_pretrained(d)
        saved = safetensors.numpy.load_file(os.path.join(d, "model.safetensors"))
        tensors = []
        for tname, arr in saved.items():
            assert arr.dtype == np.float32, tname
            again = portable_values(tname, list(arr.shape), rule_of(tname), 100 + seed)
            assert np.array_equal(again, arr), tname
            tensors.append({"name": tname, "shape": list(arr.shape), "rule": rule_of(tname)})
        os.remove(os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "weights.json"), "w") as fh:
            json.dump({"seed": 100 + seed, "tensors": sorted(tensors, key=lambda t: t["name"])},
                      fh, indent=1)
            fh.write("\n")
        for dst, src in tok_src.items():
            shutil.copyfile(src, os.path.join(d, dst))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))

        out["models"].append({
            "name": name, "architecture": model_cls.__name__,
            "model_type": model.config.model_type,
            "layer_sliding_window": windows,
            "prompt_token_ids": prompt,
            "fixed_logits": [r6(logits[t, fixed_ids]) for t in range(n)],
            "full_attention_fixed_logits": [r6(full[t, fixed_ids]) for t in range(n)],
            "full_attention_max_abs_diff": r6(diff),
            "top5_ids": top.indices.tolist(),
            "top5_logits": [r6(v) for v in top.values],
            "greedy_token_ids": new_ids,
            "greedy_min_margin": round(min_margin, 6),
        })
        print(f"{name}: {size} bytes, windows {windows}, greedy {new_ids}, min margin "
              f"{min_margin:.4f}, |window - full| after W: min {float(diff[WINDOW:].min()):.4f} "
              f"max {float(diff.max()):.4f}, logit range [{float(logits.min()):.2f}, "
              f"{float(logits.max()):.2f}]", file=sys.stderr)

    path = os.path.join(golden, "sliding_window_reference.json")
    with open(path, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
