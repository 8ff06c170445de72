#!/usr/bin/env bash
# CTest entry of the HTTP end-to-end tests: installs the OpenAI client and pytest
# (scripts/setup_e2e.sh, idempotent) and runs pytest here with the given arguments. Exits 77
# (reported as skipped) when the model is missing.
#   OCTET_BINARY, OCTET_SMOLLM2_GGUF: see conftest.py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${OCTET_SMOLLM2_GGUF:-}" ] || [ ! -f "${OCTET_SMOLLM2_GGUF}" ]; then
  echo "skipped: OCTET_SMOLLM2_GGUF is not set or missing (run scripts/setup.sh)"
  exit 77
fi
if [ ! -x "${OCTET_BINARY:-}" ]; then
  echo "error: OCTET_BINARY ('${OCTET_BINARY:-}') is not an executable" >&2
  exit 1
fi
export OCTET_BINARY="$(realpath "$OCTET_BINARY")" OCTET_SMOLLM2_GGUF="$(realpath "$OCTET_SMOLLM2_GGUF")"
py="$("$here/../../../scripts/setup_e2e.sh" | tail -n 1)"
cd "$here"
exec "$py" -m pytest -q -rs -p no:cacheprovider "$@"
