"""A uid other than root adds and removes its own contexts, hostile trials each a point: its add
(kernelctl add, add --wait) runs as itself (the file says who added it) and its report names its
own context alone, another uid's name (add over it, remove it: the same answer as a missing name), a
file not loaded yet (never written over), a root context of its own user (not removable by it), a
user= other than itself, each root-only key, a cwd it cannot enter, limits above the defaults, the
cap (the cap+1-th add refused, one more after a remove, still so after a restart of the daemon),
user_contexts_max = 0, a flood of 200 concurrent adds (the daemon stays up, exactly the cap exist),
root's add and remove unchanged, an error in root's file (not shown to the uid), root's later
[context:NAME] of a name the uid took, and the two new keys' file:line errors.

Needs root: it creates two test users (removed at the end). Kernels are stubs (tests/stubkernel)."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CAP = 3
DEFAULTS = f"autostart = no\nargv = {harness.STUB_ARGV}\nmemory_max = 1G\ntasks_max = 100\nstop_timeout = 10s\n"

# Runs as a test user: N adds of NAME-i at once, one connection each; prints what each was answered.
FLOOD = r'''
import json, resource, select, socket, sys

path, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 64)), hard))
socks = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.connect(path)
    req = {"jsonrpc": "2.0", "id": i, "method": "add", "params": {"context": f"{prefix}{i}", "env": []}}
    try:
        s.sendall(json.dumps(req).encode() + b"\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused and closed before the request went: its refusal line may still be there to read
    socks.append(s)
answers, bufs = {}, {s.fileno(): b"" for s in socks}
open_ = {s.fileno(): s for s in socks}
while open_:
    ready, _, _ = select.select(list(open_.values()), [], [], 120)
    if not ready:
        break
    for s in ready:
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            data = b""
        bufs[s.fileno()] += data
        if not data or b"\n" in bufs[s.fileno()]:
            line = bufs[s.fileno()].split(b"\n")[0]
            try:
                j = json.loads(line)
                answers[s.fileno()] = "ok" if "result" in j else str(j["error"]["code"]) + " " + j["error"]["message"]
            except ValueError:
                answers[s.fileno()] = "closed" if not line else "garbled"
            del open_[s.fileno()]
            s.close()
print(json.dumps(list(answers.values()) + ["silent"] * len(open_)))
'''


class As:
    """kernelctl and raw requests as a test user."""

    def __init__(self, d, user):
        self.d, self.user = d, user
        self.prefix = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]

    def ctl(self, *args, timeout=60):
        return self.d.ctl(*args, prefix=self.prefix, timeout=timeout)

    def rpc(self, method, params):
        """One request on a connection of this user's: the parsed answer."""
        script = ("import json, socket, sys\n"
                  "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                  "s.sendall(sys.argv[2].encode() + b'\\n')\n"
                  "buf = b''\n"
                  "while b'\\n' not in buf:\n"
                  "    c = s.recv(65536)\n"
                  "    if not c: break\n"
                  "    buf += c\n"
                  "print(buf.decode().split('\\n')[0])\n")
        req = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        r = subprocess.run([*self.prefix, sys.executable, "-c", script, self.d.socket, req], capture_output=True,
                           text=True, timeout=harness.scaled(60))
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {"raw": r.stdout + r.stderr}


def err(rep):
    e = (rep or {}).get("error") or {}
    return e.get("code"), e.get("message", "")


def file_text(d, name):
    try:
        with open(d.context_file(name)) as f:
            return f.read()
    except OSError:
        return None


def names(d):
    return sorted(c["name"] for c in d.status()["contexts"])


def test_own_add(tap, d, a, b):
    r = a.ctl("add", "a1")
    tap.eq(r.returncode, 0, "a uid's kernelctl add of a name of its own exits 0", r.stderr)
    text = file_text(d, "a1") or ""
    tap.ok(f"added_by = {a.user.uid}\n" in text and f"user = {a.user.name}\n" in text,
           "its file records who added it and runs it as that uid", text)
    r = a.ctl("start", "a1")
    tap.eq(r.returncode, 0, "it starts", r.stdout + r.stderr)
    pid = d.context("a1").get("pid")
    uid = os.stat(f"/proc/{pid}").st_uid if pid else None
    tap.eq(uid, a.user.uid, "its kernel runs as the uid that added it")
    r = a.ctl("add", "a2", "--user", a.user.name, "--cwd", a.user.home, "--env", "X=1", "--wait")
    tap.eq(r.returncode, 0, "add --wait with user = itself, a cwd it can enter and env exits 0", r.stderr)
    tap.contains(r.stdout, "a2: ready (pid", "add --wait as the uid starts its context")
    # A root edit not reloaded yet: the uid's add applies it (a reload is of the whole configuration), but is
    # told of its own context alone, not of root's change nor of how many contexts there are.
    d.write_context_file("rootlater", f"[context:rootlater]\nuser = {b.user.name}\n")
    r = b.ctl("add", "b1", "--json")
    tap.eq(r.returncode, 0, "the other uid adds b1", r.stderr)
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        rep = None
    tap.eq({k: v for k, v in (rep or {}).items() if v}, {"added": ["b1"]},
           "its report names its own context alone, and counts no other", r.stdout)
    tap.ok("rootlater" in names(d), "root's pending edit was applied by that reload")


def test_other_names(tap, d, a, b):
    before = file_text(d, "b1")
    r = a.ctl("add", "b1")
    tap.eq(r.returncode, 1, "add over another uid's name exits 1", r.stderr)
    tap.contains(r.stderr, "context b1 exists already", "it says only that the name is taken")
    tap.eq(file_text(d, "b1"), before, "the other uid's file is unchanged")
    # A file root wrote but has not reloaded yet: add never writes over it either.
    pending = f"[context:pend]\nuser = {b.user.name}\n"
    d.write_context_file("pend", pending)
    r = a.ctl("add", "pend")
    tap.eq(r.returncode, 1, "add of a name whose file is in contexts_dir, not loaded yet, exits 1", r.stderr)
    tap.contains(r.stderr, "pend.ini exists already", "it says the file exists")
    tap.eq(file_text(d, "pend"), pending, "and the file is unchanged")
    d.remove_context_file("pend")
    missing = a.ctl("remove", "nosuch")
    r = a.ctl("remove", "b1")
    tap.eq((r.returncode, r.stdout, r.stderr.replace("b1", "NAME")),
           (missing.returncode, missing.stdout, missing.stderr.replace("nosuch", "NAME")),
           "remove of another uid's context answers exactly as a missing name", r.stderr + missing.stderr)
    tap.eq(r.returncode, 5, "that answer is exit 5 (no such context)")
    tap.ok(os.path.exists(d.context_file("b1")) and "b1" in names(d), "b1 is still there")
    rep = a.rpc("remove", {"context": "b1"})
    rep_missing = a.rpc("remove", {"context": "nosuch"})
    tap.eq((err(rep)[0], err(rep)[1].replace("b1", "NAME")), (err(rep_missing)[0], err(rep_missing)[1].replace(
        "nosuch", "NAME")), "the raw answers are the same too", repr((rep, rep_missing)))
    for ctx in ("rootini", "rootadd"):
        r = a.ctl("remove", ctx)
        tap.eq(r.returncode, 4, f"remove of {ctx} (runs as the uid, but root's) exits 4", r.stderr)
        tap.contains(r.stderr, f"context {ctx} was not added by uid {a.user.uid}", f"remove of {ctx} says why")
    tap.ok(os.path.exists(d.context_file("rootadd")) and "rootini" in names(d), "root's contexts are still there")


def test_user_and_keys(tap, d, a, b):
    for user in (b.user.name, "root", "0", str(b.user.uid), "ks-no-such-user-x"):
        r = a.ctl("add", "ux", "--user", user)
        tap.eq(r.returncode, 4, f"add with user = {user} exits 4", r.stderr)
        tap.contains(r.stderr, f"permission denied: user = {user} is not uid {a.user.uid}",
                     f"user = {user}: the message names the value")
    root_keys = [("--group", "root"), ("--connection-file", f"{d.tmp}/x.json"), ("--transport", "tcp"),
                 ("--restore", "replay")]
    for opt, value in root_keys:
        r = a.ctl("add", "ux", opt, value)
        key = opt[2:].replace("-", "_")
        tap.eq(r.returncode, 4, f"add {opt} exits 4", r.stderr)
        tap.contains(r.stderr, f"permission denied: {key} is root's to set", f"{opt}: the message names the key")
    for key, value in (("argv", "/bin/sh -c id"), ("autostart", "yes"), ("added_by", "0"), ("preload", "no")):
        rep = a.rpc("add", {"context": "ux", key: value})
        tap.eq(err(rep)[0], -32002, f"raw add with {key} is refused as permission denied", repr(rep))
        tap.contains(err(rep)[1], f"{key} is root's to set", f"raw {key}: the message names the key")
    tap.ok(file_text(d, "ux") is None and "ux" not in names(d), "none of them wrote a file or made a context")


def test_cwd(tap, d, a):
    closed = os.path.join(d.tmp, "closed")
    os.makedirs(closed, mode=0o700, exist_ok=True)
    os.chmod(closed, 0o700)
    inner = os.path.join(closed, "inner")
    os.makedirs(inner, mode=0o755, exist_ok=True)
    for cwd in (closed, inner):
        r = a.ctl("add", "cx", "--cwd", cwd)
        tap.eq(r.returncode, 4, f"add --cwd {cwd} (which root may enter, the uid not) exits 4", r.stderr)
        tap.contains(r.stderr, f"cannot enter {cwd}", f"--cwd {cwd}: it says the uid cannot enter it")
    r = a.ctl("add", "cx", "--cwd", "relative/dir")
    tap.eq(r.returncode, 1, "add --cwd of a relative path exits 1, as root's", r.stderr)
    tap.contains(r.stderr, "cwd = relative/dir: must be an absolute path", "it says why")
    tap.ok(file_text(d, "cx") is None, "no file was written")


def test_limits(tap, d, a):
    for key, value, default in (("memory_max", "2G", "1073741824"), ("memory_max", "none", "1073741824"),
                                ("tasks_max", "101", "100"), ("tasks_max", "none", "100"),
                                ("output_limit", "11M", "10485760"), ("start_timeout", "31s", "30s"),
                                ("stop_timeout", "1min", "10s")):
        rep = a.rpc("add", {"context": "lx", key: value})
        tap.eq(err(rep)[0], -32002, f"add with {key} = {value} (default {default}) is refused", repr(rep))
        tap.contains(err(rep)[1], f"{key} = {value} is above the default ({default})",
                     f"{key} = {value}: the message names the value and the default")
    tap.ok(file_text(d, "lx") is None, "no file was written")
    rep = a.rpc("add", {"context": "lx", "memory_max": "512M", "tasks_max": "100", "cpu_quota": "400%",
                        "output_limit": "1M", "start_timeout": "5s", "stop_timeout": "10s", "kernel": "python3"})
    tap.ok("result" in rep, "limits at or below the defaults (cpu_quota: the default is none) are taken", repr(rep))
    text = file_text(d, "lx") or ""
    tap.ok("memory_max = 512M\n" in text and "cpu_quota = 400%\n" in text, "and written", text)


def test_cap(tap, d, a):
    # a1, a2 and lx are the uid's: the cap is CAP = 3.
    r = a.ctl("add", "a4")
    tap.eq(r.returncode, 4, f"the cap+1-th add ({CAP} = user_contexts_max) exits 4", r.stderr)
    tap.contains(r.stderr, f"uid {a.user.uid} has added {CAP} contexts, as many as [supervisor] user_contexts_max "
                 "allows; remove one first", "it says so")
    r = a.ctl("remove", "lx")
    tap.eq(r.returncode, 0, "the uid removes a context it added", r.stderr)
    tap.ok(file_text(d, "lx") is None and "lx" not in names(d), "its file and context are gone")
    r = a.ctl("add", "a4")
    tap.eq(r.returncode, 0, "after a remove one more fits", r.stderr)
    r = a.ctl("add", "a5")
    tap.eq(r.returncode, 4, "and then no more", r.stderr)
    d.stop()
    d.start()
    r = a.ctl("add", "a5")
    tap.eq(r.returncode, 4, "after a restart of the daemon the cap still counts the uid's contexts", r.stderr)
    r = a.ctl("remove", "a4")
    tap.eq(r.returncode, 0, "after a restart the uid still removes what it added", r.stderr)
    r = a.ctl("add", "a4")
    tap.eq(r.returncode, 0, "and adds again", r.stderr)


def test_off(tap, d, a, supervisor):
    d.write_config(d.contexts_text, DEFAULTS, supervisor.replace(f"= {CAP}", "= 0"))
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload with user_contexts_max = 0", r.stderr)
    r = a.ctl("remove", "a4")
    tap.eq(r.returncode, 0, "with user_contexts_max = 0 the uid still removes its own", r.stderr)
    r = a.ctl("add", "a4")
    tap.eq(r.returncode, 4, "but adds nothing", r.stderr)
    tap.contains(r.stderr, "only root may add contexts ([supervisor] user_contexts_max = 0)", "it says why")
    d.write_config(d.contexts_text, DEFAULTS, supervisor)
    tap.eq(d.ctl("reload").returncode, 0, "user_contexts_max back")


def test_flood(tap, d, b):
    before = names(d)
    r = subprocess.run([*b.prefix, sys.executable, "-c", FLOOD, d.socket, "fl", "200"], capture_output=True,
                       text=True, timeout=harness.scaled(300))
    try:
        answers = json.loads(r.stdout)
    except ValueError:
        answers = []
    tap.eq(len(answers), 200, "a flood of 200 concurrent adds: every connection answered or closed", r.stderr[-2000:])
    oks = answers.count("ok")
    kinds = {}
    for x in answers:
        kinds[x[:60]] = kinds.get(x[:60], 0) + 1
    tap.diag(f"the flood's answers: {kinds!r}")
    tap.ok(d.running() and d.ctl("status").returncode in (0, 1), "the daemon stays up under the flood and answers")
    own = [n for n in names(d) if n.startswith("fl")]
    # b1 is the uid's too.
    tap.eq((oks, len(own)), (CAP - 1, CAP - 1), f"exactly the cap ({CAP}, b1 among them) exist after the flood",
           repr(sorted(set(answers))))
    tap.ok(all(x == "ok" or x.startswith("-32002 permission denied") or "too many connections" in x
               for x in answers), "every other add was refused by the cap or the connection limit",
           repr(sorted(set(answers))))
    tap.eq(sorted(set(names(d)) - set(own)), before, "no other context changed")
    files = [f for f in os.listdir(d.contexts_dir) if f.startswith("fl")]
    tap.eq(len(files), CAP - 1, "and as many files", repr(files))


def test_root(tap, d, a):
    r = d.ctl("add", "r9", "--group", "root", "--transport", "tcp", "--user", a.user.name)
    tap.eq(r.returncode, 0, "root's add with root's keys and another user exits 0", r.stderr)
    tap.contains(file_text(d, "r9") or "", "added_by = 0\n", "root's file records root")
    r = d.ctl("remove", "a1")
    tap.eq(r.returncode, 0, "root removes a context a uid added", r.stderr)
    r = d.ctl("remove", "r9")
    tap.eq(r.returncode, 0, "root removes its own", r.stderr)
    r = d.ctl("remove", "rootini")
    tap.eq(r.returncode, 1, "root's remove of an INI context still says to edit the file", r.stderr)
    tap.contains(r.stderr, "not in", "it names the file")


def test_config_errors(tap, d, a, supervisor):
    bad = supervisor.replace(f"= {CAP}", "= 1001")
    d.write_config(d.contexts_text, DEFAULTS, bad)
    line = d.config_line("user_contexts_max = 1001")
    r = a.ctl("add", "a6")
    tap.eq(r.returncode, 1, "a uid's add while root's file does not load exits 1", r.stderr)
    tap.ok("does not load as it stands" in r.stderr and "kernelsup.ini" not in r.stderr,
           "it says the configuration does not load, not what root's file holds", r.stderr)
    tap.ok(file_text(d, "a6") is None, "its file was not kept")
    r = a.ctl("add", "a6", "--cwd", "relative")
    tap.contains(r.stderr, "does not load as it stands", "so too when its own file holds an error as well")
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "reload with user_contexts_max = 1001 fails", r.stderr)
    tap.contains(r.stderr, f"kernelsup.ini:{line}: [supervisor] user_contexts_max = 1001: expected a number from 0 "
                 "to 1000", "it names file, line, key and value")
    d.write_config(d.contexts_text + "added_by = 0\n", DEFAULTS, supervisor)
    line = d.config_line("added_by = 0")
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "added_by in the main file fails", r.stderr)
    tap.contains(r.stderr, f"kernelsup.ini:{line}: [context:rootini] added_by = 0: only in a file of contexts_dir",
                 "it names file, line, key and value")
    d.write_config(d.contexts_text + "[context:a2]\n", DEFAULTS, supervisor)
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "root's [context:a2] (a name the uid took) is refused", r.stderr)
    tap.contains(r.stderr, f"{d.context_file('a2')}:2: [context:a2] defined again", "naming the uid's file")
    d.write_config(d.contexts_text, DEFAULTS, supervisor)
    tap.eq(d.ctl("reload").returncode, 0, "the configuration back")


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (it creates test users)")
    d = harness.Daemon(tap, contexts="", defaults=DEFAULTS)
    ua = harness.TestUser(os.path.join(d.tmp, "home-a"), prefix="ks-ua")
    ub = harness.TestUser(os.path.join(d.tmp, "home-b"), prefix="ks-ub")
    try:
        supervisor = f"user_contexts_max = {CAP}\n"
        d.contexts_text = f"[context:rootini]\nuser = {ua.name}\n"
        d.write_config(d.contexts_text, DEFAULTS, supervisor)
        os.chmod(d.tmp, 0o755)
        d.start()
        os.chmod(d.run_dir, 0o755)
        a, b = As(d, ua), As(d, ub)
        r = d.ctl("add", "rootadd", "--user", ua.name)
        tap.eq(r.returncode, 0, "root adds a context that runs as the uid", r.stderr)
        test_own_add(tap, d, a, b)
        test_other_names(tap, d, a, b)
        test_user_and_keys(tap, d, a, b)
        test_cwd(tap, d, a)
        test_limits(tap, d, a)
        test_cap(tap, d, a)
        test_off(tap, d, a, supervisor)
        test_flood(tap, d, b)
        test_root(tap, d, a)
        test_config_errors(tap, d, a, supervisor)
        tap.ok(d.running(), "kernelsupd kept running")
        d.stop()
        d.check_log()
    finally:
        d.stop() if d.running() else None
        ua.close()
        ub.close()


if __name__ == "__main__":
    harness.main(test, needs_jupyter=False)
