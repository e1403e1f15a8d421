"""kernelsup-http for the integration tests: started from the build tree next to a test's kernelsupd (harness.Daemon),
with a token file, a TCP port of the test's own range and a Unix socket, and plain HTTP clients (Python's
http.client, which sets nothing kernelsup-http does not need) over either."""

import http.client
import json
import os
import signal
import socket
import subprocess
import time

import harness

KERNELSUP_HTTP = os.path.join(harness.BUILDDIR, "kernelsup-http")
TOKEN = "kst-" + "5f" * 16


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def error_code(self):
        try:
            return self.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            return None

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


def sse_events(text):
    """The events of an SSE body: a list of dicts with "event", "id" (int or None) and "data" (parsed JSON); comments
    are counted under the key "comments" of a last pseudo-event only when there were any."""
    events, comments = [], 0
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        ev = {"event": "message", "id": None, "data": None}
        for line in block.split("\n"):
            if line.startswith(":"):
                comments += 1
            elif line.startswith("event: "):
                ev["event"] = line[7:]
            elif line.startswith("id: "):
                ev["id"] = int(line[4:])
            elif line.startswith("data: "):
                ev["data"] = json.loads(line[6:])
        if ev["data"] is not None or ev["id"] is not None:
            events.append(ev)
    if comments:
        events.append({"event": "comments", "id": None, "data": comments})
    return events


class HttpFront:
    def __init__(self, tap, daemon, tcp=True, unix=True, args=(), token=TOKEN):
        self.tap, self.daemon = tap, daemon
        self.dir = os.path.join(daemon.tmp, "http")
        os.makedirs(self.dir, exist_ok=True)
        self.token = token
        self.token_file = os.path.join(self.dir, "token")
        self.unix_path = os.path.join(self.dir, "http.sock") if unix else None
        self.port = self._free_port() if tcp else None
        self.log_path = os.path.join(self.dir, "kernelsup-http.log")
        self.args = list(args)
        self.proc = None
        if token is not None:
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, (token + "\n").encode())
            os.close(fd)

    def _free_port(self):
        for p in range(self.daemon.port_max, self.daemon.port_min, -1):
            if harness.port_free(p):
                return p
        raise harness.HarnessError("no free port in the test's range")

    def argv(self):
        a = [KERNELSUP_HTTP, "--socket", self.daemon.socket]
        if self.port:
            a += ["--listen", f"127.0.0.1:{self.port}"]
        if self.unix_path:
            a += ["--listen", f"unix:{self.unix_path}"]
        if self.token is not None and self.port:
            a += ["--token-file", self.token_file]
        return a + self.args

    def spawn(self, argv=None, preexec=None):
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(argv or self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    close_fds=True, preexec_fn=preexec)

    def start(self):
        self.proc = self.spawn()
        harness.wait_until(lambda: self.proc.poll() is not None or "Listening on" in self.log(), 30,
                           "kernelsup-http listening")
        if self.proc.poll() is not None:
            raise harness.HarnessError(f"kernelsup-http exited with {self.proc.returncode}: {self.log()}")
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def connection(self, via="tcp", timeout=30):
        if via == "unix":
            return UnixHTTPConnection(self.unix_path, harness.scaled(timeout))
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=harness.scaled(timeout))

    def request(self, method, path, body=None, headers=None, auth=True, via="tcp", timeout=30, conn=None):
        """One request; body a dict is sent as JSON. A Response."""
        h = {}
        if auth and via == "tcp" and self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        own = conn is None
        c = conn or self.connection(via, timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            if own:
                c.close()

    def stop(self, name="kernelsup-http exited 0 on SIGTERM"):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(harness.scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "still running after 30 s"
        self.tap.eq(rc, 0, name, self.log()[-2000:])
        self.tap.ok(not any(m in self.log() for m in harness.SANITIZER_MARKERS), "kernelsup-http logged no "
                    "sanitizer report", self.log()[-4000:])

    def rss_kib(self):
        return harness.proc_status_kib(self.proc.pid, "VmRSS")


def main_skip_reason():
    if not os.access(KERNELSUP_HTTP, os.X_OK):
        return f"kernelsup-http not built in {harness.BUILDDIR}"
    return None
