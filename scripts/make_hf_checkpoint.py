#!/usr/bin/env python3
"""Build a Hugging Face LlamaForCausalLM directory from a llama GGUF (test checkpoints for octet).

    python scripts/make_hf_checkpoint.py GGUF OUTDIR [--dtype bf16|f16|f32] [--shards N]

Needs only light packages, no torch:  pip install numpy gguf tokenizers transformers
(transformers is imported only for its GGUF tokenizer conversion, which does not need torch).

What it writes (the layout transformers' save_pretrained writes):
  config.json             LlamaForCausalLM; tie_word_embeddings = the GGUF has no output.weight
  generation_config.json  bos/eos ids from the GGUF
  model.safetensors       or, with --shards N > 1, model-0000k-of-0000N.safetensors and
                          model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"})
  tokenizer.json          transformers' own GGUF tokenizer conversion (the reference of
                          tests/models/golden/tokenizer_*.json); tokenizer.ggml.pre "smollm" gets
                          SmolLM2's real pre-tokenizer Sequence[Digits(individual_digits),
                          ByteLevel] (transformers ignores that key, see make_tokenizer_golden.py);
                          a "llama" vocabulary gets a BOS TemplateProcessing post-processor when
                          the GGUF adds BOS (as Llama-2's tokenizer.json)
  tokenizer_config.json   bos/eos/unk/pad token texts, add_bos_token, add_eos_token, chat_template

Weights: every tensor dequantized with gguf-py to float32, then rounded to the output dtype
(round to nearest even, as torch's .to(torch.bfloat16)). Q and K rows are un-permuted from
GGUF's adjacent-pair RoPE layout back to HF's half-split layout: the inverse of
convert_hf_to_gguf.py's LlamaModel.permute (transformers' GGUF loader does the same).
The safetensors files are written here directly (8-byte aligned header, {"format": "pt"}).

Check (full venv with torch): --verify loads OUTDIR and the GGUF with transformers and prints
the max |logit difference| on a fixed prompt, and checks the tokenizer against the GGUF one.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import gguf


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


# ---------------------------------------------------------------------------------------------
# weights

GGUF_TO_HF = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in GGUF_TO_HF and parts[3] == "weight":
        return f"model.layers.{parts[1]}.{GGUF_TO_HF[parts[2]]}.weight"
    raise SystemExit(f"unsupported GGUF tensor {name}")


def unpermute(w, n_head):
    """Rows of each head go from [pair0.a, pair0.b, pair1.a, ...] (GGUF) to [all a, all b] (HF)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_dtype(x, dtype):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "f32":
        return x, "F32"
    if dtype == "f16":
        return x.astype(np.float16), "F16"
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even (no NaNs in real weights)
    return u.astype(np.uint16), "BF16"


def read_weights(reader, dtype):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"unsupported architecture {arch!r} (only llama)")
    n_head = int(field(reader, "llama.attention.head_count"))
    n_head_kv = int(field(reader, "llama.attention.head_count_kv", n_head))
    out = {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            raise SystemExit("rope_freqs.weight (Llama-3 rope scaling) is not converted")
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))  # PyTorch order [out, in]
        if ".attn_q." in t.name:
            w = unpermute(w, n_head)
        elif ".attn_k." in t.name:
            w = unpermute(w, n_head_kv)
        out[hf_name(t.name)] = to_dtype(w, dtype)
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (array, dtype name); written in name order."""
    header, offset = {}, 0
    names = sorted(tensors)
    for name in names:
        a, dt = tensors[name]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in names:
            f.write(tensors[name][0].tobytes())
    return offset


def write_weights(outdir, weights, shards):
    for name in os.listdir(outdir):  # stale files from an earlier run with other --shards
        if name.endswith(".safetensors") or name == "model.safetensors.index.json":
            os.remove(os.path.join(outdir, name))
    if shards <= 1:
        write_safetensors(os.path.join(outdir, "model.safetensors"), weights)
        return
    # Contiguous groups in a natural layer order, about equal bytes each.
    def order(name):
        p = name.split(".")
        return (int(p[2]) if p[1] == "layers" else (-1 if "embed" in name else 10**9), name)
    names = sorted(weights, key=order)
    total = sum(weights[n][0].nbytes for n in names)
    groups, acc = [[] for _ in range(shards)], 0
    for n in names:
        k = min(shards - 1, acc * shards // total)
        groups[k].append(n)
        acc += weights[n][0].nbytes
    if any(not g for g in groups):
        raise SystemExit(f"too many shards ({shards}) for {len(names)} tensors")
    weight_map = {}
    for k, g in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(outdir, fname), {n: weights[n] for n in g})
        weight_map.update({n: fname for n in g})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# config

def make_config(reader, weights, dtype):
    a = "llama."
    n_head = int(field(reader, a + "attention.head_count"))
    hidden = int(field(reader, a + "embedding_length"))
    vocab = weights["model.embed_tokens.weight"][0].shape[0]
    head_dim = int(field(reader, a + "attention.key_length", hidden // n_head))
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(field(reader, a + "feed_forward_length")),
        "num_hidden_layers": int(field(reader, a + "block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(field(reader, a + "attention.head_count_kv", n_head)),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": float(np.float32(field(reader, a + "attention.layer_norm_rms_epsilon", 1e-5))),
        "rope_theta": float(np.float32(field(reader, a + "rope.freq_base", 10000.0))),
        "rope_scaling": None,
        "max_position_embeddings": int(field(reader, a + "context_length", 2048)),
        "vocab_size": int(vocab),
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype],
    }
    scaling = field(reader, a + "rope.scaling.type", "none")
    if scaling == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear",
                               "factor": float(field(reader, a + "rope.scaling.factor"))}
    elif scaling != "none":
        raise SystemExit(f"unsupported rope.scaling.type {scaling!r}")
    n = len(field(reader, "tokenizer.ggml.tokens", []))
    for key in ("bos", "eos"):
        tid = field(reader, f"tokenizer.ggml.{key}_token_id")
        if tid is not None and 0 <= int(tid) < n:
            cfg[f"{key}_token_id"] = int(tid)
    return cfg


# ---------------------------------------------------------------------------------------------
# tokenizer

def tokenizer_dict(reader):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING
    d = {}
    for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
        v = field(reader, "tokenizer." + key)
        if v is not None:
            d[name] = v
    n = len(d["tokens"])
    for k in list(d):  # llama.cpp writes 4294967295 for "none"
        if k.endswith("_token_id") and not 0 <= int(d[k]) < n:
            del d[k]
    return d


def make_tokenizer(reader, outdir):
    from tokenizers import pre_tokenizers, processors
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    d = tokenizer_dict(reader)
    model = d.get("tokenizer_type")
    if model not in ("llama", "gpt2"):
        raise SystemExit(f"unsupported tokenizer.ggml.model {model!r}")
    tok, _ = convert_gguf_tokenizer(field(reader, "general.architecture"), d)
    if d.get("pre_tokenizer_type") == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token", model == "llama"))
    add_eos = bool(field(reader, "tokenizer.ggml.add_eos_token", False))
    tokens = d["tokens"]
    text = {k: tokens[d[k + "_token_id"]] if k + "_token_id" in d else None
            for k in ("bos", "eos", "unk", "pad")}
    if (add_bos and text["bos"]) or (add_eos and text["eos"]):
        bos = f"{text['bos']} " if add_bos and text["bos"] else ""
        eos = f" {text['eos']}" if add_eos and text["eos"] else ""
        special = [(text[k], d[k + "_token_id"]) for k, on in (("bos", add_bos), ("eos", add_eos))
                   if on and text[k]]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}$A{eos}", pair=f"{bos}$A{eos} {bos}$B:1{eos}",
            special_tokens=special)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "bos_token": text["bos"],
        "eos_token": text["eos"],
        "unk_token": text["unk"],
        "pad_token": text["pad"],
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(reader, "llama.context_length", 2048)),
    }
    template = field(reader, "tokenizer.chat_template")
    if template:
        cfg["chat_template"] = template
    with open(os.path.join(outdir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ---------------------------------------------------------------------------------------------

def verify(gguf_path, outdir):
    """Full venv only (torch): logits of transformers(OUTDIR) vs transformers(GGUF)."""
    import tempfile
    import torch
    import transformers

    directory = tempfile.mkdtemp(prefix="octet_gguf_")
    name = os.path.basename(gguf_path)
    os.symlink(os.path.abspath(gguf_path), os.path.join(directory, name))
    # pad_token_id=None: llama.cpp writes 4294967295 for "none" (stories260K), which
    # transformers' GGUF config reader would pass to nn.Embedding as padding_idx.
    ref = transformers.AutoModelForCausalLM.from_pretrained(directory, gguf_file=name,
                                                            dtype=torch.float32, pad_token_id=None)
    ours = transformers.AutoModelForCausalLM.from_pretrained(outdir, dtype=torch.float32)
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 30, 2]])
    ids = ids.clamp(max=ours.config.vocab_size - 1)
    with torch.no_grad():
        a = ref(ids).logits
        b = ours(ids).logits
    print(f"max |logit(outdir) - logit(gguf)| = {float((a - b).abs().max()):.6g} "
          f"(logit range {float(a.abs().max()):.4g}); same argmax: {bool((a.argmax(-1) == b.argmax(-1)).all())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("outdir")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--verify", action="store_true", help="compare logits with transformers (torch)")
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.gguf)
    os.makedirs(args.outdir, exist_ok=True)
    weights = read_weights(reader, args.dtype)
    cfg = make_config(reader, weights, args.dtype)
    with open(os.path.join(args.outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id") if k in cfg}
    with open(os.path.join(args.outdir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    write_weights(args.outdir, weights, args.shards)
    make_tokenizer(reader, args.outdir)
    print(f"{args.outdir}: {len(weights)} tensors, {args.dtype}, {max(1, args.shards)} file(s)",
          file=sys.stderr)
    if args.verify:
        verify(args.gguf, args.outdir)


if __name__ == "__main__":
    main()
