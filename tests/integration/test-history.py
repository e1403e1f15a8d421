"""Kernels of one user share a HOME, and IPython keeps its history in HOME/.ipython/.../history.sqlite: kernels
writing there at once find it locked and print a warning into a cell's output. The default argv keeps each
kernel's history in memory: %history, In and _ih still work, nothing is written under HOME, and cells run
at once in several kernels with one HOME print exactly their own output."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NAMES = ("h1", "h2", "h3")


def output(text):
    """What the cell printed: kernelctl exec's stdout without its last line, "[ok #N]"."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:-1]) if lines and lines[-1].startswith("[ok #") else text


def test(tap):
    d = harness.Daemon(tap)
    home = os.path.join(d.tmp, "home")
    os.makedirs(home)
    d.write_config("".join(f"[context:{n}]\n" for n in NAMES), defaults=f"env = HOME={home}\n")
    d.start()
    d.wait_all_ready(NAMES)

    pid = d.context("h1")["pid"]
    cmd = harness.proc_cmdline(pid) or []
    tap.ok("--HistoryManager.hist_file=:memory:" in cmd, "the default argv keeps IPython's history in memory",
           repr(cmd))
    tap.eq((harness.proc_environ(pid) or {}).get("HOME"), home, "the kernels share one HOME")

    r = d.ctl("exec", "h1", "a = 1")
    r = d.ctl("exec", "h1", "b = a + 1")
    r = d.ctl("exec", "h1", "%history")
    tap.eq(output(r.stdout), "a = 1\nb = a + 1\n%history\n", "%history shows this kernel's cells")
    r = d.ctl("exec", "h1", "print(In[1], _ih[2], sep=' | ')")
    tap.eq(output(r.stdout), "a = 1 | b = a + 1\n", "In and _ih hold the cells")

    # Cells in every kernel at once, over and over: each prints its own output and nothing else.
    cell = "for i in range(3):\n    x = i\nprint('done', x)"
    bad = []
    for _ in range(5):
        procs = [subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", n, cell],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in NAMES
                 for _ in range(3)]
        for p in procs:
            so, se = p.communicate(timeout=harness.scaled(60))
            if (p.returncode, output(so), se) != (0, "done 2\n", ""):
                bad.append((p.returncode, so, se))
    tap.eq(bad, [], "45 cells run at once in 3 kernels with one HOME: each prints only 'done 2'")
    written = [os.path.join(r, f) for r, _, fs in os.walk(home) for f in fs if f.startswith("history.sqlite")]
    tap.eq(written, [], "no history database is written under HOME")
    d.stop()


harness.main(test)
