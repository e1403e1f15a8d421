"""What kernelsup-http costs a cell, and what it holds: the trivial cell `x`, N times after 3 untimed warm-ups, three
ways in the same run against the same kernelsupd and kernel:

  (a) kernelctl exec       the whole process per cell
  (b) HTTP, kept-alive     POST /v1/contexts/default/execute (application/json) on one kept TCP connection
  (c) control socket       execute on one kept control-socket connection (JSON-RPC lines): the floor (b) adds to

then kernelsup-http's private memory (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup) idle, and with
--streams open SSE streams following one running cell (each stream holds a control connection of its own: the
daemon admits 64 per uid, so the rest are answered 503 daemon_busy; the bench says how many of each).

    /usr/bin/python3 bench/http-latency.py BUILDDIR [-n 30] [--streams 1000]
Asserts nothing."""

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdaemon import BenchDaemon  # noqa: E402

TOKEN = "bench-" + "ab" * 16


def private_kib(pid):
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def summary(name, xs):
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(len(xs) * 0.9))]
    print(f"{name:34} {statistics.median(xs):8.2f} {p90:8.2f} {statistics.mean(xs):8.2f}")
    return statistics.median(xs)


def timed(fn, n):
    for _ in range(3):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


class Control:
    """One kept control-socket connection."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.id = 0

    def call(self, method, params):
        self.id += 1
        self.s.sendall(json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}).encode()
                       + b"\n")
        while True:
            m = json.loads(self.f.readline())
            if m.get("id") == self.id:
                return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builddir", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--streams", type=int, default=1000)
    a = ap.parse_args()
    server = os.path.join(a.builddir, "kernelsup-http")
    if not os.access(server, os.X_OK):
        sys.exit(f"{server} is not built")
    d = BenchDaemon(a.builddir, "[context:default]\n")
    sock = d.ctl[2]
    token_file = os.path.join(d.tmp, "token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, TOKEN.encode() + b"\n")
    os.close(fd)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(d.tmp, "http.log"), "wb")
    http_proc = subprocess.Popen([server, "--socket", sock, "--listen", f"127.0.0.1:{port}", "--token-file",
                                  token_file, "--max-connections", str(a.streams + 64),
                                  "--max-per-client", str(a.streams + 64)],
                                 stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        hdr = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        conn = http.client.HTTPConnection("127.0.0.1", port)
        body = json.dumps({"code": "x"})

        def over_http():
            conn.request("POST", "/v1/contexts/default/execute", body=body, headers=hdr)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit(f"HTTP {r.status}")

        ctl = Control(sock)
        ctl.call("execute", {"context": "default", "code": "x = 1"})
        a_ = timed(lambda: subprocess.run(d.ctl + ["exec", "default", "x"], check=True, stdout=subprocess.DEVNULL),
                   a.n)
        b_ = timed(over_http, a.n)
        c_ = timed(lambda: ctl.call("execute", {"context": "default", "code": "x"}), a.n)
        print(f"per-cell latency of the cell 'x', {a.n} runs each (ms), on {os.cpu_count()} CPUs")
        print(f"{'method':34} {'median':>8} {'p90':>8} {'mean':>8}")
        ma = summary("(a) kernelctl exec (whole process)", a_)
        mb = summary("(b) HTTP POST, kept-alive", b_)
        mc = summary("(c) kept control connection", c_)
        print(f"(b)-(c): {mb - mc:+.2f} ms a cell for HTTP over the kept control connection; (a)/(b): {ma / mb:.1f}x")
        conn.close()

        idle = private_kib(http_proc.pid)
        print(f"kernelsup-http private memory, idle after the cells: {idle} KiB ({idle / 1024:.1f} MiB)")
        run = ctl.call("execute", {"context": "default", "code": "import time; time.sleep(120)", "detach": True,
                                   "on_disconnect": "keep"})
        eid = run["result"]["id"]
        streams, statuses = [], {}
        for _ in range(a.streams):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"GET /v1/executions/{eid}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                      f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
            streams.append(s)
        time.sleep(2)
        for s in streams:
            s.settimeout(5)
            try:
                line = s.recv(64).split(b"\r\n", 1)[0].decode()
            except OSError as e:
                line = f"no answer ({e})"
            statuses[line] = statuses.get(line, 0) + 1
        held = private_kib(http_proc.pid)
        print(f"with {a.streams} SSE requests open on one running cell: {held} KiB ({held / 1024:.1f} MiB) "
              f"private, {held - idle:+d} KiB; answers: {statuses}")
        for s in streams:
            s.close()
        # The daemon may have closed our idle root connection to make room for the streams' (control.c).
        Control(sock).call("cancel", {"id": eid})
    finally:
        http_proc.send_signal(signal.SIGTERM)
        http_proc.wait(30)
        d.stop()


main()
