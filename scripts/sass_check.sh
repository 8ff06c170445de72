#!/usr/bin/env bash
# Reads the SASS of the CUDA attention kernels octet launches on sm_90 (cuobjdump -sass on the
# built static libraries) and fails (exit 1) unless:
#  - every decode attention kernel (flashinfer_decode_items_kernel: octet's loop around
#    FlashInfer's BatchDecodeWithPagedKVCacheDevice) issues 16-byte global loads (LDG.E.128 or
#    cp.async's LDGSTS...128);
#  - every prefill attention kernel (FlashInfer's BatchPrefillWithPagedKVCacheKernel) issues
#    tensor-core instructions (HMMA / HGMMA);
#  - both exist. octet's own kernels (the fallback for other GPUs and shapes) are listed too.
# Prints one line per kernel: its name, architecture and the instruction counts.
# Usage: sass_check.sh BUILD_DIR   (CTest: cuda_sass_check)
# cuobjdump and nvdisasm: from PATH, else NVIDIA's pinned PyPI wheels (nvidia-cuda-cuobjdump,
# nvidia-cuda-nvdisasm 13.5.37, sha256-checked by pip) fetched once into
# ${OCTET_CACHE_DIR:-~/.cache/octet}/cuda-tools; Debian's CUDA 13.0 packages here lack both.
set -euo pipefail
build=${1:?usage: sass_check.sh BUILD_DIR}
tools="${OCTET_CACHE_DIR:-$HOME/.cache/octet}/cuda-tools"
if ! command -v cuobjdump >/dev/null || ! command -v nvdisasm >/dev/null; then
  if [[ ! -x "$tools/nvidia/cu13/bin/cuobjdump" || ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]]; then
    mkdir -p "$tools"
    req="$tools/requirements.txt"
    cat >"$req" <<'REQ'
nvidia-cuda-cuobjdump==13.5.37 --hash=sha256:38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58
nvidia-cuda-nvdisasm==13.5.37 --hash=sha256:d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca
REQ
    python3 -m pip download --quiet --no-deps --require-hashes -r "$req" -d "$tools/wheels" \
      --only-binary=:all: --platform manylinux2014_x86_64 >&2
    for w in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
    chmod +x "$tools/nvidia/cu13/bin/cuobjdump" "$tools/nvidia/cu13/bin/nvdisasm"
  fi
  export PATH="$tools/nvidia/cu13/bin:$PATH"
fi
export NVDISASM_PATH
NVDISASM_PATH=$(dirname "$(command -v nvdisasm)")

libs=()
for l in "$build/liboctet_flashinfer.a" "$build/liboctet_kernels_cuda.a"; do
  [[ -f "$l" ]] && libs+=("$l")
done
if [[ ${#libs[@]} -eq 0 ]]; then
  echo "sass_check: no CUDA libraries in $build (build octet first)" >&2
  exit 1
fi
demangle=cat
if command -v c++filt >/dev/null; then demangle=c++filt; fi

# One line per (kernel, arch): kind, arch, 16-byte global loads, tensor-core ops, mangled name.
table=$(for l in "${libs[@]}"; do cuobjdump -sass "$l"; done | awk '
  function flush() {
    if (fn != "") printf "%s %s %d %d %s\n", kind, arch, wide, mma, fn
  }
  /^[[:space:]]*arch = / { flush(); fn = ""; arch = $3 }
  /Function : / {
    flush()
    fn = $3; wide = 0; mma = 0; kind = ""
    if (fn ~ /flashinfer_decode_items_kernel|BatchDecodeWithPagedKVCacheKernel/) kind = "decode"
    else if (fn ~ /BatchPrefillWithPagedKVCacheKernel/) kind = "prefill"
    else if (fn ~ /paged_decode_split/) kind = "decode-octet"
    else if (fn ~ /paged_prefill/) kind = "prefill-octet"
    else fn = ""
    next
  }
  fn != "" && /(LDG|LDGSTS)[A-Z0-9_.]*\.128/ { wide++ }
  fn != "" && /[[:space:]]H(G)?MMA/ { mma++ }
  END { flush() }')
if [[ -z "$table" ]]; then
  echo "sass_check: no attention kernels found in ${libs[*]}" >&2
  exit 1
fi
fail=0
while read -r kind arch wide mma fn; do
  name=$(echo "$fn" | $demangle | cut -c1-220)
  verdict=ok
  case "$kind" in
    decode) ((wide > 0)) || { verdict="FAIL: no 16-byte global load"; fail=1; } ;;
    prefill) ((mma > 0)) || { verdict="FAIL: no HMMA/HGMMA"; fail=1; } ;;
    decode-octet|prefill-octet) verdict="octet's fallback (other GPUs and shapes)" ;;
  esac
  printf '%-12s %-8s 16B-loads %5d  mma %5d  %s  %s\n' "$kind" "$arch" "$wide" "$mma" "$verdict" "$name"
done <<<"$table"
grep -q '^decode ' <<<"$table" || { echo "sass_check: no FlashInfer decode kernel" >&2; fail=1; }
grep -q '^prefill ' <<<"$table" || { echo "sass_check: no FlashInfer prefill kernel" >&2; fail=1; }
exit $fail
