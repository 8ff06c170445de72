#!/usr/bin/env bash
# All tests: set up (packages, model, Release build), then every CTest test of the Release
# tree, then the sanitizer tree (ASan + UBSan, clang) and the fuzzers for their fixed time
# (scripts/test_sanitize.sh). Skipped tests (CUDA tests on a machine without a GPU) are listed
# as skipped, never as passed. Arguments go to both ctest runs (e.g. -R sampler).
# The sanitizer tree is built in the background from the start, at idle CPU priority (SCHED_IDLE:
# it only gets cycles the Release build and tests leave free, so their timed tests are not
# slowed), and at normal priority once the Release tests are done. Each phase prints its time
# on stderr ("test: PHASE Ns").
#   OCTET_SANITIZE=0       Release tests (and the image check) only
#   OCTET_IMAGE_CHECK=0    skip the container image check (scripts/image_check.sh)
#   OCTET_SANITIZE_BACKGROUND=0  build the sanitizer tree after the Release tests instead (less
#                          memory at once: up to two clang jobs run beside the Release tests)
#   OCTET_FUZZ_SECONDS=N   seconds per fuzz harness (default 10; 0 = no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
phase() { echo "test: $1 $(( $(date +%s) - t0 ))s" >&2; }
sanitize="${OCTET_SANITIZE:-1}"

t0=$(date +%s)
scripts/setup.sh --packages-only
san_pid=""
if [ "$sanitize" != 0 ] && [ "${OCTET_SANITIZE_BACKGROUND:-1}" != 0 ]; then
  san_log="$(mktemp "${TMPDIR:-/tmp}/octet-build-asan.XXXXXX.log")"
  idle=(nice -n 19)
  chrt --idle 0 true 2>/dev/null && idle=(chrt --idle 0)
  # Its own session (setsid), so it can be re-prioritised and stopped as a whole.
  setsid "${idle[@]}" scripts/test_sanitize.sh --build-only >"$san_log" 2>&1 &
  san_pid=$!
  trap '[ -n "$san_pid" ] && kill -- -"$san_pid" 2>/dev/null; true' EXIT
fi
scripts/setup.sh >/dev/null
phase "set-up and Release build"

t0=$(date +%s)
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
phase "Release tests"

# The container image (scripts/image_check.sh): lint, build with buildah, serve from inside it.
if [ "${OCTET_IMAGE_CHECK:-1}" != 0 ]; then
  t0=$(date +%s)
  scripts/image_check.sh
  phase "image"
fi
[ "$sanitize" != 0 ] || exit 0

if [ -z "$san_pid" ]; then
  scripts/test_sanitize.sh "$@"
  t0=$start
  phase "total"
  exit 0
fi
t0=$(date +%s)
if kill -0 "$san_pid" 2>/dev/null; then
  for p in $(pgrep -s "$san_pid" || true); do chrt --other -a -p 0 "$p" >/dev/null 2>&1 || true; done
  for p in $(pgrep -s "$san_pid" || true); do renice -n 0 -p "$p" >/dev/null 2>&1 || true; done
fi
rc=0
wait "$san_pid" || rc=$?
san_pid=""
if ((rc)); then
  tail -n 60 "$san_log" >&2
  echo "test: sanitizer build FAILED (exit $rc; log $san_log)" >&2
  exit "$rc"
fi
grep '^test: ' "$san_log" >&2 || true
rm -f "$san_log"
phase "waiting for the sanitizer build (it ran in the background)"

scripts/test_sanitize.sh --no-build "$@"
t0=$start
phase "total"
