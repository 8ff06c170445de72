# Placeholder until the deployment issue: builds octet on Debian bookworm with the same set-up
# script as README.md.
FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates sudo && rm -rf /var/lib/apt/lists/*
WORKDIR /octet
COPY . .
RUN scripts/setup.sh
ENTRYPOINT ["build/octet"]
