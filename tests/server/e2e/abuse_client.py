"""Helpers of the abuse suite (test_abuse.py): an `octet serve` on stories260K, raw-socket HTTP
with a timeout on every socket, the liveness check run after each case, and the resource
probes (KV blocks, RSS, open file descriptors) compared with the baseline at the end."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from conftest import (BINARY, DEVICE_ARGS, SANITIZED, SLOW, Server, sanitizer_env,
                      sanitizer_report)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
STORIES = os.path.join(REPO_ROOT, "..", "shared", "models", "stories260K.gguf")
TEMPLATE = os.path.join(HERE, "abuse_chat_template.jinja")
MODEL_NAME = "stories"
VOCAB = 512           # stories260K's vocabulary (shared/models/README.md)
BYTE_FF = 3 + 0xFF    # its byte tokens <0x00>..<0xFF> are ids 3..258
MAX_MODEL_LEN = 512
SOCKET_TIMEOUT = 30.0 * SLOW  # seconds; generous: CI is a loaded 2-core machine


def require_stories():
    if not (BINARY and os.path.exists(BINARY)):
        pytest.skip("OCTET_BINARY is not set or missing")
    if not os.path.exists(STORIES):
        pytest.skip("stories260K.gguf is missing (expected beside the checkout at %s)" % STORIES)


def serve_args(*extra, template=TEMPLATE):
    """`octet serve` on stories260K; skips the test when the binary or the model is missing."""
    require_stories()
    args = [BINARY, "serve", "--model", STORIES, "--host", "127.0.0.1", "--port", "0",
            "--served-model-name", MODEL_NAME, "--max-model-len", str(MAX_MODEL_LEN),
            "--num-kv-blocks", "1024", *DEVICE_ARGS]
    if template:
        args += ["--chat-template", template]
    return args + list(extra)


class StoriesServer(Server):
    """conftest.Server on stories260K with a committed chat template (the model has none).
    `preexec` runs in the child before exec (e.g. to lower RLIMIT_NOFILE)."""

    def __init__(self, *extra_args, template=TEMPLATE, startup_timeout=120.0 * SLOW,
                 preexec=None):
        require_stories()
        self.log = tempfile.NamedTemporaryFile(prefix="octet-abuse-", suffix=".log", delete=False)
        # Blocks of 128 KiB and more are mmapped and go back to the system when freed (no
        # dynamic threshold), and the heap is trimmed: RSS then measures live memory.
        env = sanitizer_env(dict(os.environ, OMP_WAIT_POLICY="passive",
                                 MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072"))
        self.proc = subprocess.Popen(serve_args(*extra_args, template=template), stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
        self.port = self._wait_for_port(startup_timeout)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._wait_healthy(startup_timeout)

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def cpu_seconds(self):
        """utime + stime of the whole process (all threads), in seconds."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self, timeout=10.0):
        """SIGTERM, SIGKILL after `timeout` (scaled by SLOW): for servers a case may have
        wedged. Returns the exit code. Raises AssertionError when the log holds a sanitizer
        report (LeakSanitizer reports at the exit that SIGTERM starts), whatever the code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.assert_no_sanitizer_report()
        return self.proc.returncode

    def cleanup(self):
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def start_expecting_refusal(template_path, timeout=30.0):
    """Starts `octet serve` with --chat-template `template_path` and waits up to `timeout` s for
    it to exit. Returns (exit code, seconds, log). A server that becomes healthy instead, or
    still runs at the deadline, is killed and the code is None. The caller scales `timeout` by
    SLOW. Raises AssertionError when the log holds a sanitizer report (a refusal must be a
    clean error exit, not an ASan abort, which exits with 1 too)."""
    require_stories()
    log = tempfile.NamedTemporaryFile(prefix="octet-abuse-", suffix=".log", delete=False)
    env = sanitizer_env(dict(os.environ, OMP_WAIT_POLICY="passive"))
    t0 = time.time()
    proc = subprocess.Popen(serve_args(template=template_path), stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    code = None
    port = None
    try:
        while time.time() - t0 < timeout:
            code = proc.poll()
            if code is not None:
                break
            text = open(log.name, errors="replace").read()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            port = int(m.group(1)) if m else None
            if port and health_status(port, timeout=2) == 200:
                break  # it serves with the bad template: the caller fails
            time.sleep(0.1)
        else:
            code = proc.poll()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.time() - t0
    text = open(log.name, errors="replace").read()
    os.unlink(log.name)
    report = sanitizer_report(text)
    assert report is None, "sanitizer report from the refused start:\n" + report
    return code, elapsed, text


# ---- plain HTTP ----------------------------------------------------------------------------

def request(port, method, path, body=None, headers=None, raw_body=None, timeout=SOCKET_TIMEOUT):
    """(status, lower-cased headers, body bytes) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def post(port, path, body=None, raw_body=None, headers=None, timeout=SOCKET_TIMEOUT):
    """(status, parsed JSON body or None) of a POST."""
    status, _, data = request(port, "POST", path, body, headers=headers, raw_body=raw_body,
                              timeout=timeout)
    try:
        return status, json.loads(data) if data else None
    except ValueError:
        return status, {"unparsed": data[:500]}


def health_status(port, timeout=5.0):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None


def assert_alive(server, chat=False, headers=None):
    """The server still runs, /health answers 200 and a max_tokens 2 completion (and, with
    `chat`, a chat completion) succeeds."""
    assert server.proc.poll() is None, "server died (exit %s):\n%s" % (
        server.proc.returncode, server.diagnostic())
    status = health_status(server.port, timeout=SOCKET_TIMEOUT)
    assert status == 200, "/health answered %s after the case:\n%s" % (
        status, server.log_text()[-2000:])
    status, r = post(server.port, "/v1/completions",
                     {"model": MODEL_NAME, "prompt": "Once", "max_tokens": 2}, headers=headers)
    assert status == 200, ("a short completion failed after the case", status, r)
    assert r["usage"]["completion_tokens"] <= 2 and r["choices"][0]["finish_reason"]
    if chat:
        status, r = post(server.port, "/v1/chat/completions",
                         {"model": MODEL_NAME, "max_tokens": 2,
                          "messages": [{"role": "user", "content": "hi"}]}, headers=headers)
        assert status == 200, ("a short chat completion failed after the case", status, r)


def wait_idle(server, timeout=60.0):
    """Waits until no request runs or waits and every KV block is free (up to `timeout` s,
    scaled by SLOW); the metrics then."""
    deadline = time.time() + timeout * SLOW
    m = server.metrics()
    while time.time() < deadline:
        m = server.metrics()
        if (m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
                and m["octet:kv_cache_num_free_blocks"] == m["octet:kv_cache_num_blocks"]):
            return m
        time.sleep(0.1)
    raise AssertionError("engine did not go idle: %s" % {
        k: v for k, v in m.items() if "num_" in k or "usage" in k})


# ---- raw sockets ---------------------------------------------------------------------------

def connect(port, timeout=SOCKET_TIMEOUT):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_until_close(s, limit=64 << 20):
    """Everything the peer sends until it closes (or resets) the connection; raises
    socket.timeout when it neither sends nor closes within the socket's timeout."""
    out = bytearray()
    while len(out) < limit:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


def exchange(port, data, timeout=SOCKET_TIMEOUT, shutdown_write=False):
    """Sends raw bytes on a fresh connection and returns what comes back until the server
    closes it."""
    s = connect(port, timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before taking every byte
        if shutdown_write:
            s.shutdown(socket.SHUT_WR)
        return recv_until_close(s)
    finally:
        s.close()


class RawResponse:
    def __init__(self, version, status, headers, body):
        self.version, self.status, self.headers, self.body = version, status, headers, body

    def header(self, name):
        return self.headers.get(name.lower())


def read_response(s, buf=b""):
    """One HTTP/1.x response from socket `s` (Content-Length or chunked framing; with neither,
    the body runs to the close). Returns (RawResponse, leftover bytes)."""
    def fill(need_len=None, marker=None):
        nonlocal buf
        while (marker is not None and marker not in buf) or \
                (need_len is not None and len(buf) < need_len):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-response (have %r)" % buf[:200])
            buf += chunk

    fill(marker=b"\r\n\r\n")
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ")[0], int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", ""):
        body = b""
        while True:
            fill(marker=b"\r\n")
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            fill(need_len=size + 2)
            body, buf = body + buf[:size], buf[size + 2:]
            if size == 0:
                break
    elif "content-length" in headers:
        n = int(headers["content-length"])
        fill(need_len=n)
        body, buf = buf[:n], buf[n:]
    else:
        body, buf = buf + recv_until_close(s), b""
    return RawResponse(version, status, headers, body), buf


def parse_responses(data):
    """Every complete response in `data` (bytes received until close)."""
    class Buf:
        def __init__(self):
            self.done = False

        def recv(self, n):
            return b""
    out = []
    rest = data
    while rest:
        try:
            r, rest = read_response(Buf(), rest)
        except (ConnectionError, ValueError, IndexError):
            break
        out.append(r)
    return out


def http_request_bytes(method, path, body=b"", headers=None, version="HTTP/1.1"):
    hdrs = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    if body:
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    head = "".join(f"{k}: {v}\r\n" for k, v in hdrs.items() if v is not None)
    return f"{method} {path} {version}\r\n{head}\r\n".encode() + body
