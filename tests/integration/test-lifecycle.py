"""Daemon and kernel life cycle: kernelctl start/stop/restart, the generation across
daemon starts, SIGTERM and SIGINT stopping every kernel and everything a cell left
in the kernel's process group."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402

# ipykernel takes ~5 s to answer shutdown_request when a cell left a child running;
# a short stop_timeout keeps the test fast (the escalation to SIGTERM is what we want).
DEFAULTS = "stop_timeout = 2s\n"
CONTEXTS = "[context:a]\n\n[context:b]\n"
SPAWN_SLEEP = "import subprocess\np = subprocess.Popen(['sleep', '1000'], start_new_session=False)\np.pid"


def spawn_sleep(tap, d, ctx, what):
    """Has a cell of ctx start a sleep in the kernel's process group; returns its pid."""
    r = harness.run_cell(ctx["connection_file"], SPAWN_SLEEP)
    tap.eq(r["status"], "ok", f"{what}: a cell started a sleep")
    pid = int(r["result"]) if (r["result"] or "").isdigit() else None
    st = harness.proc_stat(pid) if pid else None
    tap.ok(st is not None and st[2] == ctx["pid"], f"{what}: the sleep is in the kernel's process group", repr(st))
    d.remember_pid(pid)
    return pid


def test(tap):
    d = harness.Daemon(tap, contexts=CONTEXTS, defaults=DEFAULTS)
    d.start()
    j = d.status()
    sup1 = j["supervisor"]
    tap.eq(sup1.get("generation"), 1, "first start: generation 1")
    tap.eq(sup1.get("boot_id"), harness.boot_id(), "boot_id is the kernel's boot_id")
    a = d.context("a")
    b = d.context("b")
    tap.eq((a["state"], b["state"]), ("ready", "ready"), "both kernels ready")
    sleep1 = spawn_sleep(tap, d, a, "a")

    # stop b: the reply comes when it is stopped, and nothing of it is left.
    r = harness.run_cell(b["connection_file"], "kept = 'b1'")
    tap.eq(r["status"], "ok", "b: a variable is set")
    r = d.ctl("stop", "b", timeout=60)
    tap.eq(r.returncode, 0, "kernelctl stop b exits 0", r.stderr)
    c = d.context("b")
    tap.eq((c["state"], c["pid"]), ("stopped", None), "b is stopped with no pid when kernelctl stop returns")
    d.check_group_gone(b["pid"], "stop b leaves no process of its process group")
    tap.eq(d.context("a")["pid"], a["pid"], "stopping b leaves a alone")
    tap.eq(d.ctl("status").returncode, 1, "kernelctl status exits 1 with b stopped")
    tap.eq(d.ctl("stop", "b").returncode, 0, "kernelctl stop of a stopped context exits 0")

    # start b: ready when the reply comes, a new kernel.
    r = d.ctl("start", "b", timeout=60)
    tap.eq(r.returncode, 0, "kernelctl start b exits 0", r.stderr)
    b2 = d.context("b")
    tap.eq(b2["state"], "ready", "b is ready when kernelctl start returns")
    tap.ok(b2["pid"] not in (None, b["pid"]) and harness.alive(b2["pid"]), "b has a new live pid", repr(b2["pid"]))
    tap.ok(UUID_RE.match(b2["kernel_id"] or "") and b2["kernel_id"] != b["kernel_id"], "b has a new kernel_id")
    tap.eq(b2["incarnation"], b["incarnation"] + 1, "start after stop: incarnation + 1")
    tap.eq(d.ctl("start", "b").returncode, 0, "kernelctl start of a ready context exits 0")
    tap.eq(d.context("b")["kernel_id"], b2["kernel_id"], "starting a ready context keeps its kernel")

    # restart b: a new kernel, the namespace is gone.
    r = harness.run_cell(b2["connection_file"], "kept = 'b2'")
    r = d.ctl("restart", "b", timeout=60)
    tap.eq(r.returncode, 0, "kernelctl restart b exits 0", r.stderr)
    b3 = d.context("b")
    tap.eq(b3["state"], "ready", "b is ready when kernelctl restart returns")
    tap.ok(b3["kernel_id"] not in (b["kernel_id"], b2["kernel_id"]), "restart gives a new kernel_id")
    tap.eq(b3["incarnation"], b2["incarnation"] + 1, "restart: incarnation + 1")
    tap.ok(b3["pid"] != b2["pid"], "restart: new pid")
    d.check_group_gone(b2["pid"], "restart leaves no process of the old kernel's group")
    r = harness.run_cell(b3["connection_file"], "kept")
    tap.eq(r["ename"], "NameError", "restart: the namespace is new")

    # The whole daemon: SIGTERM stops both kernels and the sleep in a's group.
    tap.ok(harness.alive(sleep1), "a's sleep is still running before SIGTERM")
    d.stop(signal.SIGTERM)
    tap.ok(not harness.alive(sleep1), "SIGTERM: a's sleep is gone", harness.describe(sleep1))
    tap.ok(not os.path.exists(d.socket), "SIGTERM: the control socket is removed")

    # Second daemon start: generation + 1, same boot, new kernels.
    d.start()
    sup2 = d.status()["supervisor"]
    tap.eq(sup2.get("generation"), sup1.get("generation", 0) + 1, "second start: generation + 1")
    tap.eq(sup2.get("boot_id"), sup1.get("boot_id"), "second start: same boot_id")
    tap.ok(sup2.get("pid") == d.proc.pid != sup1.get("pid"), "second start: the new daemon's pid", repr(sup2))
    a2 = d.context("a")
    tap.ok(a2["state"] == "ready" and a2["kernel_id"] != a["kernel_id"], "second start: a new kernel for a",
           repr(a2))
    tap.eq(a2["incarnation"], a["incarnation"] + 1, "second start: a's incarnation + 1 (persisted)")
    sleep2 = spawn_sleep(tap, d, a2, "a after the second start")

    # SIGINT does the same.
    d.stop(signal.SIGINT)
    tap.ok(not harness.alive(sleep2), "SIGINT: a's sleep is gone", harness.describe(sleep2))


harness.main(test)
