#!/usr/bin/env bash
# Prints the registers, stack frame and spills ptxas reported (-Xptxas -v) for every CUDA kernel
# of the build, per architecture, from the logs scripts/cuda_ptxas_tee.sh kept, and fails (exit
# 1) on any spill in the attention kernels (paged_*, write_kv) or the GEMM and epilogue kernels
# (simt_gemm, w8a8_combine, add_bias), where a spill costs a local-memory round trip per element.
# Usage: cuda_resource_check.sh PTXAS_LOG_DIR [CUDA_SOURCE_DIR]   (CTest: cuda_resource_check)
# With CUDA_SOURCE_DIR only the logs of sources that still exist there are read (a removed .cu
# leaves a stale log behind).
set -euo pipefail
log_dir=${1:?usage: cuda_resource_check.sh PTXAS_LOG_DIR [CUDA_SOURCE_DIR]}
src_dir=${2:-}
shopt -s nullglob
logs=()
for log in "$log_dir"/*.log; do
  src=$(basename "$log" .o.log)  # attention.cu.o.log -> attention.cu
  if [[ -z "$src_dir" || -f "$src_dir/$src" ]]; then logs+=("$log"); fi
done
if [[ ${#logs[@]} -eq 0 ]]; then
  echo "cuda_resource_check: no ptxas logs in $log_dir (build octet_kernels_cuda first)" >&2
  exit 1
fi
demangle=cat
if command -v c++filt >/dev/null; then demangle=c++filt; fi
# ptxas -v, per entry function:
#   ptxas info    : Compiling entry function '_Z...' for 'sm_90a'
#   ptxas info    : Function properties for _Z...
#       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 40 registers, used 1 barriers, 380 bytes cmem[0]
table=$(awk '
  /Compiling entry function/ {
    match($0, /function \x27[^\x27]+\x27/); fn = substr($0, RSTART + 10, RLENGTH - 11)
    match($0, /for \x27[^\x27]+\x27/); arch = substr($0, RSTART + 5, RLENGTH - 6)
    entry = 1; stack = 0; st = 0; ld = 0; next
  }
  entry && /bytes stack frame/ {
    for (i = 1; i <= NF; ++i) {
      if ($(i + 1) == "bytes" && $(i + 2) == "stack") stack = $i
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^stores/) st = $i
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^loads/) ld = $i
    }
    next
  }
  entry && /Used [0-9]+ registers/ {
    match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15)
    printf "%s\t%s\t%s\t%s\t%s\t%s\n", arch, regs, stack, st, ld, fn
    entry = 0
  }' "${logs[@]}" | sort -u)
if [[ -z "$table" ]]; then
  echo "cuda_resource_check: no kernel figures in the logs (is -Xptxas -v set?)" >&2
  exit 1
fi
fail=0
printf '%-7s %5s %6s %7s %7s  %s\n' arch regs stack spill_st spill_ld kernel
while IFS=$'\t' read -r arch regs stack st ld fn; do
  name=$(echo "$fn" | $demangle)
  # The kernel's own name: drop the parameter list (the last parenthesis group) and templates.
  short=$(echo "$name" | sed -E 's/\([^()]*\)$//; s/<.*$//; s/^.*:://')
  printf '%-7s %5s %6s %7s %7s  %s\n' "$arch" "$regs" "$stack" "$st" "$ld" "$(echo "$name" | cut -c1-110)"
  if [[ "$st" != 0 || "$ld" != 0 ]]; then
    case "$short" in
      *paged_*|*write_kv*|*simt_gemm*|*w8a8_combine*|*add_bias*)
        echo "  FAIL: $short spills ($st bytes stored, $ld bytes loaded) on $arch" >&2
        fail=1 ;;
    esac
  fi
done <<< "$table"
if [[ $fail -ne 0 ]]; then
  echo "cuda_resource_check: spills in attention or GEMM-epilogue kernels" >&2
  exit 1
fi
echo "cuda_resource_check: no spills in the attention and GEMM-epilogue kernels"
