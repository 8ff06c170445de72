#!/usr/bin/env python3
"""Pool of warm `octet serve` processes for the peer test suites (scripts/peer_tests.sh).

  octet_pool.py SOCKET LOGDIR

Listens on the Unix socket SOCKET. A client (tests/peer/launch_octet.py) sends one JSON line
{"flags": [...]} (octet serve flags, without --model/--host/--port) and gets back
{"port": N, "id": K} once an `octet serve --model $PEER_OCTET_MODEL --port 0 FLAGS` is healthy
(reused when one with the same flags is running, unless the request has "fresh": true: then
a new process, the idle one with those flags stopped), or {"error": "..."} when it exited or did not
become healthy in $PEER_POOL_START_TIMEOUT seconds (default 240). The client keeps the
connection open while it relays to that instance (a lease). At most $PEER_POOL_MAX (default 2)
instances live; the least recently leased one without a live lease is stopped (SIGTERM) to make
room. Each instance logs to LOGDIR/octet-K.log. SIGTERM stops the pool and every instance.
Why a pool: a SmolLM2 start takes ~15 s on the 2-core CI machine, and llama.cpp's fixtures start
a server for every test.
"""
import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request

OCTET = os.environ["PEER_OCTET_BINARY"]
MODEL = os.environ["PEER_OCTET_MODEL"]
MAX_LIVE = int(os.environ.get("PEER_POOL_MAX", "2"))
START_TIMEOUT = float(os.environ.get("PEER_POOL_START_TIMEOUT", "240"))


class Instance:
    def __init__(self, ident, flags, logdir):
        self.id, self.flags, self.leases, self.last_used = ident, flags, 0, time.time()
        self.log_path = os.path.join(logdir, "octet-%d.log" % ident)
        with open(self.log_path, "w") as f:
            f.write("# octet serve --model %s --host 127.0.0.1 --port 0 %s\n" % (
                MODEL, " ".join(flags)))
        self.proc = subprocess.Popen(
            [OCTET, "serve", "--model", MODEL, "--host", "127.0.0.1", "--port", "0"] + flags,
            stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT,
            env=dict(os.environ, OMP_WAIT_POLICY="passive"), start_new_session=True)
        self.port = None

    def log_tail(self, n=1500):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-n:]

    def wait_ready(self):
        """None when healthy, else the reason."""
        deadline = time.time() + START_TIMEOUT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return "octet exited with %s:\n%s" % (self.proc.returncode, self.log_tail())
            if self.port is None:
                m = re.search(r"listening on http://[^:]+:(\d+)", self.log_tail(100000))
                if m:
                    self.port = int(m.group(1))
            else:
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/health" % self.port, timeout=5) as r:
                        if r.status == 200:
                            return None
                except Exception:
                    pass
            time.sleep(0.1)
        return "octet not healthy after %.0f s:\n%s" % (START_TIMEOUT, self.log_tail())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Pool:
    def __init__(self, logdir):
        self.logdir, self.lock, self.instances, self.next_id = logdir, threading.Lock(), [], 0

    def acquire(self, flags, fresh=False):
        with self.lock:
            self.instances = [i for i in self.instances if i.proc.poll() is None]
            inst = next((i for i in self.instances if i.flags == flags), None)
            if inst is not None and fresh:
                if inst.leases == 0:
                    inst.stop()
                    self.instances.remove(inst)
                inst = None
            if inst is None:
                idle = sorted((i for i in self.instances if i.leases == 0),
                              key=lambda i: i.last_used)
                while len(self.instances) >= MAX_LIVE and idle:
                    victim = idle.pop(0)
                    victim.stop()
                    self.instances.remove(victim)
                inst = Instance(self.next_id, flags, self.logdir)
                self.next_id += 1
                error = inst.wait_ready()
                if error:
                    inst.stop()
                    return None, error
                self.instances.append(inst)
            inst.leases += 1
            inst.last_used = time.time()
            return inst, None

    def release(self, inst):
        with self.lock:
            inst.leases -= 1
            inst.last_used = time.time()

    def stop_all(self):
        for i in self.instances:
            i.stop()


def main():
    sock_path, logdir = sys.argv[1], sys.argv[2]
    os.makedirs(logdir, exist_ok=True)
    pool = Pool(logdir)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            req = json.loads(self.rfile.readline())
            inst, error = pool.acquire(req["flags"], req.get("fresh", False))
            if inst is None:
                self.wfile.write((json.dumps({"error": error}) + "\n").encode())
                return
            try:
                self.wfile.write((json.dumps({"port": inst.port, "id": inst.id}) + "\n")
                                 .encode())
                self.wfile.flush()
                while self.rfile.read(1):  # until the relay process closes (or dies)
                    pass
            finally:
                pool.release(inst)

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    if os.path.exists(sock_path):
        os.unlink(sock_path)
    server = Server(sock_path, Handler)

    def shutdown(*_):
        pool.stop_all()
        os._exit(0)

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    server.serve_forever()


if __name__ == "__main__":
    main()
