"""exit() and quit() in a cell do not end a supervised kernel: the daemon sets ipykernel's keepkernel_on_exit, the
cell ends [ok] with a note (text) and "exit": "kept" (--json), and the namespace stays; a kernel that ends anyway
(keepkernel_on_exit undone) says so on that cell, and the next cell is not blamed; `exit` typed in a real
jupyter console attached to the kernel leaves it running; a replayed journal never holds an exit() cell."""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

KEPT_NOTE = "kernelctl: note: the cell called exit(); a supervised kernel is not a cell's to end: the kernel and its " \
            "namespace were kept (kernelctl restart default ends it).\n"


def exec_(d, code, *opts):
    return d.ctl("exec", *opts, "default", code)


def test_kept(tap):
    d = harness.Daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    tap.eq(exec_(d, "y = 5").returncode, 0, "y = 5")
    for cell in ("exit()", "quit()", "exit"):
        r = exec_(d, cell)
        tap.eq(r.returncode, 0, f"{cell}: exit 0", r.stderr)
        tap.ok(r.stdout.startswith("[ok #"), f"{cell}: [ok #N]", r.stdout)
        tap.eq(r.stderr, KEPT_NOTE, f"{cell}: the note says the kernel was kept")
        r = exec_(d, "print(y)")
        tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "5"), f"after {cell}: the next cell sees y", r.stdout)
    rc, j = d.ctl_json("exec", "default", "quit()")
    tap.eq((rc, (j or {}).get("status"), (j or {}).get("exit")), (0, "ok", "kept"), "--json: status ok, exit kept",
           repr(j))
    rc, j = d.ctl_json("exec", "default", "1 + 1")
    tap.ok(rc == 0 and "exit" not in (j or {}), "--json: a cell that did not call exit() has no exit field", repr(j))
    r = d.ctl("check", "default", "--expect", c0["kernel_id"])
    tap.eq(r.returncode, 0, "check --expect the same kernel_id exits 0", r.stdout + r.stderr)
    tap.eq(d.context("default").get("incarnation"), c0.get("incarnation"), "the same incarnation")
    d.stop()


def test_preloaded(tap):
    """A kernel forked from the preloaded launcher gets the same request: exit() keeps it too."""
    d = harness.Daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    d.wait_log("is ready", timeout=120)
    d.ctl("restart", "default", timeout=60)
    c1 = d.wait_context("default", lambda c: c["state"] == "ready" and c["kernel_id"] != c0["kernel_id"],
                        "a new kernel", 60)
    tap.eq(c1.get("started"), "preloaded", "the kernel after a restart comes from the preloaded launcher",
           repr(c1.get("start_note")))
    tap.eq(exec_(d, "y = 6").returncode, 0, "y = 6")
    r = exec_(d, "exit()")
    tap.eq((r.returncode, r.stderr), (0, KEPT_NOTE), "exit() in a preloaded kernel: exit 0, the note", r.stdout)
    r = exec_(d, "print(y)")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "6"), "the next cell sees y", r.stdout + r.stderr)
    tap.eq(d.context("default").get("kernel_id"), c1["kernel_id"], "the same kernel")
    d.stop()


def test_ending(tap):
    """A kernel that does not keep itself (the start-up request's ask_exit undone by the cell, as in a kernel the
    request never reached): the cell says it ends, the next cell runs in the next kernel and is not [died]."""
    d = harness.Daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    tap.eq(exec_(d, "y = 5").returncode, 0, "y = 5")
    r = exec_(d, "del get_ipython().ask_exit\nexit()")
    tap.eq(r.returncode, 0, "exit() with the wrapper undone: exit 0", r.stderr)
    tap.contains(r.stderr, "the cell called exit() and the kernel is ending: the next cell runs in a new kernel, "
                 "which starts empty", "the note says the kernel is ending")
    r = exec_(d, "print(1)")
    tap.eq((r.returncode, r.stdout), (0, "1\n[ok #1]\n"), "the next cell runs, in a new kernel: not [died]",
           r.stdout + r.stderr)
    c1 = d.context("default")
    tap.ok(c1.get("kernel_id") != c0["kernel_id"], "a new kernel", repr(c1.get("kernel_id")))
    tap.contains(c1.get("last_error") or "", "after a cell's exit()", "last_error says a cell's exit() ended it")
    # Kept while the new kernel is ready, and dated: set before the new kernel started, it is about the last one.
    tap.eq(c1.get("state"), "ready", "the new kernel is ready, its last_error kept")
    at, started = c1.get("last_error_at"), c1.get("started_at")
    tap.ok(isinstance(at, str) and isinstance(started, str) and at <= started and at >= c0["started_at"],
           "last_error_at: after the old kernel started, not after the new one (a stale error is dated as such)",
           f"{c0['started_at']} <= {at} <= {started}")
    r = d.ctl("check", "default", "--expect", c0["kernel_id"])
    tap.eq(r.returncode, 8, "check --expect the old kernel exits 8", r.stdout)
    rc, j = d.ctl_json("exec", "default", "del get_ipython().ask_exit\nquit()")
    tap.eq((rc, (j or {}).get("status"), (j or {}).get("exit")), (0, "ok", "ending"), "--json: exit ending", repr(j))
    d.stop()


def test_console(tap):
    """`exit` typed in jupyter console --existing: the console sends the execute_request "exit", reads the
    ask_exit payload, and shuts the kernel down only when it says keepkernel false."""
    console = shutil.which("jupyter-console")
    if not console:
        tap.skip("jupyter console", "jupyter-console is not installed (apt-get install jupyter-console)")
        return
    d = harness.Daemon(tap)
    d.start()
    c0 = d.wait_state("default", "ready")
    home = os.path.join(d.tmp, "console-home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home, JUPYTER_RUNTIME_DIR=os.path.join(home, "rt"))
    p = subprocess.run(["/usr/bin/python3", console, "--existing", c0["connection_file"], "--simple-prompt",
                        "--ZMQTerminalInteractiveShell.include_other_output=False"],
                       input="z = 7\nexit\n", capture_output=True, text=True, env=env,
                       timeout=harness.scaled(60))
    tap.eq(p.returncode, 0, "the console ends", p.stdout + p.stderr)
    r = exec_(d, "print(z)")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "7"), "the kernel stays: z from the console is there",
           r.stdout + r.stderr)
    tap.eq(d.context("default").get("kernel_id"), c0["kernel_id"], "the same kernel")
    d.stop()


def test(tap):
    with tap.guard("exit() and quit() keep the kernel"):
        test_kept(tap)
    with tap.guard("exit() in a preloaded kernel"):
        test_preloaded(tap)
    with tap.guard("a kernel that ends after exit()"):
        test_ending(tap)
    with tap.guard("exit in jupyter console"):
        test_console(tap)


if __name__ == "__main__":
    harness.main(test)
