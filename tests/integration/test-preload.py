"""Preloaded kernels (issue 14): a kernel forked by a preloaded launcher looks to its own code exactly as a cold
one of the same settings (argv, executable, sys.path with the cwd entry, environment, cwd, ids, limits, signal
dispositions and mask, parent, history, command line, stdio, session), runs as the context's user (the launcher
too, never root), is watched like a cold one (exit status, restart, group kill, output to the log, adoption
after a daemon crash, an OOM kill in its own memory cgroup), picks up a package `pip install --user` put into
the user's site directory at its next restart, and every launch the launcher cannot serve (it is still
importing, it was killed, it named a process that is not its kernel, it hangs or dies with the launch waiting,
it never says it is ready) is a cold start, with status saying which way and why, while the daemon's loop
goes on answering other contexts. Needs root (a test user)."""

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# What a kernel's own code can see of how it was started, as JSON on one line.
PROBE = r'''
import json as _j, os as _o, resource as _r, signal as _s, sys as _y
def _h(x):
    return x if x in (_s.SIG_DFL, _s.SIG_IGN, None) else getattr(x, "__qualname__", repr(x))
_fd = lambda n: _o.readlink(f"/proc/self/fd/{n}").split(":")[0]
print(_j.dumps({
    "argv": _y.argv, "orig_argv": _y.orig_argv, "executable": _y.executable, "path": _y.path,
    "environ": dict(_o.environ), "cwd": _o.getcwd(),
    "ids": [_o.getuid(), _o.geteuid(), _o.getgid(), _o.getegid(), sorted(_o.getgroups())],
    "rlimits": {n: _r.getrlimit(getattr(_r, n)) for n in dir(_r) if n.startswith("RLIMIT_")},
    "signals": {_s.Signals(n).name: str(_h(_s.getsignal(n))) for n in _s.valid_signals()
                if n not in (_s.SIGKILL, _s.SIGSTOP) and n in _s.Signals._value2member_map_},
    "sigmask": sorted(int(n) for n in _s.pthread_sigmask(_s.SIG_BLOCK, [])),
    "ppid": _o.getppid(), "session": [_o.getsid(0) == _o.getpid(), _o.getpgid(0) == _o.getpid()],
    "history": str(get_ipython().history_manager.hist_file),
    "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\0"),
    "proc_environ": sorted(open("/proc/self/environ", "rb").read().decode().split("\0")),
    "stdio": [_fd(0), _fd(1), _fd(2)], "umask": _o.umask(_o.umask(0)),
    "flags": str(_y.flags), "cgroup": open("/proc/self/cgroup").read(), "main": sorted(k for k in vars(_y.modules["__main__"]) if not k.startswith("_")),
}))
'''

FIELDS = ("argv", "orig_argv", "executable", "path", "environ", "cwd", "ids", "rlimits", "signals", "sigmask",
          "ppid", "session", "history", "cmdline", "proc_environ", "stdio", "umask", "flags", "main", "cgroup")


def output(text):
    lines = text.splitlines(keepends=True)
    return "".join(lines[:-1]) if lines and lines[-1].startswith("[ok #") else text


def probe(d, name):
    r = d.ctl("exec", name, PROBE, timeout=60)
    try:
        return json.loads(output(r.stdout).splitlines()[-1])
    except (ValueError, IndexError):
        raise harness.HarnessError(f"probe of {name}: exit {r.returncode}, {r.stdout[-500:]!r} {r.stderr[-500:]!r}")


def normalized(d, name, value):
    """value with what differs by right between two contexts (their names, kernel ids, connection files)
    made alike."""
    text = json.dumps(value)
    c = d.context(name)
    text = text.replace(c["kernel_id"], "KERNEL_ID")
    text = text.replace(f"/kernels/{name}/", "/kernels/NAME/").replace(f"KERNELSUP_CONTEXT={name}", "CTX")
    text = text.replace(f'"KERNELSUP_CONTEXT": "{name}"', '"KERNELSUP_CONTEXT": "CTX"')
    # A kernel's own cgroup or scope is named for its context and pid.
    text = re.sub(rf"kernelsup-{name}-[0-9]+", "kernelsup-NAME-PID", text)
    return json.loads(text)


def launcher_pids(d):
    """The running launchers of this daemon (their command line names the launcher's file)."""
    return [p for p in harness.all_pids()
            if harness.PRELOAD_SCRIPT in (harness.proc_cmdline(p) or []) and harness.alive(p)
            and (harness.proc_environ(p) or {}).get("KS_TEST_TAG") == d.tmp]


def uid_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))


def restart_preloaded(d, name):
    """Restarts name and waits for its new kernel; returns its status."""
    old = d.context(name)["kernel_id"]
    d.ctl("restart", name, timeout=60)
    return d.wait_context(name, lambda c: c["state"] == "ready" and c["kernel_id"] != old, "a new kernel", 60)


def same_as_cold(tap, d):
    d.wait_all_ready(("p1", "p2", "c1"))
    tap.eq(d.context("c1")["started"], "cold", "preload = no: the kernel was started cold")
    tap.eq(d.context("c1")["start_note"], "preload = no", "status says why: preload = no")
    first = d.context("p1")
    tap.ok(first["started"] == "cold" and "importing" in (first["start_note"] or ""),
           "the first launch, while the launcher imports, is cold and says so", repr(first))
    d.wait_log("is ready", timeout=120)
    pl = launcher_pids(d)
    # p1 and p2 share one; p3 (memory_max = 200M) has its own: a launcher's cgroup holds its contexts' limits.
    tap.eq(len(pl), 2, "one launcher serves the two contexts of one user, interpreter, environment and limits",
           repr(pl))
    tap.ok(pl and all(uid_of(p) == d.user.uid for p in pl), "the launcher runs as the context's user, not root")
    for name in ("p1", "p2"):
        c = restart_preloaded(d, name)
        tap.eq((c["started"], c["start_note"]), ("preloaded", None), f"{name}: restarted through the launcher")
    hot, cold = probe(d, "p1"), probe(d, "c1")
    tap.ok(hot["ppid"] == d.proc.pid, "the preloaded kernel is the daemon's child (getppid)", hot["ppid"])
    for f in FIELDS:
        tap.eq(normalized(d, "p1", hot[f]), normalized(d, "c1", cold[f]),
               f"preloaded and cold kernels agree on {f}")
    tap.ok(hot["path"][0] == hot["cwd"], "sys.path[0] is the cwd, as -m makes it", hot["path"][:2])
    return hot


def watched(tap, d):
    # Output to the log through the kernel's own stdout, as a cold kernel's.
    mark = d.log_mark()
    d.ctl("exec", "p1", "import os; os.write(1, b'preload-stdout-marker\\n')")
    d.wait_log("p1: preload-stdout-marker", mark)
    tap.ok(True, "what the preloaded kernel writes to its stdout reaches the log, with its context")

    # Its exit status is ours to read, and a restart goes through the launcher again.
    c = d.context("p1")
    os.kill(c["pid"], signal.SIGKILL)
    c = d.wait_context("p1", lambda x: x["state"] == "ready" and x["kernel_id"] != c["kernel_id"],
                       "restarted after SIGKILL", 60)
    tap.eq((c["last_exit"] or {}).get("signal"), "SIGKILL", "kill -9 of a preloaded kernel: its status says SIGKILL")
    tap.eq(c["started"], "preloaded", "restarted after kill -9 through the launcher")

    # Its group goes with it.
    r = d.ctl("exec", "p1", "import subprocess; p = subprocess.Popen(['sleep', '600']); print(p.pid)")
    child = int(output(r.stdout).strip())
    d.ctl("stop", "p1", timeout=60)
    harness.wait_until(lambda: not harness.alive(child), 30, "the kernel's child to be gone")
    tap.ok(True, "stop ends the preloaded kernel's child too")
    d.ctl("start", "p1", timeout=60)
    c = d.wait_state("p1", "ready", 60)
    tap.eq(c["started"], "preloaded", "start after stop goes through the launcher")


def make_wheel(directory):
    """A tiny pure-Python wheel, ks_pipdemo 1.0 (module ks_pipdemo, X = 42), for an offline pip install."""
    files = {"ks_pipdemo/__init__.py": "X = 42\n",
             "ks_pipdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: ks-pipdemo\nVersion: 1.0\n",
             "ks_pipdemo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test-preload\nRoot-Is-Purelib: true\n"
                                                "Tag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files["ks_pipdemo-1.0.dist-info/RECORD"] = "\n".join(record + ["ks_pipdemo-1.0.dist-info/RECORD,,"]) + "\n"
    path = os.path.join(directory, "ks_pipdemo-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    os.chmod(path, 0o644)
    return path


# The command `%pip install --user PKG` runs, offline. The %pip magic itself goes through the user's login shell,
# which is nologin for a test user, so the cell runs the same command with subprocess. Debian marks its Python
# as externally managed (PEP 668): a user install needs --break-system-packages there, as %pip would.
PIP_CELL = """import subprocess
r = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "--user", "--no-index", "--no-cache-dir",
                    "--break-system-packages", "--disable-pip-version-check", {wheel!r}],
                   capture_output=True, text=True)
print(r.returncode)
print(r.stdout[-1500:] + r.stderr[-1500:])"""


def new_package(tap, d):
    """A real `pip install --user` from a cell of a preloaded kernel: the user's site directory did not exist when
    the launcher started (so its sys.path lacks it); after `kernelctl restart` the launcher is renewed and the new
    kernel imports the package."""
    if subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True).returncode != 0:
        for name in ("pip install --user from a cell", "the restart after it renews the launcher",
                     "the restarted kernel imports the new package", "the renewed launcher serves the next launch"):
            tap.skip(name, "/usr/bin/python3 has no pip (apt-get install python3-pip; tools/deps.sh lists it)")
        return
    wheel = make_wheel(d.tmp)
    r = d.ctl("exec", "p1", PIP_CELL.format(wheel=wheel), timeout=180)
    text = output(r.stdout)
    tap.ok(r.returncode == 0 and text.startswith("0\n") and "Successfully installed ks-pipdemo-1.0" in text,
           "pip install --user --no-index of a wheel built here, from a cell of the preloaded kernel", text + r.stderr)
    r = d.ctl("exec", "p1", "import ks_pipdemo")
    tap.ok(r.returncode != 0, "the running kernel does not see it yet (its sys.path was set at its start)",
           r.stdout[-300:])
    mark = d.log_mark()
    c = restart_preloaded(d, "p1")
    tap.ok("renewed" in (c["start_note"] or ""), "the restart after it is cold: the launcher is renewed",
           repr(c["start_note"]))
    r = d.ctl("exec", "p1", "import ks_pipdemo; print(ks_pipdemo.X, ks_pipdemo.__file__)")
    tap.ok(output(r.stdout).startswith("42 " + d.user.home), "the restarted kernel imports the new package "
           "from the user's site directory", r.stdout + r.stderr)
    d.wait_log("is ready", mark, timeout=120)
    c = restart_preloaded(d, "p2")
    tap.eq(c["started"], "preloaded", "the renewed launcher serves the next launch")
    r = d.ctl("exec", "p2", "import ks_pipdemo; print(ks_pipdemo.X)")
    tap.eq(output(r.stdout), "42\n", "and its kernel imports the new package too")


def oom_killed(tap, d):
    """A preloaded kernel in its own memory cgroup (memory_max) allocating past it: the OOM killer ends it, the
    death is reported as an OOM kill, the launcher lives on and the next kernel is preloaded again."""
    c = d.context("p3")
    # Its launcher of its own (its limits) may first see the new package of new_package() and be renewed.
    for _ in range(3):
        if c["started"] == "preloaded":
            break
        d.wait_log("is ready", timeout=120)
        c = restart_preloaded(d, "p3")
    lim = c.get("limits") or {}
    if lim.get("mechanism") not in ("cgroup", "scope") or "memory_max" not in lim.get("enforced", []):
        for name in ("an OOM kill of a preloaded kernel is reported as one", "its launcher survives it",
                     "the next kernel is preloaded"):
            tap.skip(name, f"no memory cgroup of its own for the kernel here: mechanism {lim.get('mechanism')!r}, "
                           f"enforced {lim.get('enforced')!r}, note {lim.get('note')!r}")
        return
    tap.eq(c["started"], "preloaded", "p3 (memory_max = 200M) runs a preloaded kernel")
    before = launcher_pids(d)
    r = d.ctl("exec", "p3", "b = bytearray(400 * 1024 * 1024)\nb[::4096] = b'x' * (len(b) // 4096)", timeout=120)
    tap.ok(r.returncode == 1 and "OOM killer" in r.stderr, "a cell past memory_max: kernelctl says the OOM killer "
           "killed the kernel", r.stderr[-500:])
    after = d.wait_context("p3", lambda x: x["state"] == "ready" and x["kernel_id"] != c["kernel_id"],
                           "p3 ready again with a new kernel", 120)
    le = after.get("last_exit") or {}
    tap.eq((le.get("reason"), le.get("oom"), le.get("signal")), ("oom-kill", True, "SIGKILL"),
           "an OOM kill of a preloaded kernel is reported as one", repr(le))
    tap.ok(before and launcher_pids(d) == before, "its launcher survives it", f"{before} then {launcher_pids(d)}")
    tap.eq((after["started"], after["start_note"]), ("preloaded", None), "the next kernel is preloaded")


def launcher_killed(tap, d):
    for p in launcher_pids(d):
        os.kill(p, signal.SIGKILL)
    harness.wait_until(lambda: not launcher_pids(d), 30, "the launcher to be gone")
    c = restart_preloaded(d, "p1")
    tap.ok(c["started"] == "cold" and "SIGKILL" in (c["start_note"] or ""),
           "with its launcher killed, the next launch is cold at once and says why", repr(c["start_note"]))
    r = d.ctl("exec", "p1", "print(6 * 7)")
    tap.eq(output(r.stdout), "42\n", "and that cold kernel answers")


def adoption(tap, d):
    c = d.context("p2")
    d.kill9()
    d.start()
    a = d.wait_state("p2", "ready", 60)
    tap.eq((a["kernel_id"], a["pid"]), (c["kernel_id"], c["pid"]), "a preloaded kernel is adopted after a crash")
    tap.eq(a["started"], "preloaded", "status still says it was preloaded")
    r = d.ctl("check", "p2", "--expect", c["kernel_id"])
    tap.eq(r.returncode, 0, "check --expect of the adopted preloaded kernel exits 0", r.stdout + r.stderr)
    # The new daemon's launcher starts with its first launch, which is cold.
    mark = d.log_mark()
    c = restart_preloaded(d, "p1")
    tap.ok(c["started"] == "cold" and "importing" in (c["start_note"] or ""),
           "the new daemon's first launch is cold while its launcher imports", repr(c["start_note"]))
    d.wait_log("is ready", mark, timeout=120)


def hostile_launchers(tap):
    """Launchers that lie: one names another of the daemon's kernels as its kernel, one never answers."""
    d = harness.Daemon(tap)
    script = os.path.join(d.tmp, "liar.py")
    with open(script, "w") as f:
        f.write("import json, os, socket, sys, time\n"
                "s = socket.socket(fileno=3)\n"
                "s.send(json.dumps({'ready': os.getpid()}).encode())\n"
                "while True:\n"
                "    m, anc, _, _ = s.recvmsg(1 << 20, 64)\n"
                "    if not m: break\n"
                "    if os.environ.get('MODE') == 'mute': time.sleep(600)\n"
                "    if os.environ.get('MODE') == 'cold':\n"
                "        s.send(json.dumps({'cold': 'asked to'}).encode())\n"
                "        continue\n"
                "    s.send(json.dumps({'pid': int(open(os.environ['VICTIM']).read())}).encode())\n")
    victim_file = os.path.join(d.tmp, "victim")
    d.write_config("[context:v]\npreload = no\n[context:l]\n[context:m]\nenv = MODE=mute\n",
                   defaults=f"argv = {harness.IPYKERNEL_ARGV}\nenv = VICTIM={victim_file}\n")
    d.preload_script = script
    d.start()
    d.wait_all_ready(("v", "l", "m"))
    v = d.context("v")
    with open(victim_file, "w") as f:
        f.write(str(v["pid"]))
    harness.wait_until(lambda: d.log_since(0).count("is ready") >= 2, 60, "both liars to be ready")
    for name in ("l", "m"):
        c = restart_preloaded(d, name)
        tap.eq(c["started"], "cold", f"{name}: a launcher that {'names another kernel' if name == 'l' else 'never answers'}: cold")
        tap.ok(c["pid"] != v["pid"], f"{name}: the named process is not taken as the kernel", repr(c))
        tap.ok(c["start_note"], f"{name}: status says why", repr(c["start_note"]))
    v2 = d.context("v")
    tap.eq((v2["pid"], v2["kernel_id"], v2["state"]), (v["pid"], v["kernel_id"], "ready"),
           "the kernel the liar named is untouched")

    # A flood of contexts that each need a launcher of their own (another environment): at most 8 run.
    names = [f"f{i}" for i in range(12)]
    d.write_config("[context:v]\npreload = no\n" + "".join(
        f"[context:{n}]\nargv = /usr/bin/python3 -m ks_no_such_module -f {{kernel_file}}\npreload = yes\n"
        f"restart = no\nenv = MODE=cold N={n}\n" for n in names))
    d.ctl("reload")
    for n in names:
        d.wait_context(n, lambda c: c["last_exit"] is not None, "its cold kernel to have exited", 120)
    liars = [p for p in harness.all_pids() if script in (harness.proc_cmdline(p) or [])
             and harness.alive(p) and (harness.proc_stat(p) or (0, 0))[1] == d.proc.pid]
    tap.ok(0 < len(liars) <= 8, "12 contexts with 12 environments: at most 8 launchers run", repr(liars))
    # A second round over the 12: the 8 launchers in use are kept (none ended as least recently used to start
    # another, which made every launch cold), and the 4 other environments' launches are cold and say why.
    for n in names:
        d.ctl("start", n, timeout=60)
    for n in names:
        d.wait_context(n, lambda c: c["state"] == "stopped" and (c["last_exit"] or {}).get("code") == 1,
                       "its second cold kernel to have exited", 120)
    log = d.log_since(0)
    started = len(re.findall(r"preloaded launcher [0-9]+ \(/usr/bin/python3 -m ks_no_such_module\) started", log))
    tap.eq((started, log.count("the least recently used")), (8, 0),
           "two rounds over 12 environments: 8 launchers started, none ended to make room")
    notes = set(re.findall(r"(f[0-9]+): launching cold: 8 preloaded launchers run", log))
    tap.eq(len(notes), 4, "the 4 without one say why", repr(notes))
    d.stop()


BROKEN = """import json, os, socket, time
s = socket.socket(fileno=3)
mode = os.environ["MODE"]
if mode == "silent":
    time.sleep(600)  # never says it is ready
s.send(json.dumps({"ready": os.getpid()}).encode())
if mode == "chatty":
    s.send(json.dumps({"pid": 1}).encode())  # an answer nobody asked for
while True:
    m, anc, _, _ = s.recvmsg(1 << 20, 64)
    if not m:
        break
    open(os.environ["MARK"] + "." + mode, "w").close()
    if mode.startswith("hang"):
        time.sleep(600)  # never answers
    os._exit(3)  # dies with the launch waiting
"""


def broken_launchers(tap):
    """A launcher that hangs with a launch waiting, one that dies with a launch waiting, one that never says it
    is ready, one that answers unasked. None of them holds the daemon's loop: while the hanging one is asked,
    another context's status and cells are answered, and a stop of the waiting context is at once. The dying
    one's launch goes cold at once, the hanging one's at the answer deadline, and status says why; the silent
    one is ended at the ready deadline. Both deadlines are the test's (the daemon's environment): the ready one
    shortened, the answer one long enough for a loaded machine."""
    d = harness.Daemon(tap)
    script = os.path.join(d.tmp, "broken.py")
    with open(script, "w") as f:
        f.write(BROKEN)
    mark = os.path.join(d.tmp, "asked")
    def config(h3_mode):
        d.write_config("[context:v]\npreload = no\n[context:h]\nenv = MODE=hang\n[context:x]\nenv = MODE=die\n"
                       "[context:s]\nenv = MODE=silent\n[context:u]\nenv = MODE=chatty\n"
                       f"[context:h2]\nenv = MODE=hang2\n[context:h3]\nenv = MODE={h3_mode}\n",
                       defaults=f"argv = {harness.IPYKERNEL_ARGV}\nenv = MARK={mark}\n")
    config("hang3")
    d.preload_script = script
    reply = harness.scaled(10)
    deadlines = {"KERNELSUP_PRELOAD_READY_MSEC": "2000", "KERNELSUP_PRELOAD_REPLY_MSEC": str(int(reply * 1000))}
    os.environ.update(deadlines)
    try:
        d.start()
    finally:
        for k in deadlines:
            os.environ.pop(k, None)
    d.wait_all_ready(("v", "h", "x", "s", "u", "h2", "h3"))
    harness.wait_until(lambda: d.log_since(0).count("is ready") >= 5, 60, "the hanging and dying launchers' ready")

    # Silent: ended at the ready deadline.
    d.wait_log("the launcher did not say it was ready within 2s", timeout=60)
    silent = lambda: [p for p in harness.all_pids() if script in (harness.proc_cmdline(p) or [])  # noqa: E731
                      and harness.alive(p) and (harness.proc_environ(p) or {}).get("MODE") == "silent"
                      and (harness.proc_stat(p) or (0, 0))[1] == d.proc.pid]
    harness.wait_until(lambda: not silent(), 30, "the silent launcher to be gone")
    tap.ok(True, "a launcher that never says it is ready is ended at the ready deadline, and the log says so")

    # Chatty: an answer nobody asked for ends it; nothing is taken from it.
    d.wait_log("the launcher spoke unasked", timeout=60)
    tap.eq(d.context("u")["state"], "ready", "a launcher that answers unasked is ended; its context's kernel is "
           "untouched")

    # Hanging: the loop is free while its answer is awaited.
    old = d.context("h")
    # kernelctl restart waits for the new kernel: in the background.
    restart = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "restart", "h"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    harness.wait_until(lambda: os.path.exists(mark + ".hang"), 60, "the hanging launcher to have the request")
    st = {c["name"]: c for c in d.status()["contexts"]}
    tap.ok(st["h"]["state"] == "starting" and st["h"]["pid"] is None,
           "while the hanging launcher is asked, a status is answered: h starting, no pid yet", repr(st["h"]))
    tap.eq(st["v"]["state"], "ready", "and it shows the other context ready")
    r = d.ctl("exec", "v", "print(6 * 7)")
    tap.eq(output(r.stdout), "42\n", "another context's cell runs meanwhile")
    tap.eq(d.context("h")["pid"], None, "and h's launch still waits for its launcher after it")
    _, err = restart.communicate(timeout=harness.scaled(120))
    tap.eq(restart.returncode, 0, "kernelctl restart of h returns 0 once the cold kernel is ready", err)
    h = d.wait_context("h", lambda c: c["state"] == "ready" and c["kernel_id"] != old["kernel_id"],
                       "h ready again", 120)
    tap.ok(h["started"] == "cold" and "did not answer within" in (h["start_note"] or ""),
           "a hanging launcher: the waiting launch goes cold at the answer deadline, and status says why",
           repr(h["start_note"]))

    # A stop while a launch waits for its (hanging) launcher: the launch is dropped, and no kernel follows when the
    # launcher misses its deadline; a start after it goes cold, saying why.
    restart = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "restart", "h2"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    harness.wait_until(lambda: os.path.exists(mark + ".hang2"), 60, "the second hanging launcher to have the request")
    mark_log = d.log_mark()
    r = d.ctl("stop", "h2", timeout=60)
    c = d.context("h2")
    tap.eq((r.returncode, c["state"], c["pid"]), (0, "stopped", None),
           "a stop while the launch waits for its launcher: stopped at once, no kernel", r.stdout + r.stderr)
    restart.wait(timeout=harness.scaled(60))
    d.wait_log("the launcher did not answer within", mark_log, timeout=60)
    c = d.context("h2")
    tap.eq((c["state"], c["pid"]), ("stopped", None), "the dropped launch stays dropped past the answer deadline")
    r = d.ctl("start", "h2", timeout=120)
    c = d.context("h2")
    tap.ok(r.returncode == 0 and c["state"] == "ready" and c["started"] == "cold"
           and "did not answer within" in (c["start_note"] or ""),
           "started again: cold once the hanging launcher misses the deadline", r.stdout + r.stderr + repr(c))

    # Dying: its waiting launch goes cold at once.
    old = d.context("x")
    mark_log = d.log_mark()
    d.ctl("restart", "x", timeout=60)
    x = d.wait_context("x", lambda c: c["state"] == "ready" and c["kernel_id"] != old["kernel_id"],
                       "x ready again", 120)
    note = x["start_note"] or ""
    tap.ok(x["started"] == "cold" and ("exited with code 3" in note or "closed its channel" in note),
           "a launcher that dies with a launch waiting: that launch goes cold at once, and status says why",
           repr(note))
    d.wait_log("the preloaded launcher exited with code 3", mark_log)
    tap.ok(os.path.exists(mark + ".die"), "the dying launcher had the request")

    # A reload that changes the process settings of a context whose launch waits for its (hanging) launcher: the
    # launch starts over with the new settings, here through another launcher, still importing, so cold at once,
    # rather than after the old launcher's deadline.
    restart = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "restart", "h3"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    harness.wait_until(lambda: os.path.exists(mark + ".hang3"), 60, "the third hanging launcher to have the request")
    config("hang4")
    r = d.ctl("reload", timeout=60)
    tap.eq(r.returncode, 0, "reload with h3's environment changed", r.stdout + r.stderr)
    c = d.wait_context("h3", lambda c: c["state"] == "ready", "h3 ready after the reload", 120)
    tap.ok(c["started"] == "cold" and "still importing" in (c["start_note"] or ""),
           "a restart of a launch waiting for its launcher starts it over at once, with the new settings",
           repr(c["start_note"]))
    restart.wait(timeout=harness.scaled(60))
    d.stop()


def launcher_cannot_start(tap):
    """A launcher that cannot start (its file is missing): launches are cold at once and say why."""
    d = harness.Daemon(tap)
    d.preload_script = os.path.join(d.tmp, "no-such-launcher.py")
    d.write_config("[context:y]\nargv = /usr/bin/python3 -m ks_no_such_module -f {kernel_file}\npreload = yes\n"
                   "restart = no\nautostart = no\n")
    d.start()
    d.ctl("start", "y", timeout=60)
    d.wait_log("preloaded launcher")
    d.wait_log("exited with code 2")
    mark = d.log_mark()
    d.ctl("start", "y", timeout=60)
    d.wait_context("y", lambda c: c["last_exit"] is not None and c["state"] == "stopped", "the next kernel to exit", 60)
    tap.contains(d.log_since(mark), "y: launching cold: the preloaded launcher exited with code 2",
                 "a launcher that cannot start: the next launch is cold at once and the log says why")
    # Once it is started again (at most every 10 s), a launch meanwhile says why the last one ended, not that
    # it is "still importing".
    again = "y: launching cold: the preloaded launcher is starting again"

    def start_again():
        if d.context("y")["state"] == "stopped":
            d.ctl("start", "y", timeout=60)
        return again in d.log_since(mark)
    harness.wait_until(start_again, 120, "a launch while the launcher starts again", interval=0.5)
    line = next(x for x in d.log_since(mark).splitlines() if again in x)
    tap.ok("exited with code 2" in line and "still importing" not in d.log_since(mark),
           "a launch while it starts again says how the last one ended", line)
    d.stop()


def build_tree(tap):
    """kernelsupd run from its build tree (./quickstart), without KERNELSUP_PRELOAD_SCRIPT, finds the launcher
    of its source tree: the second launch is preloaded."""
    d = harness.Daemon(tap, contexts=f"[context:q]\nargv = {harness.IPYKERNEL_ARGV}\nstart_timeout = 120s\n")
    d.preload_script = None
    d.start()
    d.wait_state("q", "ready", 120)
    d.wait_log("is ready", timeout=120)
    c = restart_preloaded(d, "q")
    tap.eq((c["started"], c["start_note"]), ("preloaded", None),
           "from the build tree without KERNELSUP_PRELOAD_SCRIPT: the second launch is preloaded")
    tap.ok("can't open file" not in d.log_since(0), "and no launcher fails to find its file")
    tap.ok("Ctrl-C will not work" not in d.log_since(0) and "q: (ipykernel's note that Ctrl-C" in d.log_since(0),
           "ipykernel's Ctrl-C banner is not in the daemon's log as its own: one line says it is the kernel's")
    d.stop()


def bad_config(tap):
    d = harness.Daemon(tap)
    d.write_config("[context:x]\nargv = /bin/true {kernel_file}\npreload = yes\n")
    r = subprocess.run([harness.KERNELSUPD, "--config", d.config, "--check-config"], capture_output=True, text=True,
                       env=d.env())
    line = d.config_line("preload = yes")
    tap.eq(r.returncode, 1, "preload = yes with an argv that is not PYTHON -m MODULE: --check-config exits 1")
    tap.contains(r.stderr, f"{d.config}:{line}: [context:x] preload = yes: argv must", "the error names file:line")
    d.write_config("[context:x]\npreload = sometimes\n")
    r = subprocess.run([harness.KERNELSUPD, "--config", d.config, "--check-config"], capture_output=True, text=True,
                       env=d.env())
    tap.contains(r.stderr, "preload = sometimes: expected auto, yes or no", "a bad preload value is named")


def run(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: runs kernels as a test user")
    with tap.guard("configuration"):
        bad_config(tap)
    d = harness.Daemon(tap)
    os.chmod(d.tmp, 0o755)
    try:
        d.user = harness.TestUser(os.path.join(d.tmp, "home"), prefix="ks-pl")
    except (OSError, subprocess.CalledProcessError) as e:
        tap.skip_all(f"cannot create a test user: {e}")
    try:
        work = os.path.join(d.user.home, "work")
        d.user.run("mkdir", work)
        d.write_config("[context:p1]\n[context:p2]\n[context:p3]\nmemory_max = 200M\n[context:c1]\npreload = no\n",
                       defaults=f"user = {d.user.name}\ncwd = {work}\nenv = FOO=bar baz\nstart_timeout = 120s\n"
                                                                              "memory_max = 3G\n")
        d.start()
        with tap.guard("indistinguishable"):
            same_as_cold(tap, d)
        with tap.guard("watched like a cold kernel"):
            watched(tap, d)
        with tap.guard("adoption"):
            adoption(tap, d)
        with tap.guard("a new package"):
            new_package(tap, d)
        with tap.guard("an OOM kill"):
            oom_killed(tap, d)
        with tap.guard("the launcher killed"):
            launcher_killed(tap, d)
        d.stop()
    finally:
        d.user.close()
    with tap.guard("hostile launchers"):
        hostile_launchers(tap)
    with tap.guard("from the build tree"):
        build_tree(tap)
    with tap.guard("a launcher that cannot start"):
        launcher_cannot_start(tap)
    with tap.guard("launchers that hang, die or never say they are ready"):
        broken_launchers(tap)


harness.main(run)
