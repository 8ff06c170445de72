"""Fixtures for the end-to-end tests of `octet serve`: the real binary, a real model, a free port.

Environment (set by CTest, see CMakeLists.txt):
  OCTET_BINARY        path of build/octet
  OCTET_SMOLLM2_GGUF  SmolLM2-135M-Instruct GGUF (scripts/setup.sh fetches it)
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
                *extra_args]
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = self._wait_for_port(startup_timeout)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._wait_healthy(startup_timeout)

    def log_text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def _wait_for_port(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_text())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError("octet serve exited early:\n" + self.log_text())
            time.sleep(0.05)
        raise RuntimeError("octet serve did not listen in time:\n" + self.log_text())

    def _wait_healthy(self, timeout):
        """Polls /health until 200; the statuses seen are kept in health_statuses (503 while
        the model loads)."""
        self.health_statuses = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("octet serve exited early:\n" + self.log_text())
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
        raise RuntimeError("octet serve did not become healthy:\n" + self.log_text())

    def metrics(self):
        """/metrics as {"name{labels}": value} without the model_name label."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            key = re.sub(r'model_name="[^"]*",?', "", key).replace("{}", "")
            out[key] = float(value)
        return out

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self, timeout=60.0):
        """SIGTERM, then the exit code (killed after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    code = s.stop()
    assert code == 0, "octet serve exited with %s:\n%s" % (code, s.log_text()[-4000:])


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=300)
