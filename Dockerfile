# octet container images (deploy/README.md): a build stage with the compiler toolchain and a
# slim runtime stage holding only the `octet` binary, its shared libraries and a non-root user.
#   CPU (Debian bookworm, the default target):  docker build -t octet:cpu .
#   CUDA 13 (nvcc build, CUDA runtime base):    docker build --target cuda -t octet:cuda .
# Configuration: `octet serve` flags after the image name, a mounted YAML file (--config), or
# OCTET_* environment variables (OCTET_KV_CACHE_DTYPE=fp8 is --kv-cache-dtype fp8; flags win).
# The model: mount it (-v DIR:/models:ro, --model /models/FILE) or bake it in with
# --build-arg MODEL=PATH (a file or directory inside the build context, copied to /models/model,
# the default --model).
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

# ---- build stages ---------------------------------------------------------------------------
FROM debian:bookworm AS toolchain
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The packages of scripts/setup.sh that building the `octet` binary needs.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build ccache pkg-config libboost1.81-dev \
      libboost-program-options1.81-dev nlohmann-json3-dev libspdlog-dev catch2 libpcre2-dev \
      libyaml-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
ENV CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=2G
# xgrammar's pinned sdist (cmake/xgrammar.cmake verifies its SHA-256), where the configure
# looks for it: $OCTET_CACHE_DIR/xgrammar-0.2.8.tar.gz.
ADD https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-0.2.8.tar.gz \
    /opt/octet-cache/xgrammar-0.2.8.tar.gz
ENV OCTET_CACHE_DIR=/opt/octet-cache

FROM toolchain AS toolchain-cuda
# nvcc 13 from NVIDIA's Debian 12 repository (the same bookworm toolchain as the CPU image).
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
    /tmp/cuda-keyring.deb
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cuda-nvcc-13-0 cuda-cudart-dev-13-0 \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda-13.0/bin:${PATH} CUDACXX=/usr/local/cuda-13.0/bin/nvcc
# FlashInfer's pinned wheel (cmake/flashinfer.cmake verifies its SHA-256 and takes its headers),
# where the configure looks for it.
ADD https://files.pythonhosted.org/packages/7e/22/c96155b9959c0fb37ce179c7b1053552c170ab875bbbfc75406c9024c36f/flashinfer_python-0.7.4-py3-none-any.whl \
    /opt/octet-cache/flashinfer_python-0.7.4-py3-none-any.whl

FROM toolchain AS build-cpu
# Only what the binary is built from (a change elsewhere, e.g. docs or scripts, reuses the
# build layer); CMakeLists.txt needs tests/catch_main.cpp to configure.
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY config /src/config
COPY kernels /src/kernels
COPY models /src/models
COPY engine /src/engine
COPY bench /src/bench
COPY server /src/server
COPY tests/catch_main.cpp /src/tests/
COPY deploy/docker/build-octet.sh /src/deploy/docker/
RUN --mount=type=cache,id=octet-ccache,target=/ccache /src/deploy/docker/build-octet.sh OFF

FROM toolchain-cuda AS build-cuda
# Only what the binary is built from (a change elsewhere, e.g. docs or scripts, reuses the
# build layer); CMakeLists.txt needs tests/catch_main.cpp to configure.
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY config /src/config
COPY kernels /src/kernels
COPY models /src/models
COPY engine /src/engine
COPY bench /src/bench
COPY server /src/server
COPY tests/catch_main.cpp /src/tests/
COPY deploy/docker/build-octet.sh /src/deploy/docker/
RUN --mount=type=cache,id=octet-ccache-cuda,target=/ccache /src/deploy/docker/build-octet.sh ON

# ---- runtime stages -------------------------------------------------------------------------
FROM ${CUDA_RUNTIME_IMAGE} AS cuda
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build-cuda /out/bin/octet /usr/local/bin/octet
COPY --from=build-cuda /out/lib/ /usr/local/lib/octet/
ARG MODEL=""
# /models/model is the default --model: a baked-in model (--build-arg MODEL=...) or a mount.
RUN --mount=type=bind,target=/context \
    echo /usr/local/lib/octet > /etc/ld.so.conf.d/octet.conf && ldconfig \
 && useradd --uid 10001 --user-group --home-dir /home/octet --create-home octet \
 && mkdir -p /models \
 && if [ -n "$MODEL" ]; then cp -r "/context/$MODEL" /models/model; fi \
 && chown -R 10001:10001 /models \
 && octet --help > /dev/null
USER 10001:10001
WORKDIR /home/octet
ENV OCTET_MODEL=/models/model OCTET_HOST=0.0.0.0 OCTET_PORT=8000
EXPOSE 8000
# /health through bash's /dev/tcp (no curl in the image); OCTET_PORT is the port served.
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${OCTET_PORT:-8000} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["octet", "serve"]

# The CPU image: the last stage, so a plain `docker build .` makes it.
FROM debian:bookworm-slim AS cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build-cpu /out/bin/octet /usr/local/bin/octet
COPY --from=build-cpu /out/lib/ /usr/local/lib/octet/
ARG MODEL=""
RUN --mount=type=bind,target=/context \
    echo /usr/local/lib/octet > /etc/ld.so.conf.d/octet.conf && ldconfig \
 && useradd --uid 10001 --user-group --home-dir /home/octet --create-home octet \
 && mkdir -p /models \
 && if [ -n "$MODEL" ]; then cp -r "/context/$MODEL" /models/model; fi \
 && chown -R 10001:10001 /models \
 && octet --help > /dev/null
USER 10001:10001
WORKDIR /home/octet
# OMP_WAIT_POLICY=passive: idle OpenMP threads sleep instead of spinning (shared nodes).
ENV OCTET_MODEL=/models/model OCTET_HOST=0.0.0.0 OCTET_PORT=8000 OMP_WAIT_POLICY=passive
EXPOSE 8000
# /health through bash's /dev/tcp (no curl in the image); OCTET_PORT is the port served.
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${OCTET_PORT:-8000} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["octet", "serve"]
