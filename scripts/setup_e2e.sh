#!/usr/bin/env bash
# Set-up of the HTTP end-to-end tests (tests/server/e2e), idempotent: a virtualenv outside git
# with the official OpenAI Python client, pytest and jsonschema (tool-call arguments) from PyPI.
# Prints the venv's python as its last line.
#   OCTET_CACHE_DIR   cache (default ~/.cache/octet); the venv is $OCTET_CACHE_DIR/e2e-venv
set -euo pipefail
CACHE="${OCTET_CACHE_DIR:-$HOME/.cache/octet}"
VENV="$CACHE/e2e-venv"
REQUIREMENTS=(openai==1.109.1 pytest==9.2.0 httpx==0.28.1 jsonschema==4.25.1)
STAMP="$VENV/.octet-e2e-$(echo "${REQUIREMENTS[*]}" | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "setup_e2e: installing ${REQUIREMENTS[*]} into $VENV" >&2
  mkdir -p "$CACHE"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}" >&2
  touch "$STAMP"
fi
echo "$VENV/bin/python"
