#!/usr/bin/env bash
# All tests: set up (packages, model, Release build), then every CTest test of the Release
# tree, then the sanitizer tree (ASan + UBSan, clang) and the fuzzers for their fixed time
# (scripts/test_sanitize.sh). Skipped tests (CUDA tests on a machine without a GPU) are listed
# as skipped, never as passed. Arguments go to both ctest runs (e.g. -R sampler).
#   OCTET_SANITIZE=0       Release tests only
#   OCTET_FUZZ_SECONDS=N   seconds per fuzz harness (default 30; 0 = no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/setup.sh >/dev/null
echo "test: set-up and Release build $(( $(date +%s) - t0 ))s" >&2
t0=$(date +%s)
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
echo "test: Release tests $(( $(date +%s) - t0 ))s" >&2
if [ "${OCTET_SANITIZE:-1}" != 0 ]; then
  scripts/test_sanitize.sh "$@"
fi
