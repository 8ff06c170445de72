#!/usr/bin/env bash
# The main job: set up, then serve the default model (SmolLM2-135M-Instruct, FP8 W8A8 weights,
# fp8_e4m3 KV cache with calculated scales) with the OpenAI-compatible API on port 8000.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="$(scripts/setup.sh | tail -n 1)"
# Arguments, when given, replace the default serving flags (e.g. --port 9000 --kv-cache-dtype bf16).
if [ $# -gt 0 ]; then
  exec build/octet serve --model "$MODEL" "$@"
fi
exec build/octet serve --model "$MODEL" --served-model-name SmolLM2-135M-Instruct \
  --host 0.0.0.0 --port 8000 --kv-cache-dtype fp8_e4m3 --calculate-kv-scales
