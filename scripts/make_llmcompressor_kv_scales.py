#!/usr/bin/env python3
"""Real llm-compressor checkpoints of SmolLM2-135M-Instruct with a static FP8 KV cache, and a
small committed summary of their KV cache scales.

Makes, with llmcompressor from PyPI (an implementation independent of octet), for each
kv_cache_scheme strategy S in (tensor, attn_head):
  OUT_ROOT/SmolLM2-135M-Instruct-FP8-KV-S
      QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"],
                           kv_cache_scheme={num_bits: 8, type: float, strategy: S,
                                            dynamic: false, symmetric: true})
      calibrated by oneshot() on CALIB_SAMPLES rows x CALIB_SEQ_LEN tokens of GPL-3 (in memory,
      shuffle_calibration_samples=False so that a rerun writes the same scales), saved with
      save_pretrained(save_compressed=True) plus the tokenizer.
The source is OUT_ROOT/SmolLM2-135M-Instruct-F32, the GGUF dequantized to float32 by
transformers (made by scripts/make_llmcompressor_checkpoints.py's save_f32_source when absent):
float32, so llm-compressor writes the scales as F32 (it stores them in the model's dtype).

Then writes tests/models/golden/llmcompressor_smollm2_kv.json (small, committed):
  - generator: package versions, recipe, calibration set (with the sha256 of its token ids);
  - per checkpoint: config.json's quantization_config exactly (kv_cache_scheme included),
    kv_cache_scheme again on its own, the full config.json, recipe.yaml's text, the files,
    the tensors of layer 0 and those outside the layers as [name, dtype, shape], the number
    of tensors;
  - every KV scale tensor (every name octet's load_checkpoint_kv_scales reads; llm-compressor
    writes model.layers.N.self_attn.k_scale / v_scale): name, dtype, shape, its raw bytes as
    hex (little-endian, exact) and its values as Python floats (repr: exact for F32/BF16/F16).

Usage (the venv of scripts/make_llmcompressor_checkpoints.py):
  python3 -m venv /work/venv-llmc && /work/venv-llmc/bin/pip install llmcompressor gguf accelerate
  /work/venv-llmc/bin/python scripts/make_llmcompressor_kv_scales.py [GGUF] [OUT_ROOT] [GOLDEN_JSON]
Defaults: $OCTET_CACHE_DIR (else ~/.cache/octet)/SmolLM2-135M-Instruct.Q4_1.gguf, .../llmc,
tests/models/golden/llmcompressor_smollm2_kv.json. SUMMARY_ONLY=1 re-reads existing checkpoints.
"""
import hashlib
import json
import os
import re
import sys

import torch
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_llmcompressor_checkpoints as base  # noqa: E402  (shared helpers: readers, dumps)

CACHE = os.environ.get("OCTET_CACHE_DIR", os.path.expanduser("~/.cache/octet"))
GGUF = sys.argv[1] if len(sys.argv) > 1 else os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT_ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(CACHE, "llmc")
GOLDEN = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
    HERE, "..", "tests", "models", "golden", "llmcompressor_smollm2_kv.json")
base.GGUF, base.OUT_ROOT = GGUF, OUT_ROOT
CORPUS = "/usr/share/common-licenses/GPL-3"
CALIB_SAMPLES, CALIB_SEQ_LEN = 8, 256  # 2048 calibration tokens
STRATEGIES = ["tensor", "attn_head"]
KV_SCALE_RE = re.compile(
    r"^model\.layers\.\d+\.self_attn\.(k_scale|v_scale|k_proj\.k_scale|v_proj\.v_scale|"
    r"k_proj\.output_scale|v_proj\.output_scale|attn\.k_scale|attn\.v_scale|kv_scale)$")


def kv_scheme(strategy):
    return {"num_bits": 8, "type": "float", "strategy": strategy, "dynamic": False,
            "symmetric": True}


def directory(strategy):
    return "SmolLM2-135M-Instruct-FP8-KV-" + strategy


def calibration_rows(tok):
    with open(CORPUS, encoding="utf-8") as fh:
        ids = tok(fh.read(), add_special_tokens=False)["input_ids"]
    rows = [ids[i * CALIB_SEQ_LEN:(i + 1) * CALIB_SEQ_LEN] for i in range(CALIB_SAMPLES)]
    assert all(len(r) == CALIB_SEQ_LEN for r in rows), "corpus too short"
    return rows


def make(strategy):
    src = os.path.join(OUT_ROOT, base.F32_DIR)
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.eval()
    rows = calibration_rows(tok)
    ds = Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]})
    recipe = QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"],
                                  kv_cache_scheme=kv_scheme(strategy))
    # Not shuffled: oneshot's default RandomSampler is unseeded, and the static observer
    # ("minmax", a moving average of each batch's min/max, averaging constant 0.01) weights the
    # first batch by 0.99^(n-1): shuffled, each run wrote different scales (up to 60% apart).
    oneshot(model=model, recipe=recipe, dataset=ds, num_calibration_samples=CALIB_SAMPLES,
            max_seq_length=CALIB_SEQ_LEN, shuffle_calibration_samples=False)
    out_dir = os.path.join(OUT_ROOT, directory(strategy))
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, save_compressed=True)
    tok.save_pretrained(out_dir)
    return out_dir


def summarize(strategy, out_dir):
    with open(os.path.join(out_dir, "config.json")) as fh:
        config = json.load(fh)
    files = sorted(os.listdir(out_dir))
    st = [f for f in files if f.endswith(".safetensors")]
    assert st == ["model.safetensors"], st
    header, data = base.read_safetensors(os.path.join(out_dir, "model.safetensors"))
    header.pop("__metadata__", None)
    names = sorted(header)
    qc = config.get("quantization_config") or {}
    layer_re = re.compile(r"^model\.layers\.(\d+)\.")
    s = {
        "strategy": strategy,
        "directory": directory(strategy),
        "kv_cache_scheme": qc.get("kv_cache_scheme"),
        "quantization_config": qc,
        "config": config,
        "files": files,
        "recipe_yaml": open(os.path.join(out_dir, "recipe.yaml")).read(),
        "num_tensors": len(names),
        "tensors_layer0_and_outside": [
            [n, header[n]["dtype"], header[n]["shape"]] for n in names
            if not layer_re.match(n) or layer_re.match(n).group(1) == "0"],
        "kv_scales": [],
    }
    for n in sorted((n for n in names if KV_SCALE_RE.match(n)),
                    key=lambda n: (int(layer_re.match(n).group(1)), n)):
        info = header[n]
        raw = base.tensor_bytes(header, data, n)
        s["kv_scales"].append({"name": n, "dtype": info["dtype"], "shape": info["shape"],
                               "hex": raw.hex(), "values": base.f32_values(info, raw)})
    return s


def main():
    if os.environ.get("SUMMARY_ONLY") != "1":
        if not os.path.exists(os.path.join(OUT_ROOT, base.F32_DIR, "config.json")):
            base.save_f32_source()
    tok = AutoTokenizer.from_pretrained(os.path.join(OUT_ROOT, base.F32_DIR))
    rows = calibration_rows(tok)
    ids_bytes = b"".join(int(i).to_bytes(4, "little") for r in rows for i in r)
    out = {
        "generator": {
            "script": "scripts/make_llmcompressor_kv_scales.py",
            "source": os.path.basename(GGUF) + " loaded by transformers with dtype=float32",
            "packages": {p: base.version(p) for p in [
                "llmcompressor", "compressed-tensors", "transformers", "torch", "gguf",
                "safetensors"]},
            "recipe": "QuantizationModifier(targets='Linear', scheme='FP8_DYNAMIC', "
                      "ignore=['lm_head'], kv_cache_scheme={'num_bits': 8, 'type': 'float', "
                      "'strategy': STRATEGY, 'dynamic': False, 'symmetric': True})",
            "calibration": "%d rows x %d tokens of %s (consecutive, no special tokens)" % (
                CALIB_SAMPLES, CALIB_SEQ_LEN, CORPUS),
            "calibration_ids_sha256": hashlib.sha256(ids_bytes).hexdigest(),
            "calibration_ids_first_row_head": rows[0][:16],
            # Unshuffled, oneshot's LengthAwareSampler runs the rows in this order (argsort of
            # their lengths, descending; all equal here).
            "calibration_order": torch.argsort(
                torch.tensor([len(r) for r in rows]), descending=True).tolist(),
            "batch_size": 1,
        },
        "checkpoints": {},
    }
    for strategy in STRATEGIES:
        out_dir = (os.path.join(OUT_ROOT, directory(strategy))
                   if os.environ.get("SUMMARY_ONLY") == "1" else make(strategy))
        out["checkpoints"][strategy] = summarize(strategy, out_dir)
        print("wrote", out_dir, file=sys.stderr)
    with open(GOLDEN, "w") as fh:
        fh.write(base.dumps(out) + "\n")
    print("wrote", GOLDEN, file=sys.stderr)


if __name__ == "__main__":
    main()
