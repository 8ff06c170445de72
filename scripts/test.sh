#!/usr/bin/env bash
# All tests: set up (packages, model, build), then every CTest test. Skipped tests (CUDA tests
# on a machine without a GPU) are listed as skipped, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
