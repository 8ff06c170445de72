#!/usr/bin/env bash
# Runs every libFuzzer harness (tests/fuzz/fuzz_*.cpp, built with OCTET_FUZZ=ON) for a fixed
# time, starting from its committed seed corpus (tests/fuzz/corpus/<name>/) copied to a scratch
# directory, so CI never writes into the checkout. Fails on any finding: a crash, a sanitizer
# report, a leak, a timeout (one input running past OCTET_FUZZ_TIMEOUT seconds) or an OOM
# (past OCTET_FUZZ_RSS_MB). Harnesses run OCTET_FUZZ_JOBS at a time (each is one process on
# one core). Prints the executions per harness.
#   scripts/fuzz.sh [BUILD_DIR] [HARNESS...]      default build-asan, every harness
#   OCTET_FUZZ_SECONDS   seconds per harness (default 10: 5 harnesses on 2 cores = 30 s)
#   OCTET_FUZZ_JOBS      harnesses at once (default: the number of cores)
#   OCTET_FUZZ_TIMEOUT   seconds one input may take (default 10)
#   OCTET_FUZZ_RSS_MB    memory limit per harness, MB (default 2048)
#   OCTET_FUZZ_KEEP      a directory: the scratch corpora and crash artifacts are kept there
# A crashing input is left in the scratch dir as crash-*/leak-*/timeout-*/oom-* and its path
# printed; reproduce with BUILD_DIR/fuzz_<name> FILE, minimise with -minimize_crash=1.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-asan}"
[ $# -gt 0 ] && shift
seconds="${OCTET_FUZZ_SECONDS:-10}"
jobs="${OCTET_FUZZ_JOBS:-$(nproc)}"
timeout_s="${OCTET_FUZZ_TIMEOUT:-10}"
rss_mb="${OCTET_FUZZ_RSS_MB:-2048}"

harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do
    n="$(basename "$f" .cpp)"
    harnesses+=("${n#fuzz_}")
  done
fi

scratch="${OCTET_FUZZ_KEEP:-}"
if [ -z "$scratch" ]; then
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/octet-fuzz.XXXXXX")"
  trap 'rm -rf "$scratch"' EXIT
fi
mkdir -p "$scratch"

sym="$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:external_symbolizer_path=$sym}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:external_symbolizer_path=$sym}"
export OMP_NUM_THREADS=1

for h in "${harnesses[@]}"; do
  if [ ! -x "$build/fuzz_$h" ]; then
    echo "fuzz: $build/fuzz_$h is missing (configure with -DOCTET_FUZZ=ON and build octet_fuzzers)" >&2
    exit 1
  fi
done

# fuzz_one NAME: replays NAME's findings, then fuzzes; exit 1 on any finding. Its report goes
# to $scratch/NAME/report (printed by the caller, so parallel harnesses do not interleave).
fuzz_one() {
  local h="$1" bin="$build/fuzz_$1" work="$scratch/$1" bad=0
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$h"/* "$work/corpus/"
  local args=(-max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb"
              -malloc_limit_mb="$rss_mb" -max_len=4096 -print_final_stats=1
              -artifact_prefix="$work/artifacts/")
  [ -f "tests/fuzz/dict/$h.dict" ] && args+=(-dict="tests/fuzz/dict/$h.dict")
  export TMPDIR="$work"  # the harnesses' scratch files
  exec >"$work/report" 2>&1
  # Reproducers of bugs found earlier (tests/fuzz/findings/<name>/, fixed or to be fixed in
  # files the fuzz suite does not own): each must now run clean.
  local f
  for f in tests/fuzz/findings/"$h"/*; do
    [ -f "$f" ] || continue
    if ! "$bin" -timeout="$timeout_s" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" \
        "$f" >"$work/replay.log" 2>&1; then
      echo "fuzz: $h: finding $f still fails:"
      grep -E "ERROR|SUMMARY|runtime error|what\(\)" "$work/replay.log" | head -n 5 || true
      bad=1
    fi
  done
  local rc=0
  "$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  local execs cov
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1 || true)"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $h FAILED (exit $rc) after ${execs:-?} executions; log: $work/log"
    grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error:|.*ALARM|.*out-of-memory|.*Test unit written)" \
        "$work/log" | head -n 20 || true
    tail -n 40 "$work/log"
    bad=1
  else
    echo "fuzz: $h ok: ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $(ls "$work/corpus" | wc -l) files"
  fi
  return "$bad"
}

failed=()
declare -A pid_of=()
report() {  # report NAME PID: waits for NAME's run, prints its report, records a failure
  local rc=0
  wait "$2" || rc=$?
  cat "$scratch/$1/report" 2>/dev/null || echo "fuzz: $1: no report (exit $rc)"
  ((rc == 0)) || failed+=("$1")
}
running=()
for h in "${harnesses[@]}"; do
  if ((${#running[@]} >= jobs)); then
    report "${running[0]}" "${pid_of[${running[0]}]}"
    running=("${running[@]:1}")
  fi
  fuzz_one "$h" &
  pid_of[$h]=$!
  running+=("$h")
done
for h in "${running[@]}"; do report "$h" "${pid_of[$h]}"; done
if ((${#failed[@]})); then
  [ -z "${OCTET_FUZZ_KEEP:-}" ] && trap - EXIT  # keep the artifacts of a failure
  echo "fuzz: findings in: ${failed[*]} (inputs under $scratch/<harness>/artifacts/)" >&2
  exit 1
fi
