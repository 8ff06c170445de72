#!/bin/sh
# Build stage helper of the Dockerfile: configures and builds the `octet` binary only (no tests)
# from /src into /src/build, with ccache in $CCACHE_DIR (a cache mount that outlives the build, so a
# rebuild recompiles only what changed), then copies the binary and the shared libraries it
# needs (ldd) into /out: /out/bin/octet and /out/lib/*. glibc, libgcc_s and libstdc++ are left
# out: every Debian/Ubuntu runtime base has them (apt needs them).
#   build-octet.sh OFF|ON    OCTET_CUDA: ON builds the CUDA kernels (needs nvcc on PATH)
set -eu
cuda="${1:-OFF}"
# The locale scripts/setup.sh compiles under (ccache hashes it): the Release tree's ccache
# entries, seeded into this stage's cache by scripts/image_check.sh, then serve this build.
export LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES
cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CUDA="$cuda" >/dev/null
ninja -C /src/build octet
ccache --show-stats 2>/dev/null | grep -Ei 'hits|misses' || true
mkdir -p /out/bin /out/lib
cp /src/build/octet /out/bin/octet
strip --strip-unneeded /out/bin/octet
ldd /out/bin/octet | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libgcc_s.so.*|libstdc++.so.*) ;;
    libcuda.so.*) ;;  # the driver's library: mounted by the NVIDIA container runtime
    *) cp -L "$lib" /out/lib/ ;;
  esac
done
ls /out/lib
