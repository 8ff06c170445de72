#!/usr/bin/env python3
"""Serving benchmark for `octet serve`: time to first token (TTFT) of a short prompt with no
other load, and inter-token latency (ITL) with 16 concurrent streams. Standard library only.

  scripts/bench_serve.py --url http://127.0.0.1:8000            # a running server
  scripts/bench_serve.py --model ~/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf   # starts one

TTFT: request sent -> first SSE chunk with text, streamed /v1/completions, median of --runs
after one warm-up. ITL: gaps between consecutive text chunks of each stream (one token per
chunk), over --concurrency streams of --max-tokens tokens (ignore_eos) started together.
Prints a table, or one JSON object with --json.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request


def stream_completion(host, port, model, prompt, max_tokens):
    """[(arrival time, text)] for each text chunk, and the send time."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    arrivals = []
    buf = b""
    while True:
        data = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            payload = event[len(b"data: "):]
            if payload == b"[DONE]":
                continue
            chunk = json.loads(payload)
            if chunk["choices"] and chunk["choices"][0]["text"]:
                arrivals.append(time.perf_counter())
    conn.close()
    return t0, arrivals


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def start_server(args):
    log = tempfile.NamedTemporaryFile(prefix="octet-bench-serve-", suffix=".log", delete=False)
    cmd = [args.binary, "serve", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
           "--served-model-name", args.model_name] + args.server_args
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    port = None
    while time.time() < deadline and proc.poll() is None:
        text = open(log.name, errors="replace").read()
        m = re.search(r"listening on http://[^:]+:(\d+)", text)
        if m and port is None:
            port = int(m.group(1))
        if port:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return proc, port
            except Exception:
                pass
        time.sleep(0.1)
    raise RuntimeError("server did not start:\n" + open(log.name, errors="replace").read())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", help="start build/octet serve on this model instead")
    ap.add_argument("--binary", default=os.path.join(here, "..", "build", "octet"))
    ap.add_argument("--model-name", default="bench", help="served model name to request")
    ap.add_argument("--server-args", nargs=argparse.REMAINDER, default=[],
                    help="extra `octet serve` flags (last on the line)")
    ap.add_argument("--runs", type=int, default=10, help="TTFT requests")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt", default="Hello, my name is")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.url and not args.model:
        ap.error("give --url or --model")

    proc = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port or 80
        with urllib.request.urlopen(args.url + "/v1/models") as r:
            args.model_name = json.load(r)["data"][0]["id"]
    else:
        proc, port = start_server(args)
        host = "127.0.0.1"
    try:
        # TTFT, no load.
        stream_completion(host, port, args.model_name, args.prompt, 4)  # warm-up
        ttft = []
        for _ in range(args.runs):
            t0, arr = stream_completion(host, port, args.model_name, args.prompt, 4)
            ttft.append(arr[0] - t0)
        # ITL at `concurrency` streams.
        results = [None] * args.concurrency
        barrier = threading.Barrier(args.concurrency)

        def worker(i):
            barrier.wait()
            results[i] = stream_completion(host, port, args.model_name,
                                           f"{args.prompt} (stream {i})", args.max_tokens)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.concurrency)]
        t_start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t_start
        gaps = [b - a for _, arr in results for a, b in zip(arr, arr[1:])]
        tokens = sum(len(arr) for _, arr in results)
        out = {
            "ttft_ms_median": 1000 * statistics.median(ttft),
            "ttft_ms_mean": 1000 * statistics.mean(ttft),
            "ttft_ms_min": 1000 * min(ttft),
            "concurrency": args.concurrency,
            "itl_ms_mean": 1000 * statistics.mean(gaps),
            "itl_ms_median": 1000 * statistics.median(gaps),
            "itl_ms_p90": 1000 * percentile(gaps, 0.90),
            "itl_ms_p99": 1000 * percentile(gaps, 0.99),
            "output_tokens_per_s": tokens / wall,
        }
        if args.json:
            print(json.dumps(out))
        else:
            print(f"TTFT, no load ({args.runs} runs): median {out['ttft_ms_median']:.1f} ms, "
                  f"mean {out['ttft_ms_mean']:.1f} ms, min {out['ttft_ms_min']:.1f} ms")
            print(f"ITL at {args.concurrency} streams x {args.max_tokens} tokens: "
                  f"mean {out['itl_ms_mean']:.1f} ms, median {out['itl_ms_median']:.1f} ms, "
                  f"p90 {out['itl_ms_p90']:.1f} ms, p99 {out['itl_ms_p99']:.1f} ms; "
                  f"{out['output_tokens_per_s']:.0f} output tokens/s")
    finally:
        if proc:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    sys.exit(main())
