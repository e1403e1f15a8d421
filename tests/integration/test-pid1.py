"""kernelsupd as PID 1 of a container: `unshare --pid --fork --mount-proc kernelsupd`.

What the daemon guarantees as PID 1 (tested here):
- READY=1 reaches $NOTIFY_SOCKET (a path: it works across PID namespaces) and
  kernelctl talks to it over the control socket; its status says pid 1.
- Every orphan of the namespace becomes its child and is reaped: a cell's detached
  child that exited unreaped (a zombie of the kernel) is reaped once the kernel is
  restarted, and a process a cell orphaned while its kernel runs (a double fork:
  its parent is PID 1 at once) is reaped when it ends. No zombie is ever left.
- A process that escaped the kernel's process group with setsid() IS ended with its
  kernel: every kernel has a cgroup of its own (or, without one, the daemon ends
  what it inherits from that kernel), so nothing the kernel started outlives a
  restart.
- SIGTERM or SIGINT to PID 1 stops every kernel (its process group included) and
  exits 0 within the stop timeout; nothing is left afterwards.
Needs root (a PID namespace); skipped otherwise."""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STOP_TIMEOUT = 4  # seconds, the contexts' stop_timeout (unscaled)
DEFAULTS = f"stop_timeout = {STOP_TIMEOUT}s\n"
CONTEXTS = "[context:default]\n\n[context:other]\n"

# Three children: a detached one that exits at once and is never waited for (a zombie
# of the kernel until it is reaped), a detached sleep (own session: out of the
# kernel's process group) and a sleep in the kernel's group. References are kept so
# that Python's subprocess module does not reap the first one itself.
CELL = """import subprocess, time
kept = [subprocess.Popen(["/bin/sh", "-c", "exit 0"], start_new_session=True),
        subprocess.Popen(["sleep", "1000"], start_new_session=True),
        subprocess.Popen(["sleep", "1001"])]
kept[0].pid, kept[1].pid, kept[2].pid
"""

# The cell's child starts `sleep 2` in a new session, prints its pid and exits: the sleep is orphaned.
ORPHAN_CELL = """import subprocess
out = subprocess.run(["/bin/sh", "-c", "setsid sleep 1001 </dev/null >/dev/null 2>&1 & echo $!"],
                     capture_output=True, text=True).stdout.strip()
int(out)
"""


def pid_ns(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def ns_pids(pid):
    """The pid of a host process inside its innermost PID namespace (NSpid's last field), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def ns_members(ns):
    """{host pid: pid in the namespace} of every process (zombies included) in PID namespace ns."""
    out = {}
    for p in harness.all_pids():
        if pid_ns(p) == ns:
            n = ns_pids(p)
            if n is not None:
                out[p] = n
    return out


def describe_all(pids):
    return "; ".join(harness.describe(p) for p in sorted(pids)) or "none"


class Pid1Daemon(harness.Daemon):
    """A harness daemon started as PID 1 of new PID and mount namespaces. self.proc is
    the unshare process (in the host's namespace); self.pid1 the host pid of kernelsupd."""

    def __init__(self, tap, **kw):
        super().__init__(tap, **kw)
        self.pid1 = None
        self.ns = None

    def spawn(self, *extra_args):
        self._open_notify()
        argv = ["unshare", "--pid", "--fork", "--mount-proc", harness.KERNELSUPD, "--config", self.config,
                *extra_args]
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts + 1}: {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         close_fds=True)
        self.starts += 1
        self.pid1 = None
        self.ns = None
        return self.proc

    def find_pid1(self):
        """The host pid of the namespace's PID 1 (unshare's child running kernelsupd)."""

        def child():
            for p in harness.all_pids():
                st = harness.proc_stat(p)
                if st and st[1] == self.proc.pid and ns_pids(p) == 1:
                    cmd = harness.proc_cmdline(p) or []
                    if cmd[:1] == [harness.KERNELSUPD]:
                        return p
            return None

        self.pid1 = harness.wait_until(child, 10, "unshare's child to be kernelsupd")
        self.ns = pid_ns(self.pid1)
        return self.pid1

    def _remember(self, pid):
        # The status shows pids of the daemon's namespace: translate them, never
        # remember a host process that happens to have the same number.
        if not isinstance(pid, int) or self.ns is None:
            return
        for host, inner in ns_members(self.ns).items():
            if inner == pid:
                super()._remember(host)
                return

    def cleanup(self):
        # SIGKILL to PID 1 ends the whole namespace; only while it is still unshare's child
        # (then its pid cannot have been reused).
        st = harness.proc_stat(self.pid1) if self.pid1 else None
        if self.running() and st is not None and st[1] == self.proc.pid:
            with contextlib.suppress(OSError):
                os.kill(self.pid1, signal.SIGKILL)
        super().cleanup()

    def host_pid(self, inner):
        for host, n in ns_members(self.ns).items():
            if n == inner:
                return host
        return None


def run_cell(tap, d, name, code, what):
    r = d.ctl("exec", name, code, timeout=60)
    tap.eq(r.returncode, 0, f"{what}: kernelctl exec exits 0", f"stdout {r.stdout!r} stderr {r.stderr!r}")
    return r


def test_reaping(tap):
    d = Pid1Daemon(tap, contexts=CONTEXTS, defaults=DEFAULTS)
    d.start()
    pid1 = d.find_pid1()
    ns = d.ns
    tap.ok(ns is not None and ns != pid_ns(os.getpid()), "kernelsupd runs in a PID namespace of its own", ns)
    tap.contains(d.log(), "(PID 1)", "kernelsupd logs that it runs as PID 1")

    j = d.status()
    tap.eq(j["supervisor"].get("pid"), 1, "kernelctl status over the socket: the supervisor's pid is 1")
    c = d.wait_state("default", "ready")
    tap.eq(d.wait_state("other", "ready")["state"], "ready", "both contexts are ready")
    members = ns_members(ns)
    tap.eq(members.get(pid1), 1, "the daemon is PID 1 in the namespace")
    kernel_host = d.host_pid(c["pid"])
    tap.ok(kernel_host is not None and harness.proc_stat(kernel_host)[1] == pid1,
           "the kernel is a child of PID 1", describe_all(members))

    r = run_cell(tap, d, "default", CELL, "a cell starts a detached child that exits, a detached sleep and a "
                                          "sleep in its group")
    # kernelctl prints the result's text/plain, "(a, b, c)", then "[ok #N]".
    line = r.stdout.splitlines()[0] if r.stdout else ""
    try:
        quick, escaped, grouped = (int(x) for x in line.strip("()").split(","))
    except ValueError:
        raise harness.HarnessError(f"cannot read the pids from {r.stdout!r}") from None
    quick_h, escaped_h, grouped_h = (d.host_pid(p) for p in (quick, escaped, grouped))
    tap.ok(None not in (quick_h, escaped_h, grouped_h), "the three children are in the namespace",
           describe_all(ns_members(ns)))
    harness.wait_until(lambda: harness.proc_stat(quick_h), 10, "the detached child to exit",
                       check=lambda st: st is None or st[0] == "Z")
    st = harness.proc_stat(quick_h)
    tap.ok(st is not None and st[0] == "Z" and st[1] == kernel_host,
           "before the restart the exited child is a zombie of the kernel (nobody waited for it)",
           harness.describe(quick_h))

    # The restart: the kernel's group is ended; its orphans go to PID 1.
    r = d.ctl("restart", "default", timeout=60)
    tap.eq(r.returncode, 0, "kernelctl restart default exits 0", r.stderr)
    c2 = d.wait_state("default", "ready")
    tap.ok(c2["kernel_id"] != c["kernel_id"], "a new kernel runs after the restart")
    left = harness.poll_until(lambda: harness.proc_stat(kernel_host), 10, "the old kernel to be reaped",
                              check=lambda st: st is None)
    tap.ok(left is None, "the old kernel is gone (reaped)", f"/proc/{kernel_host}/stat: {left!r}")
    tap.ok(harness.proc_stat(grouped_h) is None, "the sleep in the old kernel's group is gone (reaped)",
           harness.describe(grouped_h))

    def zombies():
        return [p for p in ns_members(ns) if (s := harness.proc_stat(p)) and s[0] == "Z"]

    with contextlib.suppress(harness.WaitTimeout):
        harness.wait_until(zombies, 5, "no zombie in the namespace", check=lambda z: not z)
    z = zombies()
    tap.ok(not z, "no zombie is left in the namespace after the restart (PID 1 reaped the orphaned zombie)",
           describe_all(z))
    tap.ok(harness.proc_stat(quick_h) is None, "the detached child that had exited is reaped",
           harness.describe(quick_h))

    # The escaped sleep: out of the kernel's process group, but in its cgroup (or tagged with its
    # kernel_id), so it ended with the kernel, and PID 1 reaped it.
    st = harness.poll_until(lambda: harness.proc_stat(escaped_h), 10, "the escaped sleep to be gone",
                            check=lambda s: s is None)
    tap.ok(st is None, "the sleep that escaped with setsid() ended with its kernel and was reaped",
           harness.describe(escaped_h))

    # An orphan made while the kernel runs: the cell's child forks a sleep into a session of its own and
    # exits at once (the cell answers once it has), so the sleep's parent is PID 1 from then on; the test ends
    # it with a signal, and PID 1 must reap it.
    r = run_cell(tap, d, "default", ORPHAN_CELL, "a cell orphans a sleep (a double fork)")
    line = r.stdout.splitlines()[0] if r.stdout else ""
    orphan_h = d.host_pid(int(line)) if line.isdigit() else None
    st = harness.proc_stat(orphan_h) if orphan_h else None
    tap.ok(orphan_h is not None, "the orphaned sleep runs in the namespace", repr(r.stdout))
    tap.ok(st is not None and st[1] == pid1, "while it runs, the orphan is a child of PID 1",
           harness.describe(orphan_h) if orphan_h else repr(r.stdout))
    if st is not None:
        os.kill(orphan_h, signal.SIGTERM)
    gone = harness.poll_until(lambda: harness.proc_stat(orphan_h) if orphan_h else None, 15,
                              "the orphan to end and be reaped", check=lambda s: s is None)
    tap.ok(orphan_h is not None and gone is None, "when the orphan ends (SIGTERM), PID 1 reaps it (no zombie)",
           harness.describe(orphan_h) if orphan_h else "")

    # Another detached sleep, for the stop below: PID 1's exit must end it too.
    r = run_cell(tap, d, "default", "import subprocess\nlate = subprocess.Popen(['sleep', '1002'], "
                                    "start_new_session=True)\nlate.pid", "a cell starts another detached sleep")
    line = r.stdout.splitlines()[0] if r.stdout else ""
    late_h = d.host_pid(int(line)) if line.isdigit() else None
    tap.ok(late_h is not None, "the second detached sleep runs in the namespace", repr(r.stdout))
    stop_pid1(tap, d, signal.SIGTERM, extra=[late_h] if late_h else [])


def stop_pid1(tap, d, sig, extra=()):
    """Signals the namespace's PID 1 (not unshare, which ignores it): every kernel stops,
    it exits 0 within the stop timeout and nothing of the namespace is left."""
    name = signal.Signals(sig).name
    pid1 = d.pid1 or d.find_pid1()
    ns = d.ns
    kernels = [p for p, n in ns_members(ns).items() if p != pid1]
    mark = d.log_mark()
    d.exit_expected = True
    os.kill(pid1, sig)
    # The daemon stops each kernel within stop_timeout, then gives up after a grace of 5 s.
    deadline = STOP_TIMEOUT + 5
    try:
        rc = d.proc.wait(harness.scaled(deadline))
    except subprocess.TimeoutExpired:
        tap.ok(False, f"{name} to PID 1: kernelsupd exits within the stop timeout",
               f"still running after {harness.scaled(deadline):g}s: {describe_all(ns_members(ns))}")
        d.proc.kill()
        d.proc.wait()
        return
    tap.eq(rc, 0, f"{name} to PID 1: kernelsupd (and so unshare) exits 0 within the stop timeout",
           d.log_since(mark)[-2000:])
    log = d.log_since(mark)
    # The daemon names the sender; ours is in the parent PID namespace, where it has no pid.
    tap.ok(re.search(rf"^{name} from outside our PID namespace: stopping every kernel$", log, re.M),
           f"{name} to PID 1: the log says it stops every kernel", log)
    tap.contains(log, "all kernels stopped; exiting", f"{name} to PID 1: every kernel stopped before the exit")
    tap.ok("shutdown is taking too long" not in log, f"{name} to PID 1: no kernel needed the last-resort kill", log)
    d.close_notify()
    left = [p for p in [pid1, *kernels, *extra] if harness.proc_stat(p) is not None]
    tap.ok(not left, f"{name} to PID 1: no process of the namespace is left", describe_all(left))
    tap.eq(ns_members(ns), {}, f"{name} to PID 1: the PID namespace is empty")
    d.check_no_leftovers(f"{name} to PID 1: no process of the test is left", daemon_pid=pid1)
    d.check_log()


def test_sigint(tap):
    d = Pid1Daemon(tap, contexts=CONTEXTS, defaults=DEFAULTS)
    d.start()
    d.find_pid1()
    d.wait_state("default", "ready")
    d.wait_state("other", "ready")
    r = run_cell(tap, d, "other", "import subprocess\np = subprocess.Popen(['sleep', '1003'])\np.pid",
                 "SIGINT run: a cell starts a sleep in its kernel's group")
    line = r.stdout.splitlines()[0] if r.stdout else ""
    sleep_h = d.host_pid(int(line)) if line.isdigit() else None
    tap.ok(sleep_h is not None, "SIGINT run: the sleep runs in the namespace", repr(r.stdout))
    stop_pid1(tap, d, signal.SIGINT, extra=[sleep_h] if sleep_h else [])


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (a PID namespace)")
    if shutil.which("unshare") is None:
        tap.skip_all("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        tap.skip_all(f"cannot create a PID namespace here: {probe.stderr.strip()}")
    with tap.guard("reaping and SIGTERM"):
        test_reaping(tap)
    with tap.guard("SIGINT"):
        test_sigint(tap)


harness.main(test)
