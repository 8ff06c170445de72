#!/usr/bin/env bash
# CUDA compiler launcher (CMakeLists.txt, octet_kernels_cuda): runs the compile command given
# after LOG_DIR (optionally behind ccache, which replays a cached compile's stderr) and keeps its
# stderr, where `-Xptxas -v` prints each kernel's registers and spills, in LOG_DIR/<object>.log
# for scripts/cuda_resource_check.sh; the rest of stderr still reaches the build log. The exit
# code is the compiler's.
# Usage: cuda_ptxas_tee.sh LOG_DIR [ccache] nvcc ARGS...
log_dir=$1
shift
if [[ $# -gt 0 && -z "$1" ]]; then shift; fi  # empty ccache entry when ccache is absent
obj=unknown
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  if [[ "${args[i]}" == "-o" && $((i + 1)) -lt ${#args[@]} ]]; then obj=${args[i + 1]}; fi
done
mkdir -p "$log_dir"
log="$log_dir/$(basename "$obj").log"
"$@" 2> "$log.tmp"
rc=$?
# The console gets everything but ptxas's per-kernel figures (warnings, errors, other notes).
grep -v -E '^ptxas info|bytes stack frame' "$log.tmp" >&2 || true
mv -f "$log.tmp" "$log"
exit $rc
