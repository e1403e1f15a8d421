"""State that cannot be written is never hidden and never costs a kernel its identity. state_dir is a 64 KiB
tmpfs, filled: a restart and an add do not launch a kernel whose identity is not on disk (write ahead), say
why in last_error, and the daemon says it is degraded (status --json, the table, the exit status of
`kernelctl status`, STATUS=). After kill -9 of the daemon and freeing the disk nothing is orphaned, the
incarnation does not repeat, ports and key are the ones from before. Without a restart the daemon catches up
by itself once space is free. A daemon that cannot write supervisor.json refuses to start, and its
successor adopts the kernel left running."""

import errno
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DEFAULTS = f"argv = {harness.STUB_ARGV}\nbackoff_max = 300ms\nfailed_cooldown = 1s\n"
NOSPACE = os.strerror(errno.ENOSPC)
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def fill(d):
    """Fills state_dir's tmpfs; returns the path of the filler file."""
    path = os.path.join(d.state_dir, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return path


def ident(d, c):
    info = d.connection_info(c["connection_file"])
    return {k: info[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "key")}


def as_nobody(tap, d):
    """Another uid learns that the daemon is degraded, not the names of contexts that are not its own."""
    if subprocess.run(NOBODY + ["test", "-x", harness.KERNELCTL], capture_output=True).returncode != 0:
        tap.skip("degraded as nobody", f"nobody cannot execute {harness.KERNELCTL}")
        return
    for p in (d.tmp, d.run_dir):
        os.chmod(p, 0o755)
    os.chmod(d.socket, 0o666)
    try:
        r = d.ctl("status", "--json", prefix=NOBODY)
        j = json.loads(r.stdout or "{}")
        deg = (j.get("supervisor") or {}).get("degraded")
        tap.eq(r.returncode, 1, "as nobody: status exits 1 while degraded", r.stderr)
        tap.eq([c.get("name") for c in j.get("contexts") or []], [],
               "as nobody: status lists no context (none runs as nobody)", r.stdout[:500])
        tap.eq(deg, f"cannot write state files in {d.state_dir}",
               "as nobody: degraded names the state directory, not another user's context")
    finally:
        os.chmod(d.socket, 0o660)


def new_daemon(tap):
    d = harness.Daemon(tap, defaults=DEFAULTS)
    d.mount_tmpfs(d.state_dir, "64k")
    return d


def test_full_then_restart(tap):
    d = new_daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    id0 = ident(d, c0)
    tap.eq(d.read_state("default").get("pid"), c0["pid"], "the running kernel's pid is on disk")

    filler = fill(d)
    r = d.ctl("restart", "default", "--timeout", f"{harness.scaled(20):g}", timeout=40)
    tap.eq(r.returncode, 1, "restart with state_dir full: exit 1", r.stdout + r.stderr)
    tap.contains(r.stderr, NOSPACE, "restart says the state cannot be written")
    c1 = d.context("default")
    tap.eq(c1.get("pid"), None, "no kernel was launched while its identity could not be written", repr(c1))
    tap.eq(c1.get("incarnation"), c0["incarnation"], "the incarnation of the launch that did not happen is not "
           "counted", repr(c1))
    tap.ok("cannot write state file" in (c1.get("last_error") or "") and NOSPACE in c1["last_error"],
           "last_error names the state file and the error", repr(c1.get("last_error")))
    tap.ok(not harness.alive(c0["pid"]), "the old kernel is stopped", harness.describe(c0["pid"]))

    rc, j = d.ctl_json("status")
    deg = (j or {}).get("supervisor", {}).get("degraded")
    tap.ok(isinstance(deg, str) and NOSPACE in deg and "default.json" in deg,
           "status --json: supervisor.degraded names the file and the error", repr(deg))
    tap.eq(rc, 1, "status --json exits 1 while degraded")
    r = d.ctl("status")
    tap.eq(r.returncode, 1, "kernelctl status exits 1 while degraded")
    tap.contains(r.stdout, "kernelsupd is degraded: cannot write state file", "the table says degraded and why")
    harness.wait_until(d.statuses, 10, "a STATUS= saying degraded",
                       check=lambda st: any("degraded: cannot write state file" in x for x in st))
    tap.ok(True, "STATUS= says degraded and why")
    as_nobody(tap, d)

    r = d.ctl("add", "full1")
    tap.eq(r.returncode, 0, "add full1 writes its config file (not on the full disk)", r.stderr)
    f1 = d.wait_context("full1", lambda c: NOSPACE in (c.get("last_error") or ""),
                        "full1 says its state cannot be written")
    tap.eq(f1.get("pid"), None, "full1: no kernel launched without its identity on disk", repr(f1))
    tap.ok(not os.path.exists(f1["connection_file"]), "full1: no connection file is published with ports and a "
           "key that are not on disk", f1["connection_file"])
    tap.eq(sorted(d.ours(exclude=(d.proc.pid,))), [], "no kernel runs at all",
           "; ".join(harness.describe(p) for p in d.ours(exclude=(d.proc.pid,))))

    d.kill9()
    os.unlink(filler)
    d.start()
    c2 = d.wait_state("default", "ready")
    f2 = d.wait_state("full1", "ready")
    tap.eq(c2.get("incarnation"), c0["incarnation"] + 1, "after kill -9 and freeing space: incarnation + 1, "
           "not repeated", repr(c2))
    tap.eq(ident(d, c2), id0, "ports and key are unchanged")
    st = d.read_state("full1")
    tap.eq((st.get("pid"), st.get("kernel_id")), (f2["pid"], f2["kernel_id"]), "full1's kernel is on disk")
    tap.eq(sorted(d.ours(exclude=(d.proc.pid,))), sorted([c2["pid"], f2["pid"]]),
           "no orphan: only the two current kernels run")

    # Once more: full1's ports and key survive a crash (they were on disk before its kernel ran).
    idf = ident(d, f2)
    d.kill9()
    d.start()
    f3 = d.wait_state("full1", "ready")
    tap.eq((f3["pid"], f3["kernel_id"], ident(d, f3)), (f2["pid"], f2["kernel_id"], idf),
           "full1's kernel is adopted after kill -9, same ports and key")
    d.stop()


def test_catch_up(tap):
    d = new_daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    id0 = ident(d, c0)
    filler = fill(d)
    os.kill(c0["pid"], signal.SIGKILL)
    j = harness.wait_until(d.status, 20, "degraded after the kernel died on a full disk",
                           check=lambda j: j["supervisor"].get("degraded"))
    c1 = [c for c in j["contexts"] if c["name"] == "default"][0]
    tap.ok(c1.get("pid") is None and NOSPACE in (c1.get("last_error") or ""),
           "the replacement is not launched; last_error says why", repr(c1))

    mark = d.log_mark()
    os.unlink(filler)
    c2 = d.wait_context("default", lambda c: c.get("state") == "ready", "ready again once space is free")
    j = harness.wait_until(d.status, 20, "degraded to clear", check=lambda j: j["supervisor"].get("degraded") is None)
    tap.ok(True, "the degraded reason clears by itself")
    tap.eq(c2.get("incarnation"), c0["incarnation"] + 1, "the replacement: incarnation + 1")
    tap.eq(ident(d, c2), id0, "the replacement keeps ports and key")
    st = d.read_state("default")
    tap.eq((st.get("pid"), st.get("kernel_id")), (c2["pid"], c2["kernel_id"]), "the state file caught up")
    r = d.ctl("status")
    tap.eq(r.returncode, 0, "kernelctl status exits 0 again", r.stdout)
    tap.ok("degraded" not in d.statuses()[-1], "the last STATUS= no longer says degraded", d.statuses()[-1])
    tap.contains(d.log_since(mark), "state saved to", "the log says the state was saved again")
    d.stop()


def test_generation(tap):
    d = new_daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    filler = fill(d)
    d.kill9()
    mark = d.log_mark()
    d.start(expect_ready=False)
    rc = d.wait_exit()
    tap.ok(rc != 0, "a daemon that cannot write supervisor.json refuses to start", f"exit {rc}")
    log = d.log_since(mark)
    tap.ok("supervisor.json" in log and NOSPACE in log, "it says which file and why", log[-2000:])
    tap.ok(harness.alive(c0["pid"]), "the kernel keeps running", harness.describe(c0["pid"]))
    os.unlink(filler)
    d.start()
    c1 = d.wait_state("default", "ready")
    tap.eq((c1["pid"], c1["kernel_id"], c1["incarnation"]), (c0["pid"], c0["kernel_id"], c0["incarnation"]),
           "once space is free the next daemon adopts it")
    d.stop()


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (mounts a small tmpfs for state_dir)")
    with tap.guard("a full state_dir, restart and add, kill -9"):
        test_full_then_restart(tap)
    with tap.guard("catching up once space is free"):
        test_catch_up(tap)
    with tap.guard("supervisor.json cannot be written"):
        test_generation(tap)


harness.main(test, needs_jupyter=False)
