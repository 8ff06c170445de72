"""Every example command of README.md and deploy/README.md runs (issue 15).

The commands are the fenced ```sh blocks of both files, split into commands (backslash
continuations and quotes spanning lines joined; comment-only lines dropped). Each command must
match exactly one rule of RULES below, which says how it is adapted to CI, or why it is not run:

- everywhere: `build/octet` is the binary under test (OCTET_BINARY), `../shared/models/` the
  models beside the checkout, `M=...SmolLM2...gguf` the SmolLM2 file the tests use
  (OCTET_SMOLLM2_GGUF), port 8000 a free port; lengths are cut: `--max-tokens 64` (and the
  JSON "max_tokens": 64) to 8, `--max-tokens 200` to 16, a `generate` without --max-tokens
  gets `--max-tokens 8`;
- `octet serve` starts a server in the background (the curl examples after it talk to it; the
  next serve command replaces it) and must become healthy;
- perplexity reads the first 3,000 bytes of the GPL text instead of all 35 KB; bench latency
  and bench engine get short lengths (`bench kernels` has none and runs as written); quantize
  reads the bf16 SmolLM2 checkpoint of scripts/setup.sh into a temporary OUT_DIR;
- not run, with the reason in the rule: scripts/main.sh and scripts/test.sh (set-up and CI
  itself), scripts/bench.sh (all benchmarks: its commands run here with short lengths), docker
  (no daemon on CI: scripts/image_check.sh builds and serves the same Dockerfile with buildah),
  the buildah lines (scripts/image_check.sh runs them) and kubectl (no cluster: the manifests
  are validated by kubernetes-validate in scripts/image_check.sh).

A command no rule matches, or a rule no command matches, fails the test: a new example needs a
rule (that check is quick and runs in CTest's server_e2e_openai). Each run command must exit 0
and pass its rule's output check: test_examples_run is marked `load`, so it runs in CTest's
server_e2e_load entry (Release tree, alone: RUN_SERIAL, 40-minute limit), as it takes minutes
(SmolLM2 loads and calibrations, bench kernels about 1.5 minutes on an idle 2-core machine;
18 minutes in all on one shared with four parallel builds)."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from conftest import BINARY, MODEL

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MODELS_DIR = os.path.abspath(os.path.join(REPO, "..", "shared", "models"))
DOCS = ["README.md", "deploy/README.md"]
CACHE = os.environ.get("OCTET_CACHE_DIR", os.path.expanduser("~/.cache/octet"))
HF_DIR = os.environ.get("OCTET_HF_SMOLLM2_DIR",
                        os.path.join(CACHE, "hf", "SmolLM2-135M-Instruct-bf16"))
TIMEOUT = 600  # seconds per command (bench kernels: about 90 s on a loaded 2-core machine)


def extract_commands(text):
    """The commands of the ```sh blocks of a Markdown text, in order."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        pending = ""
        for line in block.splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            pending += line + "\n"
            if pending.rstrip().endswith("\\"):
                continue
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # a quote spans lines
                continue
            commands.append(pending.rstrip("\n"))
            pending = ""
        assert not pending, "unterminated command in a sh block: %r" % pending
    return commands


def words(cmd):
    return shlex.split(cmd, comments=True)


# ---- output checks ---------------------------------------------------------------------------

def nonempty(out):
    assert out.strip(), "no output"


def json_lines_with_tokens(out):
    lines = [l for l in out.splitlines() if l.strip()]
    assert lines
    for l in lines:
        assert json.loads(l)["token_ids"], l


def chat_json(out):
    r = json.loads(out)
    assert r["choices"][0]["message"]["content"], r


def sse_done(out):
    assert "data: [DONE]" in out and '"delta"' in out, out[-500:]


def completion_with_request_id(out):
    head, _, body = out.replace("\r\n", "\n").partition("\n\n")
    assert head.startswith("HTTP/1.1 200"), head
    assert "X-Request-Id: my-request-1" in head, head
    assert json.loads(body)["choices"][0]["text"] is not None


def perplexity_figure(out):
    assert re.search(r"perplexity", out, re.I), out[-500:]


# ---- rules: (pattern, action, detail) ----------------------------------------------------------
# action: "skip" (detail = the reason), "assign" (a variable the later commands use), "serve"
# (a background server), "run" (detail = the output check), "request" (run against the server:
# the last serve command's, or before any, the document's first: README.md's curls come before
# its serve command, which is what scripts/main.sh runs).
SKIP_DOCKER = ("no Docker daemon on CI: scripts/image_check.sh (the `image` phase of "
               "scripts/test.sh) builds the same Dockerfile with buildah and serves a completion "
               "from inside the image")
RULES = [
    (r"^scripts/main\.sh", "skip", "scripts/setup.sh (CI's set-up phase) and then the "
     "`build/octet serve` command of 'Serving', which runs here"),
    (r"^scripts/test\.sh", "skip", "it is CI itself (this test runs inside it)"),
    (r"^scripts/bench\.sh", "skip", "every benchmark at full length (tens of minutes); its "
     "bench commands run here with short lengths"),
    (r"^scripts/image_check\.sh", "skip", "CI's `image` phase of scripts/test.sh runs it"),
    (r"^docker ", "skip", SKIP_DOCKER),
    (r"^buildah ", "skip", "scripts/image_check.sh runs these buildah commands (its image "
     "phase), with stories260K"),
    (r"^kubectl ", "skip", "no Kubernetes cluster on CI: scripts/image_check.sh validates the "
     "manifests against the Kubernetes schemas (kubernetes-validate --strict)"),
    (r"^M=", "assign", None),
    (r"(^|\s)build/octet serve ", "serve", None),
    (r"^curl -s localhost:8000/v1/chat/completions", "request", chat_json),
    (r"^curl -sN localhost:8000/v1/chat/completions", "request", sse_done),
    (r"^curl -si localhost:8000/v1/completions", "request", completion_with_request_id),
    (r"^build/octet generate .*--json", "run", json_lines_with_tokens),
    (r"^build/octet generate ", "run", nonempty),
    (r"^build/octet perplexity ", "run", perplexity_figure),
    (r"^build/octet quantize ", "run", None),
    (r"^build/octet bench latency ", "run", nonempty),
    (r"^build/octet bench engine ", "run", nonempty),
    (r"^build/octet bench kernels", "run", nonempty),
]


def rule_for(cmd):
    matches = [r for r in RULES if re.search(r[0], cmd, re.S)]
    assert matches, "no rule in test_readme_examples.py for the example:\n" + cmd
    return matches[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Adapter:
    """Rewrites an example for CI (see the module docstring)."""

    def __init__(self, workdir, port):
        self.workdir = workdir
        self.port = port
        self.gpl_excerpt = os.path.join(workdir, "GPL-3.excerpt")
        with open("/usr/share/common-licenses/GPL-3", "rb") as f, \
                open(self.gpl_excerpt, "wb") as out:
            out.write(f.read(3000))
        with open(os.path.join(workdir, "prompts.txt"), "w") as f:
            f.write("Once upon a time\n\"<|im_start|>user\\nHi<|im_end|>\\n\"\n")

    def __call__(self, cmd):
        c = cmd
        c = re.sub(r"(^|\s)build/octet ", lambda m: m.group(1) + shlex.quote(BINARY) + " ", c)
        c = c.replace("../shared/models/", MODELS_DIR + "/")
        c = c.replace("localhost:8000", "127.0.0.1:%d" % self.port)
        c = re.sub(r"--port 8000\b", "--port %d" % self.port, c)
        c = c.replace("--max-tokens 64", "--max-tokens 8").replace("--max-tokens 200",
                                                                   "--max-tokens 16")
        c = c.replace('"max_tokens": 64', '"max_tokens": 8')
        c = c.replace("/usr/share/common-licenses/GPL-3", self.gpl_excerpt)
        c = re.sub(r"--model HF_DIR --output OUT_DIR",
                   "--model %s --output %s" % (shlex.quote(HF_DIR),
                                               shlex.quote(os.path.join(self.workdir, "quantized"))),
                   c)
        w = words(cmd)
        extra = []
        if w[:2] == ["build/octet", "generate"] and "--max-tokens" not in w:
            extra = ["--max-tokens", "8"]
        if w[:3] == ["build/octet", "bench", "latency"]:
            extra = ["--input-len", "32", "--output-len", "8", "--num-iters", "1"]
        if w[:3] == ["build/octet", "bench", "engine"]:
            extra = ["--concurrency", "1", "--contexts", "128", "--output-len", "8",
                     "--itl-tokens", "4"]
        if extra:  # before any trailing comment: append to the command's first line set
            code, _, comment = c.partition("  #")
            c = code.rstrip() + " " + " ".join(extra) + ("  #" + comment if comment else "")
        return c


def wait_healthy(proc, port, log, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the server exited:\n" + open(log).read()[-3000:]
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become healthy:\n" + open(log).read()[-3000:])


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_every_rule_matches_an_example():
    commands = [c for doc in DOCS for c in extract_commands(open(os.path.join(REPO, doc)).read())]
    assert len(commands) >= 20, commands
    used = {rule_for(c)[0] for c in commands}
    unused = [r[0] for r in RULES if r[0] not in used]
    assert not unused, "rules that match no example (stale): %s" % unused


def test_extract_commands_joins_continuations_and_quotes():
    text = ("intro\n```sh\nM=x   # comment\na \\\n  b   # c\n\n# only a comment\n"
            "curl -d '{\n  \"k\": 1}'\n```\n```yaml\nnot: sh\n```\n")
    assert extract_commands(text) == ["M=x   # comment", "a \\\n  b   # c",
                                      "curl -d '{\n  \"k\": 1}'"]


@pytest.mark.load
@pytest.mark.parametrize("doc", DOCS)
def test_examples_run(doc, tmp_path):
    if not (BINARY and os.path.exists(BINARY)):
        pytest.skip("OCTET_BINARY is not set or missing")
    if not (MODEL and os.path.exists(MODEL)):
        pytest.skip("OCTET_SMOLLM2_GGUF is not set or missing (run scripts/setup.sh)")
    commands = extract_commands(open(os.path.join(REPO, doc)).read())
    if any(re.search(r"^build/octet quantize ", c) for c in commands) and \
            not os.path.isfile(os.path.join(HF_DIR, "config.json")):
        pytest.skip("the bf16 SmolLM2 checkpoint of scripts/setup.sh is missing: " + HF_DIR)
    port = free_port()
    adapt = Adapter(str(tmp_path), port)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    prelude = ""
    server = None
    server_cmd = None
    report = []
    serve_commands = [c for c in commands if rule_for(c)[1] == "serve"]

    def start_server(cmd):
        log = os.path.join(str(tmp_path), "serve.log")
        c = adapt(cmd)
        # exec: SIGTERM reaches the server (env: the example may set variables first).
        start = ("exec env " if re.match(r"^[A-Z_]+=", c) else "exec ") + c
        # The M=... of the document (set before any serve command in both files).
        p = subprocess.Popen(["bash", "-c", "M=%s\n" % shlex.quote(MODEL) + start],
                             stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=str(tmp_path),
                             env=env)
        wait_healthy(p, port, log)
        report.append("served: " + c.splitlines()[0])
        return p

    try:
        for cmd in commands:
            pattern, action, detail = rule_for(cmd)
            if action == "skip":
                report.append("skipped (%s): %s" % (detail, cmd.splitlines()[0]))
                continue
            if action == "assign":
                name = cmd.split("=", 1)[0]
                prelude += "%s=%s\n" % (name, shlex.quote(MODEL))
                continue
            c = adapt(cmd)
            if action == "serve":
                if cmd != server_cmd:  # already serving it (started for earlier requests)
                    stop(server)
                    server, server_cmd = start_server(cmd), cmd
                continue
            if action == "request" and server is None:
                assert serve_commands, "a request example in a document without a serve command"
                server, server_cmd = start_server(serve_commands[0]), serve_commands[0]
            t0 = time.time()
            p = subprocess.run(["bash", "-c", "set -eo pipefail\n" + prelude + c],
                               capture_output=True, text=True, cwd=str(tmp_path), env=env,
                               timeout=TIMEOUT)
            assert p.returncode == 0, "example failed (exit %d):\n%s\nadapted:\n%s\n%s" % (
                p.returncode, cmd, c, (p.stdout + p.stderr)[-3000:])
            if detail:
                try:
                    detail(p.stdout)
                except (AssertionError, ValueError, KeyError) as e:
                    raise AssertionError("example output check failed:\n%s\n%s\n%s" % (
                        c, e, p.stdout[-2000:]))
            report.append("ran (%.0f s): %s" % (time.time() - t0, c.splitlines()[0]))
    finally:
        stop(server)
        print("\n".join(report))
