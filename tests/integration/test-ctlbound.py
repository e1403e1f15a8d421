"""The bounds of one control connection and one uid: requests held open (pipelined waits)
past the caps kernelsupd(8) states are refused with an error naming the cap, the memory
they held is given back, a short request of a uid at its cap is still answered; a reader
that keeps taking a long reply at a slow pace keeps it; root's own idle connections never
lock root out. No kernel is started (autostart = no)."""

import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MIB = 1 << 20
# The caps kernelsupd(8) states for requests held open.
OPEN_PER_CONN = 16
HELD_PER_CONN = 2 * MIB
HELD_PER_UID = 8 * MIB
OVERHEAD = 512


def wait_line(i, pad):
    return (json.dumps({"jsonrpc": "2.0", "id": i, "method": "wait",
                        "params": {"contexts": ["cf"], "timeout": 600, "pad": "x" * pad}}) + "\n").encode()


def answers(raw, n, timeout=120):
    """The next n lines (parsed) of raw, or fewer if it closes."""
    out = []
    while len(out) < n:
        line = raw.read_line(timeout=timeout)
        if line is None:
            break
        out.append(json.loads(line))
    return out


def fill(d, n, pad, first_id=0):
    """Pipelines n padded waits on a new connection; returns it with the errors it got
    (n minus the waits held)."""
    raw = harness.RawControl(d.socket)
    weight = len(wait_line(first_id, pad)) - 1 + OVERHEAD
    held = min(OPEN_PER_CONN, HELD_PER_CONN // weight)
    sender = harness.send_in_background(raw.s, b"".join(wait_line(first_id + i, pad) for i in range(n)))
    errs = answers(raw, n - held)
    sender.join(harness.scaled(120))
    return raw, errs, held


def connections(d):
    rep = d.rpc("metrics")
    text = rep["result"] if isinstance(rep["result"], str) else rep["result"].get("text", "")
    for line in text.splitlines():
        if line.startswith("kernelsup_control_connections "):
            return int(float(line.split()[1]))
    raise harness.HarnessError("no kernelsup_control_connections in metrics")


def wait_connections(d, n):
    """Until the daemon has closed all but n connections (the one asking included)."""
    harness.wait_until(lambda: connections(d) <= n, 60, f"{n} control connection(s) left open")


def trial_held(tap, d):
    pid = d.proc.pid
    rss0 = harness.proc_status_kib(pid, "VmRSS")
    n, pad = 300, 200000
    raw, errs, held = fill(d, n, pad)
    tap.eq(len(errs), n - held, f"{n} pipelined waits of 200 KB: all but the {held} the 2 MiB cap holds are answered")
    tap.ok(all(e.get("error", {}).get("code") == -32000 and "at most 2 MiB" in e["error"].get("message", "")
               for e in errs), "each refused wait gets an error naming the cap (at most 2 MiB)",
           repr(errs[:1])[:300])
    tap.eq(sorted(e["id"] for e in errs), list(range(held, n)), "the refused ones are the requests past the cap")
    hwm = harness.proc_status_kib(pid, "VmHWM")
    tap.diag(f"VmRSS before {rss0} KiB, VmHWM after {n} waits of 200 KB: {hwm} KiB")
    # Bound: the waits held (their line and parse, under 3 times the cap), the line buffers of one read
    # and of one request being refused, and 16 MiB of slack for the allocator.
    san = harness.sanitizers()
    if san:
        tap.skip("the daemon's peak grows by less than 3 x 2 MiB + 16 MiB", san)
    else:
        tap.ok(hwm - rss0 < (3 * HELD_PER_CONN + 16 * MIB) // 1024,
               "the daemon's peak grows by less than 3 x 2 MiB + 16 MiB", f"{rss0} -> {hwm} KiB")
    # A short status on the same connection is still answered (only the caps of big requests were hit).
    rep = raw.request(b'{"jsonrpc":"2.0","id":"s","method":"status"}\n', timeout=30)
    tap.ok(rep and rep.get("id") == "s" and "result" in rep, "a status on that connection is still answered",
           repr(rep)[:200])
    raw.close()
    wait_connections(d, 1)
    rss1 = harness.proc_status_kib(pid, "VmRSS")
    tap.diag(f"VmRSS after the connection closed: {rss1} KiB")
    if san:
        tap.skip("the memory the held waits took is given back (VmRSS within 8 MiB of before)", san)
    else:
        tap.ok(rss1 - rss0 < 8 * 1024,
               "the memory the held waits took is given back (VmRSS within 8 MiB of before)", f"{rss0} -> {rss1} KiB")


def trial_per_uid(tap, d):
    # Four connections of 2 MiB each fill root's 8 MiB; the fifth is refused by the uid's cap.
    pad = 200000
    conns = []
    try:
        for k in range(HELD_PER_UID // HELD_PER_CONN):
            raw, errs, held = fill(d, 12, pad, first_id=100 * k)
            conns.append(raw)
        weight = len(wait_line(900, pad)) - 1 + OVERHEAD
        more = (HELD_PER_UID - len(conns) * held * weight) // weight
        raw = harness.RawControl(d.socket)
        conns.append(raw)
        sender = harness.send_in_background(raw.s, b"".join(wait_line(900 + i, pad) for i in range(more + 2)))
        errs = answers(raw, 2)
        sender.join(harness.scaled(120))
        tap.eq([e.get("id") for e in errs], [900 + more, 901 + more],
               f"past 8 MiB held by one uid ({more} more on a fifth connection), its waits are refused")
        tap.ok(all("for uid 0 (at most 8 MiB)" in e.get("error", {}).get("message", "") for e in errs),
               "the error names the uid's cap", repr(errs[:1])[:300])
        rep = raw.request(b'{"jsonrpc":"2.0","id":"s","method":"status"}\n', timeout=30)
        tap.ok(rep and "result" in rep, "that uid's status is still answered at its cap", repr(rep)[:200])
    finally:
        for raw in conns:
            raw.close()
    # Given back: a new 2 MiB fill is held again.
    wait_connections(d, 1)
    raw, errs, held = fill(d, 12, pad, first_id=2000)
    tap.eq(len(errs), 12 - held, "once those connections closed, their uid's cap is free again")
    raw.close()


def trial_root_pool(tap, d):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 1024)), hard))
    pool = []
    try:
        # Root's own client holds every slot, each idle (its status answered).
        for i in range(256):
            raw = harness.RawControl(d.socket)
            pool.append(raw)
            rep = raw.request(b'{"jsonrpc":"2.0","id":1,"method":"status"}\n', timeout=30)
            if not rep or "result" not in rep:
                tap.ok(False, f"root's connection {i} is admitted", repr(rep)[:200])
                return
        r = d.ctl("status", "cf", "--json")
        tap.ok(r.returncode in (0, 1) and '"cf"' in r.stdout and "too many connections" not in r.stderr,
               "with 256 idle connections of root's open, root's kernelctl status is answered", r.stderr[-300:])
        first = pool[0].read_line(timeout=30)
        tap.ok(first is not None and b"closed, the oldest idle one of its uid" in first,
               "the oldest idle root connection is told why it is closed", repr(first)[:200])
        tap.ok(pool[0].wait_closed(timeout=30), "and is closed")
        rep = pool[-1].request(b'{"jsonrpc":"2.0","id":2,"method":"status"}\n', timeout=30)
        tap.ok(rep and "result" in rep, "the newest one of the pool still works", repr(rep)[:200])
    finally:
        for raw in pool:
            raw.close()
    wait_connections(d, 1)


def test(tap):
    d = harness.Daemon(tap, contexts="[context:cf]\nautostart = no\n")
    d.start()
    trial_held(tap, d)
    trial_per_uid(tap, d)
    trial_root_pool(tap, d)
    d.stop()
    d.check_log()


harness.main(test, needs_jupyter=False)
