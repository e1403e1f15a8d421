"""Kernels that cannot start: /bin/false, a missing binary, a missing Python, a start
that hangs past start_timeout, the start limit, the failed cool-down, and a good
kernel next to them that is not disturbed."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FAST = "restart = always\nstart_limit_burst = 3\nbackoff_max = 200ms\n"
BACKOFF = max(1, round(harness.SCALE))  # seconds in backoff for "slowback", long enough to be seen


def contexts():
    return (
        "[context:good]\n"
        "\n[context:false]\nargv = /bin/false\n" + FAST +
        "\n[context:missing]\nargv = /nonexistent/python3 -m ipykernel_launcher -f {kernel_file}\n" + FAST +
        "\n[context:pymissing]\nargv = /usr/bin/python3-missing -m ipykernel_launcher -f {kernel_file}\n" + FAST +
        "\n[context:hang]\nargv = /bin/sleep 1000\nstart_timeout = 1s\nrestart = always\nstart_limit_burst = 2\n"
        "backoff_max = 200ms\n"
        "\n[context:cooldown]\nargv = /bin/false\nfailed_cooldown = 2s\n" + FAST +
        f"\n[context:slowback]\nargv = /bin/false\nrestart = always\nstart_limit_burst = 2\n"
        f"backoff_min = {BACKOFF}s\nbackoff_max = {BACKOFF}s\n"
        # Each start takes start_timeout, longer than start_limit_interval: 3 can never fall within the window,
        # and the 3 in a row must still make it failed.
        "\n[context:slowhang]\nargv = /bin/sleep 1000\nstart_timeout = 2s\nstart_limit_burst = 3\n"
        "start_limit_interval = 1s\nbackoff_max = 200ms\n"
        "\n[context:ipcfalse]\nargv = /bin/false\ntransport = ipc\n" + FAST
    )


def sleeps_of(d):
    """Live `/bin/sleep 1000` processes that the test's daemon started."""
    out = []
    for p in d.ours(exclude=(d.proc.pid,) if d.running() else ()):
        if harness.proc_cmdline(p) == ["/bin/sleep", "1000"] and harness.alive(p):
            out.append(p)
    return out


def test(tap):
    d = harness.Daemon(tap, contexts=contexts())
    d.start(poll_status=True)

    # READY=1 came once every autostart context was ready or failed; the failures stay
    # failed (the default cool-down is minutes).
    j = d.status()
    by = {c["name"]: c for c in j["contexts"]}
    tap.eq(by["good"]["state"], "ready", "the good kernel is ready next to the failing ones")
    for name in ("false", "missing", "pymissing", "hang", "slowback", "slowhang", "ipcfalse"):
        tap.eq(by[name]["state"], "failed", f"{name}: failed when READY=1 came")
        tap.eq(by[name]["pid"], None, f"{name}: no pid when failed")
    tap.ok(any("failed" in s for s in d.statuses()), "a STATUS= text counts failed kernels", repr(d.statuses()))

    f = by["false"]
    tap.eq(f["incarnation"], 3, "false: start_limit_burst = 3 launches, then failed")
    tap.eq(f["restarts"], 2, "false: restarts is 2")
    tap.contains(f["last_error"] or "", "exited with code 1 before it was ready", "false: last_error says why")
    tap.eq((f.get("last_exit") or {}).get("code"), 1, "false: last_exit.code is 1")
    tap.eq((f.get("last_exit") or {}).get("signal"), None, "false: last_exit.signal is null")
    for name in ("missing", "pymissing"):
        tap.contains(by[name]["last_error"] or "", "No such file or directory", f"{name}: last_error names ENOENT")
    h = by["hang"]
    le = h["last_error"] or ""
    tap.contains(le, "did not answer kernel_info within start_timeout (1s)", "hang: last_error names start_timeout")
    tap.eq((h.get("last_exit") or {}).get("signal"), "SIGKILL", "hang: killed with SIGKILL at the deadline")
    tap.eq(h["incarnation"], 2, "hang: two launches (start_limit_burst = 2)")
    tap.ok("backoff" in d.history.get("slowback", []), "slowback: went through backoff",
           repr(d.history.get("slowback")))
    tap.diag(f"observed states: {d.history!r}")

    # Failed starts in a row count, whatever their times: 3 launches of 2 s each, a 1 s window.
    s = by["slowhang"]
    tap.eq(s["incarnation"], 3, "slowhang: failed after start_limit_burst = 3 launches, though 3 x 2 s > 1 s window")
    tap.contains(s["last_error"] or "", "did not answer kernel_info within start_timeout (2s)",
                 "slowhang: last_error names start_timeout")
    # On ipc a kernel other than ipykernel that fails before ready names the fix; on tcp (auto's choice for a
    # kernel not known) it does not.
    tap.contains(by["ipcfalse"]["last_error"] or "", "set transport = tcp", "ipcfalse: last_error names the fix")
    tap.ok("transport" not in (f["last_error"] or ""), "false (tcp): last_error names no transport", f["last_error"])
    tap.eq((f["transport"], f.get("transport_why")),
           ("tcp", "auto: a kernel not known to bind Unix sockets; tcp is what every Jupyter kernel supports"),
           "false: auto gives an unknown kernel tcp, and status says why")
    tap.eq((by["ipcfalse"]["transport"], by["ipcfalse"].get("transport_why")), ("ipc", "set in the configuration"),
           "ipcfalse: an explicit transport wins, and status says so")
    tap.eq((by["good"]["transport"], by["good"].get("transport_why")), ("ipc", "auto: ipykernel binds Unix sockets"),
           "good: auto gives ipykernel ipc")
    r = d.ctl("status")
    tap.ok(re.search(r"^  false: tcp, auto: a kernel not known to bind Unix sockets", r.stdout, re.M),
           "status (text) says why false is on tcp", r.stdout)
    r = subprocess.run([harness.KERNELSUPD, "--check-config", "--config", d.config], capture_output=True, text=True)
    tap.ok(re.search(r"^  false: transport tcp \(auto: a kernel not known", r.stdout, re.M) and
           re.search(r"^  good: transport ipc \(auto: ipykernel binds Unix sockets\)$", r.stdout, re.M),
           "--check-config shows each context's transport and why", f"{r.stdout!r} {r.stderr!r}")

    # A cell waiting for a context that never becomes ready is answered once it is failed.
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "start", "slowhang"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    d.wait_state("slowhang", "starting", timeout=30)
    e = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "slowhang", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = e.communicate(timeout=harness.scaled(60))
    except subprocess.TimeoutExpired:
        e.kill()
        out, err = e.communicate()
        out += "(still waiting after 60 s)"
    p.communicate(timeout=harness.scaled(60))
    tap.eq(e.returncode, 1, "exec without --timeout on a context that ends failed is answered (exit 1)",
           f"{out!r} {err!r}")
    tap.contains(err, "did not answer kernel_info within start_timeout", "the exec's answer says why")
    tap.eq(d.context("slowhang")["state"], "failed", "slowhang: failed again after kernelctl start")

    # The hanging kernel's process group was killed at the deadline.
    hang_pids = d.pids_of.get("hang", [])
    tap.diag(f"hang: pids seen while starting: {hang_pids}")
    for p in hang_pids:
        d.check_group_gone(p, f"hang: process group {p} killed at the start deadline")
    tap.ok(not sleeps_of(d), "hang: no sleep left after the start deadline",
           "; ".join(harness.describe(p) for p in sleeps_of(d)))

    # Exit codes of kernelctl status.
    tap.eq(d.ctl("status").returncode, 1, "kernelctl status exits 1 when a context is not ready")
    tap.eq(d.ctl("status", "false").returncode, 1, "kernelctl status false exits 1")
    tap.eq(d.ctl("status", "good").returncode, 0, "kernelctl status good exits 0")
    r = d.ctl("status")
    rows = {l.split()[0]: l.split() for l in r.stdout.splitlines()[1:] if l.split()}
    tap.ok(rows.get("false", [None, None])[1] == "failed", "the table shows false as failed", r.stdout)

    # kernelctl start of a failing kernel answers (exit 1) instead of hanging.
    inc = d.context("false")["incarnation"]
    r = d.ctl("start", "false", timeout=60)
    tap.eq(r.returncode, 1, "kernelctl start false exits 1")
    tap.ok(r.stderr.strip() != "", "kernelctl start false says why on stderr", repr(r.stderr))
    c = d.context("false")
    tap.ok(c["incarnation"] > inc, "kernelctl start false launched it again", f"{inc} -> {c['incarnation']}")

    # failed_cooldown = 2s: failed is retried, never stranded.
    c = d.wait_state("cooldown", "failed", timeout=30)
    inc = c["incarnation"]
    c = harness.poll_until(lambda: d.context("cooldown"), 30, "cooldown retried after failed_cooldown",
                           check=lambda c: c["incarnation"] > inc)
    tap.ok(c["incarnation"] > inc, "cooldown: retried after the cool-down (incarnation goes up)",
           f"incarnation {inc} -> {c['incarnation']}")
    c = d.wait_state("cooldown", "failed", timeout=30)
    tap.contains(c["last_error"] or "", "exited with code 1", "cooldown: failed again, last_error says why")

    # The good kernel was not disturbed.
    g = d.context("good")
    tap.eq((g["state"], g["incarnation"], g["restarts"]), ("ready", 1, 0), "good: still its first kernel")
    r = harness.run_cell(g["connection_file"], "6 * 7")
    tap.eq(r["result"], "42", "good: runs cells")

    d.stop()
    tap.ok(not sleeps_of(d), "no sleep left after kernelsupd stopped")


harness.main(test)
