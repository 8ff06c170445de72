#!/usr/bin/env bash
# The sanitizer part of CI (scripts/test.sh runs it after the Release tests): a second build
# tree, build-asan, compiled by clang with AddressSanitizer + UndefinedBehaviorSanitizer
# (-O1 -gline-tables-only: reports still name file:line and inlined frames; CUDA off,
# OCTET_FUZZ=ON), then its CTest tests except those labelled `heavy` (SmolLM2 forward passes,
# not built there; README.md), the HTTP load test and one multi-prompt generate case (minutes
# under ASan; the HTTP abuse suite, server_e2e_openai, does run: ~2 min), then the libFuzzer
# harnesses for their fixed time (scripts/fuzz.sh). Any sanitizer report fails the run
# (halt_on_error; LeakSanitizer on; the e2e servers stop with SIGTERM so LSan runs).
#   scripts/test_sanitize.sh [--build-only | --no-build] [CTEST_ARGS...]
#     --build-only   configure and build build-asan, nothing else (scripts/test.sh runs this in
#                    the background while the Release tests run)
#     --no-build     tests and fuzzers only, on a build-asan built before
#   OCTET_FUZZ_SECONDS=0   skip the fuzzers; other OCTET_FUZZ_* variables: scripts/fuzz.sh
# Expects scripts/setup.sh to have run (packages, model, HF checkpoints).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OCTET_CACHE_DIR:-$HOME/.cache/octet}"
phase() { echo "test: $1 $(( $(date +%s) - t0 ))s" >&2; }
build=1 run=1
case "${1:-}" in
  --build-only) run=0; shift ;;
  --no-build) build=0; shift ;;
esac

if ((build)); then
  t0=$(date +%s)
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
        -DOCTET_CUDA=OFF -DOCTET_FUZZ=ON \
        -DOCTET_SMOLLM2_GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf" \
        -DOCTET_HF_SMOLLM2_DIR="$CACHE/hf/SmolLM2-135M-Instruct-bf16" \
        -DOCTET_HF_SMOLLM2_F32_DIR="$CACHE/hf/SmolLM2-135M-Instruct-f32" \
        -DOCTET_LLMC_DIR="$CACHE/llmc" >/dev/null
  cmake --build build-asan -j "$(nproc)" >&2
  phase "sanitizer build"
fi
((run)) || exit 0

sym="$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:external_symbolizer_path=$sym"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:external_symbolizer_path=$sym"
t0=$(date +%s)
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -LE heavy \
      -E '^(server_e2e_load|generate --prompts-file runs every line concurrently.*)$' "$@"
phase "sanitizer tests"

if [ "${OCTET_FUZZ_SECONDS:-10}" != 0 ]; then
  t0=$(date +%s)
  scripts/fuzz.sh build-asan
  phase "fuzzers"
fi
