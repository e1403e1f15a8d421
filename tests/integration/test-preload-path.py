#!/usr/bin/env python3
"""sys.path of a preloaded kernel is a cold one's for every variable that shapes it at start-up (PYTHONSAFEPATH
with PYTHONPATH, PYTHONPATH, PYTHONNOUSERSITE, PYTHONHOME), both computed by the real interpreter (the
interpreter flags -P, -I, -E, -s in argv make a kernel cold: argv is then not PYTHON -m MODULE); and a .pth
edited in place renews the launcher (its own mtime is in the fingerprint), as a cold start would see it; so does one
written while the launcher imports (the path part of the fingerprint is taken before the imports)."""

import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

VARIANTS = {
    "safe": ["PYTHONSAFEPATH=1", "PYTHONPATH={home}/plib"],
    "ppath": ["PYTHONPATH={home}/plib"],
    "nouser": ["PYTHONNOUSERSITE=1"],
    "home": ["PYTHONHOME=/usr"],
}
PATH_CELL = "import json, sys; print(json.dumps(sys.path))"


def sys_path(d, name):
    r = d.ctl("exec", name, PATH_CELL, timeout=60)
    lines = [x for x in r.stdout.splitlines() if x.startswith("[\"") or x == "[]"]
    if not lines:
        raise harness.HarnessError(f"{name}: {r.stdout!r} {r.stderr!r}")
    return json.loads(lines[-1])


def preloaded(d, name):
    """Restarts name until its kernel is preloaded (its launcher may first be importing)."""
    for _ in range(6):
        c = d.context(name)
        if c["started"] == "preloaded":
            return c
        d.wait_log("is ready", timeout=120)
        old = c["kernel_id"]
        d.ctl("restart", name, timeout=60)
        d.wait_context(name, lambda x: x["state"] == "ready" and x["kernel_id"] != old, "a new kernel", 120)
    return d.context(name)


def variants(tap, d):
    for v in VARIANTS:
        hot = preloaded(d, f"{v}-hot")
        tap.eq(hot["started"], "preloaded", f"{v}: the kernel is preloaded", hot["start_note"])
        tap.eq(sys_path(d, f"{v}-hot"), sys_path(d, f"{v}-cold"), f"{v}: sys.path of a preloaded kernel is a cold one's")
    tap.ok(sys_path(d, "safe-hot")[0] == os.path.join(d.user.home, "plib"),
           "PYTHONSAFEPATH: the first entry is PYTHONPATH's, no cwd")


def pth_edit(tap, d):
    home = d.user.home
    cell = (f"import os, site\nsp = site.getusersitepackages(); os.makedirs(sp, exist_ok=True)\n"
            f"for n in 'AB':\n    os.makedirs(f'{home}/lib{{n}}', exist_ok=True)\n"
            f"    open(f'{home}/lib{{n}}/mod{{n}}.py', 'w').write('X = 1\\n')\n"
            f"open(os.path.join(sp, 'ab.pth'), 'w').write('{home}/libA\\n')\nprint('ok')")
    d.ctl("exec", "pth", cell, timeout=60)
    d.ctl("restart", "pth", timeout=60)  # the launcher renews: a new .pth in the user site
    c = preloaded(d, "pth")
    r = d.ctl("exec", "pth", "import modA; print('A', modA.X)", timeout=60)
    tap.ok(c["started"] == "preloaded" and "A 1" in r.stdout, "the .pth's directory is on a preloaded kernel's path",
           r.stdout + r.stderr)
    d.ctl("exec", "pth", "import site, os\nf = open(os.path.join(site.getusersitepackages(), 'ab.pth'), 'r+')\n"
          f"f.write('{home}/libB\\n'); f.close()", timeout=60)
    old = d.context("pth")["kernel_id"]
    d.ctl("restart", "pth", timeout=60)
    d.wait_context("pth", lambda x: x["state"] == "ready" and x["kernel_id"] != old, "a new kernel", 120)
    r = d.ctl("exec", "pth", "import modB; print('B', modB.X)", timeout=60)
    tap.ok("B 1" in r.stdout, "a .pth edited in place: the next kernel has its new path", r.stdout + r.stderr)


HOOK = r"""
import os, sys, time
class Hold:
    # In the launcher only: its import of ipykernel waits while HOME/hold exists, after saying so in HOME/held.
    def find_spec(self, name, path=None, target=None):
        if name == "ipykernel" and b"kernelsup-preload" in open("/proc/self/cmdline", "rb").read():
            home = os.path.expanduser("~")
            open(home + "/held", "w").close()
            deadline = time.monotonic() + 120
            while os.path.exists(home + "/hold") and time.monotonic() < deadline:
                time.sleep(0.05)
        return None
sys.meta_path.insert(0, Hold())
"""


def pth_while_importing(tap, d):
    home = d.user.home
    hold, held = os.path.join(home, "hold"), os.path.join(home, "held")
    open(hold, "w").close()
    cell = (f"import os, site\nsp = site.getusersitepackages(); os.makedirs(sp, exist_ok=True)\n"
            f"os.makedirs('{home}/libC', exist_ok=True); open('{home}/libC/modC.py', 'w').write('X = 1\\n')\n"
            f"open(os.path.join(sp, 'ks_hold.py'), 'w').write({HOOK!r})\n"
            f"open(os.path.join(sp, 'hold.pth'), 'w').write('import ks_hold\\n')\nprint('ok')")
    r = d.ctl("exec", "pth", cell, timeout=60)
    tap.ok("ok" in r.stdout, "a cell plants a .pth whose hook holds the next launcher in its imports",
           r.stdout + r.stderr)
    mark = d.log_mark()
    d.ctl("restart", "pth", timeout=60)  # a new .pth: the launcher renews, and the new one is held
    harness.wait_until(lambda: os.path.exists(held), 120, "the new launcher to reach its import of ipykernel")
    # While it is held (after site.py read the .pth files): one more .pth, which it never read.
    sp = harness.poll_until(lambda: glob.glob(os.path.join(home, ".local/lib/python*/site-packages")), 10,
                            "the user site", check=bool)[0]
    with open(os.path.join(sp, "zz-c.pth"), "w") as f:
        f.write(f"{home}/libC\n")
    os.unlink(hold)
    d.wait_log("is ready", mark, timeout=120)
    c = preloaded(d, "pth")
    r = d.ctl("exec", "pth", "import modC; print('C', modC.X)", timeout=60)
    tap.ok(c["started"] == "preloaded" and "C 1" in r.stdout,
           "a .pth written while the launcher imported: the next preloaded kernel has its path (the launcher was "
           "renewed)", f"{c['started']}: {r.stdout + r.stderr}")
    for f in ("hold.pth", "zz-c.pth"):
        os.unlink(os.path.join(sp, f))


def run(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: runs kernels as a test user")
    d = harness.Daemon(tap)
    os.chmod(d.tmp, 0o755)
    try:
        d.user = harness.TestUser(os.path.join(d.tmp, "home"), prefix="ks-pp")
    except (OSError, subprocess.CalledProcessError) as e:
        tap.skip_all(f"cannot create a test user: {e}")
    try:
        home = d.user.home
        d.user.run("mkdir", f"{home}/plib", f"{home}/work")
        contexts = ""
        for v, env in VARIANTS.items():
            for kind in ("hot", "cold"):
                contexts += f"[context:{v}-{kind}]\n" + "".join(f"env = {e.format(home=home)}\n" for e in env)
                contexts += "preload = no\n" if kind == "cold" else ""
        contexts += "[context:pth]\n"
        d.write_config(contexts, defaults=f"user = {d.user.name}\ncwd = {home}/work\nargv = {harness.IPYKERNEL_ARGV}\n"
                                          "start_timeout = 180s\n")
        d.start(timeout=180)
        d.wait_all_ready([f"{v}-{k}" for v in VARIANTS for k in ("hot", "cold")] + ["pth"], timeout=240)
        with tap.guard("sys.path flags"):
            variants(tap, d)
        with tap.guard("a .pth edited in place"):
            pth_edit(tap, d)
        with tap.guard("a .pth written while the launcher imports"):
            pth_while_importing(tap, d)
        d.stop()
    finally:
        d.user.close()


harness.main(run)
