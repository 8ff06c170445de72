#!/usr/bin/env bash
# The main job: set up, then generate with the default model (SmolLM2-135M-Instruct) from a
# fixed ChatML prompt. (Becomes `octet serve` once the server exists.)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="$(scripts/setup.sh | tail -n 1)"
# Arguments, when given, replace the default prompt and settings (e.g. --prompt-ids 1,2 --json).
if [ $# -gt 0 ]; then
  exec build/octet generate --model "$MODEL" "$@"
fi
exec build/octet generate --model "$MODEL" --temperature 0 --max-tokens 64 \
  --prompt $'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'
