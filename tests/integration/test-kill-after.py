#!/usr/bin/env python3
"""A cell that survives its interrupt (it swallows SIGINT): status says so while it runs on (interrupted_at, and
kill_at with exec --kill-after; the INFO column in words), and exec --kill-after kills the kernel when the interrupt
has not ended the cell in time: a new kernel starts, the cell ends died (exit 1) with a message that says the
namespace is gone, and the kill is counted (kernelsup_kernel_kills_total). Without the kill the cell ends as it
would (a timeout, exit 6), and status no longer shows the interrupt. Bad values of --kill-after and
params.kill_after are refused."""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# Swallows every SIGINT; ends when the file {flag} exists (never, for the kill).
SWALLOW = ("import os, signal, time\nkept = 1\nsignal.signal(signal.SIGINT, lambda *a: print('swallowed', flush=True))\n"
           "print('started', flush=True)\nt0 = time.monotonic()\n"
           "while not os.path.exists({flag!r}) and time.monotonic() - t0 < 300:\n    time.sleep(0.05)\n")


def popen_ctl(d, *args):
    return subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def started(p):
    """Waits until the cell printed "started": its SIGINT handler is in place (an interrupt before would end it)."""
    line = harness.LineReader(p, "kernelctl exec").next(60)
    if line != "started\n":
        raise harness.HarnessError(f"the cell printed {line!r} first")


def metric(d, name):
    for line in d.ctl("metrics").stdout.splitlines():
        if line.startswith(name + "{") and 'context="default"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_kill(tap, d):
    old = d.context("default")["kernel_id"]
    kills = metric(d, "kernelsup_kernel_kills_total")
    r = d.ctl("exec", "default", "before = 1")
    tap.eq(r.returncode, 0, "a variable before the kill", r.stderr)
    r = d.ctl("--timeout", "2", "exec", "--kill-after", "2", "default",
              SWALLOW.format(flag=os.path.join(d.tmp, "never")), timeout=120)
    tap.eq(r.returncode, 1, "exec --timeout 2 --kill-after 2 of a cell that swallows SIGINT: exit 1 (died)",
           r.stdout + r.stderr)
    tap.contains(r.stdout, "swallowed", "the cell got the interrupt and swallowed it")
    tap.contains(r.stderr, "did not stop within 2s of its interrupt, so the kernel was killed and a new one started",
                 "stderr says the kernel was killed for it")
    tap.contains(r.stderr, "its namespace is gone", "and that the namespace is gone")
    c = d.wait_state("default", "ready", timeout=60)
    tap.ok(c["kernel_id"] != old, "a new kernel runs", repr(c["kernel_id"]))
    tap.contains(r.stderr, f"the context now runs kernel {c['kernel_id']}", "stderr names the new kernel")
    tap.ok("interrupted_at" not in c and "kill_at" not in c, "status shows no interrupt any more", repr(c))
    r = d.ctl("exec", "default", "'before' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "the old namespace is gone")
    tap.eq(metric(d, "kernelsup_kernel_kills_total"), (kills or 0) + 1, "kernelsup_kernel_kills_total + 1")
    tap.ok("killed and a new one started (kill_after)" in d.log(), "the daemon's log says why it killed the kernel")


def test_status_while_stuck(tap, d):
    """kernelctl interrupt of a cell with --kill-after 60: status shows the interrupt until the cell ends."""
    flag = os.path.join(d.tmp, "release")
    p = popen_ctl(d, "exec", "--kill-after", "60", "default", SWALLOW.format(flag=flag))
    started(p)
    c = d.context("default")
    tap.ok("interrupted_at" not in c, "before an interrupt: no interrupted_at", repr(c))
    r = d.ctl("interrupt", "default")
    tap.eq(r.stdout.strip(), "interrupted", "kernelctl interrupt", r.stderr)
    c = d.wait_context("default", lambda c: "interrupted_at" in c, "status to show the interrupt")
    tap.ok(c.get("kill_at", "") > c["interrupted_at"], "status: interrupted_at, then kill_at after it", repr(c))
    r = d.ctl("status", "default")
    tap.contains(r.stdout, "still running", "the status table: still running after its interrupt")
    tap.contains(r.stdout, "the kernel is killed in", "the status table: when the kernel is killed")
    pid = c["pid"]
    open(flag, "w").close()
    out, err = p.communicate(timeout=harness.scaled(60))
    tap.eq(p.returncode, 0, "the cell, released, ends ok (it swallowed the interrupt)", out + err)
    c = d.wait_state("default", "ready")
    tap.ok("interrupted_at" not in c and "kill_at" not in c and c["pid"] == pid,
           "then status shows no interrupt, and the kernel is the same", repr(c))
    r = d.ctl("exec", "default", "kept")
    tap.eq(r.stdout.split("\n")[0], "1", "the namespace stays")


def test_timeout_without_kill(tap, d):
    """--timeout without --kill-after: a cell that swallows its interrupt is answered at the grace's end."""
    flag = os.path.join(d.tmp, "release2")
    r = d.ctl("--timeout", "1", "exec", "default", SWALLOW.format(flag=flag), timeout=60)
    tap.eq(r.returncode, 6, "exec --timeout 1 of a cell that swallows SIGINT: exit 6", r.stdout + r.stderr)
    tap.contains(r.stderr, "the kernel may still be running it", "stderr says the kernel may still run it")
    tap.contains(r.stderr, "exec --kill-after kills the kernel then", "and names the way out")
    c = d.context("default")
    tap.ok("interrupted_at" in c and "kill_at" not in c, "status: interrupted_at, no kill_at", repr(c))
    open(flag, "w").close()
    c = d.wait_state("default", "ready")
    tap.ok("interrupted_at" not in c, "once it ends, no interrupted_at", repr(c))


def test_kill_while_stopping(tap, d):
    """A kill_after that comes while a stop is under way (the kernel takes shutdown_grace to go) starts no new
    kernel: the context ends stopped."""
    p = popen_ctl(d, "exec", "--kill-after", "2", "slow-stop", SWALLOW.format(flag=os.path.join(d.tmp, "never2")))
    started(p)
    d.ctl("interrupt", "slow-stop")
    t0 = time.monotonic()
    r = d.ctl("--timeout", "60", "stop", "slow-stop", timeout=90)
    took = time.monotonic() - t0
    tap.eq(r.returncode, 0, "stop of a context whose cell swallowed its interrupt", r.stdout + r.stderr)
    # The kernel's loop is held by the cell, so it leaves at shutdown_grace's SIGTERM: past the kill_after.
    tap.ok(took > 3, "the stop outlasted the kill_after (the case this is about)", f"{took:.1f}s")
    p.communicate(timeout=harness.scaled(60))
    harness.poll_until(lambda: d.context("slow-stop"), 5, "a new kernel that must not come",
                       check=lambda c: c.get("state") != "stopped")
    c = d.context("slow-stop")
    tap.ok(c.get("state") == "stopped" and not c.get("pid"), "it stays stopped: the kill_after started no kernel",
           repr(c))
    tap.ok(not re.search(r"slow-stop: kernel \S+: the cell did not stop", d.log()),
           "the daemon did not kill it for the kill_after")


def test_kill_without_replay(tap, d):
    """restore = replay does not rebuild what the kill is said to have lost."""
    r = d.ctl("exec", "replayed", "before = 1")
    tap.eq(r.returncode, 0, "replayed: a variable before the kill", r.stderr)
    r = d.ctl("--timeout", "1", "exec", "--kill-after", "2", "replayed",
              SWALLOW.format(flag=os.path.join(d.tmp, "never3")), timeout=120)
    tap.eq(r.returncode, 1, "replayed: the kill_after ends the cell died", r.stdout + r.stderr)
    d.wait_state("replayed", "ready", timeout=60)
    r = d.ctl("exec", "replayed", "'before' in dir()")
    tap.eq(r.stdout.split("\n")[0], "False", "replayed: the new kernel starts empty (no replay), as the cell was told")


def test_usage(tap, d):
    for bad in ("0", "-1", "x", "86401"):
        r = d.ctl("exec", "--kill-after", bad, "default", "1")
        tap.eq(r.returncode, 2, f"exec --kill-after {bad}: usage error, exit 2", r.stderr)
    r = d.ctl("status", "--kill-after", "5")
    tap.eq(r.returncode, 2, "--kill-after on status: usage error", r.stderr)
    tap.contains(r.stderr, "--kill-after is an option of exec", "it says --kill-after is exec's")
    for bad in ("5", 0, -1, None, [1]):
        rep = d.rpc("execute", {"context": "default", "code": "1", "kill_after": bad})
        tap.eq((rep.get("error") or {}).get("code"), -32602, f"params.kill_after {bad!r}: invalid params", repr(rep))


def test(tap):
    d = harness.Daemon(tap, contexts="[context:default]\n[context:slow-stop]\nshutdown_grace = 8s\n"
                                     "[context:replayed]\nrestore = replay\n")
    d.start()
    d.wait_all_ready(["default", "slow-stop", "replayed"])
    with tap.guard("usage"):
        test_usage(tap, d)
    with tap.guard("status while stuck"):
        test_status_while_stuck(tap, d)
    with tap.guard("timeout without kill"):
        test_timeout_without_kill(tap, d)
    with tap.guard("kill"):
        test_kill(tap, d)
    with tap.guard("kill while stopping"):
        test_kill_while_stopping(tap, d)
    with tap.guard("kill without replay"):
        test_kill_without_replay(tap, d)
    d.stop()


harness.main(test)
