"""The control socket under attack by local users, each trial a point: malformed JSON, deep
nesting, NUL bytes, a 100 MB line, a pipelined flood, hostile `add` names and values, a
slowloris, an idle connection, 1000 idle connections of one uid, one uid holding more waiting
connections than its cap (exactly 64 admitted; root and another uid still get through), the shared
slots filled by four uids (root still gets through on its reserve), what a non-root peer is shown
without naming a context (its own alone, in status, wait, metrics and history), and a non-root peer
probing context names (one answer for another uid's context and a missing one).

Needs root: it creates five test users (removed at the end) to be the other uids. No kernel is
ever started (autostart = no)."""

import json
import os
import pwd
import re
import select
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# Named after this run (as harness.TestUser does): a user left behind by a run that was killed, or one
# of a run beside this one, is never this run's. Each ends in the letter its context own-X takes.
USERS = tuple(f"ks-h{os.getpid() % 100000}-{c}" for c in "abcde")
# The connections one uid other than root may have open at once (kernelsupd(8), CONTROL CONNECTIONS).
PER_UID = 64

# Runs as a test user. "idle PATH N": opens N connections that never send, reports once the
# daemon has answered the last one (so it has seen them all), again on "check" from stdin, and
# once every connection has ended, with what each was told first.
# "hold PATH N CTX": N connections, each sending a status and then a wait on CTX that stays
# open; reports how many were admitted (the status answered) or refused, then holds them until
# stdin closes.
ATTACKER = r'''
import json, resource, select, socket, sys, time

mode, path, n, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 64)), hard))


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.connect(path)
    return s


def kind(line):
    if line is None:
        return "silent"
    if b"too many connections" in line:
        return "refused"
    if b"idle timeout" in line:
        return "idle"
    return "other"


def report(**kw):
    print(json.dumps(kw), flush=True)


if mode == "idle":
    socks = [connect() for _ in range(n)]
    first = [None] * n
    bufs = [b""] * n
    fd_index = {s.fileno(): i for i, s in enumerate(socks)}
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)

    def pump(timeout_ms):
        for fd, _ in poller.poll(timeout_ms):
            i = fd_index[fd]
            try:
                data = socks[i].recv(4096)
            except ConnectionResetError:
                data = b""
            bufs[i] += data
            if first[i] is None and (b"\n" in bufs[i] or not data):
                first[i] = bufs[i].split(b"\n")[0] if b"\n" in bufs[i] else b"(closed without a line)"
            if not data:
                poller.unregister(fd)

    def counts():
        c = {"refused": 0, "idle": 0, "other": 0, "silent": 0}
        for line in first:
            c[kind(line)] += 1
        return c

    deadline = time.monotonic() + limit
    while first[n - 1] is None and time.monotonic() < deadline:
        pump(100)
    pump(0)
    report(phase="ready", last_answered=first[n - 1] is not None, **counts(),
           sample=[l.decode(errors="replace") for l in first if kind(l) == "refused"][:1])
    sys.stdin.readline()
    pump(0)
    report(phase="check", **counts())
    deadline = time.monotonic() + limit
    while any(l is None for l in first) and time.monotonic() < deadline:
        pump(100)
    report(phase="done", **counts(),
           others=[l.decode(errors="replace") for l in first if kind(l) == "other"][:3],
           sample=[l.decode(errors="replace") for l in first if kind(l) == "idle"][:1])
else:
    ctx = sys.argv[5]
    held, admitted, refused, messages = [], 0, 0, set()
    for i in range(n):
        s = connect()
        # A refused connection may be closed before the requests are sent: its error line is still there to read.
        try:
            s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "status"}) + "\n" +
                       json.dumps({"jsonrpc": "2.0", "id": 2, "method": "wait",
                                   "params": {"contexts": [ctx], "timeout": 600}}) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(limit)
        buf = b""
        while b"\n" not in buf:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                break
            buf += data
        reply = json.loads(buf.split(b"\n")[0] or b"null")
        if isinstance(reply, dict) and reply.get("id") == 1 and "result" in reply:
            admitted += 1
            held.append(s)
        else:
            refused += 1
            messages.add((reply or {}).get("error", {}).get("message", repr(buf[:200])))
            s.close()
    report(admitted=admitted, refused=refused, messages=sorted(messages))
    sys.stdin.read()
'''


def user_drop(name):
    u = pwd.getpwnam(name)
    return ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups"]


def users_create():
    made = []
    for name in USERS:
        subprocess.run(["userdel", name], capture_output=True)
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise harness.HarnessError(f"useradd {name}: {r.stderr.strip()}")
        made.append(name)
    return made


def users_remove(names):
    for name in names:
        subprocess.run(["userdel", name], capture_output=True)


class Attacker:
    """The ATTACKER script running as a test user, reporting JSON lines."""

    def __init__(self, user, *args):
        self.proc = subprocess.Popen(user_drop(user) + [sys.executable, "-c", ATTACKER, *map(str, args)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = harness.LineReader(self.proc, "the attacking process")

    def report(self, timeout):
        return json.loads(self.lines.next(timeout))

    def say(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def end(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=harness.scaled(30))
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def status_answered(r):
    """kernelctl status --json gave the daemon's answer (exit 0, or 1 for a stopped context)."""
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return False
    return r.returncode in (0, 1) and isinstance(j, dict) and isinstance(j.get("supervisor"), dict)


def rpc_line(id_, method, params=None):
    req = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        req["params"] = params
    return (json.dumps(req) + "\n").encode()


def trial_malformed(tap, d):
    raw = harness.RawControl(d.socket)
    try:
        for data, what in ((b"this is not json\n", "a line that is not JSON"),
                           (b'{"jsonrpc": "2.0", "id": 1, "method": "status"\n', "a truncated object"),
                           (b"[" * 100000 + b"]" * 100000 + b"\n", "an array nested 100000 deep"),
                           (b'{"jsonrpc":"2.0","id":2,"method":"status","params":{"a":' + b'{"b":' * 30000 +
                            b"1" + b"}" * 30000 + b"}}\n", "params nested 30000 deep"),
                           (b'{"jsonrpc":"2.0","id":3,"method":"sta\x00tus"}\n', "a raw NUL byte in a string"),
                           (b'{"jsonrpc":"2.0","id":4,"method":"status"}\x00\n', "a NUL byte after the object"),
                           (b'{"jsonrpc":"2.0","id":5,"method":"status\\u0000"}\n', "an escaped NUL in the method"),
                           (b'{"jsonrpc":"2.0","id":6,"method":"status","params":{"contexts":["a\\u0000b"]}}\n',
                            "an escaped NUL in a context name")):
            rep = raw.request(data, timeout=30)
            tap.ok(harness.is_rpc_error(rep, -32700), f"malformed: {what} gets a parse error", repr(rep)[:300])
        rep = raw.request(rpc_line(7, "status"), timeout=30)
        tap.ok(isinstance(rep, dict) and rep.get("id") == 7 and "result" in rep,
               "malformed: the same connection still answers a good request after them", repr(rep)[:300])
    finally:
        raw.close()

    # 100 MB on one line: refused at 256 KiB, the connection closed, the sender not left blocked.
    raw = harness.RawControl(d.socket)
    try:
        sender = harness.send_in_background(raw.s, b'{"jsonrpc":"2.0","id":8,"method":"status","params":{"p":"' +
                                            b"x" * (100 << 20))
        line = raw.read_line(timeout=60)
        tap.ok(line is not None and b"request too long" in line, "100 MB line: answered \"request too long\"",
               repr(line)[:300])
        tap.ok(raw.wait_closed(timeout=60), "100 MB line: the daemon closes that connection")
        sender.join(harness.scaled(60))
        tap.ok(not sender.is_alive(), "100 MB line: the sender is not left blocked")
    finally:
        raw.close()

    # A pipelined flood: 5000 requests in one write, every reply comes, in order.
    n = 5000
    raw = harness.RawControl(d.socket)
    try:
        flood = b"".join(rpc_line(1000 + i, "status", {"contexts": ["nosuch"]}) for i in range(n))
        sender = harness.send_in_background(raw.s, flood)
        ids = []
        while len(ids) < n:
            line = raw.read_line(timeout=60)
            if line is None:
                break
            ids.append(json.loads(line).get("id"))
        tap.eq(ids, list(range(1000, 1000 + n)), f"pipelined flood: {n} requests in one write get {n} replies in order")
        sender.join(harness.scaled(60))
    finally:
        raw.close()
    tap.ok(status_answered(d.ctl("status", "--json")) and d.running(), "after the malformed input the daemon answers")


def trial_add(tap, d):
    before = sorted(os.listdir(d.contexts_dir)), sorted(os.listdir(d.conf_dir))
    raw = harness.RawControl(d.socket)
    try:
        names = ("../evil", "a/b", "/abs", ".hidden", "..", ".", "", "x" * 65, "a b", "a\nb", "a;b", "caf\u00e9",
                 "a\u202e", 5, None)
        for i, name in enumerate(names):
            rep = raw.request(rpc_line(100 + i, "add", {"context": name}), timeout=30)
            tap.ok(harness.is_rpc_error(rep, -32602), f"add: the name {name!r} is refused as invalid params",
                   repr(rep)[:300])
        for i, (key, value) in enumerate((("user", "x\n[context:evil]"), ("cwd", "/tmp\rargv = /bin/sh"),
                                          ("connection_file", " /tmp/x.json"), ("group", ""))):
            rep = raw.request(rpc_line(200 + i, "add", {"context": "probe1", key: value}), timeout=30)
            tap.ok(harness.is_rpc_error(rep, -32602), f"add: {key} = {value!r} is refused", repr(rep)[:300])
        rep = raw.request(rpc_line(210, "add", {"context": "probe2", "env": ["A=1\n[context:evil]\nuser = root"]}),
                          timeout=30)
        tap.ok(harness.is_rpc_error(rep, -32602), "add: an env entry with a line break is refused", repr(rep)[:300])
    finally:
        raw.close()
    after = sorted(os.listdir(d.contexts_dir)), sorted(os.listdir(d.conf_dir))
    tap.eq(after, before, "add: no file was written in contexts_dir or next to it")
    names = [c.get("name") for c in d.status()["contexts"]]
    tap.ok(not any(n in names for n in ("evil", "probe1", "probe2")), "add: no context came of it", repr(names))


def trial_idle(tap, d):
    # Silent: closed with an error line after the idle timeout.
    raw = harness.RawControl(d.socket)
    try:
        line = raw.read_line(timeout=60)
        rep = json.loads(line) if line else None
        tap.ok(harness.is_rpc_error(rep) and "idle timeout" in rep["error"]["message"],
               "idle: a connection that sends nothing gets an idle timeout error", repr(line)[:300])
        tap.ok(raw.wait_closed(timeout=30), "idle: and is closed")
    finally:
        raw.close()

    # Slowloris: a valid request one byte a second. The whole line has one deadline, so it is cut
    # off long before its 300 bytes are sent.
    req = rpc_line(300, "status", {"contexts": ["secret"], "pad": "p" * 200})
    raw = harness.RawControl(d.socket)
    sent = 0
    try:
        while sent < len(req):
            try:
                raw.send(req[sent:sent + 1])
            except OSError:
                break
            sent += 1
            if select.select([raw.s], [], [], 1.0)[0]:
                break
        line = raw.read_line(timeout=30)
        tap.ok(sent < len(req), f"slowloris: cut off before its line was complete ({sent} of {len(req)} bytes)")
        tap.ok(line is not None and b"idle timeout" in line, "slowloris: told idle timeout", repr(line)[:300])
    finally:
        raw.close()

    # Waiting for an answer is not idle: a wait of 8 s ends with its own timeout, not the idle one.
    raw = harness.RawControl(d.socket)
    try:
        rep = raw.request(rpc_line(301, "wait", {"contexts": ["secret"], "timeout": 8}), timeout=60)
        tap.ok(harness.is_rpc_error(rep, -32003) and rep.get("id") == 301 and
               "idle" not in rep["error"]["message"],
               "idle: a connection waiting 8 s for a wait's answer is not closed as idle", repr(rep)[:300])
    finally:
        raw.close()


def trial_idle_flood(tap, d):
    """1000 connections of uid A that never send: A is refused past its cap, each admitted one idles out."""
    n = 1000
    a = Attacker(USERS[0], "idle", d.socket, n, harness.scaled(120))
    try:
        ready = a.report(120)
        a.say("check\n")
        a.report(30)
        done = a.report(180)
    finally:
        a.end()
    tap.diag(f"1000 idle connections of uid A: {ready} / {done}")
    tap.ok(ready["last_answered"], "1000 idle: the daemon answered up to the last connection", repr(ready))
    # How many were admitted depends on how many idled out (freeing their slot) before the last one came; the
    # exact cap, with every connection held at once, is trial_per_uid's.
    tap.eq((done["refused"] + done["idle"], done["other"], done["silent"]), (n, 0, 0),
           "1000 idle: each connection was refused or closed idle, none told anything else", repr(done))
    tap.ok(done["idle"] >= PER_UID, f"1000 idle: at least the cap ({PER_UID}) was admitted", repr(done))
    tap.contains(" ".join(ready.get("sample") or []), f"(at most {PER_UID})",
                 f"1000 idle: the refusal names the per-uid cap of kernelsupd(8), {PER_UID}")
    tap.ok(done["idle"] > 0 and done["silent"] == 0 and "idle timeout" in " ".join(done.get("sample") or []),
           "1000 idle: every admitted idle connection was closed with an idle timeout", repr(done))


def trial_per_uid(tap, d):
    """uid A opens more connections than its cap, each waiting (never idle): exactly the cap of kernelsupd(8) is
    admitted, the rest refused; root and uid B get through meanwhile."""
    n = PER_UID + 8
    a = Attacker(USERS[0], "hold", d.socket, n, harness.scaled(60), "own-a")
    try:
        got = a.report(120)
        root = d.ctl("status", "--json")
        other = d.ctl("status", "--json", prefix=user_drop(USERS[1]))
    finally:
        a.end()
    tap.eq((got["admitted"], got["refused"]), (PER_UID, n - PER_UID),
           f"per uid: {n} waiting connections of uid A, {PER_UID} admitted (kernelsupd(8)) and the rest refused",
           repr(got))
    uid = pwd.getpwnam(USERS[0]).pw_uid
    tap.eq(got["messages"], [f"too many connections from uid {uid} (at most {PER_UID})"],
           "per uid: the refusal names the uid and the cap", repr(got))
    tap.ok(status_answered(root), "per uid: root's status works while uid A holds its cap",
           f"{root.returncode} {root.stderr[:300]}")
    tap.ok(status_answered(other), "per uid: another uid's status works while uid A holds its cap",
           f"{other.returncode} {other.stderr[:300]}")


def trial_reserve(tap, d):
    """Four uids fill the shared slots with connections that wait: root still gets in, a fifth uid not."""
    attackers = []
    try:
        reports = []
        for user in USERS[:4]:
            a = Attacker(user, "hold", d.socket, 64, harness.scaled(60), f"own-{user[-1]}")
            attackers.append(a)
            reports.append(a.report(120))
        tap.diag(f"four uids, 64 waiting connections each: {reports}")
        admitted = sum(r["admitted"] for r in reports)
        tap.ok(admitted < 4 * 64 and all(r["admitted"] > 0 for r in reports),
               "reserve: the four uids together were refused before taking every slot", repr(reports))
        tap.ok(any("kept for root" in m for r in reports for m in r["messages"]),
               "reserve: the refusal says the last slots are kept for root", repr(reports))
        r = d.ctl("status", "--json")
        tap.ok(status_answered(r), "reserve: root's status works with the shared slots full", r.stderr[:300])
        r = d.ctl("status", "--json", prefix=user_drop(USERS[4]))
        tap.ok(r.returncode == 1 and "too many connections" in r.stderr,
               "reserve: a fifth uid is refused meanwhile, saying why", f"{r.returncode} {r.stderr[:300]}")
    finally:
        for a in attackers:
            a.end()
    try:
        harness.wait_until(lambda: d.ctl("status", "--json", prefix=user_drop(USERS[4])), 60,
                           "the fifth uid's status to work once the others left", check=status_answered)
        got_in = True
    except harness.WaitTimeout:
        got_in = False
    tap.ok(got_in, "reserve: the fifth uid gets in once the others have left")


def trial_visibility(tap, d):
    """What uid A is shown without naming a context: its own (own-a) and nothing of the others' (kernelsupd(8),
    CONTROL CONNECTIONS: another uid sees only the contexts that run as that uid)."""
    drop = user_drop(USERS[0])
    all_names = sorted(["secret"] + [f"own-{u[-1]}" for u in USERS])
    root = d.status()
    tap.eq(sorted(c["name"] for c in root["contexts"]), all_names, "visibility: root's status lists every context")
    for args in (("status",), ("wait", "--timeout", "1")):
        r = d.ctl(*args, "--json", prefix=drop)
        try:
            names = sorted(c.get("name") for c in json.loads(r.stdout).get("contexts"))
        except (ValueError, AttributeError, TypeError):
            names = None
        tap.eq(names, ["own-a"], f"visibility: kernelctl {args[0]} --json as uid A lists own-a alone",
               f"exit {r.returncode}, stderr {r.stderr[-300:]!r}")
        r = d.ctl(*args, prefix=drop)
        shown = [n for n in all_names if re.search(rf"(^|\W){re.escape(n)}(\W|$)", r.stdout + r.stderr)]
        tap.eq(shown, ["own-a"], f"visibility: kernelctl {args[0]} as uid A names own-a alone",
               f"exit {r.returncode}, stdout {r.stdout[-500:]!r}")
    r = d.ctl("metrics", prefix=drop)
    labelled = sorted(set(re.findall(r'context="([^"]*)"', r.stdout)))
    tap.eq((r.returncode, labelled), (0, ["own-a"]), "visibility: kernelctl metrics as uid A has own-a's series alone",
           r.stderr[-300:])
    ours, theirs = d.ctl("history", "own-a", prefix=drop), d.ctl("history", "own-b", prefix=drop)
    # own-a keeps no journal (restore = none, the default): an answer about own-a, not "no such context".
    tap.eq((ours.returncode, "own-a keeps no cell journal" in ours.stderr, theirs.returncode), (1, True, 5),
           "visibility: kernelctl history as uid A: own-a's is answered, own-b's is no such context (exit 5)",
           f"own-a: {ours.stderr.strip()!r}; own-b: {theirs.stderr.strip()!r}")


def trial_probe(tap, d):
    """As uid A, another uid's context (own-b) and a missing one (nosuch) look the same."""
    drop = user_drop(USERS[0])
    for args in (("status",), ("check", "--timeout", "1"), ("wait", "--timeout", "1"), ("exec", "--timeout", "1"),
                 ("interrupt",), ("start",), ("stop",), ("restart",), ("history",)):
        cmd, rest = args[0], args[1:]
        extra = ("1",) if cmd == "exec" else ()
        theirs = d.ctl(cmd, *rest, "own-b", *extra, prefix=drop)
        missing = d.ctl(cmd, *rest, "nosuch", *extra, prefix=drop)
        same = (theirs.returncode, theirs.stdout, theirs.stderr.replace("own-b", "NAME")) == \
               (missing.returncode, missing.stdout, missing.stderr.replace("nosuch", "NAME"))
        tap.ok(same and theirs.returncode == 5,
               f"probe: kernelctl {cmd} as another uid: its context and a missing one give one answer (exit 5)",
               f"theirs: {theirs.returncode} {theirs.stderr.strip()!r}; missing: {missing.returncode} "
               f"{missing.stderr.strip()!r}")
    raw = harness.RawControl(d.socket)
    try:
        # Through the socket as root, for contrast: root sees own-b.
        rep = raw.request(rpc_line(400, "status", {"contexts": ["own-b"]}), timeout=30)
        tap.ok(isinstance(rep, dict) and "result" in rep, "probe: root sees own-b", repr(rep)[:300])
    finally:
        raw.close()
    theirs = d.ctl("status", "own-b", "--json", prefix=drop)
    tap.ok(theirs.returncode == 5 and "own-b" in theirs.stderr and "yours" not in theirs.stderr and
           "permission" not in theirs.stderr.lower(), "probe: the answer does not say the context exists",
           repr(theirs.stderr))


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: creates test users to be the other uids")
    for tool in ("useradd", "userdel", "setpriv"):
        if not shutil.which(tool):
            tap.skip_all(f"no {tool}")
    contexts = "[context:secret]\nautostart = no\n" + "".join(
        f"[context:own-{u[-1]}]\nuser = {u}\nautostart = no\n" for u in USERS)
    made = users_create()
    try:
        d = harness.Daemon(tap, contexts=contexts)
        d.start()
        # Let the test users reach the socket: its directories are 0700 (mkdtemp); 0666 is socket_mode's default.
        for p in (d.tmp, d.run_dir):
            os.chmod(p, 0o755)
        os.chmod(d.socket, 0o666)
        probe = subprocess.run(user_drop(USERS[0]) + ["test", "-x", harness.KERNELCTL], capture_output=True)
        if probe.returncode != 0:
            tap.skip_all(f"the test users cannot execute {harness.KERNELCTL}")

        with tap.guard("malformed input"):
            trial_malformed(tap, d)
        with tap.guard("hostile add"):
            trial_add(tap, d)
        with tap.guard("idle and slowloris"):
            trial_idle(tap, d)
        with tap.guard("1000 idle connections"):
            trial_idle_flood(tap, d)
        with tap.guard("the per-uid cap"):
            trial_per_uid(tap, d)
        with tap.guard("the reserve for root"):
            trial_reserve(tap, d)
        with tap.guard("what another uid sees"):
            trial_visibility(tap, d)
        with tap.guard("name probing"):
            trial_probe(tap, d)

        tap.ok(d.running(), "the daemon survived every trial")
        d.check_log()
        d.stop()
    finally:
        users_remove(made)


harness.main(test, needs_jupyter=False)
