"""Heavy output and late interrupts against a real daemon and real ipykernels: the
daemon's peak memory (VmHWM) stays under the bound kernelsup.ini(5) states whatever a
cell prints, through kernelctl exec or a stock jupyter_client; exec always answers
(text, --json, --stream) with the first output_limit bytes and markers saying what was
cut or dropped; an interrupt that lands after the cell's code finished (no
execute_reply) ends the cell once the kernel is known idle, the queue moves on and the
namespace stays; a queued cell has a deadline; a control client that sends cells and
never reads is disconnected before the daemon holds more than its bound; timeouts that
are NaN, infinite, negative or absurdly large are refused or clamped, never wrapped."""

import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MiB = 1 << 20
LIMIT = 1 * MiB  # output_limit of the flooded contexts
# kernelsup.ini(5): the daemon stays under 48 MiB, plus 64 MiB + 16 × output_limit per
# context producing output at once.
BOUND = 48 * MiB + 64 * MiB + 16 * LIMIT
FLOOD = "import sys\nfor i in range({}): sys.stdout.write('x' * (1 << 20))\nprint('end')"
DROPPED = "[output dropped: a message of more than "
TRUNCATED = f"[output truncated: limit of {LIMIT} bytes reached]"
NO_REPLY = "[no reply: the kernel sent no reply to the cell"
SANITIZED = False


def contexts():
    return (f"[context:flood]\noutput_limit = {LIMIT // MiB}M\n"
            f"\n[context:other]\noutput_limit = {LIMIT // MiB}M\noutput_chunking = no\n"
            "\n[context:late]\n"
            "\n[context:off]\nautostart = no\n")


def vm_hwm(pid):
    """The peak resident set size of pid in bytes (VmHWM in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise harness.HarnessError(f"no VmHWM in /proc/{pid}/status")


def sanitized():
    """A sanitizer build: its RSS holds ASan's shadow memory and quarantine, not ours alone."""
    with open(harness.KERNELSUPD, "rb") as f:
        return b"__asan_init" in f.read()


def check_bound(tap, d, name):
    hwm = vm_hwm(d.proc.pid)
    if SANITIZED:
        tap.skip(f"{name}: daemon peak RSS {hwm // MiB} MiB <= bound {BOUND // MiB} MiB",
                 "a sanitizer build's RSS includes ASan's shadow memory and quarantine")
        return
    tap.ok(hwm <= BOUND, f"{name}: daemon peak RSS {hwm // MiB} MiB <= bound {BOUND // MiB} MiB")


def test_flood_exec(tap, d):
    r = d.ctl("exec", "flood", FLOOD.format(200), timeout=120)
    tap.eq(r.returncode, 0, "200 MiB in 1 MiB writes: exec exit 0", r.stderr[-500:])
    tap.ok(r.stdout.rstrip("\n").split("\n")[-1].startswith("[ok #"), "200 MiB: the last line is [ok #N]",
           r.stdout[-300:])
    tap.ok(DROPPED in r.stderr or TRUNCATED in r.stderr, "200 MiB: a marker says what was dropped or cut",
           r.stderr[-500:])
    tap.ok(len(r.stdout) <= LIMIT + 4096, f"200 MiB: at most output_limit bytes printed ({len(r.stdout)})")
    check_bound(tap, d, "200 MiB through exec")

    for mode in ("--json", "--stream"):
        r = d.ctl("exec", "flood", FLOOD.format(30), mode, timeout=120)
        try:
            j = json.loads(r.stdout if mode == "--json" else r.stdout.rstrip("\n").split("\n")[-1])
        except ValueError:
            j = {}
        tap.eq((r.returncode, j.get("status")), (0, "ok"), f"30 MiB with {mode}: exit 0, status ok",
               r.stderr[-300:])
        text = "".join(o.get("text", "") for o in j.get("outputs", []))
        tap.ok(DROPPED in text or TRUNCATED in text, f"30 MiB with {mode}: the outputs carry the marker")
    check_bound(tap, d, "30 MiB with --json and --stream")

    # Text that fits the bound message by message: the first output_limit bytes, then how much was cut.
    r = d.ctl("exec", "flood", "for i in range(60000): print('%099d' % i)", timeout=120)
    tap.eq(r.returncode, 0, "6 MB in lines: exit 0", r.stderr[-300:])
    tap.ok(r.stdout.startswith("%099d\n%099d\n" % (0, 1)), "6 MB in lines: the first lines are kept")
    tap.contains(r.stderr, TRUNCATED, "6 MB in lines: the truncation marker")
    tap.contains(r.stderr, f"[output truncated: {60000 * 100 - LIMIT} more bytes not kept]",
                 "6 MB in lines: says how much was cut")

    # Many tiny display messages.
    r = d.ctl("exec", "flood", "from IPython.display import display\n"
              "for i in range(20000): display({'text/plain': 'y' * 100}, raw=True)", "--json", timeout=120)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        j = {}
    tap.eq((r.returncode, j.get("status")), (0, "ok"), "20,000 displays: exit 0, status ok", r.stderr[-300:])
    n = sum(1 for o in j.get("outputs", []) if o.get("output_type") == "display_data")
    # Each output counts 1 KiB beyond its text: what it takes in memory.
    tap.ok(0 < n <= LIMIT // (100 + 1024), f"20,000 displays: kept up to the limit, 1 KiB each counted ({n})")
    check_bound(tap, d, "20,000 displays")
    r = d.ctl("exec", "flood", "print('alive')")
    tap.eq((r.returncode, r.stdout), (0, "alive\n[ok #6]\n"), "after the floods the kernel runs cells, same kernel")


def test_flood_client(tap, d):
    """A stock jupyter_client on the published connection file, not the daemon's exec."""
    path = d.context("other")["connection_file"]
    mark = d.log_mark()
    kc = harness.KernelClient(path, timeout=60)
    try:
        res = kc.run("import sys; sys.stdout.write('z' * (100 << 20))", timeout=120)
    finally:
        kc.close()
    tap.eq(res["status"], "ok", "100 MiB in one write by a jupyter_client: the cell ran")
    tap.eq(len(res["stdout"]), 100 * MiB, "the client got all of it (the bound is the daemon's, not the kernel's)")
    check_bound(tap, d, "100 MiB in one write through a jupyter_client")
    d.wait_log("a message on the kernel's iopub connection was lost", mark)
    tap.ok(True, "the daemon logged the dropped message")
    tap.eq(d.context("other")["state"], "ready", "the context is ready after the client's flood")
    r = d.ctl("exec", "other", "print('still')")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "still"), "the daemon's iopub reconnected: output arrives")


def test_flood_client_chunked(tap, d):
    """The same client flood on a kernel with output chunking (test-flood.py): no message over the
    bound, so nothing is dropped; the daemon reads every 1 MiB piece and stays bounded."""
    mark = d.log_mark()
    res = harness.run_cell(d.context("flood")["connection_file"], "import sys; n = sys.stdout.write('c' * (100 << 20))",
                           timeout=300)
    tap.eq((res["status"], len(res["stdout"])), ("ok", 100 * MiB),
           "chunked: 100 MiB in one write by a jupyter_client, all of it received")
    check_bound(tap, d, "100 MiB in one write through a jupyter_client, chunked")
    tap.ok("connection was lost" not in d.log_since(mark), "chunked: no message over the bound, nothing dropped")


def test_late_interrupt(tap, d):
    """ipykernel sleeps _execute_sleep after a cell's code and before its reply: an
    interrupt then raises KeyboardInterrupt outside the code and no execute_reply comes."""
    r = d.ctl("exec", "late", "kept = 42\nget_ipython().kernel._execute_sleep = 3")
    tap.eq(r.returncode, 0, "late: set _execute_sleep = 3")
    r = d.ctl("--timeout", "1", "exec", "late", "pass", timeout=60)
    tap.eq(r.returncode, 6, "late: --timeout 1 exec pass: exit 6", r.stderr)
    tap.eq(r.stdout.rstrip("\n").split("\n")[-1][:8], "[timeout", "late: [timeout ...] line", r.stdout)
    tap.contains(r.stderr, NO_REPLY, "late: the outputs say no reply came")
    st = d.context("late")
    tap.eq((st["state"], st["queued"]), ("ready", 0), "late: status shows ready at once, nothing queued")
    r = d.ctl("--timeout", "5", "exec", "late", "print(kept)", timeout=60)
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "42"), "late: the next cell runs, the namespace stayed",
           r.stderr)

    # The same with kernelctl interrupt after the code has run: status aborted, said so.
    # print without flush: ipykernel flushes after the code, so the output arriving
    # means the code is done (a flush=True inside the code could be interrupted).
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "late", "print('ran')",
                          "--stream"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    first = p.stdout.readline()
    tap.eq(json.loads(first or "{}").get("text"), "ran\n", "late interrupt: the code ran")
    r = d.ctl("interrupt", "late")
    tap.eq(r.returncode, 0, "late interrupt: kernelctl interrupt")
    out, err = p.communicate(timeout=harness.scaled(60))
    try:
        j = json.loads(out.rstrip("\n").split("\n")[-1])
    except ValueError:
        j = {}
    tap.eq((p.returncode, j.get("status")), (1, "aborted"), "late interrupt: the cell ends aborted (exit 1)", err)
    tap.ok(any(NO_REPLY in o.get("text", "") for o in j.get("outputs", [])), "late interrupt: said in the outputs")
    tap.eq(d.context("late")["state"], "ready", "late interrupt: ready at once")

    # A queued cell has a deadline: it waits behind a busy kernel only as long as its timeout.
    d.ctl("exec", "late", "get_ipython().kernel._execute_sleep = 0")
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "late",
                          "import time\nprint('long', flush=True)\ntime.sleep(4)", "--stream"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    r = d.ctl("--timeout", "1", "exec", "late", "queued = 1", timeout=60)
    tap.eq(r.returncode, 11, "queued cell: exit 11 (not started) at its timeout", r.stderr)
    tap.eq(r.stdout.rstrip("\n").split("\n")[-1], "[not started: timeout]", "queued cell: [not started: timeout]")
    tap.contains(r.stderr, "did not start within its timeout", "queued cell: says it did not start")
    out, err = p.communicate(timeout=harness.scaled(60))
    tap.eq(p.returncode, 0, "queued cell: the long cell before it still ends ok", err)
    r = d.ctl("exec", "late", "'queued' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "queued cell: it never ran")


def test_never_reads(tap, d):
    """A client sends 50 cells printing 2 MB each and never reads: the daemon stops
    reading its requests, then disconnects it past 16 MiB + 4 x output_limit unread."""
    mark = d.log_mark()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(d.socket)
    reqs = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "execute",
                                "params": {"context": "flood", "code": "print('w' * 2_000_000)"}}).encode() + b"\n"
                    for i in range(50))
    s.sendall(reqs)
    d.wait_log("leaves", mark, timeout=120)
    tap.contains(d.log_since(mark), "bytes of replies unread, closing its connection",
                 "never reads: the daemon disconnects it")
    check_bound(tap, d, "a client that never reads")
    st = harness.poll_until(lambda: d.context("flood"), 60, "flood to be ready",
                            check=lambda c: c.get("state") == "ready")
    tap.eq(st.get("state"), "ready", "never reads: the context is ready again (its cells were dropped or interrupted)")
    s.close()
    r = d.ctl("exec", "flood", "print('next')")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "next"), "never reads: the next exec runs")

    # A client that reads slowly is not disconnected: it gets its whole reply.
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "flood",
                          "for i in range(3): print('s' * 600_000)", "--stream"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(1)
    time.sleep(0.5)  # not a wait for an event: the slowness under test
    out, err = p.communicate(timeout=harness.scaled(60))
    try:
        j = json.loads((first + out).decode().rstrip("\n").split("\n")[-1])
    except ValueError:
        j = {}
    tap.eq((p.returncode, j.get("status")), (0, "ok"), "slow reader: exit 0, status ok", err[-300:])

    # A client that stops reading for longer than the idle timeout (5 s) while its reply is still being
    # written (a pager the user has not scrolled yet), then reads on, still gets its whole reply.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(d.socket)
    s.sendall(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "execute",
                          "params": {"context": "flood", "code": "print('p' * 3_000_000)"}}).encode() + b"\n")
    s.settimeout(harness.scaled(30))
    head = s.recv(4096)
    time.sleep(7)  # not a wait for an event: the pause under test, longer than the idle timeout
    buf = bytearray(head)
    while not buf.endswith(b"\n") or b'"id":7' not in buf[buf.rfind(b"\n", 0, len(buf) - 1):]:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    s.close()
    last = buf.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        reply = json.loads(last)
    except ValueError:
        reply = {}
    tap.eq(reply.get("id"), 7, "a reader that pauses 7 s mid-reply still gets its final reply",
           f"{len(buf)} bytes, last line {last[:200]!r}")


def test_timeouts(tap, d):
    for bad in ("nan", "inf", "infinity", "-1", "0", "1e17", "86401", "0x10"):
        r = d.ctl("--timeout", bad, "check", "late")
        tap.eq(r.returncode, 2, f"kernelctl --timeout {bad}: usage error (exit 2)", r.stderr)
        tap.contains(r.stderr, "invalid timeout", f"kernelctl --timeout {bad}: says so")
    for method in ("check", "start", "stop", "wait"):
        for bad in (-1, 0, "10"):
            params = {"context": "off", "timeout": bad} if method != "wait" else {"contexts": ["off"], "timeout": bad}
            rep = d.rpc(method, params)
            tap.ok(harness.is_rpc_error(rep, -32602), f"raw {method} with timeout {bad!r}: invalid params",
                   repr(rep))
    for bad in (-1, 0, 1e17, 86401, "1"):
        rep = d.rpc("execute", {"context": "late", "code": "1", "timeout": bad})
        tap.ok(harness.is_rpc_error(rep, -32602), f"raw execute with timeout {bad!r}: invalid params", repr(rep))
    # NaN, Infinity and a number beyond a double (what Python's json.dumps writes for them) are not JSON: the
    # request is refused whole, as any line that is not JSON.
    for lit in ("NaN", "Infinity", "-Infinity", "1e400"):
        for method, params in (("check", '{"context": "late", "timeout": %s}'),
                               ("execute", '{"context": "late", "code": "1", "timeout": %s}')):
            raw = harness.RawControl(d.socket)
            try:
                rep = raw.request(('{"jsonrpc": "2.0", "id": 1, "method": "%s", "params": %s}\n'
                                   % (method, params % lit)).encode(), timeout=30)
            finally:
                raw.close()
            tap.ok(harness.is_rpc_error(rep, -32700), f"raw {method} with timeout {lit}: parse error", repr(rep))
    # 1e17 s is clamped to a day, not wrapped into "expired": a wait for a stopped
    # context is answered when it becomes ready.
    raw = harness.RawControl(d.socket)
    try:
        raw.s.sendall(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "wait",
                                  "params": {"contexts": ["off"], "timeout": 1e17}}).encode() + b"\n")
        r = d.ctl("start", "off", timeout=90)
        tap.eq(r.returncode, 0, "start the context the wait waits for", r.stderr)
        rep = raw.request(b"", timeout=60)
    finally:
        raw.close()
    tap.ok(rep is not None and "result" in rep, "raw wait with timeout 1e17: answered when ready, not expired",
           repr(rep)[:300])
    rep = d.rpc("check", {"context": "late", "timeout": 1e300})
    tap.ok(rep is not None and "result" in rep, "raw check with timeout 1e300: clamped, answered", repr(rep)[:300])


def test(tap):
    global SANITIZED
    SANITIZED = sanitized()
    d = harness.Daemon(tap, contexts=contexts())
    d.start()
    d.wait_all_ready(["flood", "other", "late"], timeout=90)
    with tap.guard("flood through exec"):
        test_flood_exec(tap, d)
    with tap.guard("flood through a jupyter_client"):
        test_flood_client(tap, d)
    with tap.guard("late interrupt"):
        test_late_interrupt(tap, d)
    with tap.guard("never reads"):
        test_never_reads(tap, d)
    with tap.guard("timeouts"):
        test_timeouts(tap, d)
    with tap.guard("flood through a jupyter_client, chunked"):
        test_flood_client_chunked(tap, d)
    d.stop()


harness.main(test)
