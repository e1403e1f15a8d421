"""Other clients of a context's kernel, against a real daemon and a real ipykernel: a stock
jupyter_client (BlockingKernelClient on the published connection file, in its own process)
runs a long cell (it waits until the test releases it, at most 120 s) while kernelctl looks on. status shows busy and whose cell it is, and the
kernel's own execution count; kernelctl interrupt interrupts the other client's cell; an
exec --timeout queued behind it is answered not started (exit 11) and never runs, and
the other cell finishes untouched; so does an exec whose kernelctl is killed while it
waits; the same when our cell had already reached the kernel behind the other one (the
race the daemon cannot avoid: it is withdrawn with an abort_request, never interrupted);
our own cell past its timeout is still interrupted and the namespace stays. After each
step the context goes back to ready, and a new client's cell runs at once."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# The other client: runs each cell given, prints a JSON line when the cell says
# "started" and one when it is over (its reply's status, an error's name, its stdout).
CLIENT = r'''
import json, sys
from jupyter_client import BlockingKernelClient

def say(**kw):
    print(json.dumps(kw), flush=True)

kc = BlockingKernelClient()
kc.load_connection_file(sys.argv[1])
kc.start_channels()
kc.wait_for_ready(timeout=float(sys.argv[2]))
for code in sys.argv[3:]:
    msg_id = kc.execute(code, allow_stdin=False)
    res = {"event": "done", "status": None, "ename": None, "stdout": "", "count": None}
    while True:
        m = kc.get_iopub_msg(timeout=float(sys.argv[2]))
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        if t == "execute_input":
            res["count"] = c["execution_count"]
        elif t == "stream":
            res["stdout"] += c["text"]
            if "started" in c["text"]:
                say(event="started", count=res["count"])
        elif t == "error":
            res["ename"] = c["ename"]
        elif t == "status" and c["execution_state"] == "idle":
            break
    while True:
        m = kc.get_shell_msg(timeout=float(sys.argv[2]))
        if m["parent_header"].get("msg_id") == msg_id:
            res["status"] = m["content"]["status"]
            break
    say(**res)
kc.stop_channels()
'''

# The other client's long cell: it runs until the test creates the file {flag}.
LONG = ("print('started', flush=True)\nimport os, time\nt0 = time.monotonic()\n"
        "while not os.path.exists({flag!r}) and time.monotonic() - t0 < 120:\n    time.sleep(0.02)\n"
        "outer_done = True")
# Makes the kernel publish no busy status (its idle still goes out): the next cell of the
# other client then runs while the daemon sees the kernel idle, so our cell reaches the
# kernel behind it, as when the other client's request wins the race to the shell.
HIDE_BUSY = ("k = get_ipython().kernel\n"
             "k._ks_orig = getattr(k, '_ks_orig', k._publish_status)\n"
             "k._publish_status = lambda s, c, parent=None: None if s == 'busy' else k._ks_orig(s, c, parent)")
LONG_SHOW_BUSY = LONG + "\nk._publish_status = k._ks_orig"


class Other:
    """The other client, in its own process; its cells may hold {flag}, a file that
    release() creates."""
    n = 0
    alive = []

    def __init__(self, d, *cells):
        conn = d.context("default")["connection_file"]
        Other.n += 1
        self.flag = os.path.join(d.tmp, f"release-{Other.n}")
        cells = [c.format(flag=self.flag) if "{flag" in c else c for c in cells]
        self.p = subprocess.Popen([sys.executable, "-c", CLIENT, conn, str(harness.scaled(180)), *cells],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.lines = harness.LineReader(self.p, "the other client")
        Other.alive.append(self)

    def line(self, timeout=60):
        """Its next JSON line."""
        return json.loads(self.lines.next(timeout))

    def release(self):
        with open(self.flag, "w"):
            pass

    @classmethod
    def reap(cls):
        """Ends every other client still there (a point that failed left it waiting):
        its cell is released, then its process killed, so the next test starts clean."""
        for o in cls.alive:
            o.release()
        for o in cls.alive:
            try:
                o.p.wait(timeout=harness.scaled(10))
            except subprocess.TimeoutExpired:
                o.p.kill()
                o.p.wait()
        cls.alive.clear()

    def started(self):
        """Waits until its cell runs (it printed "started"); returns that line."""
        while True:
            ev = self.line()
            if ev.get("event") == "started":
                return ev

    def done(self):
        """Waits for its (last) cell's end; returns that line."""
        while True:
            ev = self.line()
            if ev.get("event") == "done" and "started" in ev.get("stdout", ""):
                self.p.wait(timeout=harness.scaled(30))
                return ev


def back_to_idle(tap, d, what):
    """status goes back to ready (never stays busy for an idle kernel), and the kernel
    is really idle: a new client's cell runs at once."""
    c = d.wait_state("default", "ready", timeout=30)
    tap.eq((c.get("running"), c.get("queued")), (None, 0), f"{what}: ready again, nothing running or queued")
    res = harness.run_cell(c["connection_file"], "'idle'", timeout=30)
    tap.eq(res["result"], "'idle'", f"{what}: a new client's cell runs, the kernel is idle")


def test_status_and_interrupt(tap, d):
    other = Other(d, LONG)
    ev = other.started()
    # The daemon reads the same iopub messages as the other client, a moment later maybe.
    c = d.wait_context("default", lambda c: c.get("state") == "busy" and c.get("execution_count") == ev["count"],
                       "busy with the other client's cell")
    tap.eq(c.get("running"), "other", "another client's cell: status busy, running other")
    tap.ok(isinstance(ev["count"], int) and ev["count"] > 0,
           "status shows the kernel's own execution count, from the other client's cell", repr(ev))
    r = d.ctl("status", "default")
    tap.contains(r.stdout, "another client's cell", "the status table says whose cell runs")
    tap.eq(r.returncode, 0, "status exits 0 while busy")

    r = d.ctl("interrupt", "default")
    tap.eq((r.returncode, r.stdout.strip()), (0, "interrupted"), "kernelctl interrupt: interrupted", r.stderr)
    res = other.done()
    tap.eq((res["status"], res["ename"]), ("error", "KeyboardInterrupt"),
           "the other client's cell got the KeyboardInterrupt")
    back_to_idle(tap, d, "after the interrupt")
    r = d.ctl("interrupt", "default")
    tap.eq(r.stdout.strip(), "nothing running", "interrupt on an idle kernel: nothing running")


def test_timeout_queued(tap, d):
    other = Other(d, LONG)
    other.started()
    r = d.ctl("--timeout", "2", "exec", "default", "print('B'); w = 1", timeout=60)
    tap.eq(r.returncode, 11, "exec --timeout 2 behind another client's cell: exit 11", r.stdout + r.stderr)
    tap.eq(r.stdout.rstrip("\n").split("\n")[-1], "[not started: timeout]", "the last line says not started")
    tap.ok("B" not in r.stdout, "its code did not print", repr(r.stdout))
    tap.contains(r.stderr, "another client's request", "stderr says why it did not start")
    c = d.context("default")
    tap.eq((c["state"], c.get("running")), ("busy", "other"), "the other cell still runs")
    other.release()
    res = other.done()
    tap.eq((res["status"], res["ename"]), ("ok", None), "the other cell finished normally (no KeyboardInterrupt)")
    back_to_idle(tap, d, "after the timeout")
    r = d.ctl("exec", "default", "'w' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "our cell never ran later")

    other = Other(d, LONG)
    other.started()
    rc, j = d.ctl_json("--timeout", "1", "exec", "default", "w = 2", timeout=60)
    tap.eq((rc, (j or {}).get("status")), (11, "not_started"), "--json: status not_started, exit 11")
    other.release()
    tap.eq(other.done()["status"], "ok", "--json: the other cell finished normally")
    back_to_idle(tap, d, "after the --json timeout")


def test_killed_waiting(tap, d):
    other = Other(d, LONG)
    other.started()
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "default", "print('C'); v = 1"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    d.wait_context("default", lambda c: c.get("queued") == 1, "our cell to wait in the queue")
    p.kill()
    p.communicate()
    d.wait_context("default", lambda c: c.get("queued") == 0, "the killed client's cell to leave the queue")
    other.release()
    res = other.done()
    tap.eq((res["status"], res["ename"]), ("ok", None), "killed waiting kernelctl: the other cell finished normally")
    back_to_idle(tap, d, "after the killed kernelctl")
    r = d.ctl("exec", "default", "'v' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "killed waiting kernelctl: its cell never ran")


def test_race(tap, d):
    """Our cell reaches the kernel behind the other client's (the daemon saw no busy)."""
    other = Other(d, HIDE_BUSY, LONG_SHOW_BUSY)
    other.started()
    c = d.wait_state("default", "ready")
    tap.eq(c.get("running"), None, "race: the daemon sees the kernel idle (its busy is hidden)")
    r = d.ctl("--timeout", "2", "exec", "default", "print('R'); race = 1", timeout=60)
    tap.eq(r.returncode, 11, "race: our cell, sent behind the other, is not started at its timeout",
           r.stdout + r.stderr)
    tap.eq(r.stdout.rstrip("\n").split("\n")[-1], "[not started: timeout]", "race: the last line says not started")
    tap.contains(r.stderr, "withdrawn and will not run", "race: stderr says it was withdrawn")
    other.release()
    res = other.done()
    tap.eq((res["status"], res["ename"]), ("ok", None), "race: the other cell finished normally (no interrupt)")
    back_to_idle(tap, d, "after the race")
    r = d.ctl("exec", "default", "'race' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "race: our withdrawn cell never ran in the kernel")

    # The same with a kernelctl killed while its cell sits in the kernel behind the other.
    other = Other(d, HIDE_BUSY, LONG_SHOW_BUSY)
    other.started()
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "default", "race2 = 1"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    d.wait_context("default", lambda c: c.get("state") == "busy" and c.get("running") == "ours",
                   "our cell to be on the kernel")
    p.kill()
    p.communicate()
    other.release()
    res = other.done()
    tap.eq((res["status"], res["ename"]), ("ok", None), "race, killed kernelctl: the other cell finished normally")
    back_to_idle(tap, d, "after the race with a killed kernelctl")
    r = d.ctl("exec", "default", "'race2' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "race, killed kernelctl: its cell never ran")


def test_own_timeout(tap, d):
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "default", "--timeout", "3",
                          "keep = 5\nprint('started', flush=True)\nimport time\ntime.sleep(30)"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    c = d.wait_context("default", lambda c: c.get("state") == "busy", "our cell to run")
    tap.eq(c.get("running"), "ours", "our own cell: running ours")
    tap.contains(d.ctl("status", "default").stdout, "a cell from exec", "the status table says it is ours")
    out, err = p.communicate(timeout=harness.scaled(60))
    tap.eq(p.returncode, 6, "our own cell past its timeout: exit 6", err)
    tap.ok(out.rstrip("\n").split("\n")[-1].startswith("[timeout #"), "our own cell: [timeout #N]", repr(out))
    tap.contains(err, "KeyboardInterrupt", "our own cell was interrupted")
    back_to_idle(tap, d, "after our own timeout")
    r = d.ctl("exec", "default", "keep")
    tap.eq(r.stdout.split("\n")[0], "5", "the namespace stays")


def test(tap):
    d = harness.Daemon(tap, contexts="[context:default]\n")
    d.start()
    d.wait_all_ready(["default"])
    for what, fn in (("status and interrupt", test_status_and_interrupt),
                     ("timeout while queued", test_timeout_queued),
                     ("killed while waiting", test_killed_waiting),
                     ("race", test_race), ("own timeout", test_own_timeout)):
        with tap.guard(what):
            fn(tap, d)
        Other.reap()
    d.stop()


harness.main(test)
