"""Kernels outlive the daemon. After kill -9 of kernelsupd its kernels keep running,
and a new kernelsupd on the same config and state adopts them: the same pid,
kernel_id and incarnation, generation + 1, ready, the namespace intact, and
`kernelctl check --expect` says 0. An adopted kernel that dies is noticed (pidfd)
and replaced; a clean stop ends adopted kernels too. A pid in the state file that
now belongs to another process is neither adopted nor killed: a new kernel is
launched instead. A live kernel whose state file names another boot is not adopted
either (a record from before a cold boot never matches a process of this one)."""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402

CONTEXTS = "[context:default]\nheartbeat_interval = 200ms\n\n[context:idle]\nautostart = no\n"


def tmo(seconds):
    return f"{harness.scaled(seconds):g}"


def out(r):
    return f"exit {r.returncode}; stdout {r.stdout[-1000:]!r}; stderr {r.stderr[-1000:]!r}"


def check(d, ctx, expect, timeout=30):
    return d.ctl("check", ctx, "--expect", expect, "--timeout", tmo(timeout), timeout=timeout + 30)


def starttime(pid):
    st = harness.proc_stat(pid)
    return st[4] if st else None


def crash_and_adopt(tap, d, before, gen_before, what):
    """kill -9 of the daemon, then a new one: checks that it adopts the kernel of
    before (a context dict). Returns (the context after, the new generation)."""
    pid, kid = before["pid"], before["kernel_id"]
    st0 = starttime(pid)
    old_daemon = d.kill9()
    tap.ok(harness.alive(pid) and starttime(pid) == st0,
           f"{what}: the kernel (pid {pid}) keeps running after kill -9 of kernelsupd", harness.describe(pid))
    tap.ok(not harness.alive(old_daemon), f"{what}: the old kernelsupd is gone", harness.describe(old_daemon))

    # A check issued while no daemon runs (its socket is stale) waits for the next one.
    waiter = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "check", "default", "--expect", kid,
                               "--timeout", tmo(60)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        mark = d.log_mark()
        d.start()
        after = d.wait_state("default", "ready")
        so, se = waiter.communicate(timeout=harness.scaled(90))
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    tap.eq(waiter.returncode, 0,
           f"{what}: a check --expect issued before the new daemon started exits 0 once it adopted the kernel",
           f"stdout {so!r} stderr {se!r}")

    tap.eq((after.get("pid"), after.get("kernel_id"), after.get("incarnation"), after.get("restarts")),
           (pid, kid, before["incarnation"], before["restarts"]),
           f"{what}: adopted: same pid, kernel_id, incarnation and restarts")
    tap.eq(starttime(pid), st0, f"{what}: it is the same process (same /proc start time)")
    sup = d.status()["supervisor"]
    tap.eq(sup.get("generation"), gen_before + 1, f"{what}: generation + 1")
    tap.eq(sup.get("pid"), d.proc.pid, f"{what}: the status comes from the new daemon")
    log = d.log_since(mark)
    tap.contains(log, f"default: adopting kernel {kid} (pid {pid}, incarnation {before['incarnation']}) left by an "
                      "earlier kernelsupd", f"{what}: the log says it is adopting the kernel")
    tap.contains(log, f"default: adopted kernel {kid}", f"{what}: the log says it adopted the kernel")
    tap.ok("launched kernel" not in log, f"{what}: no kernel was launched", log)
    tap.eq(d.context("idle")["state"], "stopped", f"{what}: the autostart = no context stays stopped")
    st = d.read_state("default")
    tap.eq((st.get("pid"), st.get("kernel_id")), (pid, kid), f"{what}: the state file keeps the pid and kernel_id")

    r = check(d, "default", kid)
    tap.eq(r.returncode, 0, f"{what}: check --expect OLD_ID exits 0", out(r))
    return after, sup.get("generation")


def test_adopt(tap):
    d = harness.Daemon(tap, contexts=CONTEXTS)
    d.start()
    first = d.wait_state("default", "ready")
    gen = d.status()["supervisor"]["generation"]
    cf = first["connection_file"]
    info = d.connection_info(cf)
    r = harness.run_cell(cf, "survivor = 40 + 2\nsurvivor")
    tap.eq(r["result"], "42", "a cell defines a variable before the crash")

    # A client that keeps its connection across the daemon's crash: the kernel never notices.
    client = harness.KernelClient(cf)
    try:
        r = client.run("kept_by_client = 'yes'")
        tap.eq(r["status"], "ok", "a kept client defines a variable")

        after, gen = crash_and_adopt(tap, d, first, gen, "first crash")
        tap.eq(d.connection_info(cf), info, "first crash: the connection file is unchanged")

        r = client.run("survivor, kept_by_client")
        tap.eq(r["result"], "(42, 'yes')", "the kept client still sees both variables")
    finally:
        client.close()
    r = harness.run_cell(cf, "survivor * 2")
    tap.eq(r["result"], "84", "a new client (jupyter_client) still sees the variable after adoption")

    # The adopted kernel is watched: kill -9 it and the daemon replaces it.
    os.kill(after["pid"], signal.SIGKILL)
    r = check(d, "default", after["kernel_id"])
    tap.eq(r.returncode, 8, "kill -9 of the adopted kernel: check --expect exits 8", out(r))
    second = d.wait_state("default", "ready")
    tap.ok(second["kernel_id"] != after["kernel_id"] and UUID_RE.match(second["kernel_id"] or "") is not None,
           "the dead adopted kernel is replaced: new kernel_id", f"{after['kernel_id']} -> {second['kernel_id']}")
    tap.eq(second["incarnation"], after["incarnation"] + 1, "the replacement: incarnation + 1")
    tap.contains(r.stdout, second["kernel_id"], "check's line names the replacement")
    d.check_group_gone(after["pid"], "the killed adopted kernel's group is gone")
    r = harness.run_cell(cf, "survivor")
    tap.eq(r["ename"], "NameError", "the replacement's namespace is new")
    r = harness.run_cell(cf, "again = 1")
    tap.eq(r["status"], "ok", "a cell defines a variable in the replacement")

    # A second crash adopts the replacement (a kernel this daemon launched after an adoption).
    third, gen = crash_and_adopt(tap, d, second, gen, "second crash")
    r = harness.run_cell(cf, "again + 1")
    tap.eq(r["result"], "2", "second crash: the namespace is intact")

    # A clean stop ends adopted kernels too.
    d.stop()
    tap.ok(not harness.alive(third["pid"]), "SIGTERM to kernelsupd ends the adopted kernel",
           harness.describe(third["pid"]))


def test_pid_reuse(tap):
    d = harness.Daemon(tap, contexts=CONTEXTS)
    d.start()
    first = d.wait_state("default", "ready")
    kid, pid = first["kernel_id"], first["pid"]
    st = d.read_state("default")
    tap.eq((st.get("pid"), st.get("kernel_id"), st.get("boot_id")), (pid, kid, harness.boot_id()),
           "the state file records the kernel's pid, kernel_id and boot_id")
    tap.eq(st.get("pid_starttime"), starttime(pid), "the state file records the kernel's /proc start time")

    # The daemon and its kernel die; another process has the pid now (simulated by
    # writing the pid of a new process, which leads its own session and group).
    d.kill9()
    os.killpg(pid, signal.SIGKILL)
    harness.wait_until(lambda: harness.alive(pid), 10, f"kernel {pid} to die", check=lambda a: not a)
    sleeper = d.spawn_bystander(["/bin/sleep", "1000"])
    harness.wait_until(lambda: harness.proc_cmdline(sleeper.pid), 10, "the sleep to exec",
                       check=lambda a: a == ["/bin/sleep", "1000"])
    st["pid"] = sleeper.pid
    d.write_state("default", st)

    mark = d.log_mark()
    d.start()
    c = d.wait_context("default", lambda c: c.get("state") == "ready" and c.get("kernel_id") != kid,
                       "a new kernel ready", timeout=60)
    log = d.log_since(mark)
    tap.contains(log, f"pid {sleeper.pid} is another process now", "the log says the pid is another process now")
    tap.ok("adopting kernel" not in log and "adopted kernel" not in log, "the other process is not adopted", log)
    tap.ok(sleeper.poll() is None and harness.alive(sleeper.pid), "the other process is not killed",
           harness.describe(sleeper.pid))
    tap.ok(c["pid"] != sleeper.pid, "the context's pid is not the other process's", repr(c["pid"]))
    tap.ok(UUID_RE.match(c["kernel_id"] or "") is not None, "a new kernel_id", repr(c["kernel_id"]))
    tap.eq(c["incarnation"], first["incarnation"] + 1, "incarnation + 1")
    st2 = d.read_state("default")
    tap.eq((st2.get("pid"), st2.get("kernel_id")), (c["pid"], c["kernel_id"]), "the state file names the new kernel")
    r = check(d, "default", kid)
    tap.eq(r.returncode, 8, "check --expect OLD exits 8", out(r))
    tap.contains(r.stdout, c["kernel_id"], "check's line names the new kernel_id")
    r = check(d, "default", c["kernel_id"])
    tap.eq(r.returncode, 0, "check --expect NEW exits 0", out(r))

    d.stop()
    tap.ok(sleeper.poll() is None and harness.alive(sleeper.pid),
           "the other process survives the daemon's clean stop too", harness.describe(sleeper.pid))
    sleeper.kill()
    sleeper.wait()


def test_other_boot(tap):
    """The boot check alone: the recorded pid is alive with the recorded start time, but the
    record says another boot. Only the boot_id comparison can refuse it."""
    d = harness.Daemon(tap, contexts=CONTEXTS)
    d.start()
    first = d.wait_state("default", "ready")
    kid, pid = first["kernel_id"], first["pid"]
    st = d.read_state("default")
    d.kill9()
    try:
        tap.ok(harness.alive(pid) and starttime(pid) == st.get("pid_starttime"),
               "other boot: the kernel lives on with its recorded start time", harness.describe(pid))
        other = "00000000-0000-4000-8000-000000000001"
        tap.ok(other != harness.boot_id(), "other boot: the boot_id written differs from this boot's")
        st["boot_id"] = other
        d.write_state("default", st)

        mark = d.log_mark()
        d.start()
        # Ready either way (adopted or new), so a wrong verdict fails under the points' names.
        c = d.wait_state("default", "ready", timeout=60)
        log = d.log_since(mark)
        tap.ok("adopting kernel" not in log and "adopted kernel" not in log,
               "other boot: a live kernel recorded under another boot_id is not adopted", log)
        tap.ok(c["pid"] != pid and UUID_RE.match(c["kernel_id"] or "") is not None,
               "other boot: a new kernel (new pid and kernel_id) runs instead", repr(c))
        tap.eq(c["incarnation"], first["incarnation"] + 1, "other boot: incarnation + 1")
        r = check(d, "default", kid)
        tap.eq(r.returncode, 8, "other boot: check --expect OLD exits 8", out(r))
    finally:
        # Never adopted, so no daemon owns it: the test ends it.
        if harness.alive(pid):
            os.killpg(pid, signal.SIGKILL)
    d.stop()


def test(tap):
    with tap.guard("adoption"):
        test_adopt(tap)
    with tap.guard("pid reuse"):
        test_pid_reuse(tap)
    with tap.guard("other boot"):
        test_other_boot(tap)


harness.main(test)
