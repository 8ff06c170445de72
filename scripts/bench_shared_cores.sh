#!/usr/bin/env bash
# Shared-cores figure: batch-1 decode tokens/s of 1, 2 and 3 `octet bench latency` processes
# running at once on the same cores, and of one process beside a competing busy loop, against
# one process alone. Every process is pinned (taskset) to the same CPUs, so the figures are
# ratios within one run. The acceptance point of issue 12: the 3 processes' summed tokens/s
# reach >= 80% of one alone. A benchmark, not a test: it prints figures and exits 0.
#
# usage: scripts/bench_shared_cores.sh [OCTET_BINARY ...]   (default: build/octet)
# env:   MODEL (default ~/.cache/octet/hf/SmolLM2-135M-Instruct-bf16), CPUS (taskset list,
#        default 0,1), OUTPUT_LEN (decode steps per process, default 192), QUANT (fp8),
#        EXTRA (more bench flags, e.g. "--threads 1").
# Each process runs one iteration (--num-iters 1) so that no process times an iteration
# after its peers have finished; all start together and load the same model. Binaries that have
# --num-iters-warmup (default 1) run one untimed iteration before it, all at once as well.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-$HOME/.cache/octet/hf/SmolLM2-135M-Instruct-bf16}
CPUS=${CPUS:-0,1}
OUTPUT_LEN=${OUTPUT_LEN:-192}
QUANT=${QUANT:-fp8}
EXTRA=${EXTRA:-}
BINARIES=("$@")
[ ${#BINARIES[@]} -eq 0 ] && BINARIES=(build/octet)
tmp=$(mktemp -d)
busy_pid=""
cleanup() {
  [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# run_n BIN N: N processes at once; prints their decode tokens/s, space-separated.
run_n() {
  local bin=$1 n=$2 pids=() i
  for ((i = 0; i < n; ++i)); do
    # shellcheck disable=SC2086
    taskset -c "$CPUS" "$bin" bench latency --model "$MODEL" --quantization "$QUANT" \
      --input-len 32 --output-len "$OUTPUT_LEN" --num-iters 1 --json $EXTRA \
      >"$tmp/out.$i" 2>"$tmp/err.$i" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || { cat "$tmp"/err.* >&2; exit 1; }; done
  for ((i = 0; i < n; ++i)); do
    python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["decode_tokens_per_second"], end=" ")' "$tmp/out.$i"
  done
}

sum() { python3 -c 'import sys; print("%.1f" % sum(float(x) for x in sys.argv[1:]))' "$@"; }
ratio() { python3 -c 'import sys; print("%.0f%%" % (100 * float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }

echo "shared cores: CPUs $CPUS, model $MODEL, --quantization $QUANT, $OUTPUT_LEN decode steps," \
     "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-22s %-18s %-10s %s\n' binary situation "tok/s each" "sum" "sum / alone"
for bin in "${BINARIES[@]}"; do
  alone=$(run_n "$bin" 1)
  printf '%-28s %-22s %-18s %-10s %s\n' "$bin" "alone" "$alone" "$alone" "100%"
  taskset -c "$CPUS" sh -c 'while :; do :; done' &
  busy_pid=$!
  busy=$(run_n "$bin" 1)
  kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; busy_pid=""
  printf '%-28s %-22s %-18s %-10s %s\n' "$bin" "beside a busy loop" "$busy" "$busy" \
    "$(ratio "$busy" "$alone")"
  for n in 2 3; do
    each=$(run_n "$bin" "$n")
    # shellcheck disable=SC2086
    total=$(sum $each)
    printf '%-28s %-22s %-18s %-10s %s\n' "$bin" "$n processes at once" "$each" "$total" \
      "$(ratio "$total" "$alone")"
  done
done
