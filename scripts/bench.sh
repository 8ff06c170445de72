#!/usr/bin/env bash
# Benchmarks (printed, not tests): batch-1 prefill and decode tokens/s of both models in FP32
# and FP8 W8A8 with the memory-bandwidth floor, the W8A8 kernel table, and the FP8 accuracy
# cost on the standard corpus (perplexity, KL, top-1 agreement), continuous-batching decode
# throughput and ITL against context per KV dtype (bench engine), and serving TTFT / ITL
# (scripts/bench_serve.py). Figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${OCTET_CACHE_DIR:-$HOME/.cache/octet}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -x build/octet ] && [ -f "$MODEL" ] || MODEL="$(scripts/setup.sh | tail -n 1)"
echo "threads: ${OMP_NUM_THREADS:-$(nproc)}; cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for q in none fp8; do
  build/octet bench latency --model ../shared/models/stories260K.gguf --quantization $q \
      --input-len 128 --output-len 128
  build/octet bench latency --model "$MODEL" --quantization $q --input-len 128 --output-len 64
done
build/octet bench kernels
build/octet perplexity --model "$MODEL" --text /usr/share/common-licenses/GPL-3 \
    --max-tokens 2048 --compare
build/octet bench engine --model "$MODEL"
python3 scripts/bench_serve.py --model "$MODEL" --server-args --kv-cache-dtype fp8_e4m3 \
    --calculate-kv-scales
