"""The memory bound kernelsup.ini(5) states (output_limit), put to the test it promises: every way in at
once, and the daemon's peak (VmHWM) checked against the bound computed here from the documented formula
and this test's configuration, never read from the daemon:

  48 MiB
  + (64 MiB + 16 x output_limit) for each context whose kernel sends output at the same time (2 here)
  + (16 MiB + 4 x output_limit) for each control connection that leaves its replies unread (1 here: the
    kernelctl exec flood, read slowly by its pipe)
  + 88 MiB for the requests held open on the control socket.

The ways in, together (the red team's numbers): 1,200 pipelined 200 KB waits on one connection and 800 cells
of 200 KB queued behind a sleeping cell, held while the others come: a kernel message with 15 buffers of 16 MiB (a comm_msg on iopub); `kernelctl kernels` of a
uid with 20,000 kernelspec directories; a 200 MB print flood through `kernelctl exec` and one through an
outside jupyter_client. Heavy: it runs in the normal build only."""

import json
import os
import shutil
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MIB = 1 << 20
OUTPUT_LIMIT = 1 * MIB
SENDING = 2  # contexts whose kernels send output at the same time
UNREAD = 1  # control connections that may leave replies unread
BOUND = 48 * MIB + SENDING * (64 * MIB + 16 * OUTPUT_LIMIT) + UNREAD * (16 * MIB + 4 * OUTPUT_LIMIT) + 88 * MIB

DEFAULTS = f"argv = {harness.IPYKERNEL_ARGV}\noutput_limit = 1M\n"
CONTEXTS = """[context:q]

[context:f]

[context:cf]
autostart = no
"""

BUFFERS_CELL = ("k = get_ipython().kernel\n"
                "k.session.send(k.iopub_socket, 'comm_msg', {'comm_id': 'membound', 'data': {}},\n"
                "               parent=k.get_parent(), buffers=[b'x' * (16 << 20)] * 15)\n"
                "'sent'")
FLOOD_CELL = "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 1000000)\n"


def line(i, method, params):
    return (json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode()


def pipelined_waits(d, out):
    raw = harness.RawControl(d.socket)
    try:
        data = b"".join(line(i, "wait", {"contexts": ["cf"], "timeout": 600, "pad": "x" * 200000})
                        for i in range(1200))
        sender = harness.send_in_background(raw.s, data)
        sender.join(harness.scaled(300))
        out["waits"] = "sent"
    finally:
        out["waits_conn"] = raw


def queued_cells(d, out):
    raw = harness.RawControl(d.socket)
    code = "x = 1  # " + "y" * 200000
    data = line(0, "execute", {"context": "q", "code": "import time; time.sleep(600)"}) + \
        b"".join(line(1 + i, "execute", {"context": "q", "code": code}) for i in range(800))
    sender = harness.send_in_background(raw.s, data)
    sender.join(harness.scaled(300))
    out["cells_conn"] = raw


def kernelspecs(tap, d, user, out):
    r = d.ctl("kernels", prefix=("setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                                 "env", f"HOME={user.home}"), timeout=600)
    out["kernels"] = r.returncode


def exec_flood(d, out):
    r = d.ctl("exec", "f", input=FLOOD_CELL, timeout=600)
    out["exec"] = r.returncode


def outside_flood(d, conn, out):
    res = harness.run_cell(conn, FLOOD_CELL, timeout=600)
    out["outside"] = res.get("status")


def make_specs(home, n):
    root = os.path.join(home, ".local", "share", "jupyter", "kernels")
    for i in range(n):
        p = os.path.join(root, f"k{i}")
        os.makedirs(p)
        with open(os.path.join(p, "kernel.json"), "w") as f:
            json.dump({"argv": ["/bin/false", "{connection_file}"], "display_name": f"K{i}", "language": "x"}, f)


def test(tap):
    other = harness.not_normal_build()
    if other:
        tap.skip_all(f"the memory-bound test runs in the normal build only: {other}")
    if os.geteuid() != 0:
        tap.skip_all("needs root (a test user owns the 20,000 kernelspecs)")
    d = harness.Daemon(tap, contexts=CONTEXTS, defaults=DEFAULTS)
    d.start()
    d.wait_state("q", "ready", timeout=120)
    d.wait_state("f", "ready", timeout=120)
    pid = d.proc.pid
    user = harness.TestUser(os.path.join(d.tmp, "home"), prefix="ks-mb")
    try:
        make_specs(user.home, 20000)
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", user.home], check=True)
        tap.diag(f"VmRSS at rest: {harness.proc_status_kib(pid, 'VmRSS')} KiB")
        out = {}
        conn = d.context("f")["connection_file"]
        held = [threading.Thread(target=fn, args=(d, out)) for fn in (pipelined_waits, queued_cells)]
        for t in held:
            t.start()
        for t in held:
            t.join(harness.scaled(600))
        rss = harness.proc_status_kib(pid, "VmRSS")
        tap.diag(f"VmRSS with the pipelined waits and queued cells sent: {rss} KiB")
        threads = [threading.Thread(target=fn, args=args) for fn, args in (
            (kernelspecs, (tap, d, user, out)),
            (exec_flood, (d, out)),
            (outside_flood, (d, conn, out)),
        )]
        for t in threads:
            t.start()
        res = d.ctl("exec", "f", input=BUFFERS_CELL, timeout=600)
        out["buffers"] = res.returncode
        for t in threads:
            t.join(harness.scaled(900))
        tap.ok(d.running(), "the daemon survives every way in at once", json.dumps(
            {k: v for k, v in out.items() if not k.endswith("_conn")}))
        tap.eq(out.get("buffers"), 0, "the cell sending 15 buffers of 16 MiB on iopub ends ok")
        tap.eq(out.get("exec"), 0, "the 200 MB flood through kernelctl exec ends ok (its output cut at output_limit)")
        tap.eq(out.get("outside"), "ok", "the 200 MB flood through an outside jupyter_client ends ok")
        tap.ok(out.get("kernels") is not None, "kernelctl kernels of the uid with 20,000 specs answered",
               f"exit {out.get('kernels')}")
        hwm = harness.proc_status_kib(pid, "VmHWM") * 1024
        tap.diag(f"VmHWM {hwm // 1024} KiB; the documented bound {BOUND // 1024} KiB "
                 f"(output_limit {OUTPUT_LIMIT // MIB} MiB, {SENDING} sending, {UNREAD} unread)")
        tap.ok(hwm < BOUND, f"the daemon's peak stays below the bound kernelsup.ini(5) states "
               f"({BOUND // MIB} MiB)", f"VmHWM {hwm // MIB} MiB")
        for k in ("waits_conn", "cells_conn"):
            if out.get(k):
                out[k].close()
        r = d.ctl("status", "q", "--json", timeout=60)
        tap.ok('"q"' in r.stdout, "the daemon still answers a status afterwards", r.stderr[-300:])
    finally:
        user.close()
        shutil.rmtree(user.home, ignore_errors=True)
    d.stop(timeout=120)


harness.main(test)
