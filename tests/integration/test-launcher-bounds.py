#!/usr/bin/env python3
"""What a user's code runs in the preloaded launcher (a .pth in the user site, which a cell can write and a
renewal runs) is bounded and ended as a kernel's is: the launcher's own cgroup holds memory_max and tasks_max,
and is ended at `stop` of the user's last context and at the daemon's exit; what the launcher writes reaches the
log only prefixed ("launcher UID: "). And a kernel's flood on its own fd 1 reaches the log only up to the relay's
budget (logrelay.h: 64 KiB, then 16 KiB a second), with a line saying how much was not logged."""

import glob
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# Runs only in the launcher (its argv[0] is the launcher's file): a forged line on its stderr, then a setsid'd
# allocator past memory_max (it writes "allocated" only when it got the memory) and a forker that starts up to
# 80 sleeping children (past tasks_max) and says how many it got.
PAYLOAD = r'''
import os, sys, time
if sys.argv[0].endswith("kernelsup-preload.py") and not os.path.exists(os.path.expanduser("~/forker.done")):
    home = os.path.expanduser("~")
    os.write(2, b"kernelsupd: notice: FORGED-LINE from a user's .pth\n")
    def detached(fn, tag):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open(f"{home}/{tag}.pid", "w") as f:
                    f.write(str(os.getpid()))
                try:
                    fn()
                finally:
                    os._exit(0)
            os._exit(0)
        os.wait()
    def allocate():
        b = bytearray(300 * 1024 * 1024)
        b[::4096] = b"x" * (len(b) // 4096)
        open(f"{home}/allocated", "w").close()
        time.sleep(600)
    def fork_many():
        n = 0
        for _ in range(80):
            try:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                n += 1
            except OSError:
                break
        with open(f"{home}/forker.tmp", "w") as f:
            f.write(str(n))
        os.rename(f"{home}/forker.tmp", f"{home}/forker.done")
        time.sleep(600)
    detached(allocate, "allocator")
    detached(fork_many, "forker")
'''

CELL = r'''
import os, site
os.makedirs(site.getusersitepackages(), exist_ok=True)
open(os.path.expanduser("~/payload.py"), "w").write(PAYLOAD)
pth = os.path.join(site.getusersitepackages(), "zz.pth")
if os.path.exists(pth):
    os.unlink(pth)  # a new entry: the directory changes, so the launcher is renewed
with open(pth, "w") as f:
    f.write("import os; exec(open(os.path.expanduser('~/payload.py')).read(), {})\n")
print("planted")
'''


def read_pid(d, tag):
    path = os.path.join(d.user.home, f"{tag}.pid")
    harness.wait_until(lambda: os.path.exists(path) and open(path).read(), 120, f"the {tag} to start")
    return int(open(path).read())


def cgroup_of(pid):
    try:
        return open(f"/proc/{pid}/cgroup").read()
    except OSError:
        return ""


def escape(tap, d, when, end):
    """Plants the .pth, renews the launcher, checks the bounds, then end() must leave nothing of it."""
    for f in ("allocated", "forker.done", "allocator.pid", "forker.pid"):
        try:
            os.unlink(os.path.join(d.user.home, f))
        except FileNotFoundError:
            pass
    mark = d.log_mark()
    r = d.ctl("exec", "pz", f"PAYLOAD = {PAYLOAD!r}\n" + CELL, timeout=60)
    tap.ok("planted" in r.stdout, f"{when}: the cell planted its .pth", r.stdout[-300:] + r.stderr[-300:])
    d.ctl("restart", "pz", timeout=60)
    alloc, forker = read_pid(d, "allocator"), read_pid(d, "forker")
    done = os.path.join(d.user.home, "forker.done")
    harness.wait_until(lambda: os.path.exists(done), 120, "the forker to be done")
    n = int(open(done).read())
    tap.ok(n < 64, f"{when}: the launcher's code starts fewer processes than tasks_max (64)", f"{n} forked")
    allocated = os.path.join(d.user.home, "allocated")
    harness.wait_until(lambda: not harness.alive(alloc) or os.path.exists(allocated), 120,
                       "the allocator to die or get its memory")
    tap.ok(not os.path.exists(allocated), f"{when}: the launcher's code cannot allocate past memory_max (200M)")
    tap.ok("kernelsup-launcher-" in cgroup_of(forker), f"{when}: it runs in the launcher's own cgroup",
           cgroup_of(forker))
    children = [p for p in harness.all_pids() if (harness.proc_stat(p) or (0, 0))[1] == forker]
    d.wait_log("FORGED-LINE", mark, timeout=60)
    lines = [x for x in d.log_since(mark).splitlines() if "FORGED-LINE" in x]
    tap.ok(lines and all(re.search(rf"launcher {d.user.uid}: kernelsupd: notice: FORGED-LINE", x) for x in lines)
           and not any(x.startswith("kernelsupd: notice: FORGED") for x in lines),
           f"{when}: a line the launcher's code writes reaches the log only prefixed", repr(lines))
    end()
    left = [p for p in [forker, alloc] + children if harness.alive(p)]
    # SIGKILLed by then; their exit is the kernel's to finish.
    left = harness.poll_until(lambda: [p for p in left if harness.alive(p)], 30, "the launcher's processes to go",
                              check=lambda v: not v)
    tap.eq(left, [], f"{when}: nothing the launcher's code started is left")
    for p in left:
        os.kill(p, 9)


def flood(tap, d):
    d.wait_state("fl", "ready", 120)
    size = os.path.getsize(d.log_path)
    t0 = time.monotonic()
    r = d.ctl("exec", "fl", "import os\nfor _ in range(12800): os.write(1, b'\\x1b[2J' + b'A' * 4091 + b'\\n')\n"
              "os.write(1, b'flood-done\\n')", timeout=300)
    tap.eq(r.returncode, 0, "a cell writes 50 MB to its fd 1", r.stderr[-300:])
    harness.wait_until(lambda: "not logged]" in d.log_since(0), 120, "the line about what was not logged")
    elapsed = time.monotonic() - t0
    grown = os.path.getsize(d.log_path) - size
    bound = 64 * 1024 + 16 * 1024 * elapsed
    # Each logged line adds at most its prefix and escapes (4 bytes for each of its 4 control characters).
    tap.ok(grown <= bound * 1.1 + 20000, f"the daemon's log grows by at most the relay's budget: {grown} bytes in "
           f"{elapsed:.1f} s (bound {bound:.0f})")
    log = d.log_since(0)
    dropped = sum(int(n) for n in re.findall(r"fl: \[([0-9]+) bytes of the kernel's output not logged\]", log))
    logged = sum(len(x) - len("fl: ") + 1 for x in log.splitlines() if x.startswith("fl: \\x1b[2J"))
    tap.ok(dropped > 40_000_000 and dropped + logged >= 12800 * 4096 - 12800 * 4 * 3,
           "lines say how many bytes of the kernel's output were not logged", f"{dropped} dropped, {logged} logged")
    tap.ok("\x1b" not in log and "fl: \\x1b[2J" in log, "control characters reach the log escaped (\\x1b)")


def run(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: runs kernels as a test user and places them in cgroups")
    d = harness.Daemon(tap)
    os.chmod(d.tmp, 0o755)
    try:
        d.user = harness.TestUser(os.path.join(d.tmp, "home"), prefix="ks-lb")
    except (OSError, subprocess.CalledProcessError) as e:
        tap.skip_all(f"cannot create a test user: {e}")
    try:
        d.write_config("[context:pz]\nuser = %s\nmemory_max = 200M\ntasks_max = 64\n[context:fl]\npreload = no\n"
                       % d.user.name, defaults=f"argv = {harness.IPYKERNEL_ARGV}\nstart_timeout = 120s\n")
        d.start()
        d.wait_all_ready(("pz", "fl"), timeout=120)
        lim = d.context("pz").get("limits") or {}
        if lim.get("mechanism") != "cgroup" or set(lim.get("enforced", [])) != {"memory_max", "tasks_max"}:
            tap.skip_all(f"no cgroup limits here: {lim!r}")
        with tap.guard("the log relay's bound"):
            flood(tap, d)
        with tap.guard("ended at stop"):
            escape(tap, d, "stop", lambda: d.ctl("stop", "pz", timeout=60))
        # The next launcher starts without the payload: only the .pth the next round's cell plants runs in it
        # (the pid files read are that payload's, not those of one the launcher started at `start` ran).
        for f in glob.glob(os.path.join(d.user.home, ".local", "lib", "python*", "site-packages", "zz.pth")):
            os.unlink(f)
        d.ctl("start", "pz", timeout=60)
        d.wait_state("pz", "ready", 120)
        with tap.guard("ended at the daemon's exit"):
            escape(tap, d, "exit", lambda: d.stop(timeout=60))
    finally:
        d.user.close()


harness.main(run)
