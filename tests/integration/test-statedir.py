"""One daemon per state_dir, and state files that are not regular files. A second kernelsupd on the
same state_dir but another socket is refused before it writes anything, naming the state_dir and the
first daemon's pid, and the first daemon's kernel is untouched; so is a second one on the same socket
(supervisor.json is not rewritten). A contexts/NAME.json that is a directory, a symlink or a FIFO
costs only that context its state: the daemon starts, says which file, and the context starts fresh.
A contexts.d file whose name holds a newline and an ESC is named in the log escaped (\\x0a, \\x1b): the line
is not split and no escape sequence reaches the log. 1,000 contexts with restore = replay start under
RLIMIT_NOFILE 512: a journal holds no descriptor between its calls."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DEFAULTS = f"argv = {harness.STUB_ARGV}\n"


def second_daemon(d, socket_path):
    """Runs a kernelsupd on d's configuration with socket = socket_path; returns (exit code, output)."""
    conf = os.path.join(d.tmp, "second.ini")
    with open(d.config) as f:
        text = f.read().replace(f"socket = {d.socket}\n", f"socket = {socket_path}\n")
    with open(conf, "w") as f:
        f.write(text)
    env = d.env()
    env.pop("NOTIFY_SOCKET", None)
    r = subprocess.run([harness.KERNELSUPD, "--config", conf], env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=harness.scaled(60))
    return r.returncode, r.stdout + r.stderr


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_second_daemon(tap):
    d = harness.Daemon(tap, contexts="[context:a]\n", defaults=DEFAULTS)
    d.start()
    c0 = d.wait_state("a", "ready")
    sup = os.path.join(d.state_dir, "supervisor.json")
    before = read(sup)
    other = os.path.join(d.tmp, "other.sock")

    rc, out = second_daemon(d, other)
    tap.eq(rc, 1, "a second kernelsupd on the same state_dir and another socket exits 1")
    tap.ok(f"state_dir {d.state_dir} is in use by another kernelsupd (pid {d.proc.pid}" in out,
           "it names the state_dir and the pid of the daemon holding it", out[-1000:])
    tap.ok("adopting" not in out, "it adopts nothing", out[-1000:])
    tap.eq(read(sup), before, "supervisor.json is unchanged")
    tap.ok(not os.path.exists(other), "it leaves no socket behind")

    rc, out = second_daemon(d, d.socket)
    tap.eq(rc, 1, "a second kernelsupd with the same configuration exits 1")
    tap.eq(read(sup), before, "and does not rewrite supervisor.json either (R8a)")

    c1 = d.wait_state("a", "ready")
    tap.eq((c1["pid"], c1["incarnation"]), (c0["pid"], c0["incarnation"]),
           "the first daemon's kernel keeps running, the same incarnation")
    tap.ok(d.running(), "the first daemon still runs")
    d.stop()
    # The lock goes with its holder: the next daemon starts and adopts nothing stale.
    d.start()
    d.wait_state("a", "ready")
    d.stop()


def test_not_regular(tap):
    names = ("dir", "link", "fifo")
    d = harness.Daemon(tap, contexts="".join(f"[context:{n}]\n" for n in names) + "[context:plain]\n",
                       defaults=DEFAULTS)
    d.start()
    for n in names + ("plain",):
        d.wait_state(n, "ready")
    d.stop()
    sdir = os.path.join(d.state_dir, "contexts")
    for n in names:
        os.unlink(os.path.join(sdir, f"{n}.json"))
    os.mkdir(os.path.join(sdir, "dir.json"))
    target = os.path.join(d.tmp, "target.json")
    with open(target, "w") as f:
        json.dump({"incarnation": 7}, f)
    os.symlink(target, os.path.join(sdir, "link.json"))
    os.mkfifo(os.path.join(sdir, "fifo.json"))
    mark = d.log_mark()
    d.start()
    for n in names:
        c = d.wait_state(n, "ready")
        tap.ok(c["pid"], f"state {n}.json that is a {n}: the daemon starts and the context runs fresh")
    log = d.log_since(mark)
    for n in names:
        tap.ok(f"{sdir}/{n}.json" in log, f"the log names {n}.json", log[-2000:])
    tap.eq(read(target), b'{"incarnation": 7}', "the symlink's target is neither read as state nor written")
    d.stop()


def test_log_escapes(tap):
    evil = "evil\nname\x1b[31m.ini"
    d = harness.Daemon(tap, contexts="[context:plain]\nautostart = no\n", defaults=DEFAULTS)
    d.write_context_file(evil, "[context:evil]\nautostart = no\n")
    d.start()
    d.write_context_file(evil, "[context:evil]\nno_such_key = 1\n")
    mark = d.log_mark()
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "a reload with a bad key in that file is refused", r.stderr)
    log = d.log_since(mark)
    tap.ok("evil\\x0aname\\x1b[31m.ini" in log, "the daemon's log names the file with its control characters "
           "escaped", log[-1500:])
    tap.ok("\x1b" not in log and not any(line.startswith("name") for line in log.splitlines()),
           "no raw ESC in the log, and the name does not split its line", repr(log[-1500:]))
    d.stop()


def test_many_journals(tap):
    n, limit = 1000, 512
    defaults = DEFAULTS + "restore = replay\nautostart = no\n"
    d = harness.Daemon(tap, contexts="", defaults=defaults)
    # 5 ports each are counted; no kernel ever binds them (autostart = no).
    d.port_min, d.port_max = 40000, 40000 + 5 * n
    d.write_config("", defaults)
    d.write_context_file("many", "".join(f"[context:j{i}]\n" for i in range(n)))
    # soft = hard: the daemon raises its soft limit to the hard one.
    d.launcher = ("prlimit", f"--nofile={limit}:{limit}", "--")
    d.start(timeout=120)
    _, st = d.ctl_json("status", timeout=120)
    ctxs = (st or {}).get("contexts", []) if isinstance(st, dict) else (st or [])
    tap.eq(len(ctxs), n,
           f"{n} contexts with restore = replay start under RLIMIT_NOFILE {limit}")
    jdir = os.path.join(d.state_dir, "journals")
    tap.eq(len([f for f in os.listdir(jdir) if f.endswith(".journal")]), n, f"each has its journal file ({n})")
    fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
    tap.diag(f"descriptors open in kernelsupd: {fds}")
    tap.ok(fds < 100, "the daemon holds no descriptor per journal", f"{fds} open")
    d.stop(timeout=120)


def test(tap):
    with tap.guard("a second daemon on one state_dir"):
        test_second_daemon(tap)
    with tap.guard("non-regular state files"):
        test_not_regular(tap)
    with tap.guard("control characters of names in the log"):
        test_log_escapes(tap)
    with tap.guard("many journals, few descriptors"):
        test_many_journals(tap)


harness.main(test, needs_jupyter=False)
