#!/usr/bin/env bash
# The virtualenv the reference-value generators run in (scripts/make_gemma3_reference.py,
# scripts/make_sliding_window_reference.py): torch (PyPI's default wheel, with its CUDA
# libraries; only the CPU is used), transformers, gguf (GGUF dequantization), accelerate
# (transformers' GGUF loading needs it). Idempotent. Prints the python path as its last line.
#   scripts/make_reference_venv.sh [DIR]   (default $OCTET_CACHE_DIR/ref-venv, ~/.cache/octet)
set -euo pipefail
DIR="${1:-${OCTET_CACHE_DIR:-$HOME/.cache/octet}/ref-venv}"
[ -x "$DIR/bin/python" ] || python3 -m venv "$DIR" >&2
"$DIR/bin/pip" install --quiet torch==2.15.0 transformers==5.24.0 gguf==0.19.0 \
    accelerate==1.16.0 numpy==2.4.6 safetensors==0.8.0 tokenizers==0.23.3 >&2
echo "$DIR/bin/python"
