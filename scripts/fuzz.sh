#!/usr/bin/env bash
# Runs every libFuzzer harness (tests/fuzz/fuzz_*.cpp, built with OCTET_FUZZ=ON) for a fixed
# time, starting from its committed seed corpus (tests/fuzz/corpus/<name>/) copied to a scratch
# directory, so CI never writes into the checkout. Fails on any finding: a crash, a sanitizer
# report, a leak, a timeout (one input running past OCTET_FUZZ_TIMEOUT seconds) or an OOM
# (past OCTET_FUZZ_RSS_MB). Prints the executions per harness.
#   scripts/fuzz.sh [BUILD_DIR] [HARNESS...]      default build-asan, every harness
#   OCTET_FUZZ_SECONDS   seconds per harness (default 30: 5 harnesses = 2.5 min)
#   OCTET_FUZZ_TIMEOUT   seconds one input may take (default 10)
#   OCTET_FUZZ_RSS_MB    memory limit, MB (default 2048)
#   OCTET_FUZZ_KEEP      a directory: the scratch corpora and crash artifacts are kept there
# A crashing input is left in the scratch dir as crash-*/leak-*/timeout-*/oom-* and its path
# printed; reproduce with BUILD_DIR/fuzz_<name> FILE, minimise with -minimize_crash=1.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-asan}"
[ $# -gt 0 ] && shift
seconds="${OCTET_FUZZ_SECONDS:-30}"
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

failed=()
for h in "${harnesses[@]}"; do
  bin="$build/fuzz_$h"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (configure with -DOCTET_FUZZ=ON and build octet_fuzzers)" >&2
    exit 1
  fi
  work="$scratch/$h"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$h"/* "$work/corpus/"
  args=(-max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb"
        -malloc_limit_mb="$rss_mb" -max_len=4096 -print_final_stats=1
        -artifact_prefix="$work/artifacts/")
  [ -f "tests/fuzz/dict/$h.dict" ] && args+=(-dict="tests/fuzz/dict/$h.dict")
  export TMPDIR="$work"  # the harnesses' scratch files
  # Reproducers of bugs found earlier (tests/fuzz/findings/<name>/, fixed or to be fixed in
  # files the fuzz suite does not own): each must now run clean.
  for f in tests/fuzz/findings/"$h"/*; do
    [ -f "$f" ] || continue
    if ! "$bin" -timeout="$timeout_s" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" \
        "$f" >"$work/replay.log" 2>&1; then
      echo "fuzz: $h: finding $f still fails:" >&2
      grep -E "ERROR|SUMMARY|runtime error|what\(\)" "$work/replay.log" | head -n 5 >&2 || true
      failed+=("$h:$(basename "$f")")
    fi
  done
  rc=0
  "$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1 || true)"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $h FAILED (exit $rc) after ${execs:-?} executions; log: $work/log" >&2
    grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error:|.*ALARM|.*out-of-memory|.*Test unit written)" \
        "$work/log" | head -n 20 >&2 || true
    tail -n 40 "$work/log" >&2
    failed+=("$h")
    [ -z "${OCTET_FUZZ_KEEP:-}" ] && trap - EXIT  # keep the artifacts of a failure
  else
    echo "fuzz: $h ok: ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $(ls "$work/corpus" | wc -l) files"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in: ${failed[*]} (inputs under $scratch/<harness>/artifacts/)" >&2
  exit 1
fi
