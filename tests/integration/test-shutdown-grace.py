"""Stops that do not wait on a kernel that ignores shutdown_request (Debian's ipykernel 6.17 now and
then does): SIGTERM follows after shutdown_grace, long before stop_timeout. restart returns when the
new kernel answers; remove returns when the old kernel is gone, or says that it is still stopping.

A kernel is made deaf by a cell that replaces its shutdown_request handlers. stop_timeout is 120 s
in every context here, so only shutdown_grace can end a deaf kernel's stop within the
30 s the requests are given."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402

DEFAULTS = "stop_timeout = 120s\nshutdown_grace = 300ms\n"


def deafen(channels):
    """A cell making the kernel ignore shutdown_request on the given channels ("control", "shell")."""
    lines = ["k = get_ipython().kernel", "async def _ignore(*args, **kw):", "    pass"]
    lines += [f"k.{ch}_handlers['shutdown_request'] = _ignore" for ch in channels]
    return "\n".join(lines)


def out(r):
    return f"exit {r.returncode}; stdout {r.stdout[-800:]!r}; stderr {r.stderr[-800:]!r}"


def gone(pid):
    """Whether pid is gone (a zombie nobody reaped would still count as there)."""
    return not harness.alive(pid)


def test_restart_deaf(tap, d):
    old = d.wait_state("deaf", "ready")
    r = d.ctl("exec", "deaf", deafen(("control", "shell")))
    tap.eq(r.returncode, 0, "restart: a cell makes the kernel ignore shutdown_request", out(r))
    mark = d.log_mark()
    r = d.ctl("restart", "deaf", "--timeout", "30", timeout=60)
    tap.eq(r.returncode, 0, "restart of a kernel that ignores shutdown_request exits 0 within 30 s "
                            "(stop_timeout is 120 s)", out(r))
    new = d.context("deaf")
    tap.ok(new.get("state") == "ready" and new.get("kernel_id") != old["kernel_id"]
           and UUID_RE.match(new.get("kernel_id") or ""), "restart: a new kernel answers when restart returns",
           repr(new))
    tap.ok(gone(old["pid"]), "restart: the old kernel is gone", harness.describe(old["pid"]))
    log = d.log_since(mark)
    tap.contains(log, "deaf: kernel did not stop within shutdown_grace (300ms) of shutdown_request; sending SIGTERM",
                 "restart: the log says SIGTERM followed shutdown_grace")
    tap.contains(log, f"deaf: kernel {old['kernel_id']} stopped (killed by SIGTERM)",
                 "restart: the old kernel ended by SIGTERM")
    tap.ok("sending SIGKILL" not in log, "restart: no SIGKILL was needed", log[-1500:])


def test_remove(tap, d):
    d.write_context_file("gone", "[context:gone]\n")
    d.write_context_file("slow", "[context:slow]\nshutdown_grace = 60s\n")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "remove: reload adds gone and slow", out(r))
    for name in ("gone", "slow"):
        c = d.wait_state(name, "ready", timeout=60)
        r = d.ctl("exec", name, deafen(("control", "shell")))
        tap.eq(r.returncode, 0, f"remove: {name} ignores shutdown_request", out(r))
    gone_pid = d.context("gone")["pid"]
    slow_pid = d.context("slow")["pid"]

    r = d.ctl("remove", "gone", timeout=60)
    tap.eq((r.returncode, r.stdout), (0, "removed gone\nunchanged 3\n"), "remove gone exits 0 and says removed",
           out(r))
    tap.ok(gone(gone_pid), "remove: when kernelctl remove returns, the removed context's kernel is gone",
           harness.describe(gone_pid))
    tap.eq(d.ctl("status", "gone").returncode, 5, "remove: gone is not in the status")

    # A kernel that outlives the wait: remove says so, and the removal stands.
    r = d.ctl("remove", "slow", "--timeout", "1", timeout=60)
    tap.eq((r.returncode, r.stdout), (0, "removed slow\nstopping slow (its kernel has not exited yet)\nunchanged 2\n"),
           "remove --timeout 1 of a kernel that has not exited: exit 0, says it is still stopping", out(r))
    tap.ok(harness.alive(slow_pid), "remove: that kernel is indeed still there (shutdown_grace is 60 s)",
           harness.describe(slow_pid))
    tap.eq(d.ctl("status", "slow").returncode, 5, "remove: slow is not in the status")
    os.killpg(slow_pid, 9)
    d.wait_log("slow: removed")

    # The client goes away while remove waits: the daemon drops the wait (and the report it held), nothing else.
    d.write_context_file("quit", "[context:quit]\nshutdown_grace = 60s\n")
    tap.eq(d.ctl("reload").returncode, 0, "remove: reload adds quit")
    quit_pid = d.wait_state("quit", "ready", timeout=60)["pid"]
    tap.eq(d.ctl("exec", "quit", deafen(("control", "shell"))).returncode, 0, "remove: quit ignores shutdown_request")
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "remove", "quit"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    harness.wait_until(lambda: d.ctl("status", "quit").returncode, 30, "quit to be removed", check=lambda rc: rc == 5)
    tap.ok(p.poll() is None, "remove quit: kernelctl waits while the kernel ignores the request")
    p.kill()
    p.communicate()
    tap.eq(d.ctl("status", "deaf").returncode, 0, "remove: after its client was killed mid-wait, the daemon answers")
    os.killpg(quit_pid, 9)
    d.wait_log("quit: removed")
    tap.ok(d.running(), "remove: the daemon runs on after the abandoned wait ended")


def test_reload(tap, d):
    d.write_config("[context:deaf]\n\n[context:other]\nshutdown_grace = 60s\n",
                   defaults=DEFAULTS.replace("300ms", "400ms"))
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload: a new shutdown_grace is accepted", out(r))
    tap.contains(r.stdout, "updated deaf (shutdown_grace changed, applied without a restart)",
                 "reload: shutdown_grace applies without a restart")


def test(tap):
    d = harness.Daemon(tap, contexts="[context:deaf]\n\n[context:other]\nshutdown_grace = 60s\n",
                       defaults=DEFAULTS)
    d.start()
    with tap.guard("restart of a deaf kernel"):
        test_restart_deaf(tap, d)
    with tap.guard("remove"):
        test_remove(tap, d)
    with tap.guard("reload"):
        test_reload(tap, d)
    d.stop()


harness.main(test)
