#!/usr/bin/env python3
"""Stand-in for `llama-server ARGS` and `vllm serve MODEL ARGS`: translates the peer's argv into
`octet serve` flags and serves octet on the port the peer's test asked for.

  launch_octet.py llamacpp ARGS...        (what tests/peer/bin/llama-server runs)
  launch_octet.py vllm serve MODEL ARGS... (what the vLLM shim's RemoteOpenAIServer runs)

The model is always SmolLM2 ($PEER_OCTET_MODEL), whatever model the peer's test names; the
peer's model name (vLLM: MODEL or --served-model-name; llama.cpp: --alias) becomes
--served-model-name, so requests naming it reach octet. Flags that `octet serve --help` lists
are passed on; flags octet lacks are dropped, and each drop is printed as
"peer-launch: dropped FLAG" (a test that needs the dropped feature then fails on its own
assertion, not here). The translation table is TRANSLATE_* below.

With $PEER_POOL_SOCK set (scripts/peer_tests.sh sets it), the octet process comes from the pool
(tests/peer/octet_pool.py: one warm `octet serve` per distinct flag set, since a SmolLM2 start
takes ~15 s on the 2-core CI machine and llama.cpp's tests start a server per test) and this
process relays TCP from the requested port to it until SIGTERM; otherwise it execs octet on
the requested port. Exit 1 with a message when octet cannot start. PEER_WARM_ONLY=1: only
make the pool start the instance, then exit.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading

OCTET = os.environ.get("PEER_OCTET_BINARY", "")
MODEL = os.environ.get("PEER_OCTET_MODEL", "")
# SmolLM2-135M's context (max_position_embeddings); larger --max-model-len is clamped to it.
MODEL_MAX_LEN = 8192


def log(msg):
    print("peer-launch: " + msg, file=sys.stderr, flush=True)


def octet_flags():
    """The set of long flags `octet serve --help` lists (cached per binary in the pool dir)."""
    cache = os.path.join(tempfile.gettempdir(),
                         "peer-octet-flags-%d.json" % os.stat(OCTET).st_mtime_ns)
    try:
        with open(cache) as f:
            return set(json.load(f))
    except (OSError, ValueError):
        pass
    text = subprocess.run([OCTET, "serve", "--help"], capture_output=True, text=True).stdout
    flags = sorted(set(re.findall(r"^\s+(--[a-z0-9][a-z0-9-]*)", text, re.M)))
    with open(cache, "w") as f:
        json.dump(flags, f)
    return set(flags)


def split_flags(argv):
    """[(flag, value-or-None)] in order; --f=v and '--f v' (v not starting with '-' or a
    negative number) both give a value. Positionals come as (None, value)."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", a):
            if "=" in a and a.startswith("--"):
                k, v = a.split("=", 1)
                out.append((k, v))
            elif i + 1 < len(argv) and (not argv[i + 1].startswith("-")
                                        or re.fullmatch(r"-\d+(\.\d+)?", argv[i + 1])):
                out.append((a, argv[i + 1]))
                i += 1
            else:
                out.append((a, None))
        else:
            out.append((None, a))
        i += 1
    return out


# vLLM flags octet shares but that must not pass: the model is SmolLM2 on the CPU at TP 1.
VLLM_NEVER = {"--model", "--tokenizer", "--load-format", "--seed", "--dtype",
              "--tensor-parallel-size", "--gpu-memory-utilization", "--port", "--host",
              "--served-model-name", "--max-model-len", "--chat-template", "--quantization",
              "--device"}


def chat_template_file(value):
    """vLLM's --chat-template is a path or the template text itself; octet wants a path."""
    if os.path.isfile(value):
        return os.path.abspath(value)
    f = tempfile.NamedTemporaryFile("w", suffix=".jinja", prefix="peer-template-", delete=False)
    f.write(value)
    f.close()
    return f.name


def translate_vllm(argv):
    """vllm serve MODEL ARGS -> (host, port, octet flags without --port/--host)."""
    if argv and argv[0] == "serve":
        argv = argv[1:]
    known = octet_flags()
    pairs = split_flags(argv)
    model, names, host, port, flags = None, [], "127.0.0.1", None, []
    for k, v in pairs:
        if k is None:
            if model is None:
                model = v  # later positionals: more --served-model-name names (unused)
            continue
        if k == "--model":
            model = v
        elif k == "--served-model-name":
            names.append(v)
        elif k == "--port":
            port = int(v)
        elif k == "--host":
            host = v or "127.0.0.1"
        elif k == "--max-model-len":
            flags += ["--max-model-len", str(min(int(v), MODEL_MAX_LEN))]
        elif k == "--chat-template":
            flags += ["--chat-template", chat_template_file(v)]
        elif k in known and k not in VLLM_NEVER:
            flags += [k] + ([v] if v is not None else [])
        else:
            log("dropped %s%s" % (k, "" if v is None else " " + v))
    if os.environ.get("VLLM_API_KEY") and "--api-key" not in flags:
        flags += ["--api-key", os.environ["VLLM_API_KEY"]]  # vLLM reads its key from there too
    # --served-model-name takes several names in vLLM; positionals after it are more names.
    served = names[0] if names else model
    return host, port, ["--served-model-name", served] + last_wins(flags)


def last_wins(flags):
    """A flag given twice (vLLM's tests append to a base list) keeps its last value, as
    argparse does; octet refuses repeated options."""
    groups, order = {}, []
    for item in flags:
        if item.startswith("--"):
            if item in groups:
                order.remove(item)
            groups[item] = [item]
            order.append(item)
            current = item
        else:
            groups[current].append(item)
    return [x for k in order for x in groups[k]]


def tool_parser_for(template_file):
    """octet's --tool-call-parser for a llama.cpp test template (None: the model's own,
    SmolLM2's ChatML, whose tool calls are Hermes-style), or None when octet has none."""
    if not template_file:
        return "hermes"
    name = os.path.basename(template_file).lower()
    if "llama-3" in name:
        return "llama3_json"
    if "mistral" in name:
        return "mistral"
    if "hermes" in name or "qwen" in name:
        return "hermes"
    return None


def translate_llamacpp(argv):
    """llama-server ARGS -> (host, port, octet flags without --port/--host)."""
    known = octet_flags()
    d, flags = {}, []
    for k, v in split_flags(argv):
        d[k] = v
    host = d.get("--host") or "127.0.0.1"
    port = int(d.get("--port", 8080))
    # --alias takes comma-separated names in llama.cpp; octet serves one name: the first.
    served = (d.get("--alias") or "").split(",")[0] or d.get("--hf-repo") or "octet"
    flags += ["--served-model-name", served]
    ctx = int(d["--ctx-size"]) if "--ctx-size" in d else MODEL_MAX_LEN
    slots = int(d["--parallel"]) if "--parallel" in d else 1
    if slots > 1 and "--kv-unified" not in d:
        ctx //= slots  # llama.cpp splits --ctx-size among the slots
    flags += ["--max-model-len", str(max(16, min(ctx, MODEL_MAX_LEN)))]
    if "--parallel" in d:
        flags += ["--max-num-seqs", str(slots)]
    if d.get("--api-key"):
        flags += ["--api-key", d["--api-key"]]
    if d.get("--chat-template-file"):  # relative to the test's directory; the pool's differs
        flags += ["--chat-template", os.path.abspath(d["--chat-template-file"])]
    if "--jinja" in d:
        # llama-server --jinja parses tool calls in the format its chat template implies;
        # octet's parser for that family (vLLM's flags), where octet has one.
        parser = tool_parser_for(d.get("--chat-template-file"))
        if parser:
            flags += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
        else:
            log("dropped --jinja tool-call parsing (no octet parser for %s)"
                % d.get("--chat-template-file"))
    used = {"--host", "--port", "--alias", "--ctx-size", "--parallel", "--api-key",
            "--chat-template-file", "--kv-unified", "--jinja"}
    for k, v in split_flags(argv):
        if k in used:
            continue
        if k in ("--hf-repo", "--hf-file", "--model", "--model-url", "--offline"):
            continue  # the model is SmolLM2
        log("dropped %s%s" % (k, "" if v is None else " " + v))
    return host, port, flags


def relay(listen_host, listen_port, target_port):
    """Accepts on listen_host:listen_port and pipes each connection to 127.0.0.1:target_port."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((listen_host, listen_port))
    srv.listen(128)

    def pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        client, _ = srv.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port))
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("llamacpp", "vllm"):
        sys.exit("usage: launch_octet.py llamacpp|vllm ARGS...")
    if not (OCTET and MODEL):
        sys.exit("peer-launch: PEER_OCTET_BINARY and PEER_OCTET_MODEL must be set")
    dialect, argv = sys.argv[1], sys.argv[2:]
    host, port, flags = (translate_llamacpp if dialect == "llamacpp" else translate_vllm)(argv)
    log("%s %s -> octet serve --model %s %s" % (dialect, " ".join(argv), MODEL,
                                                  " ".join(flags)))
    sock_path = os.environ.get("PEER_POOL_SOCK")
    if not sock_path:
        os.execv(OCTET, [OCTET, "serve", "--model", MODEL, "--host", host, "--port",
                         str(port)] + flags)
    lease = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lease.connect(sock_path)
    # vLLM's tests expect a new server per RemoteOpenAIServer (its /metrics counters start at
    # zero); llama.cpp's start one per test and share its state only through the pool.
    lease.sendall((json.dumps({"flags": flags, "fresh": dialect == "vllm"}) + "\n").encode())
    reply = json.loads(lease.makefile().readline() or '{"error": "pool closed"}')
    if "error" in reply:
        log("octet did not start: " + reply["error"])
        sys.exit(1)
    if os.environ.get("PEER_WARM_ONLY"):  # scripts/peer_tests.sh: start it, serve nothing
        log("warm: pool instance %s on port %d" % (reply["id"], reply["port"]))
        return
    log("relaying %s:%d -> octet on port %d (pool instance %s)" % (
        host, port, reply["port"], reply["id"]))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    # The lease socket stays open while this process lives: the pool does not stop an
    # instance that a live relay still uses.
    relay(host, port, reply["port"])


if __name__ == "__main__":
    main()
