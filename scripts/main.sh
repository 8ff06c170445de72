#!/usr/bin/env bash
# The main job: set up, then serve the default model (SmolLM2-135M-Instruct, FP8 W8A8 weights,
# fp8_e4m3 KV cache with calculated scales) with the OpenAI-compatible API on port 8000.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="$(scripts/setup.sh | tail -n 1)"
# Arguments are added to the default serving flags; a flag given here replaces its default
# (e.g. scripts/main.sh --port 9000 --kv-cache-dtype bf16).
declare -A DEFAULTS=(
  [--served-model-name]=SmolLM2-135M-Instruct [--host]=0.0.0.0 [--port]=8000
  [--kv-cache-dtype]=fp8_e4m3
)
args=()
for flag in --served-model-name --host --port --kv-cache-dtype; do
  given=0
  for a in "$@"; do [[ "$a" == "$flag" || "$a" == "$flag="* ]] && given=1; done
  [ "$given" = 1 ] || args+=("$flag" "${DEFAULTS[$flag]}")
done
calc=(--calculate-kv-scales)
for a in "$@"; do
  [[ "$a" == --calculate-kv-scales || "$a" == --no-calculate-kv-scales || "$a" == --kv-scales-path* ]] && calc=()
done
exec build/octet serve --model "$MODEL" "${args[@]}" "${calc[@]}" "$@"
