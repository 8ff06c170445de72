#!/usr/bin/env bash
# Cross-check of `octet bench serve` against independent load testers from PyPI (aiperf, and
# guidellm with GUIDELLM=1) on the same workload against the same `octet serve`: output
# throughput, median TTFT, median ITL and median TPOT, each tool once per round, alternating.
# A one-off measurement for docs/benchmarks.md, not a CI test.
#   scripts/compare_loadgen.sh [MODEL_GGUF] [HF_TOKENIZER_DIR]
# Names: aiperf's "inter_chunk_latency" is the gaps between chunks (vLLM's ITL) and its
# "inter_token_latency" is per request (E2EL - TTFT) / (tokens - 1) (vLLM's TPOT); guidellm's
# inter_token_latency is vLLM's TPOT too (it has no per-chunk gaps; its ITL row is n/a).
# Environment: OCTET (default build/octet), NUM_PROMPTS (48), CONCURRENCY (4), INPUT_LEN (128),
# OUTPUT_LEN (64), ROUNDS (2), LOADGEN_VENV (~/.cache/octet/loadgen-venv; made with pip if
# missing), GUIDELLM=1 (a third column), SERVER_CPUS / CLIENT_CPUS (taskset lists, e.g. 0 and 1:
# the server with one kernel thread per CPU given, the load testers apart), PARALLEL=1 (two
# identical servers, two tools at once, swapping servers every round), SHARED=1 (one server with
# max-num-seqs 2 x CONCURRENCY, bench serve and each other tool at once, CONCURRENCY each: the
# same server at the same moments), KEEP_DIR=DIR (keep every raw result there).
# The server is warmed up once (an untimed run) and prefix caching is off, so no tool's run
# sees prompts cached by another's; the tools then run without warm-ups of their own.
# Besides each tool's figures it prints the server's own view of each run (mean TTFT, ITL and
# E2EL from the deltas of its /metrics histograms, which no client can skew), each tool's
# client-side excess over it (client mean - server mean) and the CPU each tool used: a tool that
# reports a slower server than another either saw a slower server (something slowed the server
# while it ran: compare the server rows) or added time of its own (the excess rows).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model="${1:-$HOME/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf}"
hf_tok="${2:-$HOME/.cache/octet/hf/SmolLM2-135M-Instruct-bf16}"
octet="${OCTET:-$here/build/octet}"
rounds="${ROUNDS:-2}"; n="${NUM_PROMPTS:-48}"; c="${CONCURRENCY:-4}"; isl="${INPUT_LEN:-128}"; osl="${OUTPUT_LEN:-64}"
venv="${LOADGEN_VENV:-$HOME/.cache/octet/loadgen-venv}"
tools=(octet aiperf)
[ "${GUIDELLM:-0}" = 1 ] && tools+=(guidellm)
# No HF_HUB_OFFLINE: with it, aiperf resolves every tokenizer name as a hub repo id, even a local
# directory; a local path loads without any network access as it is.
export OMP_WAIT_POLICY=passive
if [ ! -x "$venv/bin/aiperf" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q aiperf
fi
if [ "${GUIDELLM:-0}" = 1 ] && [ ! -x "$venv/bin/guidellm" ]; then "$venv/bin/pip" install -q guidellm; fi
work=$(mktemp -d)
trap 'cleanup' EXIT
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null || true
  [ -n "${KEEP_DIR:-}" ] && mkdir -p "$KEEP_DIR" && cp -r "$work/." "$KEEP_DIR/"
  rm -rf "$work"
}
server_pin=(); client_pin=(); server_threads=()
if [ -n "${SERVER_CPUS:-}" ]; then
  server_pin=(taskset -c "$SERVER_CPUS")
  server_threads=(--threads "$(taskset -c "$SERVER_CPUS" nproc)")
fi
[ -n "${CLIENT_CPUS:-}" ] && client_pin=(taskset -c "$CLIENT_CPUS")
timed=(/usr/bin/time -f "%U %S %e")  # user s, system s, wall s (children waited for included)

bench_serve() {  # URL SEED RESULT_JSON NUM_PROMPTS
  "${client_pin[@]}" "${timed[@]}" -o "$3.time" "$octet" bench serve --base-url "$1" --model smollm2 \
    --tokenizer "$hf_tok" --random-input-len "$isl" --random-output-len "$osl" --ignore-eos \
    --num-prompts "$4" --max-concurrency "$c" --num-warmups 0 --ready-check-timeout-sec 0 \
    --seed "$2" --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 --disable-tqdm \
    --result-json "$3" > "$3.txt"
}
start_server() {  # PORT
  "${server_pin[@]}" "$octet" serve "${server_threads[@]}" --model "$model" --served-model-name smollm2 \
    --host 127.0.0.1 --port "$1" --max-num-seqs "$seqs" --no-enable-prefix-caching > "$work/serve_$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && break; sleep 0.2; done
  bench_serve "http://127.0.0.1:$1" 1000 "$work/warmup_$1.json" "$((2 * c))"  # untimed warm-up
}
seqs=$c; [ "${SHARED:-0}" = 1 ] && seqs=$((2 * c))
start_server 18533
urls=("http://127.0.0.1:18533")
if [ "${PARALLEL:-0}" = 1 ]; then start_server 18534; urls+=("http://127.0.0.1:18534"); fi

run_tool() {  # TOOL URL ROUND [NAME]: one measured run, the server's /metrics before and after
  local tool=$1 url=$2 r=$3 out="$work/$1_${4:-$3}"
  curl -sf "$url/metrics" > "$out.metrics0"
  case $tool in
    octet) bench_serve "$url" "$r" "$out.json" "$n" ;;
    aiperf)
      "${client_pin[@]}" "${timed[@]}" -o "$out.json.time" "$venv/bin/aiperf" profile --model smollm2 --url "$url" \
        --endpoint-type completions --streaming --tokenizer "$hf_tok" --isl "$isl" --isl-stddev 0 \
        --osl "$osl" --osl-stddev 0 --use-legacy-max-tokens --extra-inputs ignore_eos:true \
        --use-server-token-count --concurrency "$c" --request-count "$n" --random-seed "$r" \
        --no-server-metrics --ui-type none --output-artifact-dir "$out" > "$out.log" 2>&1 ||
        { tail -40 "$out.log"; return 1; } ;;
    guidellm)  # guidellm 0.8's CLI (kind=... groups); synthetic prompts set ignore_eos themselves
      "${client_pin[@]}" "${timed[@]}" -o "$out.json.time" "$venv/bin/guidellm" run \
        --backend "kind=openai_http,target=$url,model=smollm2,request_format=/v1/completions" \
        --profile "kind=concurrent,streams=$c" --constraint "kind=max_requests,count=$n" \
        --data "kind=synthetic_text,prompt_tokens=$isl,output_tokens=$osl" \
        --tokenizer "kind=hf_auto,model=$hf_tok" --output "kind=json,path=$out.json" \
        --disable-console-interactive > "$out.log" 2>&1 || { tail -40 "$out.log"; return 1; } ;;
  esac
  curl -sf "$url/metrics" > "$out.metrics1"
}
running() {  # requests the server is running now
  curl -sf "$1/metrics" | sed -n 's/^[a-z]*:num_requests_running{[^}]*} \([0-9.]*\)$/\1/p' | cut -d. -f1
}
for round in $(seq "$rounds"); do
  if [ "${SHARED:-0}" = 1 ]; then
    # One server (max-num-seqs 2 x CONCURRENCY), both tools at once, CONCURRENCY each: the same
    # server at the same moments, under the same interference. aiperf first (it starts slowly);
    # bench serve once aiperf's requests are running.
    others=("${tools[@]:1}")
    for t in "${others[@]}"; do
      run_tool "$t" "${urls[0]}" "$round" & bg=$!
      for _ in $(seq 1200); do [ "$(running "${urls[0]}")" -gt 0 ] 2>/dev/null && break; sleep 0.1; done
      run_tool octet "${urls[0]}" "$round" "${round}_$t"
      wait $bg
    done
  elif [ "${PARALLEL:-0}" = 1 ]; then
    # Two tools at a time, on the two servers, swapping every round (guidellm after them).
    a=0; b=1; [ $((round % 2)) = 0 ] && { a=1; b=0; }
    run_tool octet "${urls[$a]}" "$round" & p1=$!
    run_tool aiperf "${urls[$b]}" "$round" & p2=$!
    wait $p1; wait $p2
    [ "${GUIDELLM:-0}" = 1 ] && run_tool guidellm "${urls[$a]}" "$round"
  else
    # Alternate the order so that neither tool always runs first.
    order=("${tools[@]}")
    [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${tools[@]}" | tac))
    for t in "${order[@]}"; do run_tool "$t" "${urls[0]}" "$round"; done
  fi
done
"$venv/bin/python" - "$work" "$rounds" "${SHARED:-0}" "${tools[@]}" <<'PY'
import json, os, re, statistics, sys
work, rounds, shared, tools = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
med = statistics.median
def octet(base):
    j = json.load(open(base + ".json"))
    return {"output tok/s": j["output_throughput"], "median TTFT ms": j["median_ttft_ms"],
            "median ITL ms": j["median_itl_ms"], "median TPOT ms": j["median_tpot_ms"],
            "mean TTFT ms": j["mean_ttft_ms"], "mean E2EL ms": j["mean_e2el_ms"],
            "requests": j["completed"], "output tokens": j["total_output_tokens"]}
def aiperf(base):
    f = os.path.join(base, "phases", "profiling", "profile_export_aiperf.json")
    if not os.path.exists(f):
        f = os.path.join(base, "profile_export_aiperf.json")
    j = json.load(open(f))
    m = j.get("records", j)
    g = lambda name, stat: (m.get(name) or {}).get(stat)
    return {"output tok/s": g("output_token_throughput", "avg"),
            "median TTFT ms": g("time_to_first_token", "p50"),
            "median ITL ms": g("inter_chunk_latency", "p50"),
            "median TPOT ms": g("inter_token_latency", "p50"),
            "mean TTFT ms": g("time_to_first_token", "avg"), "mean E2EL ms": g("request_latency", "avg"),
            "requests": g("request_count", "avg"), "output tokens": g("total_output_tokens", "avg")}
def guidellm(base):  # its own figures; its inter_token_latency is per request, vLLM's TPOT
    b = json.load(open(base + ".json"))["benchmarks"][0]
    m = b["metrics"]
    g = lambda name, stat: m[name]["successful"][stat]
    return {"output tok/s": g("output_tokens_per_second", "mean"),
            "median TTFT ms": g("time_to_first_token_ms", "median"), "median ITL ms": None,
            "median TPOT ms": g("inter_token_latency_ms", "median"),
            "mean TTFT ms": g("time_to_first_token_ms", "mean"),
            "mean E2EL ms": 1000 * g("request_latency", "mean"),
            "requests": g("output_token_count", "count"), "output tokens": g("output_token_count", "total_sum")}
def server(base):  # the server's own mean TTFT, ITL, E2EL over this run (deltas of /metrics)
    def load(f):
        d = {}
        for line in open(f):
            m = re.match(r"[a-z]+:([a-z0-9_]+)(\{[^}]*\})?\s+(\S+)$", line)
            if m and "le=" not in (m.group(2) or ""):
                d[m.group(1)] = d.get(m.group(1), 0.0) + float(m.group(3))
        return d
    a, b = load(base + ".metrics0"), load(base + ".metrics1")
    out = {}
    for k, name in (("time_to_first_token", "server mean TTFT ms"), ("inter_token_latency", "server mean ITL ms"),
                    ("e2e_request_latency", "server mean E2EL ms")):
        cnt = b[k + "_seconds_count"] - a[k + "_seconds_count"]
        out[name] = 1000 * (b[k + "_seconds_sum"] - a[k + "_seconds_sum"]) / cnt if cnt else None
    return out
def cpu(base):  # the tool's CPU use, cores (user + system over wall)
    u, s, e = map(float, open(base + ".json.time").read().split()[-3:])
    return (u + s) / e
read = {"octet": octet, "aiperf": aiperf, "guidellm": guidellm}
def load(t, base):
    d = read[t](base)
    if not shared:  # the server served this tool alone: its view and the tool's excess over it
        srv = server(base)
        d.update(srv)
        d["TTFT excess ms (client - server)"] = d["mean TTFT ms"] - srv["server mean TTFT ms"]
        d["E2EL excess ms (client - server)"] = d["mean E2EL ms"] - srv["server mean E2EL ms"]
    d["tool CPU (cores)"] = cpu(base)
    return d
other = tools[1:]
# Each other tool is paired with a bench serve run: the same round's (SHARED=1: the one run
# alongside it on the same server).
res = {}
for r in range(1, rounds + 1):
    for t in other:
        res[(t, r)] = load(t, f"{work}/{t}_{r}")
        res[("octet", t, r)] = load("octet", f"{work}/octet_{r}_{t}" if shared else f"{work}/octet_{r}")
names = {"octet": "octet bench serve", "aiperf": "aiperf", "guidellm": "guidellm"}
cols = [("octet", t) for t in other] if shared else [("octet", other[0])]
head = ["bench serve (with %s)" % t for t in other] if shared else ["octet bench serve"]
print("| metric | round | " + " | ".join(head + [names[t] for t in other]) + " | " +
      " | ".join("ratio bench serve / " + t for t in other) + " |")
print("|---|---|" + "---|" * (len(head) + 2 * len(other)))
fmt = lambda v: "n/a" if v is None else "%.2f" % v
rows = ["output tok/s", "median TTFT ms", "median ITL ms", "median TPOT ms"]
if not shared:
    rows += ["server mean TTFT ms", "server mean ITL ms", "server mean E2EL ms",
             "TTFT excess ms (client - server)", "E2EL excess ms (client - server)"]
rows += ["tool CPU (cores)", "requests", "output tokens"]
no_ratio = ("TTFT excess", "E2EL excess", "tool CPU", "requests", "output tokens")
def value(key, k, r):
    if r != "median":
        return res[key + (r,)][k]
    xs = [res[key + (q,)][k] for q in range(1, rounds + 1) if res[key + (q,)][k] is not None]
    return med(xs) if xs else None
for k in rows:
    for r in list(range(1, rounds + 1)) + ["median"]:
        ours = [value(("octet", t), k, r) for t in other]
        theirs = [value((t,), k, r) for t in other]
        shown = ours if shared else ours[:1]
        ratios = ["" if o is None or not v or k.startswith(no_ratio) else "%.3f" % (o / v)
                  for o, v in zip(ours, theirs)]
        label = f"median of {rounds}" if r == "median" else str(r)
        print(f"| {k} | {label} | " + " | ".join(fmt(v) for v in shown + theirs) + " | " + " | ".join(ratios) + " |")
PY
