"""The control socket and kernelctl's exit codes: no daemon (3), usage errors (2),
unknown contexts (5), another uid (4), malformed JSON-RPC, an oversized line, the
socket's mode. The context never starts a kernel (autostart = no): this is about
the socket, not about kernels."""

import json
import os
import socket
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test(tap):
    d = harness.Daemon(tap, contexts="[context:idle]\nautostart = no\n")

    # No daemon: exit 3, for a missing socket and for a stale one nobody listens on.
    r = d.ctl("status")
    tap.eq(r.returncode, 3, "no daemon (no socket): kernelctl status exits 3")
    tap.contains(r.stderr, "kernelsupd is not running", "no daemon: stderr says kernelsupd is not running")
    stale = os.path.join(d.tmp, "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(stale)
    s.close()
    r = d.ctl("status", socket_path=stale)
    tap.eq(r.returncode, 3, "stale socket nobody listens on: kernelctl status exits 3")
    tap.contains(r.stderr, "kernelsupd is not running", "stale socket: stderr says kernelsupd is not running")

    d.start()
    c = d.context("idle")
    tap.eq((c["state"], c["pid"]), ("stopped", None), "autostart = no: stopped, no pid, READY=1 all the same")
    tap.eq(d.ctl("status").returncode, 1, "kernelctl status exits 1 when a context is stopped")

    # The socket.
    st = os.lstat(d.socket)
    tap.ok(stat.S_ISSOCK(st.st_mode), "the control socket is a socket", oct(st.st_mode))
    tap.eq(stat.S_IMODE(st.st_mode), 0o666, "the control socket's mode is 0666 (socket_mode's default)")

    # Usage errors: exit 2, before any request.
    for args, what in ((("frobnicate",), "an unknown command"),
                       (("status", "--no-such-option"), "an unknown option"),
                       (("start",), "start without a context"),
                       (("stop",), "stop without a context"),
                       (("restart",), "restart without a context"),
                       ((), "no command")):
        r = d.ctl(*args)
        tap.eq(r.returncode, 2, f"kernelctl with {what} exits 2", r.stderr)
        tap.ok(r.stderr.strip() != "", f"kernelctl with {what} says why on stderr")

    # Unknown contexts: exit 5.
    for cmd in ("status", "start", "stop", "restart"):
        r = d.ctl(cmd, "nosuch")
        tap.eq(r.returncode, 5, f"kernelctl {cmd} nosuch exits 5", r.stderr)
    r, j = d.ctl_json("status", "nosuch")
    tap.eq(r, 5, "kernelctl status nosuch --json exits 5")

    # Malformed requests on a raw connection: errors, and the connection keeps working.
    raw = harness.RawControl(d.socket)
    try:
        rep = raw.request(b"this is not json\n")
        tap.ok(harness.is_rpc_error(rep, -32700), "garbage: -32700 parse error", repr(rep))
        tap.ok(isinstance(rep, dict) and "id" in rep and rep["id"] is None, "garbage: the error has id null",
               repr(rep))
        rep = raw.request(b'{"jsonrpc": "2.0", "id": 1, "method": "status"\n')
        tap.ok(harness.is_rpc_error(rep, -32700), "truncated JSON: -32700 parse error", repr(rep))
        rep = raw.request(b"[1, 2, 3]\n")
        tap.ok(harness.is_rpc_error(rep, -32600), "a JSON array: -32600 invalid request", repr(rep))
        rep = raw.request(b'"just a string"\n')
        tap.ok(harness.is_rpc_error(rep, -32600), "a JSON string: -32600 invalid request", repr(rep))
        rep = raw.request(b'{"id": 7, "method": "status"}\n')
        tap.ok(harness.is_rpc_error(rep, -32600), "no \"jsonrpc\": -32600 invalid request", repr(rep))
        tap.eq(rep.get("id") if isinstance(rep, dict) else None, 7, "invalid request: the error carries the id")
        rep = raw.request(b'{"jsonrpc": "1.0", "id": 8, "method": "status"}\n')
        tap.ok(harness.is_rpc_error(rep, -32600), "\"jsonrpc\": \"1.0\": -32600 invalid request", repr(rep))
        rep = raw.request(b'{"jsonrpc": "2.0", "id": 9, "method": 42}\n')
        tap.ok(harness.is_rpc_error(rep, -32600), "a non-string method: -32600 invalid request", repr(rep))
        rep = raw.request(b'{"jsonrpc": "2.0", "id": 10, "method": "no_such_method"}\n')
        tap.ok(harness.is_rpc_error(rep, -32601), "an unknown method: -32601 method not found", repr(rep))
        tap.eq(rep.get("id") if isinstance(rep, dict) else None, 10, "method not found: the error carries the id")
        rep = raw.request(b"\x00\xff\xfe garbage \x01\n")
        tap.ok(harness.is_rpc_error(rep, -32700), "binary garbage: -32700 parse error", repr(rep))
        rep = raw.request(b"still here?\n")
        tap.ok(harness.is_rpc_error(rep, -32700), "the same connection still answers after errors", repr(rep))
    finally:
        raw.close()
    tap.eq(d.ctl("status", "idle").returncode, 1, "kernelctl still works after malformed requests")

    # A half request and a hang-up must not disturb the daemon.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(d.socket)
    s.sendall(b'{"jsonrpc": "2.0", "id": 1, "meth')
    s.close()
    r = d.ctl("status", "idle")
    tap.ok(r.returncode == 1 and d.running(), "a connection closed mid-request leaves the daemon answering",
           repr(r))

    # A 1 MiB line: an error, then the daemon closes that connection.
    raw = harness.RawControl(d.socket)
    try:
        big = b'{"jsonrpc": "2.0", "id": 11, "method": "status", "params": {"pad": "' + b"a" * (1 << 20) + b'"}}\n'
        sender = harness.send_in_background(raw.s, big)
        line = raw.read_line(timeout=30)
        try:
            rep = json.loads(line) if line is not None else None
        except ValueError:
            rep = line
        tap.ok(harness.is_rpc_error(rep), "a 1 MiB line gets a JSON-RPC error", repr(rep)[:300])
        tap.ok(raw.wait_closed(timeout=30), "the daemon closes the connection after the oversized line")
        sender.join(harness.scaled(30))
        tap.ok(not sender.is_alive(), "the sender is not left blocked")
    finally:
        raw.close()
    tap.ok(d.running(), "the daemon survives the oversized line")
    raw = harness.RawControl(d.socket)
    try:
        rep = raw.request(b"garbage after the big line\n")
        tap.ok(harness.is_rpc_error(rep, -32700), "a new connection is answered after the oversized line", repr(rep))
    finally:
        raw.close()
    rc, j = d.ctl_json("status")
    tap.ok(rc == 1 and isinstance(j, dict), "kernelctl status --json still works", repr(d.last_ctl))

    # Another uid cannot connect to a 0660 root socket: exit 4 (test-socket-access.py sets socket_mode itself).
    if os.geteuid() != 0:
        tap.skip("kernelctl as nobody exits 4", "not root")
    else:
        # Let nobody reach the socket file, so that its mode alone decides.
        for p in (d.tmp, d.run_dir):
            os.chmod(p, 0o755)
        os.chmod(d.socket, 0o660)
        probe = subprocess.run(NOBODY + ["test", "-x", harness.KERNELCTL], capture_output=True)
        if probe.returncode != 0:
            tap.skip("kernelctl as nobody exits 4", f"nobody cannot execute {harness.KERNELCTL}")
        else:
            r = d.ctl("status", prefix=NOBODY)
            tap.eq(r.returncode, 4, "kernelctl status as nobody exits 4", r.stderr)
            tap.ok("permission denied" in r.stderr.lower(), "as nobody: stderr says permission denied",
                   repr(r.stderr))
            r = d.ctl("stop", "idle", prefix=NOBODY)
            tap.eq(r.returncode, 4, "kernelctl stop idle as nobody exits 4", r.stderr)

    d.stop()
    tap.ok(not os.path.exists(d.socket), "the control socket is removed on exit")
    r = d.ctl("status")
    tap.eq(r.returncode, 3, "after the daemon stopped: kernelctl status exits 3")
    tap.contains(r.stderr, "kernelsupd is not running", "after the daemon stopped: stderr says so")


harness.main(test, needs_jupyter=False)
