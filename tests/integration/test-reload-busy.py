"""A reload that changes a context's env while a cell runs on it (the context busy): the reload
reports "restarted b (env changed)" (kernelctl(1), reload) and does it: the busy kernel is ended
and a new one runs, with a new pid, the next incarnation and the new environment, and the cell
that was running is answered. A context the reload does not change keeps its kernel."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def contexts(foo):
    return (f"[context:b]\nargv = {harness.IPYKERNEL_ARGV}\nenv = FOO={foo}\n"
            f"\n[context:k]\nargv = {harness.STUB_ARGV}\n")


def test(tap):
    if not os.access(harness.STUBKERNEL, os.X_OK):
        tap.skip_all(f"{harness.STUBKERNEL} not built (make tests/stubkernel)")
    d = harness.Daemon(tap, contexts=contexts("old"))
    d.start()
    d.wait_all_ready(["b", "k"])
    before, kept = d.context("b"), d.context("k")
    tap.eq(harness.proc_environ(before["pid"]).get("FOO"), "old", "b's kernel runs with FOO=old")

    # The cell says when it runs (a file), then runs until the test lets it go (another file): b is busy
    # for as long as the test needs, however slow the machine.
    started, go = os.path.join(d.tmp, "started"), os.path.join(d.tmp, "go")
    code = (f"import os, time\nopen({started!r}, 'w').close()\n"
            f"while not os.path.exists({go!r}):\n    time.sleep(0.05)\nprint('let go')")
    cell = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "b", code],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_until(lambda: os.path.exists(started), 30, "the cell to run")
        busy = d.wait_state("b", "busy")
        tap.eq((busy["pid"], busy["incarnation"]), (before["pid"], before["incarnation"]),
               "while the cell runs, b is busy on the same kernel")

        d.write_file(d.config, d.config_text(contexts("new")))
        r = d.ctl("reload")
        tap.eq((r.returncode, r.stdout), (0, "restarted b (env changed)\nunchanged 1\n"),
               "reload while b is busy: exit 0, reports b restarted for its env", r.stderr)
        try:
            after = d.wait_context("b", lambda c: c.get("state") == "ready" and
                                   c.get("pid") not in (None, before["pid"]), "a new kernel ready", timeout=60)
            tap.ok(True, "after the reload a new kernel of b is ready (another pid)")
        except harness.WaitTimeout as e:
            tap.ok(False, "after the reload a new kernel of b is ready (another pid)", str(e)[:600])
            after = d.context("b")
        tap.eq(after["incarnation"], before["incarnation"] + 1, "the reload started the next incarnation")
        tap.ok(after["kernel_id"] != before["kernel_id"], "the new kernel has a new kernel_id",
               repr((before["kernel_id"], after["kernel_id"])))
        env = harness.proc_environ(after["pid"]) or {}
        tap.eq(env.get("FOO"), "new", "the new kernel runs with the new env (FOO=new, /proc/PID/environ)")
        d.check_group_gone(before["pid"], "the busy kernel's process group is gone")
        try:
            so, se = cell.communicate(timeout=harness.scaled(60))
        except subprocess.TimeoutExpired:
            so, se = "", "(still running)"
        # kernelctl(1), exec: exit 1 when the kernel died under the cell, the daemon's message naming the new one.
        tap.eq((cell.returncode, "let go" in so), (1, False),
               "the cell that was running: exit 1, the kernel died under it (it did not run to its end)",
               f"stdout {so[-300:]!r}, stderr {se[-300:]!r}")
        tap.ok("the kernel died while running the cell" in se and f"now runs kernel {after['kernel_id']}" in se,
               "the cell's error says its kernel died and names the new one", repr(se[-500:]))
    finally:
        open(go, "w").close()
        if cell.poll() is None:
            cell.kill()
            cell.wait()
    r = d.ctl("exec", "b", "import os; print(os.environ['FOO'])", timeout=60)
    tap.eq((r.returncode, r.stdout.splitlines()[:1]), (0, ["new"]), "a cell on b now sees FOO=new", r.stderr)
    now = d.context("k")
    tap.eq((now["pid"], now["kernel_id"], now["incarnation"]), (kept["pid"], kept["kernel_id"], kept["incarnation"]),
           "k, unchanged by the reload, keeps its kernel")
    d.stop()


harness.main(test)
