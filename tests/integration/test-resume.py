"""Liveness, freezes, and the verdicts of kernelctl check and wait.

A SIGSTOPped kernel becomes unresponsive and comes back ready after SIGCONT (same
kernel, same namespace); with unresponsive_restart it is replaced. A frozen sandbox
(daemon and kernel stopped together, or the daemon alone) counts as a resume, not
as missed heartbeats. kernelctl check says 0 for the same kernel, 8 for a replaced
one (naming it), 6 when not ready, 5 for no such context, 3 without a daemon;
kernelctl wait returns once the contexts are ready and 6 when they are not."""

import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402

HB = "heartbeat_interval = 200ms\nheartbeat_misses = 3\n"
# A SIGSTOP of the daemon is seen only as a late tick (the clocks all go on), and the
# daemon allows its 1 s tick 1.5 s of lateness plus a 2 s threshold: a freeze must
# last longer than 4.5 s to count. 6 s leaves a margin.
FREEZE_SECONDS = 6


def tmo(seconds):
    """A --timeout argument: seconds scaled by KS_TIMEOUT_SCALE."""
    return f"{harness.scaled(seconds):g}"


def check(d, ctx, expect=None, timeout=30, json_out=False):
    """Runs kernelctl check CTX [--expect ID] --timeout T [--json]; returns the
    CompletedProcess (with .json set to the parsed stdout, or None). A timeout the
    check should meet is scaled; a short one (under 5 s) that it should run out is not."""
    args = ["check", ctx, "--timeout", tmo(timeout) if timeout >= 5 else f"{timeout:g}"]
    if expect is not None:
        args += ["--expect", expect]
    if json_out:
        args.append("--json")
    r = d.ctl(*args, timeout=timeout + 30)
    r.json = None
    if json_out:
        try:
            r.json = json.loads(r.stdout)
        except ValueError:
            pass
    return r


def out(r):
    return f"exit {r.returncode}; stdout {r.stdout[-1000:]!r}; stderr {r.stderr[-1000:]!r}"


def same_kernel(tap, before, after, what):
    tap.eq((after.get("pid"), after.get("kernel_id"), after.get("incarnation"), after.get("restarts")),
           (before["pid"], before["kernel_id"], before["incarnation"], before["restarts"]),
           f"{what}: same pid, kernel_id, incarnation and restarts")


def wait_resumes(d, n):
    """The supervisor's status once it counts at least n resumes."""
    return harness.wait_until(lambda: d.status()["supervisor"], 20, f"supervisor.resumes >= {n}",
                              check=lambda s: isinstance(s.get("resumes"), int) and s["resumes"] >= n)


def resumes_metric(d):
    """kernelsup_daemon_resumes_total in kernelctl metrics (its one sample, a line "NAME VALUE"), or what the text
    holds instead."""
    r = d.ctl("metrics")
    m = re.search(r"^kernelsup_daemon_resumes_total (\S+)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        return f"exit {r.returncode}, no sample in {r.stdout[:300]!r}, stderr {r.stderr[-300:]!r}"
    return float(m.group(1))


def resume_sigcont(*pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------------------


def test_liveness(tap):
    d = harness.Daemon(tap, contexts=(
        "[context:live]\n" + HB +
        "\n[context:revive]\n" + HB + "unresponsive_restart = 1s\nstop_timeout = 2s\n"))
    d.start()
    live = d.wait_state("live", "ready")
    revive = d.wait_state("revive", "ready")
    cf = live["connection_file"]
    r = harness.run_cell(cf, "kept = 'still here'\nkept")
    tap.eq(r["result"], "'still here'", "live: a cell defines a variable")

    # SIGSTOP: no heartbeat answers -> unresponsive; SIGCONT -> ready, the same kernel.
    mark = d.log_mark()
    os.kill(live["pid"], signal.SIGSTOP)
    try:
        with tap.guard("live: SIGSTOP makes the kernel unresponsive"):
            c = d.wait_state("live", ("unresponsive", "backoff", "starting", "stopping"), timeout=20)
            tap.eq(c["state"], "unresponsive", "live: SIGSTOP of the kernel -> unresponsive")
            same_kernel(tap, live, c, "live: unresponsive")
            tap.contains(d.log_since(mark), f"live: kernel {live['kernel_id']} missed 3 heartbeats; unresponsive",
                         "live: the log says the kernel missed 3 heartbeats")
            r = check(d, "live", expect=live["kernel_id"], timeout=1)
            tap.eq(r.returncode, 6, "live: check --expect of a stopped kernel, --timeout 1, exits 6", out(r))
            # A cell to the stopped kernel cannot start: it says the kernel is unresponsive, no other client.
            r = d.ctl("exec", "--timeout", "1", "live", "pass")
            tap.ok(r.returncode == 11 and "the kernel is unresponsive (no heartbeat answer for " in r.stderr
                   and "another client" not in r.stderr,
                   "live: exec --timeout 1 to the stopped kernel: not started (11), because it is unresponsive", out(r))
            tap.ok(harness.alive(live["pid"]) and harness.proc_stat(live["pid"])[0] == "T",
                   "live: the unresponsive kernel is left alone (still there, stopped)",
                   harness.describe(live["pid"]))
        # A check issued while the kernel is stopped (the 6 above: it cannot say 0 then)
        # answers once the kernel runs again.
        waiter = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "check", "live", "--expect",
                                   live["kernel_id"], "--timeout", tmo(30)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        resume_sigcont(live["pid"])
    try:
        so, se = waiter.communicate(timeout=harness.scaled(60))
    except subprocess.TimeoutExpired:
        waiter.kill()
        so, se = waiter.communicate()
    tap.eq(waiter.returncode, 0, "live: that check exits 0 after SIGCONT (same kernel answering)",
           f"stdout {so!r} stderr {se!r}")
    c = d.wait_state("live", "ready", timeout=20)
    same_kernel(tap, live, c, "live: ready again after SIGCONT")
    tap.contains(d.log_since(mark), f"live: kernel {live['kernel_id']} answers its heartbeat again",
                 "live: the log says the kernel answers again")
    r = harness.run_cell(cf, "kept")
    tap.eq(r["result"], "'still here'", "live: the namespace survived SIGSTOP/SIGCONT")
    r = check(d, "live", expect=live["kernel_id"])
    tap.eq(r.returncode, 0, "live: check --expect exits 0 after SIGCONT", out(r))

    # unresponsive_restart = 1s: a stopped kernel is replaced, and the stopped process ends.
    mark = d.log_mark()
    os.kill(revive["pid"], signal.SIGSTOP)
    try:
        with tap.guard("revive: the unresponsive kernel is restarted"):
            # last_error says why while the restart is under way (stop_timeout = 2s keeps the
            # stopped kernel in stopping for 2 s: SIGTERM stays pending, SIGKILL ends it).
            errors = []

            def replaced(c):
                if c.get("last_error") not in errors:
                    errors.append(c.get("last_error"))
                return c.get("state") == "ready" and c.get("kernel_id") != revive["kernel_id"]

            c = d.wait_context("revive", replaced, "a new kernel ready", timeout=40)
            tap.ok(UUID_RE.match(c["kernel_id"] or "") is not None, "revive: a new kernel_id", repr(c["kernel_id"]))
            tap.eq(c["incarnation"], revive["incarnation"] + 1, "revive: incarnation + 1")
            tap.ok(c["pid"] != revive["pid"], "revive: a new pid", repr(c["pid"]))
            tap.ok(any(isinstance(e, str) and "unresponsive" in e for e in errors),
                   "revive: last_error mentions unresponsive during the restart", repr(errors))
            le = c.get("last_exit") if isinstance(c.get("last_exit"), dict) else {}
            tap.eq(le.get("signal"), "SIGKILL", "revive: last_exit says the stopped kernel was killed (SIGKILL)",
                   repr(c.get("last_exit")))
            log = d.log_since(mark)
            tap.contains(log, f"revive: kernel {revive['kernel_id']} missed 3 heartbeats; unresponsive",
                         "revive: it became unresponsive first (log)")
            tap.contains(log, "restarted (unresponsive_restart)",
                         "revive: the log says it was restarted for being unresponsive")
            d.check_group_gone(revive["pid"], "revive: the stopped kernel and its group are gone")
            r = check(d, "revive", expect=revive["kernel_id"])
            tap.eq(r.returncode, 8, "revive: check --expect OLD exits 8", out(r))
    finally:
        resume_sigcont(revive["pid"])

    # The other context was not disturbed by all this.
    same_kernel(tap, live, d.context("live"), "live: untouched by revive's restart")
    d.stop()


def test_freeze(tap):
    d = harness.Daemon(tap, contexts="[context:default]\n" + HB)
    d.start()
    before = d.wait_state("default", "ready")
    sup = d.status()["supervisor"]
    tap.eq((sup.get("resumes"), sup.get("last_resume_at")), (0, None), "freeze: no resume at first")
    cf = before["connection_file"]
    r = harness.run_cell(cf, "frozen = 7 * 6")
    tap.eq(r["status"], "ok", "freeze: a cell defines a variable")

    # The whole sandbox: the daemon and the kernel stop and continue together.
    mark = d.log_mark()
    os.kill(d.proc.pid, signal.SIGSTOP)
    os.kill(before["pid"], signal.SIGSTOP)
    try:
        time.sleep(FREEZE_SECONDS)  # the freeze itself, not a synchronisation
    finally:
        resume_sigcont(before["pid"], d.proc.pid)
    sup = wait_resumes(d, 1)
    tap.eq(sup.get("resumes"), 1, "freeze of daemon and kernel: supervisor.resumes is 1")
    tap.eq(resumes_metric(d), 1, "freeze: kernelctl metrics says kernelsup_daemon_resumes_total 1")
    tap.ok(isinstance(sup.get("last_resume_at"), str) and sup["last_resume_at"],
           "freeze: supervisor.last_resume_at is set", repr(sup.get("last_resume_at")))
    r = check(d, "default", expect=before["kernel_id"])
    tap.eq(r.returncode, 0, "freeze: check --expect exits 0 after the freeze", out(r))
    c = d.context("default")
    tap.eq(c["state"], "ready", "freeze: the context is ready")
    same_kernel(tap, before, c, "freeze: not restarted")
    log = d.log_since(mark)
    tap.contains(log, "resumed after a freeze", "freeze: the log says the daemon resumed after a freeze")
    tap.ok("unresponsive" not in log, "freeze: the context never became unresponsive (no such log line)", log)
    tap.ok("unresponsive" not in d.history.get("default", []), "freeze: no status showed unresponsive",
           repr(d.history.get("default")))
    r = harness.run_cell(cf, "frozen")
    tap.eq(r["result"], "42", "freeze: the namespace is intact")

    # The daemon alone is stopped: a resume too, and the kernel is not touched.
    mark = d.log_mark()
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(FREEZE_SECONDS)  # the freeze itself, not a synchronisation
    finally:
        resume_sigcont(d.proc.pid)
    sup = wait_resumes(d, 2)
    tap.eq(sup.get("resumes"), 2, "freeze of the daemon alone: supervisor.resumes goes to 2")
    tap.eq(resumes_metric(d), 2, "daemon freeze: kernelsup_daemon_resumes_total goes to 2")
    r = check(d, "default", expect=before["kernel_id"])
    tap.eq(r.returncode, 0, "daemon freeze: check --expect exits 0", out(r))
    c = d.context("default")
    tap.eq(c["state"], "ready", "daemon freeze: the context is ready")
    same_kernel(tap, before, c, "daemon freeze: kernel untouched")
    log = d.log_since(mark)
    tap.ok("unresponsive" not in log, "daemon freeze: no unresponsive line in the log", log)
    d.stop()


def test_check(tap):
    d = harness.Daemon(tap, contexts=(
        "[context:default]\n" + HB +
        "\n[context:bad]\nargv = /bin/false\nrestart = always\nbackoff_max = 200ms\n"
        "\n[context:idle]\nautostart = no\n"))

    # No daemon: kernelctl check retries until its timeout, then exits 3.
    r = check(d, "default", timeout=1)
    tap.eq(r.returncode, 3, "check without a daemon, --timeout 1, exits 3", out(r))
    tap.ok(r.stderr.strip() != "", "check without a daemon says why on stderr", out(r))
    r = d.ctl("wait", "--timeout", "1", timeout=30)
    tap.eq(r.returncode, 3, "wait without a daemon, --timeout 1, exits 3", out(r))

    d.start()
    # Without --expect: readiness only.
    r = check(d, "default")
    tap.eq(r.returncode, 0, "check default (no --expect) exits 0 once ready", out(r))
    r = check(d, "default", json_out=True)
    j = r.json if isinstance(r.json, dict) else {}
    tap.eq((r.returncode, j.get("verdict")), (0, "ready"), "check --json without --expect: verdict ready", out(r))
    tap.eq(j.get("expected"), None, "check --json without --expect: expected is null", out(r))
    first = d.context("default")
    old = first["kernel_id"]

    r = check(d, "default", expect=old)
    tap.eq(r.returncode, 0, "check --expect the current kernel_id exits 0", out(r))
    tap.contains(r.stdout, old, "check --expect: the line names the kernel_id")
    tap.eq(len(r.stdout.strip().splitlines()), 1, "check prints one line", out(r))
    tap.contains(r.stdout, "ready", "check: the line names the state")
    tap.contains(r.stdout, str(first["pid"]), "check: the line names the pid")
    r = check(d, "default", expect=old, json_out=True)
    j = r.json if isinstance(r.json, dict) else {}
    tap.eq((r.returncode, j.get("verdict"), j.get("expected")), (0, "same", old),
           "check --expect --json: exit 0, verdict same, expected", out(r))
    ctx = j.get("context") if isinstance(j.get("context"), dict) else {}
    tap.eq((ctx.get("name"), ctx.get("kernel_id"), ctx.get("pid"), ctx.get("state")),
           ("default", old, first["pid"], "ready"), "check --json: the context object", out(r))
    sup = j.get("supervisor") if isinstance(j.get("supervisor"), dict) else {}
    tap.eq((sup.get("pid"), sup.get("generation")), (d.proc.pid, 1), "check --json: the supervisor object", out(r))

    # Errors the user can hit.
    r = check(d, "nosuch", timeout=5)
    tap.eq(r.returncode, 5, "check of an unknown context exits 5", out(r))
    r = check(d, "bad", timeout=1)
    tap.eq(r.returncode, 6, "check of a failing context (/bin/false), --timeout 1, exits 6", out(r))
    r = check(d, "bad", timeout=1, json_out=True)
    j = r.json if isinstance(r.json, dict) else {}
    tap.eq((r.returncode, j.get("verdict")), (6, "not-ready"), "check --json of a failing context: not-ready",
           out(r))
    r = check(d, "idle", expect=old, timeout=1)
    tap.eq(r.returncode, 6, "check --expect of a stopped context, --timeout 1, exits 6", out(r))
    r = d.ctl("check", timeout=30)
    tap.eq(r.returncode, 2, "check without a context exits 2 (usage)", out(r))

    # The daemon's method directly: the error carries the context.
    rep = d.rpc("check", {"context": "bad", "timeout": 1})
    tap.ok(harness.is_rpc_error(rep, -32003), "rpc check of a failing context: -32003 timeout", repr(rep))
    data = rep.get("error", {}).get("data") if isinstance(rep, dict) else None
    tap.ok(isinstance(data, dict) and isinstance(data.get("context"), dict) and data["context"].get("name") == "bad",
           "rpc check timeout: error data has the context", repr(rep))
    rep = d.rpc("check", {"context": "default", "timeout": harness.scaled(30)}, timeout=60)
    res = rep.get("result") if isinstance(rep, dict) else None
    tap.ok(isinstance(res, dict) and isinstance(res.get("supervisor"), dict)
           and isinstance(res.get("context"), dict) and res["context"].get("kernel_id") == old,
           "rpc check: {supervisor, context} with the kernel_id", repr(rep))

    # kill -9 the kernel: a different kernel answers (8, naming it); then it is the one expected.
    os.kill(first["pid"], signal.SIGKILL)
    r = check(d, "default", expect=old)
    tap.eq(r.returncode, 8, "after kill -9 of the kernel: check --expect OLD exits 8", out(r))
    now = d.wait_state("default", "ready")
    new = now["kernel_id"]
    tap.ok(new != old and UUID_RE.match(new or "") is not None, "the replacement has a new kernel_id", repr(new))
    tap.contains(r.stdout, new, "check's line names the new kernel_id")
    r = check(d, "default", expect=old, json_out=True)
    j = r.json if isinstance(r.json, dict) else {}
    ctx = j.get("context") if isinstance(j.get("context"), dict) else {}
    tap.eq((r.returncode, j.get("verdict"), j.get("expected"), ctx.get("kernel_id")), (8, "replaced", old, new),
           "check --expect OLD --json: exit 8, verdict replaced, the new kernel_id", out(r))
    r = check(d, "default", expect=new)
    tap.eq(r.returncode, 0, "check --expect NEW exits 0", out(r))
    d.check_group_gone(first["pid"], "the killed kernel's group is gone")
    d.stop()


def test_wait(tap):
    d = harness.Daemon(tap, contexts=(
        "[context:default]\n" + HB + "\n[context:second]\n" + HB + "\n[context:idle]\nautostart = no\n"))
    d.start()
    # Right after READY the kernels are usually still starting; wait returns once they answer.
    r = d.ctl("wait", "--timeout", tmo(60), timeout=90)
    tap.eq(r.returncode, 0, "wait (no contexts named) right after READY exits 0", out(r))
    s = d.status()
    states = {c["name"]: c["state"] for c in s["contexts"]}
    tap.eq((states.get("default"), states.get("second"), states.get("idle")), ("ready", "ready", "stopped"),
           "after wait: every autostart context is ready (idle, autostart = no, is not waited for)")
    r = d.ctl("wait", "default", "second", "--timeout", tmo(30), "--json", timeout=60)
    tap.eq(r.returncode, 0, "wait default second exits 0", out(r))
    try:
        j = json.loads(r.stdout)
    except ValueError:
        j = None
    tap.ok(isinstance(j, dict) and sorted(c.get("name") for c in j.get("contexts", [])) == ["default", "second"],
           "wait --json prints the status of the named contexts", out(r))

    r = d.ctl("wait", "idle", "--timeout", "1", timeout=30)
    tap.eq(r.returncode, 6, "wait on a stopped context, --timeout 1, exits 6", out(r))
    r = d.ctl("wait", "default", "idle", "--timeout", "1", timeout=30)
    tap.eq(r.returncode, 6, "wait on a ready and a stopped context, --timeout 1, exits 6", out(r))
    r = d.ctl("wait", "nosuch", "--timeout", "1", timeout=30)
    tap.eq(r.returncode, 5, "wait on an unknown context exits 5", out(r))
    rep = d.rpc("wait", {"contexts": ["idle"], "timeout": 1})
    tap.ok(harness.is_rpc_error(rep, -32003), "rpc wait on a stopped context: -32003", repr(rep))
    rep = d.rpc("wait", {"contexts": ["default"], "timeout": 5})
    res = rep.get("result") if isinstance(rep, dict) else None
    tap.ok(isinstance(res, dict) and isinstance(res.get("contexts"), list) and res["contexts"]
           and res["contexts"][0].get("state") == "ready", "rpc wait on a ready context: the status result",
           repr(rep))

    # A wait in progress (the 6 above: it cannot say 0 while idle is stopped) returns
    # when the context comes up.
    waiter = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "wait", "idle", "--timeout", tmo(60)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        r = d.ctl("start", "idle", "--timeout", tmo(60), timeout=90)
        tap.eq(r.returncode, 0, "kernelctl start idle exits 0", out(r))
        so, se = waiter.communicate(timeout=harness.scaled(60))
        tap.eq(waiter.returncode, 0, "the pending wait idle exits 0 once idle is ready", f"{so!r} {se!r}")
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    tap.eq(d.context("idle")["state"], "ready", "idle is ready after the wait returned")
    d.stop()


def test(tap):
    with tap.guard("liveness"):
        test_liveness(tap)
    with tap.guard("freeze"):
        test_freeze(tap)
    with tap.guard("check"):
        test_check(tap)
    with tap.guard("wait"):
        test_wait(tap)


harness.main(test)
