"""Fixtures for the end-to-end tests of `octet serve`: the real binary, a real model, a free port.

Environment (set by CTest, see CMakeLists.txt):
  OCTET_BINARY        path of build/octet
  OCTET_SMOLLM2_GGUF  SmolLM2-135M-Instruct GGUF (scripts/setup.sh fetches it)
  OCTET_E2E_SANITIZED 1 when OCTET_BINARY is the AddressSanitizer + UBSan build (build-asan,
                      CMake's OCTET_SANITIZE): time bounds and client timeouts are multiplied
                      by SLOW, the servers run with halt_on_error, and any sanitizer report in
                      a server's log fails the test (see sanitizer_report)
  OCTET_E2E_DEVICE    optional --device for every server (e.g. cuda; scripts/gpu_check)
Tests are skipped (exit code 77 through CTest's SKIP_RETURN_CODE... via pytest's own skip) when
either is missing.
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

BINARY = os.environ.get("OCTET_BINARY", "")
MODEL = os.environ.get("OCTET_SMOLLM2_GGUF", "")
MODEL_NAME = "smol"
MAX_MODEL_LEN = 1024

SANITIZED = os.environ.get("OCTET_E2E_SANITIZED", "") not in ("", "0")
# --device for every server under test (unset: the binary's default).
DEVICE_ARGS = (["--device", os.environ["OCTET_E2E_DEVICE"]]
               if os.environ.get("OCTET_E2E_DEVICE") else [])
# ASan + UBSan at -O1 runs the server 3-10x slower than Release (more for allocation-heavy
# paths such as JSON parsing and template rendering); 5 with the generous Release bounds
# (already 10x or more over a warm run) covers the loaded 2-core CI machine.
SLOW = 5 if SANITIZED else 1

# The first line of an ASan/LSan/UBSan report (UBSan: "file:line:col: runtime error: ...").
_SANITIZER_REPORT = re.compile(r"^(==\d+==ERROR: \w+Sanitizer|.*: runtime error: |"
                               r"SUMMARY: \w+Sanitizer)", re.M)


def sanitizer_env(env):
    """`env` with halt_on_error=1 in ASAN_OPTIONS and UBSAN_OPTIONS (appended to what is set,
    e.g. the symbolizer path of scripts/test_sanitize.sh) when SANITIZED: the first report kills
    the server, which the next liveness check notices. Unchanged otherwise."""
    if SANITIZED:
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            opts = env.get(var, "")
            if "halt_on_error=" not in opts:
                env[var] = (opts + ":" if opts else "") + "halt_on_error=1"
    return env


def sanitizer_report(text):
    """The sanitizer report in a server log (from its first line, at most 12,000 characters),
    or None."""
    m = _SANITIZER_REPORT.search(text)
    return None if m is None else text[m.start():m.start() + 12000]


class Server:
    """One `octet serve` process on a free port (--port 0; the port is read from its log)."""

    def __init__(self, *extra_args, startup_timeout=300.0):
        if not (BINARY and os.path.exists(BINARY)):
            pytest.skip("OCTET_BINARY is not set or missing")
        if not (MODEL and os.path.exists(MODEL)):
            pytest.skip("OCTET_SMOLLM2_GGUF is not set or missing (run scripts/setup.sh)")
        self.log = tempfile.NamedTemporaryFile(prefix="octet-serve-", suffix=".log", delete=False)
        args = [BINARY, "serve", "--model", MODEL, "--host", "127.0.0.1", "--port", "0",
                "--served-model-name", MODEL_NAME, "--max-model-len", str(MAX_MODEL_LEN),
                *DEVICE_ARGS, *extra_args]
        env = sanitizer_env(dict(os.environ, OMP_WAIT_POLICY="passive"))
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = self._wait_for_port(startup_timeout)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._wait_healthy(startup_timeout)

    def log_text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def diagnostic(self):
        """What to show when the server misbehaved: its sanitizer report if the log has one,
        else the last 3,000 characters of the log (stdout and stderr)."""
        text = self.log_text()
        return sanitizer_report(text) or text[-3000:]

    def assert_no_sanitizer_report(self):
        report = sanitizer_report(self.log_text())
        assert report is None, "octet serve (exit %s) wrote a sanitizer report:\n%s" % (
            self.proc.poll(), report)

    def _wait_for_port(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_text())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError("octet serve exited early:\n" + self.diagnostic())
            time.sleep(0.05)
        raise RuntimeError("octet serve did not listen in time:\n" + self.diagnostic())

    def _wait_healthy(self, timeout):
        """Polls /health until 200; the statuses seen are kept in health_statuses (503 while
        the model loads)."""
        self.health_statuses = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("octet serve exited early:\n" + self.diagnostic())
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                    self.health_statuses.append(r.status)
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                self.health_statuses.append(e.code)
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError("octet serve did not become healthy:\n" + self.diagnostic())

    def metrics(self):
        """/metrics as {"name{labels}": value} without the model_name and engine labels (vllm:
        families carry model_name and engine="0", octet: ones model_name)."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            key = re.sub(r'(model_name|engine)="[^"]*",?', "", key).replace("{}", "")
            out[key] = float(value)
        return out

    def rss_bytes(self):
        """Resident bytes outside the backend's buffers (the heap, stacks, glibc's mappings):
        what a leak grows. The backend's large buffers (weights, the KV pool, activations:
        kernels/cpu/huge_page_allocator.h) are 2 MiB-aligned mappings marked MADV_HUGEPAGE
        (VmFlags "hg" in smaps) whose pages are faulted in when first used, so the KV pool's
        resident size grows as the LRU free list hands out blocks never used before; they are
        left out."""
        total = pools = 0
        rss = 0
        with open(f"/proc/{self.proc.pid}/smaps") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                    total += rss
                elif line.startswith("VmFlags:") and " hg" in line:
                    pools += rss
        if total == 0:
            raise RuntimeError("no Rss in smaps")
        return total - pools

    def stop(self, timeout=60.0):
        """SIGTERM, then the exit code (killed after `timeout` x SLOW). Raises AssertionError
        when the log holds a sanitizer report (LeakSanitizer's runs at this exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.assert_no_sanitizer_report()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    # cached_tokens in usage (vLLM's flag; off by default, as vLLM): the prefix-cache tests read it.
    s = Server("--enable-prompt-tokens-details")
    yield s
    code = s.stop()
    assert code == 0, "octet serve exited with %s:\n%s" % (code, s.log_text()[-4000:])


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=300)
