# octet on Debian bookworm: the same set-up script as README.md, then the main job
# (`octet serve` on port 8000). docker run -p 8000:8000 IMAGE [serve flags...]
FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates sudo && rm -rf /var/lib/apt/lists/*
WORKDIR /octet
COPY . .
RUN scripts/setup.sh
EXPOSE 8000
ENTRYPOINT ["scripts/main.sh"]
