#!/usr/bin/env bash
# Benchmark (not a test): FP32 reference prefill and decode tokens/s, batch 1, for both models.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${OCTET_CACHE_DIR:-$HOME/.cache/octet}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -x build/octet ] && [ -f "$MODEL" ] || MODEL="$(scripts/setup.sh | tail -n 1)"
echo "threads: ${OMP_NUM_THREADS:-$(nproc)}; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
build/octet bench latency --model ../shared/models/stories260K.gguf --input-len 128 --output-len 128
build/octet bench latency --model "$MODEL" --input-len 128 --output-len 64
