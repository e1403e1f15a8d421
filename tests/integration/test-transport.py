"""transport = ipc (the default) keeps a kernel to its user; tcp stays available.

As a second uid (a user this test creates and removes), while root's ipc context
prints a secret: subscribe to every TCP port listening in the port range and to
every socket file reachable under runtime_dir. Nothing of the secret arrives, the
socket directory cannot be entered, and the same probe does receive the output of
the tcp context (so it would have seen the secret had it been reachable). The
daemon runs with umask 0, so the socket files themselves are 0777 and the 0700
directory alone keeps others out. The second uid's own ipc context works with a
stock jupyter_client run as that uid; per-cell clients on the published file run
cells on ipc; paths stay the same across kernel restarts, daemon restarts,
adoption and a wiped runtime_dir (a reboot); stale sockets go; the directory's
owner and mode are enforced at each launch; reload and adoption restart a context
whose transport changed. Needs root (it creates a user); skips otherwise."""

import atexit
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PY = "/usr/bin/python3"
SECRET = "TOPSECRET-4f1c9e"
TCP_MARK = "TCPMARK"

# Run as the second uid: subscribes to every kernel socket it can find, then prints every message it gets, one JSON
# line each, until a line arrives on stdin.
PROBE = r"""
import errno, json, os, stat, sys, zmq
run_dir, port_min, port_max, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])

def out(o):
    print(json.dumps(o), flush=True)

def listening_ports():
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            port = int(f[1].rsplit(":", 1)[1], 16)
            if f[3] == "0A" and port_min <= port <= port_max:
                ports.add(port)
    return sorted(ports)

def reachable_sockets():
    found = []
    for root, dirs, files in os.walk(run_dir):
        for n in dirs + files:
            p = os.path.join(root, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
            except OSError:
                pass
    return sorted(found)

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def unix_connect(p):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
    finally:
        s.close()

tried = {}
for d in extra["dirs"]:
    tried["listdir " + d] = attempt(lambda: os.listdir(d))
for p in extra["sockets"]:
    tried["stat " + p] = attempt(lambda: os.stat(p))
    tried["connect " + p] = attempt(lambda: unix_connect(p))

ctx = zmq.Context()
poller = zmq.Poller()
endpoints = {}
ports, socks = listening_ports(), reachable_sockets()
for ep in [f"tcp://127.0.0.1:{p}" for p in ports] + [f"ipc://{p}" for p in sorted(set(socks) | set(extra["sockets"]))]:
    s = ctx.socket(zmq.SUB)
    s.linger = 0
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(ep)
    poller.register(s, zmq.POLLIN)
    endpoints[s] = ep
poller.register(sys.stdin, zmq.POLLIN)
out({"uid": os.getuid(), "tcp_ports": ports, "sockets": socks, "tried": tried})
while True:
    events = dict(poller.poll())
    if sys.stdin.fileno() in events or sys.stdin in events:
        break
    for s, ep in endpoints.items():
        while s in events:
            try:
                frames = s.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            out({"from": ep, "frames": [f.decode(errors="replace") for f in frames]})
out({"done": True})
"""

# A stock jupyter_client, run as the second uid on its own connection file: one cell, its stdout and result.
CLIENT = r"""
import json, queue, sys, time
from jupyter_client import BlockingKernelClient
kc = BlockingKernelClient()
kc.load_connection_file(sys.argv[1])
kc.start_channels()
kc.wait_for_ready(timeout=60)
deadline = time.monotonic() + 60
# iopub delivers only once the subscription is through: kernel_info until its idle status arrives.
while True:
    mid = kc.kernel_info()
    try:
        while True:
            m = kc.get_iopub_msg(timeout=1)
            if m["parent_header"].get("msg_id") == mid and m["content"].get("execution_state") == "idle":
                raise StopIteration
    except queue.Empty:
        if time.monotonic() > deadline:
            raise
    except StopIteration:
        break
mid = kc.execute(sys.argv[2])
res = {"stdout": "", "result": None}
while True:
    m = kc.get_iopub_msg(timeout=60)
    if m["parent_header"].get("msg_id") != mid:
        continue
    if m["msg_type"] == "stream":
        res["stdout"] += m["content"]["text"]
    elif m["msg_type"] == "execute_result":
        res["result"] = m["content"]["data"]["text/plain"]
    elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
        break
while True:
    m = kc.get_shell_msg(timeout=60)
    if m["parent_header"].get("msg_id") == mid:
        res["status"] = m["content"]["status"]
        break
kc.stop_channels()
print(json.dumps(res))
"""


class TestUser:
    """A throw-away local user with a home in /tmp; removed at exit (after the daemons' cleanup)."""

    def __init__(self):
        self.name = f"kst{os.getpid()}"
        self.home = f"/tmp/{self.name}-home"
        subprocess.run(["useradd", "-m", "-d", self.home, "-s", "/usr/sbin/nologin", "-U", self.name], check=True,
                       capture_output=True)
        atexit.register(self.remove)
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid

    def remove(self):
        subprocess.run(["userdel", "-f", "-r", self.name], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)

    def argv(self, *args):
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *args]

    def run(self, *args, timeout=90):
        env = {"PATH": "/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"}
        return subprocess.run(self.argv(*args), capture_output=True, text=True, env=env, cwd="/",
                              timeout=harness.scaled(timeout))


class Probe:
    """PROBE running as the second uid; its JSON lines are collected by a thread."""

    def __init__(self, user, d, extra):
        env = {"PATH": "/usr/bin:/bin", "HOME": user.home, "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen(user.argv(PY, "-c", PROBE, d.run_dir, str(d.port_min), str(d.port_max),
                                               json.dumps(extra)),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, cwd="/")
        self.lines = harness.LineReader(self.proc, "the probe")
        self.messages = []
        self.hello = self.next_line(30)

    def next_line(self, timeout):
        return json.loads(self.lines.next(timeout))

    def drain(self):
        """Every message received so far (list of {"from", "frames"})."""
        self.messages += [json.loads(line) for line in self.lines.pending()]
        return self.messages

    def seen(self, text):
        return [m for m in self.drain() if "frames" in m and any(text in f for f in m["frames"])]

    def stop(self):
        with contextlib.suppress(OSError):
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        try:
            self.proc.wait(harness.scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.drain()


def start_umask0(d):
    """Starts the daemon with umask 0: the kernels' socket files are 0777, so only their directory guards them."""
    old = os.umask(0)
    try:
        d.start()
    finally:
        os.umask(old)


def exec_ok(tap, d, ctx, code, name):
    r = d.ctl("exec", ctx, code, timeout=60)
    tap.eq(r.returncode, 0, name, r.stderr)
    return r


def files_of(path):
    with open(path) as f:
        return json.load(f)


def test_isolation(tap, d, user):
    root_cf = d.wait_state("rootctx", "ready")["connection_file"]
    user_c = d.wait_state("userctx", "ready")
    tcp_cf = d.wait_state("tcpctx", "ready")["connection_file"]
    ipc = os.path.join(d.run_dir, "ipc")

    # Layout and modes.
    info = files_of(root_cf)
    tap.eq((info.get("transport"), info.get("ip")), ("ipc", os.path.join(ipc, "rootctx", "k")),
           "root's connection file: transport ipc, ip the socket path prefix")
    tap.eq([info.get(f"{ch}_port") for ch in harness.CHANNELS], [1, 2, 3, 4, 5], "ports 1..5 name the sockets")
    st = os.lstat(ipc)
    tap.ok(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0,
           "runtime_dir/ipc is root's, 0755", oct(st.st_mode))
    for name, uid in (("rootctx", 0), ("userctx", user.uid)):
        st = os.lstat(os.path.join(ipc, name))
        tap.ok(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == uid,
               f"ipc/{name} is a 0700 directory of uid {uid}", f"mode {oct(st.st_mode)} uid {st.st_uid}")
    socks = [os.path.join(ipc, "rootctx", f"k-{i}") for i in range(1, 6)]
    tap.ok(all(stat.S_ISSOCK(os.lstat(p).st_mode) for p in socks), "root's five sockets exist as k-1 ... k-5")
    tap.ok(stat.S_IMODE(os.lstat(socks[1]).st_mode) == 0o777,
           "under umask 0 the socket files are 0777: only the directory keeps others out",
           oct(os.lstat(socks[1]).st_mode))

    # The probe, as the second uid.
    probe = Probe(user, d, {"dirs": [os.path.join(ipc, "rootctx")], "sockets": socks})
    try:
        hello = probe.hello
        tap.eq(hello.get("uid"), user.uid, "the probe runs as the second uid")
        tried = hello.get("tried", {})
        tap.eq(tried.get(f"listdir {ipc}/rootctx"), "EACCES", "as the second uid: ipc/rootctx cannot be listed")
        tap.eq(tried.get(f"stat {socks[1]}"), "EACCES", "as the second uid: root's iopub socket cannot be looked up")
        tap.eq(tried.get(f"connect {socks[1]}"), "EACCES", "as the second uid: connect() to it is refused")
        found = hello.get("sockets", [])
        tap.ok(not any(p.startswith(os.path.join(ipc, "rootctx")) for p in found),
               "no socket of root's context is reachable under runtime_dir", repr(found))
        own = [os.path.join(ipc, "userctx", f"k-{i}") for i in range(1, 6)]
        tap.ok(all(p in found for p in own), "the walk does reach the second uid's own five sockets", repr(found))
        tcp_ports = [files_of(tcp_cf).get(f"{ch}_port") for ch in harness.CHANNELS]
        tap.ok(all(p in hello.get("tcp_ports", []) for p in tcp_ports),
               "the port sweep finds the tcp context's five ports", f"{hello.get('tcp_ports')} vs {tcp_ports}")

        # The probe hears the tcp context: its subscription works (any local user can do this with tcp).
        def tcp_heard():
            r = d.ctl("exec", "tcpctx", f"print('{TCP_MARK}')", timeout=60)
            if r.returncode != 0:
                raise harness.HarnessError(f"a cell in tcpctx failed: {r.stdout} {r.stderr}")
            return probe.seen(TCP_MARK)

        heard = harness.wait_until(tcp_heard, 60, "the probe to receive the tcp context's output", interval=0.2)
        tap.ok(heard, "as the second uid: the tcp context's output is received (tcp: anyone can subscribe)")

        # Root's secret, while the probe listens; then one more tcp cell proves the probe still hears.
        for i in range(3):
            exec_ok(tap, d, "rootctx", f"print('{SECRET}-{i}')", f"root's secret cell {i} runs")
        n = len(probe.seen(TCP_MARK))
        harness.wait_until(tcp_heard, 60, "the probe to hear the tcp context again",
                           check=lambda seen: len(seen) > n, interval=0.2)
    finally:
        probe.stop()
    leaked = probe.seen(SECRET)
    tap.ok(not leaked, "as the second uid: nothing of root's secret is received", repr(leaked)[:1000])
    tap.ok(not [m for m in probe.messages if "frames" in m and "/rootctx/" in m["from"]],
           "as the second uid: no message at all from root's sockets")
    tap.ok(d.running(), "kernelsupd survived the probe (it also knocked on control.sock)")

    # The second uid's own context, through its own connection file, with a stock jupyter_client run as that uid.
    ucf = user_c["connection_file"]
    st = os.lstat(ucf)
    tap.eq((st.st_uid, stat.S_IMODE(st.st_mode)), (user.uid, 0o600), "the second uid's connection file is its own")
    r = user.run(PY, "-c", CLIENT, ucf, "import os\nprint(os.getuid())\n6 * 7")
    try:
        res = json.loads(r.stdout)
    except ValueError:
        res = {}
    tap.eq((res.get("status"), res.get("stdout"), res.get("result")), ("ok", f"{user.uid}\n", "42"),
           "as the second uid: jupyter_client runs a cell in its own ipc context", r.stderr[-2000:])
    r = user.run(PY, "-c", CLIENT, root_cf, "1")
    tap.ok(r.returncode != 0, "as the second uid: root's connection file is of no use (unreadable)", r.stdout)


def test_cells(tap, d):
    """The seed's per-cell client: a BlockingKernelClient on the published file for each cell."""
    cf = d.context("rootctx")["connection_file"]
    r = harness.run_cell(cf, "x = 41\nprint('hello')\nx + 1")
    tap.eq((r["status"], r["stdout"], r["result"]), ("ok", "hello\n", "42"), "ipc: per-cell client runs a cell")
    r = harness.run_cell(cf, "x * 2")
    tap.eq(r["result"], "82", "ipc: the next client sees the variable")
    r = harness.run_cell(cf, "import sys; sys.stderr.write('err\\n')")
    tap.eq(r["stderr"], "err\n", "ipc: stderr arrives")
    r = harness.run_cell(cf, "1/0")
    tap.eq((r["status"], r["ename"]), ("error", "ZeroDivisionError"), "ipc: an error arrives as such")
    r = d.ctl("exec", "rootctx", "x + 1")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "42"), "ipc: kernelctl exec (the daemon's own connection)")
    kid = d.context("rootctx")["kernel_id"]
    r = d.ctl("check", "rootctx", "--expect", kid)
    tap.eq(r.returncode, 0, "ipc: kernelctl check --expect answers through the heartbeat", r.stdout + r.stderr)
    # An interrupt goes through the control channel (interrupt_mode message): a long cell ends.
    r = d.ctl("exec", "rootctx", "import time\nfor i in range(600): time.sleep(0.1)", "--timeout", "2", timeout=60)
    tap.ok(r.returncode == 6, "ipc: a cell over --timeout is interrupted and exits 6", r.stdout + r.stderr)
    r = d.ctl("exec", "rootctx", "x")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "41"), "ipc: after the interrupt the namespace is intact")


def test_tcp(tap, d):
    c = d.context("tcpctx")
    info = files_of(c["connection_file"])
    tap.eq(info.get("transport"), "tcp", "tcp context: the file says tcp")
    ports = [info.get(f"{ch}_port") for ch in harness.CHANNELS]
    tap.ok(all(isinstance(p, int) and d.port_min <= p <= d.port_max for p in ports), "tcp: ports in port_range",
           repr(ports))
    r = harness.run_cell(c["connection_file"], "6 * 7")
    tap.eq(r["result"], "42", "tcp: a per-cell client runs a cell")
    tap.eq((c.get("transport"), c.get("transport_note")),
           ("tcp", "any local user can connect to its ports and subscribe to its output"),
           "status --json: tcp, and the note")
    rc = d.context("rootctx")
    tap.eq((rc.get("transport"), rc.get("transport_note")), ("ipc", None), "status --json: ipc, no note")
    r = d.ctl("status")
    rows = {l.split()[0]: l.split() for l in r.stdout.splitlines()[1:] if l.split()}
    header = r.stdout.splitlines()[0].split() if r.stdout else []
    col = header.index("TRANSPORT") if "TRANSPORT" in header else None
    tap.ok(col is not None and rows.get("tcpctx", [None] * 8)[col] == "tcp" and rows.get("rootctx", [None] * 8)[col]
           == "ipc", "the status table has a TRANSPORT column: tcp, ipc", r.stdout)
    tap.contains(r.stdout, "tcp: any local user can connect to the kernel of the context on tcp",
                 "the table's note about tcp")


def test_stable_paths(tap, d):
    cf = d.context("rootctx")["connection_file"]
    before = files_of(cf)
    cached = os.path.join(d.tmp, "cached.json")
    shutil.copy(cf, cached)
    r = d.ctl("restart", "rootctx", timeout=90)
    tap.eq(r.returncode, 0, "kernelctl restart rootctx", r.stderr)
    tap.eq(files_of(cf), before, "after a kernel restart: the connection file is the same")
    r = harness.run_cell(cached, "'cached'")
    tap.eq(r["result"], "'cached'", "a cached copy of the file works after the kernel restart")

    # A crash of the daemon: the ipc kernel is adopted (same kernel_id) and the cached file still works.
    c = d.context("rootctx")
    harness.run_cell(cf, "kept = 7")
    d.kill9()
    start_umask0(d)
    a = d.wait_state("rootctx", "ready", timeout=60)
    tap.eq((a["kernel_id"], a["pid"]), (c["kernel_id"], c["pid"]), "after kill -9 of kernelsupd: adopted, same kernel")
    r = harness.run_cell(cached, "kept")
    tap.eq(r["result"], "7", "the adopted ipc kernel keeps its namespace, reached through the cached file")
    r = d.ctl("check", "rootctx", "--expect", c["kernel_id"])
    tap.eq(r.returncode, 0, "check --expect of the adopted ipc kernel exits 0", r.stdout + r.stderr)

    # A reboot wipes runtime_dir: the next daemon makes the same paths.
    d.stop()
    shutil.rmtree(d.run_dir)
    start_umask0(d)
    d.wait_all_ready(["rootctx", "userctx", "tcpctx"], timeout=90)
    tap.eq(files_of(cf), before, "after a wiped runtime_dir and a new daemon: the same connection file")
    r = harness.run_cell(cached, "'again'")
    tap.eq(r["result"], "'again'", "the cached file works after the 'reboot'")


def test_stale_and_enforced(tap, d, user):
    ipc = os.path.join(d.run_dir, "ipc")
    sdir = os.path.join(ipc, "stub")
    c = d.wait_state("stub", "ready")
    tap.ok(all(os.path.exists(os.path.join(sdir, f"k-{i}")) for i in range(1, 6)), "the stub kernel's sockets exist")
    os.kill(c["pid"], signal.SIGKILL)
    d.wait_state("stub", "stopped")
    left = [n for n in os.listdir(sdir) if n.startswith("k-")]
    tap.eq(left, [], "the sockets of a kernel killed with SIGKILL are removed once it is seen dead")

    # A directory where a socket goes would make the bind fail: the launch says so at once.
    os.mkdir(os.path.join(sdir, "k-2"))
    r = d.ctl("start", "stub", timeout=60)
    tap.ok(r.returncode != 0, "a directory at ipc/stub/k-2: kernelctl start fails", r.stdout + r.stderr)
    err = d.context("stub").get("last_error") or ""
    tap.contains(err, f"{sdir}/k-2", "last_error names the path")
    tap.contains(err, "Is a directory", "last_error says why")
    d.ctl("stop", "stub")
    os.rmdir(os.path.join(sdir, "k-2"))

    # Stale entries left as the second uid: a live listening socket and a symlink to a file of root's.
    udir = os.path.join(ipc, "userctx")
    victim = os.path.join(d.tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    # The holder takes k-2 from the running kernel (unlink, bind) and keeps listening on it.
    holder = user.argv(PY, "-c", "import os,socket,sys,time; p=sys.argv[1]; os.unlink(p); "
                                 "s=socket.socket(socket.AF_UNIX); s.bind(p); s.listen(); print('up', flush=True); "
                                 "time.sleep(600)", os.path.join(udir, "k-2"))
    before = d.context("userctx")
    h = subprocess.Popen(holder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        up = h.stdout.readline()
        r = user.run("ln", "-sf", victim, os.path.join(udir, "k-3"))
        tap.ok(up.strip() == "up" and r.returncode == 0,
               "as the second uid: a live socket held at k-2, a symlink at k-3", repr(up) + r.stderr)
        # And the second uid opens its directory to everyone; root also hands it to itself.
        r = user.run("chmod", "0777", udir)
        tap.eq(r.returncode, 0, "as the second uid: chmod 0777 of its socket directory", r.stderr)
        r = d.ctl("restart", "userctx", timeout=90)
        tap.eq(r.returncode, 0, "restart of the second uid's context with those in place", r.stdout + r.stderr)
        after = d.wait_state("userctx", "ready")
        tap.ok(after["kernel_id"] != before["kernel_id"], "a new kernel")
        st = os.lstat(udir)
        tap.eq((stat.S_IMODE(st.st_mode), st.st_uid), (0o700, user.uid), "the launch made the directory 0700 again")
        tap.ok(stat.S_ISSOCK(os.lstat(os.path.join(udir, "k-3")).st_mode), "k-3 is the kernel's socket, not the link")
        with open(victim) as f:
            tap.eq(f.read(), "precious\n", "the symlink's target is untouched")
        tap.eq(after.get("last_error"), before.get("last_error"), "no port note for ipc (nothing moved)")
    finally:
        h.kill()
        h.wait()
    os.chown(udir, 0, 0)
    r = d.ctl("restart", "userctx", timeout=90)
    tap.eq(r.returncode, 0, "restart after chown of its directory to root", r.stdout + r.stderr)
    st = os.lstat(udir)
    tap.eq((st.st_uid, st.st_gid), (user.uid, user.gid), "the launch gave the directory back to the context's user")
    r = user.run(PY, "-c", CLIENT, d.context("userctx")["connection_file"], "'mine'")
    tap.ok('"result": "\'mine\'"' in r.stdout, "the second uid's context works after that", r.stdout + r.stderr)


def test_transport_change(tap, d, config):
    # Reload: tcpctx goes to ipc; nobody else restarts.
    before = d.snapshot()
    contexts, defaults = config
    d.write_config(contexts.replace("[context:tcpctx]\ntransport = tcp\n", "[context:tcpctx]\ntransport = ipc\n"),
                   defaults=defaults)
    rc, rep = d.ctl_json("reload")
    tap.eq(rc, 0, "reload with tcpctx's transport changed")
    tap.eq((rep or {}).get("restarted"), [{"name": "tcpctx", "reason": "transport changed"}],
           "the reload restarts tcpctx: transport changed", repr(rep))
    c = d.wait_context("tcpctx", lambda c: c.get("state") == "ready" and c.get("kernel_id") != before["tcpctx"][2],
                       "a new kernel on ipc", timeout=90)
    after = d.snapshot()
    tap.eq({n: after[n] for n in ("rootctx", "userctx")}, {n: before[n] for n in ("rootctx", "userctx")},
           "the other contexts keep their kernels")
    tap.eq((c.get("transport"), files_of(c["connection_file"]).get("transport")), ("ipc", "ipc"),
           "tcpctx is on ipc now: status and its file")
    r = harness.run_cell(c["connection_file"], "'now ipc'")
    tap.eq(r["result"], "'now ipc'", "tcpctx runs cells on ipc")

    # Changed while no daemon ran: the kernel on the old transport is not adopted.
    d.kill9()
    d.write_config(contexts, defaults=defaults)
    mark = d.log_mark()
    start_umask0(d)
    c2 = d.wait_context("tcpctx", lambda x: x.get("state") == "ready" and x.get("kernel_id") != c["kernel_id"],
                        "a new kernel on tcp", timeout=90)
    tap.contains(d.log_since(mark), "it listens on ipc, the configuration says transport = tcp",
                 "a kernel on the old transport is ended, and the log says why")
    tap.eq(files_of(c2["connection_file"]).get("transport"), "tcp", "tcpctx's file says tcp again")
    r = harness.run_cell(c2["connection_file"], "'tcp again'")
    tap.eq(r["result"], "'tcp again'", "tcpctx runs cells on tcp again")
    tap.eq(d.context("rootctx")["kernel_id"], before["rootctx"][2], "rootctx, unchanged, is adopted as before")


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: it creates a second user")
    for tool in ("useradd", "userdel", "setpriv"):
        if not shutil.which(tool):
            tap.skip_all(f"{tool} not found")
    user = TestUser()
    d = harness.Daemon(tap, contexts="")
    home_ipy = os.path.join(d.tmp, "ipython")
    contexts = (
        f"[context:rootctx]\nargv = {harness.IPYKERNEL_ARGV}\n"
        f"[context:userctx]\nargv = {harness.IPYKERNEL_ARGV}\nuser = {user.name}\n"
        f"env = IPYTHONDIR={user.home}/.ipython\n"
        "[context:tcpctx]\ntransport = tcp\n"
        # The stub binds Unix sockets, but is no kernel auto knows: ipc is set.
        f"[context:stub]\nargv = {harness.STUB_ARGV}\nrestart = no\ntransport = ipc\n"
    )
    # Root's kernels under umask 0 keep IPython's files in the test's directory, not in /root.
    defaults = f"env = IPYTHONDIR={home_ipy}\n"
    d.write_config(contexts, defaults=defaults)
    os.chmod(d.tmp, 0o755)  # as /run is: the second uid may walk runtime_dir
    fd = os.open(d.log_path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    start_umask0(d)
    d.wait_all_ready(["rootctx", "userctx", "tcpctx", "stub"], timeout=90)
    with tap.guard("isolation"):
        test_isolation(tap, d, user)
    with tap.guard("cells"):
        test_cells(tap, d)
    with tap.guard("tcp"):
        test_tcp(tap, d)
    with tap.guard("stale sockets and the directory"):
        test_stale_and_enforced(tap, d, user)
    with tap.guard("stable paths"):
        test_stable_paths(tap, d)
    with tap.guard("transport change"):
        test_transport_change(tap, d, (contexts, defaults))
    d.stop()


harness.main(test)
