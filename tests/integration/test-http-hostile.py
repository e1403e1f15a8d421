#!/usr/bin/env python3
"""kernelsup-http under a hostile client, over raw sockets (kernelsup-http(8), LIMITS): a 64 KiB header, a body that
claims 1 GiB and one that streams past --max-body, request smuggling (Content-Length with Transfer-Encoding, two
Content-Lengths), 1,000 pipelined requests on one connection, a slowloris request, 5,000 connections at once (past
--max-connections), and a reader that never reads an SSE stream of a flood. Each is refused or bounded, the
server's memory stays within its bound, and after each it still serves."""

import contextlib
import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import harness_http  # noqa: E402


def raw(front, timeout=30):
    s = socket.create_connection(("127.0.0.1", front.port), timeout=harness.scaled(timeout))
    return s


def head(front, extra=""):
    return (f"Host: 127.0.0.1:{front.port}\r\nAuthorization: Bearer {front.token}\r\n{extra}").encode()


def read_all(s, limit=1 << 20):
    """What the server sends until it closes (or limit bytes, or the socket's timeout)."""
    out = b""
    try:
        while len(out) < limit:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def status_of(answer):
    try:
        return int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def still_serves(tap, front, what):
    r = front.request("GET", "/v1/status")
    tap.eq(r.status, 200, f"after {what}: the server still serves")


def check_sizes(tap, front):
    s = raw(front)
    s.sendall(b"GET /v1/status HTTP/1.1\r\n" + head(front) + b"X-Big: " + b"a" * 65536 + b"\r\n\r\n")
    st = status_of(read_all(s))
    s.close()
    tap.ok(st in (400, 413, 431), "a 64 KiB header: refused (400, 413 or 431)", repr(st))
    still_serves(tap, front, "a 64 KiB header")

    s = raw(front)
    s.sendall(b"POST /v1/contexts/default/execute HTTP/1.1\r\n" + head(front, "Content-Type: application/json\r\n") +
              b"Content-Length: 1073741824\r\n\r\n")
    ans = read_all(s)
    s.close()
    tap.eq(status_of(ans), 413, "a body that claims 1 GiB: 413 before it is sent")

    s = raw(front)
    s.sendall(b"POST /v1/contexts/default/execute HTTP/1.1\r\n" + head(front, "Content-Type: application/json\r\n") +
              b"Transfer-Encoding: chunked\r\n\r\n")
    sent, chunk = 0, b"10000\r\n" + b"x" * 65536 + b"\r\n"
    try:
        while sent < 64 << 20:
            s.sendall(chunk)
            sent += 65536
    except (BrokenPipeError, ConnectionResetError):
        pass
    ans = read_all(s)
    s.close()
    tap.ok(status_of(ans) == 413 or sent < 64 << 20, "a chunked body past --max-body: 413, the rest not taken",
           f"sent {sent} bytes, answer {ans[:80]!r}")
    still_serves(tap, front, "bodies too large")


def check_smuggling(tap, front):
    for name, extra in (("Content-Length with Transfer-Encoding",
                         "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n"),
                        ("two Content-Lengths", "Content-Length: 2\r\nContent-Length: 3\r\n")):
        s = raw(front)
        s.sendall(b"POST /v1/contexts/default/execute HTTP/1.1\r\n" +
                  head(front, "Content-Type: application/json\r\n" + extra) + b"\r\n{}\r\n\r\n")
        st = status_of(read_all(s))
        s.close()
        tap.eq(st, 400, f"{name}: 400")
    still_serves(tap, front, "smuggling")


def check_pipelined(tap, front):
    s = raw(front, timeout=60)
    one = b"GET /v1/contexts/default HTTP/1.1\r\n" + head(front) + b"\r\n"
    s.sendall(one * 1000)
    ans, deadline = b"", time.monotonic() + harness.scaled(60)
    s.settimeout(harness.scaled(5))
    with contextlib.suppress(OSError):
        while ans.count(b"HTTP/1.1 ") < 1000 and time.monotonic() < deadline:
            b = s.recv(1 << 20)
            if not b:
                break
            ans += b
    s.close()
    n = ans.count(b"HTTP/1.1 200 OK")
    tap.ok(0 < n <= 1000 and ans.count(b"HTTP/1.1 ") == n,
           "1,000 pipelined requests: each answered 200 in turn, or the rest dropped with the connection", f"{n} answered")
    still_serves(tap, front, "a pipelined flood")


def wait_closed(s, timeout):
    """Whether the server closes s within timeout (unscaled) seconds, whatever it sends first."""
    s.settimeout(harness.scaled(timeout))
    try:
        while s.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def check_slowloris(tap, front):
    s = raw(front, timeout=60)
    t0 = time.monotonic()
    closed = False
    try:
        for b in b"GET /v1/status HTTP/1.1\r\nHost: x\r\n":
            s.sendall(bytes([b]))
            time.sleep(0.5)
            if time.monotonic() - t0 > harness.scaled(20):
                break
    except OSError:
        closed = True
    closed = closed or wait_closed(s, 5)
    took = time.monotonic() - t0
    s.close()
    tap.ok(closed and took < harness.scaled(20), "a request sent a byte every 0.5 s: closed at --request-timeout (3 s)",
           f"closed {closed} after {took:.1f}s")
    still_serves(tap, front, "slowloris")


def status_or_none(front):
    """GET /v1/status's status, None while the server resets the connection (it is still closing thousands)."""
    try:
        return front.request("GET", "/v1/status").status
    except OSError:
        return None


def fds_of(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def check_many(tap, front):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 5200:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(5200, hard), hard))
        except (ValueError, OSError):
            pass
    n = min(5000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
    rss0, fds0 = front.rss_kib(), fds_of(front.proc.pid)
    socks = []
    for _ in range(n):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", front.port))  # the kernel completes it, or queues it: no wait here
        socks.append(c)
    peak_fds, peak_rss = fds0, rss0
    for _ in range(10):
        time.sleep(0.3)
        peak_fds, peak_rss = max(peak_fds, fds_of(front.proc.pid)), max(peak_rss, front.rss_kib())
    for c in socks:
        c.close()
    tap.diag(f"{n} connections: descriptors {fds0} -> {peak_fds}, VmRSS {rss0} -> {peak_rss} KiB")
    tap.ok(peak_fds - fds0 <= 256, f"{n} connections at once: the server holds at most its 256 (--max-connections)",
           f"{fds0} -> {peak_fds} descriptors")
    name = f"{n} connections at once: the server's memory grew by less than 32 MiB"
    if harness.sanitizers():
        tap.skip(name, harness.sanitizers())
    else:
        tap.ok(peak_rss - rss0 < 32 * 1024, name, f"{rss0} -> {peak_rss} KiB")
    r = harness.poll_until(lambda: status_or_none(front), 30, "served again", check=lambda st: st == 200)
    tap.eq(r, 200, f"after {n} connections: the server still serves (once it has closed them)")


def check_never_read(tap, front):
    heavy = harness.not_normal_build()
    if heavy:
        return tap.skip("a reader that never reads an SSE stream of a 1 GiB print", f"normal build only ({heavy})")
    rss0 = front.rss_kib()
    s = raw(front, timeout=120)
    body = b'{"code": "import sys\\nfor i in range(2048): sys.stdout.write(\\"x\\" * (1 << 19))"}'
    s.sendall(b"POST /v1/contexts/default/execute HTTP/1.1\r\n" +
              head(front, "Content-Type: application/json\r\nAccept: text/event-stream\r\n") +
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peak = rss0
    t0 = time.monotonic()
    # The cell prints 1 GiB; the daemon keeps output_limit (10 MiB) and cuts the rest. Nothing is read meanwhile.
    while time.monotonic() - t0 < harness.scaled(60):
        peak = max(peak, front.rss_kib())
        c = front.daemon.context("default")
        if c.get("state") == "ready" and time.monotonic() - t0 > 3:
            break
        time.sleep(0.2)
    peak = max(peak, front.rss_kib())
    s.close()
    tap.diag(f"a reader that never reads: VmRSS {rss0} -> {peak} KiB")
    # The bound: the stream buffer (1M) and the daemon's final answer (its kept outputs, output_limit 10 MiB, as JSON).
    tap.ok(peak - rss0 < 48 * 1024, "a reader that never reads an SSE stream of a 1 GiB print: the server grows by "
           "less than 48 MiB", f"{rss0} -> {peak} KiB")
    d = front.daemon
    d.wait_state("default", "ready", timeout=120)
    still_serves(tap, front, "a reader that never reads")


def run(tap):
    why = harness_http.main_skip_reason()
    if why:
        tap.skip_all(why)
    d = harness.Daemon(tap).start()
    d.wait_state("default", "ready", timeout=60)
    front = harness_http.HttpFront(tap, d, args=["--request-timeout", "3"]).start()
    for what, fn in (("sizes", check_sizes), ("smuggling", check_smuggling), ("pipelined", check_pipelined),
                     ("slowloris", check_slowloris), ("many connections", check_many),
                     ("a reader that never reads", check_never_read)):
        with tap.guard(what):
            fn(tap, front)
    front.stop()
    d.check_log()


harness.main(run)
