#!/usr/bin/env bash
# Cross-check of `octet bench serve` against an independent load tester from PyPI (aiperf) on
# the same workload against the same `octet serve`: output throughput, median TTFT, median ITL
# and TPOT. A one-off measurement for docs/benchmarks.md, not a CI test. aiperf's
# "inter_token_latency" is per request (E2EL - TTFT) / (tokens - 1), i.e. vLLM's TPOT; its
# "inter_chunk_latency" is the gaps between chunks, vLLM's ITL.
#   scripts/compare_loadgen.sh [MODEL_GGUF] [HF_TOKENIZER_DIR]
# Environment: OCTET (default build/octet), NUM_PROMPTS (48), CONCURRENCY (4), INPUT_LEN (128),
# OUTPUT_LEN (64), LOADGEN_VENV (~/.cache/octet/loadgen-venv; made here with pip if missing).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model="${1:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
hf_tok="${2:-$HOME/.cache/octet/hf/SmolLM2-135M-Instruct-bf16}"
octet="${OCTET:-$here/build/octet}"
n="${NUM_PROMPTS:-48}"; c="${CONCURRENCY:-4}"; isl="${INPUT_LEN:-128}"; osl="${OUTPUT_LEN:-64}"
venv="${LOADGEN_VENV:-$HOME/.cache/octet/loadgen-venv}"
# No HF_HUB_OFFLINE: with it, aiperf resolves every tokenizer name as a hub repo id, even a local
# directory; a local path loads without any network access as it is.
export OMP_WAIT_POLICY=passive
if [ ! -x "$venv/bin/aiperf" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q aiperf
fi
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port=18533
url="http://127.0.0.1:$port"
"$octet" serve --model "$model" --served-model-name smollm2 --host 127.0.0.1 --port $port \
  --max-num-seqs "$c" > "$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 300); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.2; done

# Each tool runs twice, alternating (the machine is shared: the spread shows the noise).
for round in 1 2; do
  "$octet" bench serve --base-url "$url" --model smollm2 --tokenizer "$hf_tok" \
    --random-input-len "$isl" --random-output-len "$osl" --ignore-eos --num-prompts "$n" \
    --max-concurrency "$c" --num-warmups "$c" --ready-check-timeout-sec 60 --seed "$round" \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 --disable-tqdm \
    --result-json "$work/octet_$round.json" > "$work/octet_$round.txt"
  "$venv/bin/aiperf" profile --model smollm2 --url "$url" --endpoint-type completions \
    --streaming --tokenizer "$hf_tok" --isl "$isl" --isl-stddev 0 --osl "$osl" --osl-stddev 0 \
    --use-legacy-max-tokens --extra-inputs ignore_eos:true --use-server-token-count \
    --concurrency "$c" --request-count "$n" --warmup-request-count "$c" --random-seed "$round" \
    --output-artifact-dir "$work/aiperf_$round" > "$work/aiperf_$round.log" 2>&1 ||
    { tail -40 "$work/aiperf_$round.log"; exit 1; }
done
"$venv/bin/python" - "$work" <<'PY'
import glob, json, os, sys
work = sys.argv[1]
def aiperf(path):
    f = glob.glob(os.path.join(path, "**", "profile_export_aiperf.json"), recursive=True)[0]
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
for r in (1, 2):
    o, a = ours(f"{work}/octet_{r}.json"), aiperf(f"{work}/aiperf_{r}")
    for k in o:
        av = a[k]
        ratio = "" if not av else "%.3f" % (o[k] / av)
        print("| %s | %d | %.2f | %s | %s |" % (k, r, o[k], "n/a" if av is None else "%.2f" % av, ratio))
PY
