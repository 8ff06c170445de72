#!/usr/bin/env bash
# Cross-check of `octet bench serve` against an independent load tester from PyPI (aiperf) on
# the same workload against the same `octet serve`: output throughput, median TTFT, median ITL
# and TPOT. A one-off measurement for docs/benchmarks.md, not a CI test. aiperf's
# "inter_token_latency" is per request (E2EL - TTFT) / (tokens - 1), i.e. vLLM's TPOT; its
# "inter_chunk_latency" is the gaps between chunks, vLLM's ITL.
#   scripts/compare_loadgen.sh [MODEL_GGUF] [HF_TOKENIZER_DIR]
# Environment: OCTET (default build/octet), NUM_PROMPTS (48), CONCURRENCY (4), INPUT_LEN (128),
# OUTPUT_LEN (64), ROUNDS (2; each tool once per round, alternating), LOADGEN_VENV
# PARALLEL=1: two identical servers, both tools at the same time, one on each, swapping servers
# every round: on a shared machine both then see the same load (sequential runs do not).
# KEEP_DIR=DIR keeps both tools' raw results there. SERVER_CPUS / CLIENT_CPUS (taskset lists, e.g.
# 0 and 1): pin the server (with one thread per CPU given) and the load generators apart. On 2
# cores that is the fair setting: aiperf's Python workers need most of a core, and sharing the
# server's cores slows the very server it measures (by ~1.5x on a quiet 2-core machine). (~/.cache/octet/loadgen-venv; made here with pip if missing).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model="${1:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
hf_tok="${2:-$HOME/.cache/octet/hf/SmolLM2-135M-Instruct-bf16}"
octet="${OCTET:-$here/build/octet}"
rounds="${ROUNDS:-2}"; n="${NUM_PROMPTS:-48}"; c="${CONCURRENCY:-4}"; isl="${INPUT_LEN:-128}"; osl="${OUTPUT_LEN:-64}"
venv="${LOADGEN_VENV:-$HOME/.cache/octet/loadgen-venv}"
# No HF_HUB_OFFLINE: with it, aiperf resolves every tokenizer name as a hub repo id, even a local
# directory; a local path loads without any network access as it is.
export OMP_WAIT_POLICY=passive
if [ ! -x "$venv/bin/aiperf" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q aiperf
fi
work=$(mktemp -d)
trap 'cleanup' EXIT
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null || true
  [ -n "${KEEP_DIR:-}" ] && cp -r "$work/." "$KEEP_DIR/"
  rm -rf "$work"
}
server_pin=(); client_pin=(); server_threads=()
if [ -n "${SERVER_CPUS:-}" ]; then
  server_pin=(taskset -c "$SERVER_CPUS")
  server_threads=(--threads "$(taskset -c "$SERVER_CPUS" nproc)")
fi
[ -n "${CLIENT_CPUS:-}" ] && client_pin=(taskset -c "$CLIENT_CPUS")
start_server() {  # PORT
  "${server_pin[@]}" "$octet" serve "${server_threads[@]}" --model "$model" --served-model-name smollm2 --host 127.0.0.1 --port "$1" \
    --max-num-seqs "$c" > "$work/serve_$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return; sleep 0.2; done
}
start_server 18533
url_a="http://127.0.0.1:18533"; url_b="$url_a"
if [ "${PARALLEL:-0}" = 1 ]; then start_server 18534; url_b="http://127.0.0.1:18534"; fi

# The tools alternate, ROUNDS times each (the machine is shared: the spread shows the noise, and
# the medians over rounds are compared).
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then ours="$url_a"; theirs="$url_b"; else ours="$url_b"; theirs="$url_a"; fi
  run_ours() {
    "${client_pin[@]}" "$octet" bench serve --base-url "$ours" --model smollm2 --tokenizer "$hf_tok" \
      --random-input-len "$isl" --random-output-len "$osl" --ignore-eos --num-prompts "$n" \
      --max-concurrency "$c" --num-warmups "$c" --ready-check-timeout-sec 60 --seed "$round" \
      --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 --disable-tqdm \
      --result-json "$work/octet_$round.json" > "$work/octet_$round.txt"
  }
  run_aiperf() {
    "${client_pin[@]}" "$venv/bin/aiperf" profile --model smollm2 --url "$theirs" --endpoint-type completions \
      --streaming --tokenizer "$hf_tok" --isl "$isl" --isl-stddev 0 --osl "$osl" --osl-stddev 0 \
      --use-legacy-max-tokens --extra-inputs ignore_eos:true --use-server-token-count \
      --concurrency "$c" --request-count "$n" --warmup-request-count "$c" --random-seed "$round" \
      --no-server-metrics \
      --output-artifact-dir "$work/aiperf_$round" > "$work/aiperf_$round.log" 2>&1 ||
      { tail -40 "$work/aiperf_$round.log"; return 1; }
  }
  if [ "${PARALLEL:-0}" = 1 ]; then
    run_ours & a=$!
    run_aiperf & b=$!
    wait $a; wait $b
  else
    run_ours; run_aiperf
  fi
done
"$venv/bin/python" - "$work" "$rounds" <<'PY'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def aiperf(path):
    f = os.path.join(path, "phases", "profiling", "profile_export_aiperf.json")
    if not os.path.exists(f):
        f = os.path.join(path, "profile_export_aiperf.json")
    j = json.load(open(f))
    m = j.get("records", j)
    def get(name, stat):
        v = m.get(name)
        return None if v is None else v.get(stat)
    return {"output tok/s": get("output_token_throughput", "avg"),
            "median TTFT ms": get("time_to_first_token", "p50"),
            "median ITL ms": get("inter_chunk_latency", "p50"),
            "median TPOT ms": get("inter_token_latency", "p50")}
def ours(path):
    j = json.load(open(path))
    return {"output tok/s": j["output_throughput"], "median TTFT ms": j["median_ttft_ms"],
            "median ITL ms": j["median_itl_ms"], "median TPOT ms": j["median_tpot_ms"]}
print("| metric | round | octet bench serve | aiperf | ratio |")
print("|---|---|---|---|---|")
med = {"octet": {}, "aiperf": {}}
for r in range(1, rounds + 1):
    o, a = ours(f"{work}/octet_{r}.json"), aiperf(f"{work}/aiperf_{r}")
    for k in o:
        med["octet"].setdefault(k, []).append(o[k])
        med["aiperf"].setdefault(k, []).append(a[k])
        ratio = "" if not a[k] else "%.3f" % (o[k] / a[k])
        print("| %s | %d | %.2f | %s | %s |" % (k, r, o[k], "n/a" if a[k] is None else "%.2f" % a[k], ratio))
for k in med["octet"]:
    o = statistics.median(med["octet"][k])
    vals = [v for v in med["aiperf"][k] if v is not None]
    a = statistics.median(vals) if vals else None
    print("| %s | median of %d | %.2f | %s | %s |" % (k, rounds, o, "n/a" if a is None else "%.2f" % a,
                                                  "" if not a else "%.3f" % (o / a)))
PY
