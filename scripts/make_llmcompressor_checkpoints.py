#!/usr/bin/env python3
"""Real llm-compressor FP8 checkpoints of SmolLM2-135M-Instruct, and a small committed summary.

Makes, with llmcompressor from PyPI (an implementation independent of octet):
  OUT_ROOT/SmolLM2-135M-Instruct-FP8-dynamic  scheme FP8_DYNAMIC: weights E4M3 per output channel
      (static scales), activations E4M3 per token (dynamic); no calibration data.
  OUT_ROOT/SmolLM2-135M-Instruct-FP8-static   scheme FP8: weights E4M3 per tensor, static
      per-tensor input_scale calibrated on a tiny in-memory dataset (chunks of the GPL-3 text).
  OUT_ROOT/SmolLM2-135M-Instruct-F32          the source: the GGUF dequantized by transformers,
      saved unquantized (float32, HF layout); oneshot() needs a directory with config.json.
Both FP8 ones: QuantizationModifier(targets="Linear", ignore=["lm_head"]), saved with
save_pretrained(save_compressed=True) plus the tokenizer.

The source model is the same GGUF octet reads, loaded by transformers (Q4_1/Q8_0 dequantized
to float32 by the `gguf` package, Q/K un-permuted to HF's half-split RoPE layout) with
dtype=float32. float32 rather than bfloat16 on purpose: octet quantizes the GGUF dequantized to
float32, so both start from identical weights; with float32 llm-compressor also writes
weight_scale / input_scale as F32 (it stores scales in the model's dtype).

Then writes tests/models/golden/llmcompressor_smollm2.json (small, committed):
  - generator: package versions, scheme names, calibration set description;
  - per checkpoint: config.json's quantization_config exactly, the full config.json, the files
    in the directory, recipe.yaml's text, the safetensors __metadata__, every tensor's
    [name, dtype, shape] and the order of their data in the file;
  - samples for layers 0 and 29, each of the 7 linears: FP8 codes (uint8) of the first 8 rows x
    32 columns, the weight_scale of those rows (all of it for per-tensor), input_scale (static);
  - sha256 of the raw bytes of every .weight / .weight_scale / .input_scale tensor, so a full
    bit-for-bit comparison with octet's own quantization can be done locally.

Usage (a venv of its own, llmcompressor pins its torch/transformers):
  python3 -m venv /work/venv-llmc && /work/venv-llmc/bin/pip install llmcompressor gguf accelerate
  /work/venv-llmc/bin/python scripts/make_llmcompressor_checkpoints.py \
      [GGUF] [OUT_ROOT] [GOLDEN_JSON]
Defaults: $OCTET_CACHE_DIR (else ~/.cache/octet)/SmolLM2-135M-Instruct.Q4_1.gguf, .../llmc,
tests/models/golden/llmcompressor_smollm2.json.
"""
import hashlib
import importlib.metadata as md
import json
import os
import struct
import sys

import torch
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("OCTET_CACHE_DIR", os.path.expanduser("~/.cache/octet"))
GGUF = sys.argv[1] if len(sys.argv) > 1 else os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT_ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(CACHE, "llmc")
GOLDEN = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
    HERE, "..", "tests", "models", "golden", "llmcompressor_smollm2.json")
CORPUS = "/usr/share/common-licenses/GPL-3"
CALIB_SAMPLES, CALIB_SEQ_LEN = 4, 128  # 512 calibration tokens
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
SAMPLE_LAYERS = [0, 29]
SAMPLE_ROWS, SAMPLE_COLS = 8, 32
F32_DIR = "SmolLM2-135M-Instruct-F32"  # the dequantized GGUF, unquantized HF layout
CHECKPOINTS = [
    {"key": "fp8_dynamic", "scheme": "FP8_DYNAMIC", "dir": "SmolLM2-135M-Instruct-FP8-dynamic"},
    {"key": "fp8_static", "scheme": "FP8", "dir": "SmolLM2-135M-Instruct-FP8-static"},
]


def save_f32_source():
    """The GGUF dequantized by transformers, saved as a plain float32 HF checkpoint: oneshot()
    re-reads config.json from model.config.name_or_path, which a GGUF load does not have."""
    out_dir = os.path.join(OUT_ROOT, F32_DIR)
    d, f = os.path.split(os.path.abspath(GGUF))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    gguf_model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained (its quantizer is "gguf"): copy the weights
    # into a plain model of the same config.
    cfg = gguf_model.config.to_dict()
    cfg.pop("quantization_config", None)
    config = AutoConfig.for_model(**cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def load():
    src = os.path.join(OUT_ROOT, F32_DIR)
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.eval()
    return tok, model


def calibration_dataset(tok):
    with open(CORPUS, encoding="utf-8") as fh:
        ids = tok(fh.read(), add_special_tokens=False)["input_ids"]
    rows = [ids[i * CALIB_SEQ_LEN:(i + 1) * CALIB_SEQ_LEN] for i in range(CALIB_SAMPLES)]
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]})


def make(ckpt):
    out_dir = os.path.join(OUT_ROOT, ckpt["dir"])
    tok, model = load()
    recipe = QuantizationModifier(targets="Linear", scheme=ckpt["scheme"], ignore=["lm_head"])
    if ckpt["scheme"] == "FP8_DYNAMIC":
        oneshot(model=model, recipe=recipe)
    else:
        oneshot(model=model, recipe=recipe, dataset=calibration_dataset(tok),
                num_calibration_samples=CALIB_SAMPLES, max_seq_length=CALIB_SEQ_LEN)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, save_compressed=True)
    tok.save_pretrained(out_dir)
    return out_dir


def read_safetensors(path):
    """(header dict, data bytes) read by hand: dtypes like F8_E4M3 stay raw bytes."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    return header, data


def tensor_bytes(header, data, name):
    b, e = header[name]["data_offsets"]
    return data[b:e]


def f32_values(info, raw):
    if info["dtype"] == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if info["dtype"] == "BF16":
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    if info["dtype"] == "F16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    raise ValueError(info["dtype"])


def summarize(ckpt, out_dir):
    with open(os.path.join(out_dir, "config.json")) as fh:
        config = json.load(fh)
    files = sorted(os.listdir(out_dir))
    st = [f for f in files if f.endswith(".safetensors")]
    assert st == ["model.safetensors"], st  # 135M parameters: one file, no index
    header, data = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    meta = header.pop("__metadata__", None)
    names = sorted(header)
    offset_order = sorted(names, key=lambda n: header[n]["data_offsets"][0])
    s = {
        "scheme": ckpt["scheme"],
        "directory": ckpt["dir"],
        "quantization_config": config.get("quantization_config"),
        "config": config,
        "files": files,
        "recipe_yaml": open(os.path.join(out_dir, "recipe.yaml")).read(),
        "safetensors_metadata": meta,
        "tensors": [[n, header[n]["dtype"], header[n]["shape"]] for n in names],
        "data_order": offset_order,
        "sha256": {},
        "samples": [],
    }
    for n in names:
        if n.endswith((".weight_scale", ".input_scale")) or (
                n.endswith(".weight") and header[n]["dtype"] == "F8_E4M3"):
            s["sha256"][n] = hashlib.sha256(tensor_bytes(header, data, n)).hexdigest()
    for layer in SAMPLE_LAYERS:
        for lin in LINEARS:
            base = "model.layers.%d.%s" % (layer, lin)
            w = header[base + ".weight"]
            cols = w["shape"][1]
            raw = tensor_bytes(header, data, base + ".weight")
            codes = [list(raw[r * cols:r * cols + SAMPLE_COLS]) for r in range(SAMPLE_ROWS)]
            sc_info = header[base + ".weight_scale"]
            scales = f32_values(sc_info, tensor_bytes(header, data, base + ".weight_scale"))
            sample = {"name": base, "codes": codes,
                      "weight_scale": scales[:SAMPLE_ROWS] if len(scales) > 1 else scales}
            if base + ".input_scale" in header:
                sample["input_scale"] = f32_values(
                    header[base + ".input_scale"],
                    tensor_bytes(header, data, base + ".input_scale"))
            s["samples"].append(sample)
    return s


def dumps(v, indent=0):
    """JSON with objects indented and lists of scalars (or of lists of scalars) on one line."""
    pad = " " * (indent + 1)
    flat = lambda x: not isinstance(x, (dict, list)) or (
        isinstance(x, list) and all(not isinstance(y, (dict, list)) for y in x))
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [pad + json.dumps(k) + ": " + dumps(x, indent + 1) for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(v, list) and v and not all(flat(x) for x in v):
        return "[\n" + ",\n".join(pad + dumps(x, indent + 1) for x in v) + "\n" + " " * indent + "]"
    return json.dumps(v, separators=(",", ":"))


def version(pkg):
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def main():
    out = {
        "generator": {
            "script": "scripts/make_llmcompressor_checkpoints.py",
            "source": os.path.basename(GGUF) + " loaded by transformers with dtype=float32",
            "packages": {p: version(p) for p in ["llmcompressor", "compressed-tensors",
                                                  "transformers", "torch", "gguf", "safetensors"]},
            "recipe": "QuantizationModifier(targets='Linear', scheme=SCHEME, ignore=['lm_head'])",
            "calibration": "%d rows x %d tokens of %s (static scheme only)" % (
                CALIB_SAMPLES, CALIB_SEQ_LEN, CORPUS),
            "samples": "layers %s, first %d rows x %d columns of each linear's FP8 codes" % (
                SAMPLE_LAYERS, SAMPLE_ROWS, SAMPLE_COLS),
        },
        "checkpoints": {},
    }
    if os.environ.get("SUMMARY_ONLY") != "1":  # SUMMARY_ONLY=1: re-read existing checkpoints
        save_f32_source()
    for ckpt in CHECKPOINTS:
        out_dir = (os.path.join(OUT_ROOT, ckpt["dir"]) if os.environ.get("SUMMARY_ONLY") == "1"
                   else make(ckpt))
        out["checkpoints"][ckpt["key"]] = summarize(ckpt, out_dir)
        print("wrote", out_dir, file=sys.stderr)
    with open(GOLDEN, "w") as fh:
        fh.write(dumps(out) + "\n")
    print("wrote", GOLDEN, file=sys.stderr)


if __name__ == "__main__":
    main()
