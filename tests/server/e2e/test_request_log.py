"""Operational logging of `octet serve` (issue 15): the X-Request-Id response header (a valid
client id honoured, anything else replaced), the request id on every log line of a request,
one JSON access-log line per request with its token counts and times, attempts to inject log
lines or headers through the id, --disable-log-requests, --log-level, the text format, and
OCTET_* environment variables. stories260K, loopback, a few seconds."""
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from abuse_client import (SLOW, SOCKET_TIMEOUT, StoriesServer, health_status, request,
                          serve_args)

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def completion(**fields):
    body = {"model": "stories", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}
    body.update(fields)
    return body


def log_lines(server, settle=0.2):
    """The server's log lines (after a moment for the last lines to be written)."""
    time.sleep(settle)
    return server.log_text().splitlines()


def json_lines(server):
    """Every line of the log parsed as JSON, asserting that each one is a JSON object: with
    --log-format json the start-up report is logged line by line too (stdout and stderr share
    the file)."""
    out = []
    for line in log_lines(server):
        if not line.strip():
            continue
        obj = json.loads(line)  # raises on a line that is not JSON
        assert isinstance(obj, dict) and set(obj) >= {"time", "level", "message"}, obj
        out.append(obj)
    return out


def test_the_startup_report_is_json_too(json_server):
    messages = [j["message"] for j in json_lines(json_server)]
    assert any(m.startswith("threads: ") for m in messages), messages[:20]
    assert any(m.startswith("model ") for m in messages), messages[:20]


def access_lines(server, request_id):
    return [j for j in json_lines(server) if j.get("request_id") == request_id and "method" in j]


def raw_exchange(port, data):
    """Sends raw bytes; returns the response bytes until the server closes or 2 s pass."""
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT) as s:
        s.sendall(data)
        s.settimeout(2.0)
        chunks = []
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        except socket.timeout:
            pass
    return b"".join(chunks)


@pytest.fixture(scope="module")
def json_server():
    s = StoriesServer("--log-format", "json")
    yield s
    assert s.kill(30) == 0, s.log_text()[-3000:]
    s.cleanup()


def test_client_request_id_is_echoed_and_logged(json_server):
    status, headers, body = request(json_server.port, "POST", "/v1/completions", completion(),
                                    headers={"X-Request-Id": "client-id.42"})
    assert status == 200, body
    assert headers["x-request-id"] == "client-id.42"
    usage = json.loads(body)["usage"]
    lines = access_lines(json_server, "client-id.42")
    assert len(lines) == 1, lines
    a = lines[0]
    assert list(a) == ["time", "level", "request_id", "message", "method", "path", "status",
                       "prompt_tokens", "completion_tokens", "ttft_ms", "latency_ms"]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", a["time"]), a
    assert a["level"] == "info"
    assert (a["method"], a["path"], a["status"]) == ("POST", "/v1/completions", 200)
    assert a["prompt_tokens"] == usage["prompt_tokens"] > 0
    assert a["completion_tokens"] == usage["completion_tokens"] == 4
    assert 0 <= a["ttft_ms"] <= a["latency_ms"]
    assert a["message"].startswith("POST /v1/completions 200 prompt_tokens=%d completion_tokens=4"
                                   % usage["prompt_tokens"])


def test_streaming_response_carries_the_id_and_logs_its_tokens(json_server):
    status, headers, body = request(json_server.port, "POST", "/v1/completions",
                                    completion(stream=True), headers={"X-Request-Id": "stream-1"})
    assert status == 200
    assert headers["x-request-id"] == "stream-1"
    assert body.rstrip().endswith(b"data: [DONE]")
    (a,) = access_lines(json_server, "stream-1")
    assert (a["status"], a["completion_tokens"]) == (200, 4)
    assert a["ttft_ms"] is not None and a["ttft_ms"] <= a["latency_ms"]


def test_without_a_header_each_request_gets_a_fresh_id(json_server):
    ids = []
    for _ in range(2):
        status, headers, _ = request(json_server.port, "GET", "/health")
        assert status == 200
        ids.append(headers["x-request-id"])
    assert all(HEX32.match(i) for i in ids), ids
    assert ids[0] != ids[1]
    (a,) = access_lines(json_server, ids[1])
    assert (a["method"], a["path"], a["status"], a["ttft_ms"]) == ("GET", "/health", 200, None)


def test_errors_carry_the_id_too(json_server):
    status, headers, _ = request(json_server.port, "GET", "/no/such/path?secret=1",
                                 headers={"X-Request-Id": "err-404"})
    assert (status, headers["x-request-id"]) == (404, "err-404")
    status, headers, _ = request(json_server.port, "POST", "/v1/completions",
                                 completion(max_tokens=-1), headers={"X-Request-Id": "err-400"})
    assert (status, headers["x-request-id"]) == (400, "err-400")
    (a,) = access_lines(json_server, "err-404")
    assert (a["path"], a["status"]) == ("/no/such/path", 404)  # the query string is not logged
    (b,) = access_lines(json_server, "err-400")
    assert (b["status"], b["completion_tokens"]) == (400, 0)


def test_every_log_line_of_a_request_names_it(json_server):
    # An unknown field is logged (a warning, on a preparation thread) before the access line.
    status, _, _ = request(json_server.port, "POST", "/v1/completions",
                           completion(not_a_field=1), headers={"X-Request-Id": "warn-1"})
    assert status == 200
    mine = [j for j in json_lines(json_server) if "not_a_field" in j["message"]]
    assert len(mine) == 1 and mine[0]["request_id"] == "warn-1", mine
    assert mine[0]["level"] == "warning"


@pytest.mark.parametrize("sent", [
    "has space", 'quote"d', "x" * 129, "tab\there", "\u00fc".encode().decode("latin-1"),
    "semi;colon", "{\"level\":\"error\"}",
])
def test_invalid_client_ids_are_replaced(json_server, sent):
    status, headers, _ = request(json_server.port, "GET", "/health", headers={"X-Request-Id": sent})
    assert status == 200
    assert HEX32.match(headers["x-request-id"]), headers
    assert access_lines(json_server, headers["x-request-id"])


def test_injection_through_raw_header_bytes(json_server):
    """Header bytes no client library would send: an id with a bare CR, a folded (obs-fold)
    continuation line, a NUL. Whatever the parser does with them (400, or a replaced id),
    the response has exactly one X-Request-Id, the log gains no forged line, and every JSON
    line still parses."""
    forged = b"[error] FORGED"
    attempts = [
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\rb " + forged + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\r\n " + forged + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\x00" + forged + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: ok-1\r\nX-Request-Id: ok-2\r\n\r\n",
    ]
    for data in attempts:
        reply = raw_exchange(json_server.port, data)
        assert reply.startswith(b"HTTP/1.1 "), reply[:200]
        head = reply.split(b"\r\n\r\n", 1)[0]
        ids = [l for l in head.split(b"\r\n") if l.lower().startswith(b"x-request-id:")]
        assert len(ids) == 1, head
        value = ids[0].split(b":", 1)[1].strip()
        assert b"FORGED" not in value and re.match(rb"^[A-Za-z0-9._:~+/=-]{1,128}$", value), head
    lines = log_lines(json_server)
    assert not [l for l in lines if "FORGED" in l and not l.startswith("{")], lines[-10:]
    json_lines(json_server)  # every JSON line parses
    assert request(json_server.port, "GET", "/health")[0] == 200


def test_disable_log_requests_and_log_level():
    quiet = StoriesServer("--log-format", "json", "--disable-log-requests")
    try:
        status, headers, _ = request(quiet.port, "GET", "/health", headers={"X-Request-Id": "q-1"})
        assert status == 200 and headers["x-request-id"] == "q-1"  # the header stays
        assert not [j for j in json_lines(quiet) if "method" in j]
        assert any("ready" in j["message"] for j in json_lines(quiet))
    finally:
        assert quiet.kill(30) == 0
        quiet.cleanup()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_log_level_warning_drops_info_lines():
    """--log-level warning: no info line (not even "listening", so this server gets a fixed
    port rather than --port 0, whose port that line reports)."""
    port = free_port()
    args = [a for a in serve_args(template=None) if a not in ("--port", "0")]
    log = tempfile.NamedTemporaryFile(prefix="octet-log-level-", suffix=".log", delete=False)
    proc = subprocess.Popen(args + ["--port", str(port), "--log-level", "warning"], stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    try:
        deadline = time.time() + 120 * SLOW
        while health_status(port, timeout=2) != 200:
            assert proc.poll() is None and time.time() < deadline, open(log.name).read()[-2000:]
            time.sleep(0.1)
        assert request(port, "GET", "/health")[0] == 200
        time.sleep(0.2)
        lines = [l for l in open(log.name, errors="replace").read().splitlines()
                 if l.startswith("[20")]
        assert lines, "no log line at all (the start-up warning about the chat template)"
        assert not [l for l in lines if "] [info] " in l], lines
        assert all("] [warning] " in l or "] [error] " in l for l in lines), lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30 * SLOW)
        os.unlink(log.name)


def test_text_format_access_line():
    s = StoriesServer()
    try:
        status, _, body = request(s.port, "POST", "/v1/completions", completion(),
                                  headers={"X-Request-Id": "text-1"})
        assert status == 200
        prompt = json.loads(body)["usage"]["prompt_tokens"]
        pattern = (r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[info\] \[text-1\] "
                   r"POST /v1/completions 200 prompt_tokens=%d completion_tokens=4 "
                   r"ttft_ms=\d+\.\d latency_ms=\d+\.\d$" % prompt)
        assert [l for l in log_lines(s) if re.match(pattern, l)], log_lines(s)[-5:]
    finally:
        assert s.kill(30) == 0
        s.cleanup()


def test_environment_variables_configure_the_server(monkeypatch):
    """OCTET_LOG_FORMAT=json from the environment gives JSON lines; a bad bool variable is a
    usage error (exit 2) naming it."""
    monkeypatch.setenv("OCTET_LOG_FORMAT", "json")
    monkeypatch.setenv("OCTET_DISABLE_LOG_REQUESTS", "0")
    s = StoriesServer("--log-level", "info")
    try:
        status, headers, _ = request(s.port, "GET", "/health", headers={"X-Request-Id": "env-1"})
        assert status == 200
        assert access_lines(s, "env-1")
    finally:
        assert s.kill(30) == 0
        s.cleanup()
    monkeypatch.setenv("OCTET_DISABLE_LOG_REQUESTS", "maybe")
    p = subprocess.run(serve_args(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "OCTET_DISABLE_LOG_REQUESTS must be 1, true, yes, on, 0, false, no or off" in p.stderr
