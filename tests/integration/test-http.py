"""kernelsup-http against a real kernelsupd and the real ipykernel, over TCP and a Unix socket, with a plain HTTP
client: every route of the native API (/v1) and its errors, the token in each of its four forms, Host and Origin
refusals, execute answered as one Execution and as Server-Sent Events numbered by output, an execution's events
resumed from Last-Event-ID exactly, cancel, on_disconnect (interrupt by default, keep), contexts added by language
and removed, restart and check's verdicts, and the daemon going away: 503 with Retry-After, a stream that ends
with an error event, and requests served again once it is back."""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import harness_http  # noqa: E402
from harness import UUID_RE  # noqa: E402

TICKER = "import time\nfor i in range({n}):\n    print(i, flush=True)\n    time.sleep({dt})\n"
PLOT = ("import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3])\nplt.show()\n")


class Sse:
    """An SSE response read event by event while it streams."""

    def __init__(self, front, method, path, body=None, headers=None):
        self.conn = front.connection()
        h = {"Authorization": f"Bearer {front.token}", "Accept": "text/event-stream"}
        if body is not None:
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        self.conn.request(method, path, body=body, headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def next(self):
        """The next event as harness_http.sse_events gives it, None at the end; comments are skipped."""
        block = ""
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode()
            if line == "\n":
                evs = [e for e in harness_http.sse_events(block) if e["event"] != "comments"]
                if evs:
                    return evs[0]
                block = ""
                continue
            block += line

    def rest(self):
        out = []
        while (e := self.next()) is not None:
            out.append(e)
        return out

    def close(self):
        self.conn.close()


def check_auth(tap, front):
    r = front.request("GET", "/v1/status", auth=False)
    tap.eq(r.status, 401, "no token over TCP: 401")
    tap.eq(r.error_code(), "unauthorized", "its error code is unauthorized")
    tap.eq(r.headers.get("www-authenticate"), "Bearer", "401 says WWW-Authenticate: Bearer")
    r = front.request("GET", "/v1/status", auth=False, headers={"Authorization": "Bearer wrong"})
    tap.eq(r.status, 401, "a wrong token: 401")
    r = front.request("GET", "/v1/status", auth=False, headers={"Authorization": "Bearer " + front.token[:-1]})
    tap.eq(r.status, 401, "the token less its last character: 401")
    for name, headers, path in (
            ("Authorization: Bearer T", {"Authorization": f"Bearer {front.token}"}, "/v1/status"),
            ("Authorization: token T", {"Authorization": f"token {front.token}"}, "/v1/status"),
            ("X-Access-Token: T", {"X-Access-Token": front.token}, "/v1/status"),
            ("?token=T", {}, f"/v1/status?token={front.token}")):
        r = front.request("GET", path, auth=False, headers=headers)
        tap.eq(r.status, 200, f"the token as {name}: 200", repr(r))
    r = front.request("GET", "/v1/status", via="unix")
    tap.eq(r.status, 200, "the Unix socket, our own uid, no token: 200", repr(r))
    r = front.request("GET", "/v1/status", headers={"Host": "evil.example"})
    tap.eq(r.status, 403, "Host: evil.example (DNS rebinding): 403", repr(r))
    r = front.request("GET", "/v1/status", headers={"Host": f"evil.example:{front.port}"})
    tap.eq(r.status, 403, "Host: evil.example:PORT: 403")
    r = front.request("GET", "/v1/status", headers={"Host": f"localhost:{front.port}"})
    tap.eq(r.status, 200, "Host: localhost:PORT: 200")
    r = front.request("GET", "/v1/status", headers={"Origin": "http://evil.example"})
    tap.eq(r.status, 403, "a browser's Origin not allowed: 403", repr(r))


def check_errors(tap, front):
    r = front.request("GET", "/v1/nothing")
    tap.eq((r.status, r.error_code()), (404, "not_found"), "an unknown route: 404 not_found")
    r = front.request("PUT", "/v1/status")
    tap.eq((r.status, r.error_code()), (405, "method_not_allowed"), "a known route, another method: 405")
    r = front.request("POST", "/v1/contexts/default/execute", body=b"code=1",
                      headers={"Content-Type": "application/x-www-form-urlencoded"})
    tap.eq((r.status, r.error_code()), (415, "unsupported_media_type"), "a form body: 415 (no simple CORS request)")
    r = front.request("POST", "/v1/contexts/default/execute", body=b"{not json",
                      headers={"Content-Type": "application/json"})
    tap.eq((r.status, r.error_code()), (400, "invalid_json"), "a body that is not JSON: 400 invalid_json")
    r = front.request("POST", "/v1/contexts/default/execute", body=b'{"code": "\xff"}',
                      headers={"Content-Type": "application/json"})
    tap.eq((r.status, r.error_code()), (400, "invalid_json"), "a body that is not UTF-8: 400 invalid_json")
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": 1})
    tap.eq((r.status, r.error_code()), (400, "invalid_params"), "code not a string: 400 invalid_params")
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": "1", "on_disconnect": "later"})
    tap.eq((r.status, r.error_code()), (400, "invalid_params"), "on_disconnect neither interrupt nor keep: 400")
    for bad in ("5", 0, -2):
        r = front.request("POST", "/v1/contexts/default/execute", body={"code": "1", "kill_after": bad})
        tap.eq((r.status, r.error_code()), (400, "invalid_params"), f"kill_after {bad!r}: 400 invalid_params")
    r = front.request("POST", "/v1/contexts/nope/execute", body={"code": "1"})
    tap.eq((r.status, r.error_code()), (404, "no_such_context"), "execute in a missing context: 404")
    r = front.request("GET", "/v1/contexts/nope")
    tap.eq((r.status, r.error_code()), (404, "no_such_context"), "a missing context: 404 no_such_context")
    r = front.request("GET", "/v1/contexts/de%2Ffault")
    tap.eq(r.status, 404, "a name with an escaped '/': 404, no route")
    r = front.request("GET", "/v1/contexts/default%00x")
    tap.eq(r.status, 404, "a name with an escaped NUL: 404, never the context before the NUL")
    r = front.request("GET", "/v1/contexts/..")
    tap.eq(r.status, 404, "a name '..': 404")
    r = front.request("GET", "/v1/executions/" + "0" * 8 + "-0000-4000-8000-" + "0" * 12)
    tap.eq((r.status, r.error_code()), (404, "no_such_execution"), "a missing execution: 404 no_such_execution")


def check_execute_json(tap, front, kernel_id):
    r = front.request("POST", "/v1/contexts/default/execute",
                      body={"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nx = 6\nx * 7"})
    tap.eq(r.status, 200, "execute, application/json: 200", repr(r))
    e = r.json()
    tap.eq(e["logs"], {"stdout": ["out\n"], "stderr": ["err\n"]}, "logs.stdout and logs.stderr")
    tap.eq(e["results"], [{"text": "42", "isMainResult": True}], "the cell's value is the main result")
    tap.eq(e["error"], None, "error is null")
    tap.eq(e["status"], "ok", "status ok")
    tap.ok(UUID_RE.match(e.get("id", "")), "the execution's id is a UUID", repr(e))
    tap.eq(e["kernel_id"], kernel_id, "kernel_id is the context's kernel's")
    n = e["executionCount"]
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": "x"})
    tap.eq(r.json()["executionCount"], n + 1, "executionCount counts the kernel's cells; the namespace is kept")
    tap.eq(r.json()["results"][0]["text"], "6", "x is still 6")
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": "1/0"})
    e = r.json()
    tap.eq((r.status, e["status"]), (200, "error"), "a cell that raises: 200, status error")
    tap.eq((e["error"]["name"], e["error"]["value"]), ("ZeroDivisionError", "division by zero"),
           "error.name and error.value")
    tap.ok(isinstance(e["error"]["traceback"], list) and e["error"]["traceback"], "error.traceback is a list")
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": PLOT}, timeout=90)
    res = r.json()["results"]
    png = [x for x in res if "png" in x]
    tap.ok(png and base64.b64decode(png[0]["png"])[:8] == b"\x89PNG\r\n\x1a\n", "a plot is a result with a PNG",
           repr(res)[:300])
    tap.ok(png and png[0]["isMainResult"] is False and "text" in png[0], "the plot is a display, with its text too")
    r = front.request("POST", "/v1/contexts/default/execute",
                      body={"code": "from IPython.display import display, HTML, Markdown\n"
                                    "display(HTML('<b>b</b>'), Markdown('*m*'))\n"
                                    "display({'application/json': {'a': 1}}, raw=True)"})
    res = r.json()["results"]
    tap.eq([sorted(k for k in x if k != "isMainResult") for x in res], [["html", "text"], ["markdown", "text"], ["json"]],
           "HTML, Markdown and JSON displays keep their formats", repr(res))


def check_text(tap, front, d):
    """The answer's text is kernelctl exec's (one renderer, render.h), and max_output keeps a head and a tail."""
    cell = "for i in range(3): print(f'\\r{i}%', end='')\nprint('\\n\\x1b[31mred\\x1b[0m')\n'v'"
    e = front.request("POST", "/v1/contexts/default/execute", body={"code": cell}).json()
    tap.eq(e["text"], "2%\nred\n'v'\n", "text: the progress line's last state, no ANSI, the value", repr(e["text"]))
    tap.eq(e["truncated"], None, "truncated: null when nothing was cut")
    ctl = d.ctl("exec", "default", cell)
    # kernelctl's last line is its summary, "[ok #N]", which the answer has as status and executionCount.
    tap.eq(e["text"], re.sub(r"\[ok #\d+\]\n$", "", ctl.stdout), "the same text as kernelctl exec prints",
           repr(ctl.stdout))
    e = front.request("POST", "/v1/contexts/default/execute",
                      body={"code": "print('x' * 20000)\nprint('THE END')", "max_output": "1K"}).json()
    tap.ok(e["truncated"] and e["truncated"]["kept"] <= 1024 and e["truncated"]["dropped"] > 18000,
           "max_output 1K: truncated {kept <= 1024, dropped}", repr(e["truncated"]))
    tap.ok(e["text"].endswith("THE END\n") and e["text"].startswith("xxx") and len(e["text"]) < 1300,
           "the head and the tail are kept, the end of the print too", repr(e["text"][-80:]))
    tap.eq(e["logs"]["stdout"][0].count("x"), 20000, "logs keep every byte: the budget is the text's")
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": "1", "max_output": "lots"})
    tap.eq(r.status, 400, "a max_output that is no size: 400")


def check_execute_sse(tap, front):
    s = Sse(front, "POST", "/v1/contexts/default/execute",
            {"code": "import sys\nprint(1)\nprint(2, file=sys.stderr)\n3"})
    tap.eq(s.status, 200, "execute with Accept: text/event-stream: 200")
    tap.eq(s.resp.getheader("Content-Type"), "text/event-stream", "its Content-Type is text/event-stream")
    evs = s.rest()
    s.close()
    tap.eq([e["event"] for e in evs], ["execution", "output", "output", "output", "end"],
           "the events: execution, one per output, end", repr(evs)[:400])
    tap.eq([e["id"] for e in evs if e["event"] == "output"], [0, 1, 2], "each output's id is its number")
    tap.eq(evs[-1]["data"]["status"], "ok", "end says status ok")
    tap.ok(UUID_RE.match(evs[0]["data"]["id"]), "the first event names the execution")
    s = Sse(front, "POST", "/v1/contexts/nope/execute", {"code": "1"})
    tap.eq(s.status, 404, "an SSE execute in a missing context: 404, before any event")
    s.close()


def check_resume(tap, front):
    """An execution read in pieces over Last-Event-ID equals one read from 0."""
    n = 20
    s = Sse(front, "POST", "/v1/contexts/default/execute",
            {"code": TICKER.format(n=n, dt=0.1), "on_disconnect": "keep"})
    first = s.next()
    eid = first["data"]["id"]
    seen = []
    while len(seen) < 3:
        e = s.next()
        if e["event"] == "output":
            seen.append(e)
    s.close()  # the client goes away; with keep the cell runs on
    pieces = 0
    while True:
        s = Sse(front, "GET", f"/v1/executions/{eid}/events", headers={"Last-Event-ID": str(seen[-1]["id"])})
        got = 0
        end = None
        while (e := s.next()) is not None:
            if e["event"] == "output":
                seen.append(e)
                got += 1
                if got == 4:
                    break
            elif e["event"] == "end":
                end = e
        s.close()
        pieces += 1
        if end or pieces > 50:
            break
    full = Sse(front, "GET", f"/v1/executions/{eid}/events")
    all_evs = [e for e in full.rest() if e["event"] == "output"]
    full.close()
    tap.eq([e["id"] for e in seen], list(range(len(all_evs))), f"{pieces} resumed reads: every number once, in "
           "order", repr([e["id"] for e in seen]))
    tap.eq([e["data"] for e in seen], [e["data"] for e in all_evs], "the pieces equal one read from 0")
    tap.eq("".join(e["data"]["text"] for e in all_evs), "".join(f"{i}\n" for i in range(n)),
           "the kept cell ran to its end after its client left")
    s = Sse(front, "GET", f"/v1/executions/{eid}/events?from=5")
    ids = [e["id"] for e in s.rest() if e["event"] == "output"]
    s.close()
    tap.eq(ids[:1], [5], "?from=5 starts at output 5")
    r = front.request("GET", f"/v1/executions/{eid}")
    tap.eq((r.status, r.json().get("state")), (200, "ok"), "GET /v1/executions/ID: the record, state ok")
    r = front.request("GET", "/v1/executions?context=default")
    tap.ok(eid in [x["id"] for x in r.json()["executions"]], "GET /v1/executions?context= lists it")
    r = front.request("GET", f"/v1/executions/{eid}/events", headers={"Last-Event-ID": "x"})
    tap.eq(r.status, 400, "a Last-Event-ID that is no number: 400")


def execution_state(front, eid):
    return front.request("GET", f"/v1/executions/{eid}").json().get("state")


def check_disconnect_and_cancel(tap, front):
    # The default: a client that goes away interrupts its cell.
    s = Sse(front, "POST", "/v1/contexts/default/execute", {"code": TICKER.format(n=300, dt=0.1)})
    eid = s.next()["data"]["id"]
    s.next()
    s.close()
    st = harness.wait_until(lambda: execution_state(front, eid), 30, "the execution ends",
                            check=lambda v: v not in ("queued", "running"))
    tap.eq(st, "interrupted", "a client that goes away (on_disconnect interrupt, the default): interrupted")
    s = Sse(front, "POST", "/v1/contexts/default/execute",
            {"code": TICKER.format(n=300, dt=0.1), "on_disconnect": "keep"})
    eid = s.next()["data"]["id"]
    r = front.request("DELETE", f"/v1/executions/{eid}")
    tap.eq(r.status, 200, "DELETE /v1/executions/ID of a running cell: 200", repr(r))
    evs = s.rest()
    s.close()
    tap.ok(evs and evs[-1]["event"] == "end" and evs[-1]["data"]["status"] != "ok",
           "its stream ends, not ok", repr(evs[-1:]))
    r = front.request("DELETE", f"/v1/executions/{eid}")
    tap.eq((r.status, r.error_code()), (409, "failed"), "cancel of an ended execution: 409")


def check_daemon_busy(tap, front):
    """Each request holds a control connection; past the daemon's bound (256 in all) it is 503, not a hang."""
    s = Sse(front, "POST", "/v1/contexts/default/execute",
            {"code": "import time; time.sleep(60)", "on_disconnect": "keep"})
    eid = s.next()["data"]["id"]
    s.close()
    socks, answers = [], {}
    for _ in range(270):
        c = socket.create_connection(("127.0.0.1", front.port))
        c.sendall(f"GET /v1/executions/{eid}/events HTTP/1.1\r\nHost: 127.0.0.1:{front.port}\r\n"
                  f"Authorization: Bearer {front.token}\r\n\r\n".encode())
        socks.append(c)
    for c in socks:
        c.settimeout(harness.scaled(30))
        head = b""
        # The head and the body of a 503 may come apart; a stream's head comes alone.
        while b"\r\n\r\n" not in head or (b" 503 " in head and b"daemon_" not in head):
            chunk = c.recv(4096)
            if not chunk:
                break
            head += chunk
        head = head.decode(errors="replace")
        key = head.split("\r\n", 1)[0]
        if "503" in key:
            key += " Retry-After" if "Retry-After: 1" in head else ""
            key += " daemon_busy" if "daemon_busy" in head else ""
        answers[key] = answers.get(key, 0) + 1
    for c in socks:
        c.close()
    # The server sees the closes, then the daemon its closed connections: served again, soon.
    harness.poll_until(lambda: front.request("GET", f"/v1/executions/{eid}"), 30, "a request to be served again",
                       check=lambda r: r.status == 200)
    tap.ok(answers.get("HTTP/1.1 503 Service Unavailable Retry-After daemon_busy", 0) > 0 and
           answers.get("HTTP/1.1 200 OK", 0) > 0 and
           sum(answers.values()) == 270, "270 streams at once: the daemon's bound answers 503 daemon_busy with "
           "Retry-After, the rest stream", repr(answers))
    r = front.request("DELETE", f"/v1/executions/{eid}")
    tap.eq(r.status, 200, "served again once they are closed", repr(r))
    st = harness.wait_until(lambda: front.request("GET", f"/v1/executions/{eid}").json(), 30,
                            "the cancelled execution to end", check=lambda v: v.get("state") not in ("queued", "running"))
    # Not started when the kernel had aborted it unrun (it came just after the interrupted cell above).
    tap.ok(st.get("state") in ("interrupted", "not_started"), "the cancelled cell was interrupted or withdrawn",
           repr(st))


def check_contexts(tap, front, d):
    r = front.request("GET", "/v1/contexts")
    tap.eq(sorted(c["name"] for c in r.json()["contexts"]), ["default"], "GET /v1/contexts lists the contexts")
    r = front.request("POST", "/v1/contexts", body={"name": "added", "language": "python", "cwd": "/tmp"},
                      timeout=90)
    tap.eq(r.status, 201, "POST /v1/contexts by language: 201", repr(r))
    tap.eq(r.json().get("name"), "added", "it answers the new context")
    tap.ok(r.json().get("kernel"), "a kernelspec of that language was chosen", repr(r.json().get("kernel")))
    d.wait_state("added", "ready", timeout=60)
    r = front.request("POST", "/v1/contexts/added/execute", body={"code": "import os; os.getcwd()"})
    tap.eq(r.json()["results"][0]["text"], "'/tmp'", "its cells run in the cwd given")
    r = front.request("POST", "/v1/contexts", body={"name": "added", "language": "python"})
    tap.eq((r.status, r.error_code()), (409, "failed"), "a name that exists: 409")
    r = front.request("POST", "/v1/contexts", body={"name": "x2", "language": "cobol"})
    tap.eq((r.status, r.error_code()), (400, "no_such_language"), "a language no kernelspec has: 400")
    r = front.request("POST", "/v1/contexts", body={"name": "bad/name", "kernel": "python3"})
    tap.eq(r.status, 400, "an invalid name: 400", repr(r))
    r = front.request("DELETE", "/v1/contexts/added", timeout=90)
    tap.eq(r.status, 200, "DELETE /v1/contexts/NAME: 200", repr(r))
    r = front.request("GET", "/v1/contexts/added")
    tap.eq(r.status, 404, "then it is gone: 404")


def check_lifecycle(tap, front, d):
    old = front.request("GET", "/v1/contexts/default").json()["kernel_id"]
    r = front.request("GET", f"/v1/contexts/default/check?expect={old}")
    tap.eq((r.status, r.json().get("verdict")), (200, "same"), "check?expect=the kernel's id: same")
    # Wait until the cells of the checks before have ended (a cancelled one ends as the kernel answers).
    d.wait_state("default", "ready", timeout=60)
    r = front.request("POST", "/v1/contexts/default/interrupt")
    tap.eq((r.status, r.json()), (200, {"interrupted": False}), "interrupt with no cell running: interrupted false")
    r = front.request("POST", "/v1/contexts/default/restart", body={"timeout": 60}, timeout=90)
    tap.eq(r.status, 200, "POST restart: 200", repr(r))
    new = r.json().get("kernel_id")
    tap.ok(new and new != old, "a new kernel_id after the restart")
    r = front.request("GET", f"/v1/contexts/default/check?expect={old}")
    tap.eq((r.status, r.json().get("verdict")), (200, "replaced"), "check?expect=the old id: replaced")
    r = front.request("POST", "/v1/contexts/default/stop", timeout=60)
    tap.eq((r.status, r.json().get("state")), (200, "stopped"), "POST stop: stopped")
    r = front.request("POST", "/v1/contexts/default/execute", body={"code": "1"})
    tap.eq((r.status, r.error_code()), (409, "failed"), "execute in a stopped context: 409")
    r = front.request("POST", "/v1/contexts/default/start", timeout=90)
    tap.eq((r.status, r.json().get("state")), (200, "ready"), "POST start: ready")
    r = front.request("POST", "/v1/contexts/default/start", body={"timeout": "soon"})
    tap.eq(r.status, 400, "a timeout that is no number: 400")


def check_daemon_away(tap, front, d):
    s = Sse(front, "POST", "/v1/contexts/default/execute", {"code": TICKER.format(n=100, dt=0.1)})
    s.next()
    s.next()
    d.kill9()
    evs = s.rest()
    s.close()
    tap.eq(evs[-1:] and (evs[-1]["event"], evs[-1]["data"]["error"]["code"]), ("error", "daemon_unavailable"),
           "a stream whose daemon dies ends with an error event", repr(evs[-2:]))
    r = front.request("GET", "/v1/status")
    tap.eq(r.status, 503, "the daemon away: 503")
    tap.eq(r.headers.get("retry-after"), "1", "with Retry-After: 1")
    tap.eq(r.error_code(), "daemon_unavailable", "error code daemon_unavailable")
    d.start()
    r = front.request("GET", "/v1/status")
    tap.eq(r.status, 200, "the daemon back: served again, nothing to reconnect by hand")
    tap.eq(r.json()["supervisor"]["pid"], d.proc.pid, "by the new daemon")


def check_socket_activation(tap, front, d):
    """kernelsup-http takes the sockets systemd passes (LISTEN_FDS), as kernelsup-http.socket does."""
    activate = shutil.which("systemd-socket-activate")
    if not activate:
        return tap.skip("socket activation", "systemd-socket-activate is not installed (Debian's systemd)")
    port = front.port - 1
    proc = front.spawn([activate, "-l", f"127.0.0.1:{port}", harness_http.KERNELSUP_HTTP, "--socket", d.socket,
                        "--token-file", front.token_file])
    try:
        def ask():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=harness.scaled(10))
                c.request("GET", "/v1/status", headers={"Authorization": f"Bearer {front.token}"})
                return c.getresponse().status
            except OSError:
                return None
        tap.eq(harness.wait_until(ask, 30, "an answer on the passed socket", check=lambda v: v is not None), 200,
               "on a socket passed by systemd (LISTEN_FDS): 200")
        tap.ok(f"Listening on 127.0.0.1:{port}" in front.log(), "it names the passed socket in its log")
    finally:
        proc.send_signal(signal.SIGTERM)
        tap.eq(proc.wait(harness.scaled(30)), 0, "the activated server exits 0 on SIGTERM")


def run(tap):
    why = harness_http.main_skip_reason()
    if why:
        tap.skip_all(why)
    d = harness.Daemon(tap).start()
    d.wait_state("default", "ready", timeout=60)
    # More connections than the daemon's 256, so that its bound shows (check_daemon_busy).
    front = harness_http.HttpFront(tap, d, args=["--max-connections", "400", "--max-per-client", "400"]).start()
    r = front.request("GET", "/v1/status")
    tap.eq(r.status, 200, "GET /v1/status: 200", repr(r))
    tap.eq(r.json()["supervisor"]["pid"], d.proc.pid, "it is the daemon's status")
    tap.eq(r.headers.get("content-type"), "application/json", "as application/json")
    kernel_id = front.request("GET", "/v1/contexts/default").json()["kernel_id"]
    check_auth(tap, front)
    check_errors(tap, front)
    check_execute_json(tap, front, kernel_id)
    check_text(tap, front, d)
    check_execute_sse(tap, front)
    check_resume(tap, front)
    check_disconnect_and_cancel(tap, front)
    check_daemon_busy(tap, front)
    check_contexts(tap, front, d)
    check_lifecycle(tap, front, d)
    check_socket_activation(tap, front, d)
    check_daemon_away(tap, front, d)
    front.stop()
    d.check_log()


harness.main(run)
