"""Harness for kernelsup's integration tests.

Each test script starts a fresh kernelsupd in its own temporary directory (its own
config, control socket, runtime and state directories and port range), waits for
READY=1 on a private NOTIFY_SOCKET, drives it with kernelctl and real Jupyter
clients, and prints TAP for automake's tap-driver. Every wait polls a condition
with a deadline; every timeout is multiplied by $KS_TIMEOUT_SCALE.

Environment: KS_BUILDDIR (holds ./kernelsupd and ./kernelctl), KS_SRCDIR,
KS_TIMEOUT_SCALE (default 1), KS_KEEP_TMP (keep the temporary directories).
Run with Debian's /usr/bin/python3, which has jupyter_client.
"""

import atexit
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from harness_wait import (  # noqa: F401 - re-exported: tests use harness.X
    SCALE,
    HarnessError,
    LineReader,
    WaitTimeout,
    scaled,
    wait_until,
    poll_until,
)
from harness_proc import (  # noqa: F401 - re-exported: tests use harness.X
    cgroup_paths,
    proc_cgroups,
    proc_stat,
    proc_status_kib,
    proc_cmdline,
    proc_environ,
    all_pids,
    alive,
    describe,
    group_members,
    boot_id,
    port_free,
)
from harness_clients import (  # noqa: F401 - re-exported: tests use harness.X
    TestUser,
    KernelClient,
    run_cell,
    RawControl,
    send_in_background,
    is_rpc_error,
    mode_of,
)

SRCDIR = os.environ.get("KS_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILDDIR = os.environ.get("KS_BUILDDIR") or SRCDIR
KERNELSUPD = os.path.join(BUILDDIR, "kernelsupd")
KERNELCTL = os.path.join(BUILDDIR, "kernelctl")
# The stub kernel (`make tests/stubkernel`): a few MiB instead of ipykernel's 50, for tests with many contexts.
STUBKERNEL = os.path.join(BUILDDIR, "tests", "stubkernel")
STUB_ARGV = f"{STUBKERNEL} -f {{kernel_file}}"
PRELOAD_SCRIPT = os.path.join(SRCDIR, "src", "daemon", "kernelsup-preload.py")
IPYKERNEL_ARGV = "/usr/bin/python3 -m ipykernel_launcher -f {kernel_file} --HistoryManager.hist_file=:memory:"

SANITIZER_MARKERS = ("AddressSanitizer", "runtime error:", "LeakSanitizer")
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
KEY_RE = re.compile(r"^[0-9a-f]{64}$")
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
STATES = ("stopped", "starting", "ready", "busy", "unresponsive", "backoff", "failed", "stopping")


# ---------------------------------------------------------------------------
# TAP


class TAP:
    def __init__(self):
        self.n = 0
        self.failed = 0
        self.daemons = []
        self._finished = False
        atexit.register(self._atexit)
        # The test driver (or a user) may SIGTERM us: run the cleanup then.
        signal.signal(signal.SIGTERM, lambda signo, frame: sys.exit(128 + signo))
        # A suite started in the background of a script inherits SIGINT and SIGQUIT ignored, and so would every
        # process a test starts: a kernelctl sent SIGINT mid-cell would not go away. Handled here, they are
        # back to their defaults in each child.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)

    def diag(self, text):
        for line in str(text).splitlines() or [""]:
            print(f"# {line}")
        sys.stdout.flush()

    def ok(self, cond, name, diag=None):
        self.n += 1
        name = str(name).replace("#", "\\#").replace("\n", " ")
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}")
        if not cond:
            self.failed += 1
            if diag is not None:
                self.diag(diag)
        sys.stdout.flush()
        return bool(cond)

    def eq(self, got, want, name, diag=None):
        return self.ok(got == want, name, f"got {got!r}, want {want!r}" + (f"\n{diag}" if diag else ""))

    def contains(self, text, part, name):
        return self.ok(text is not None and part in text, name, f"{part!r} not found in {text!r}")

    def todo(self, cond, name, reason, diag=None):
        """A test point for a known defect not fixed yet: "not ok ... # TODO reason" does not fail the run, and
        once the defect is fixed "ok ... # TODO" is an unexpected pass (XPASS), which does: drop the TODO then."""
        self.n += 1
        name = str(name).replace("#", "\\#").replace("\n", " ")
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name} # TODO {reason}")
        if not cond and diag is not None:
            self.diag(diag)
        sys.stdout.flush()
        return bool(cond)

    def skip(self, name, reason):
        self.n += 1
        print(f"ok {self.n} - {name} # SKIP {reason}")
        sys.stdout.flush()

    @contextlib.contextmanager
    def guard(self, name):
        """Runs an independent block: an exception fails one test point and the
        script goes on with the next block."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any error is a failure of this block
            self.ok(False, f"{name}: {type(e).__name__}", _format_exc(e))

    def _report_logs(self):
        for d in self.daemons:
            d.print_log_tail()

    def _cleanup(self):
        for d in reversed(self.daemons):
            try:
                d.cleanup()
            except Exception as e:  # noqa: BLE001 - cleanup must go on
                self.diag(f"cleanup of {d.tmp}: {type(e).__name__}: {e}")

    def done(self):
        if self.failed:
            self._report_logs()
        self._cleanup()
        self._finished = True
        print(f"1..{self.n}")
        sys.stdout.flush()
        sys.exit(1 if self.failed else 0)

    def skip_all(self, reason):
        self._cleanup()
        self._finished = True
        print(f"1..0 # SKIP {reason}")
        sys.stdout.flush()
        sys.exit(77)

    def _atexit(self):
        if self._finished:
            return
        # An uncaught exception or a signal: still kill and remove what we made.
        self.ok(False, "the test script ran to its end")
        self._report_logs()
        self._cleanup()
        if self.n:
            print(f"1..{self.n}")
        sys.stdout.flush()


def _format_exc(e):
    if isinstance(e, HarnessError):
        return str(e)
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


def main(fn, needs_jupyter=True):
    """Runs fn(tap), turning an exception into a failed test point, then ends the plan."""
    tap = TAP()
    if not (os.access(KERNELSUPD, os.X_OK) and os.access(KERNELCTL, os.X_OK)):
        tap.skip_all(f"kernelsupd/kernelctl not built in {BUILDDIR}")
    if needs_jupyter:
        if importlib.util.find_spec("jupyter_client") is None:
            tap.skip_all(f"{sys.executable} has no jupyter_client (use /usr/bin/python3)")
    try:
        fn(tap)
    except Exception as e:  # noqa: BLE001 - reported as TAP
        tap.ok(False, f"test script raised {type(e).__name__}", _format_exc(e))
        # Often the daemon died under the test: say so, and whether a sanitizer saw why.
        for d in tap.daemons:
            if d.proc is not None and not d.exit_expected and d.proc.poll() is not None:
                tap.ok(False, "kernelsupd kept running during the test", f"it exited with {d.proc.returncode}")
            if d.proc is not None:
                d.check_log()
    tap.done()


# ---------------------------------------------------------------------------
# The daemon

_slot = None


def sanitizers():
    """Why this build's memory figures are not the product's (it has the sanitizers: ASan keeps freed memory in
    quarantine and adds its shadow), or None. A point about VmRSS or VmHWM skips with this reason."""
    san = _san_cflags()
    return f"this build has the sanitizers (SAN_CFLAGS = {san})" if san else None


def _san_cflags():
    try:
        with open(os.path.join(BUILDDIR, "Makefile")) as f:
            san = re.search(r"^SAN_CFLAGS *= *(\S.*)?$", f.read(), re.M)
    except OSError as e:
        raise HarnessError(f"cannot read {BUILDDIR}/Makefile: {e}") from e
    if san is None:
        raise HarnessError(f"{BUILDDIR}/Makefile has no SAN_CFLAGS line")
    return san.group(1)


def not_normal_build():
    """Why this is not the normal build (the sanitizer build, or make distcheck's), or None. A heavy test that
    runs in the normal build only skips with this reason."""
    why = sanitizers()
    if why:
        return why
    # automake's distcheck configures in DISTDIR/_build/sub.
    if os.path.relpath(BUILDDIR, SRCDIR) == os.path.join("_build", "sub"):
        return "this is make distcheck's build"
    return None


def port_slot():
    """This process's slot of 200 ports in 20000-29999: getpid() % 50, or the next one
    free when another test process holds it (two pids can share a remainder). A slot
    is held by binding an abstract Unix socket, which the kernel frees when we exit."""
    global _slot
    if _slot is None:
        first = os.getpid() % 50
        for i in range(50):
            n = (first + i) % 50
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            try:
                s.bind(f"\0kernelsup-test-port-slot-{n}")
            except OSError:
                s.close()
                continue
            _slot = (n, s)
            break
        else:
            raise HarnessError("all 50 port slots are held by other test processes")
    return _slot[0]



class Daemon:
    def __init__(self, tap, contexts="[context:default]\n", defaults="", supervisor="", extra_files=None):
        self.tap = tap
        self.tmp = tempfile.mkdtemp(prefix="ks-test-")
        self.conf_dir = os.path.join(self.tmp, "conf")
        self.contexts_dir = os.path.join(self.conf_dir, "contexts.d")
        self.config = os.path.join(self.conf_dir, "kernelsup.ini")
        self.run_dir = os.path.join(self.tmp, "run")
        self.state_dir = os.path.join(self.tmp, "state")
        self.socket = os.path.join(self.run_dir, "control.sock")
        self.notify_path = os.path.join(self.tmp, "notify")
        self.log_path = os.path.join(self.tmp, "daemon.log")
        # A port range per test process, so tests running in parallel do not collide.
        self.port_min = 20000 + port_slot() * 200
        self.port_max = self.port_min + 199
        self.proc = None
        self.notify_sock = None
        self.notifications = []
        self.starts = 0
        self.seen_pids = {}  # pid -> /proc starttime when first seen (None if already gone)
        self.history = {}  # context name -> list of states observed, without repeats
        self.pids_of = {}  # context name -> every pid a status showed for it
        self.mounts = []
        self.log_reported = False
        self.last_ctl = None
        self.exit_expected = False  # set once the test stops the daemon or expects it to exit
        self.bystanders = []  # processes a test started outside the daemon (see spawn_bystander)
        self.preload_script = PRELOAD_SCRIPT  # the launcher's file its kernels are preloaded with
        tap.daemons.append(self)
        os.makedirs(self.contexts_dir)
        self.write_config(contexts, defaults, supervisor, extra_files)

    # -- configuration

    def config_text(self, contexts, defaults="", supervisor=""):
        return (
            "[supervisor]\n"
            f"socket = {self.socket}\n"
            f"runtime_dir = {self.run_dir}\n"
            f"state_dir = {self.state_dir}\n"
            f"contexts_dir = {self.contexts_dir}\n"
            f"port_range = {self.port_min}-{self.port_max}\n"
            + supervisor
            + "\n[defaults]\n"
            + defaults
            + "\n"
            + contexts
        )

    def write_config(self, contexts, defaults="", supervisor="", extra_files=None):
        with open(self.config, "w") as f:
            f.write(self.config_text(contexts, defaults, supervisor))
        for name, text in (extra_files or {}).items():
            with open(os.path.join(self.contexts_dir, name), "w") as f:
                f.write(text)

    def config_line(self, text, path=None):
        """1-based line number of the first line of path (default: the main file) equal to text."""
        with open(path or self.config) as f:
            for i, line in enumerate(f, 1):
                if line.rstrip("\n") == text:
                    return i
        raise HarnessError(f"{text!r} not in {path or self.config}")

    def context_file(self, name):
        """contexts_dir/NAME.ini, where `kernelctl add NAME` writes."""
        return os.path.join(self.contexts_dir, f"{name}.ini")

    def write_file(self, path, text, mode=0o644):
        """Replaces path atomically (temporary file + rename), so a reload never reads half a file."""
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.test-tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.rename(tmp, path)

    def write_context_file(self, name, text):
        """Writes contexts_dir/NAME.ini (atomically); returns its path."""
        path = self.context_file(name)
        self.write_file(path, text)
        return path

    def remove_context_file(self, name):
        os.unlink(self.context_file(name))

    def snapshot(self):
        """{name: (state, pid, kernel_id)} of every context in the status."""
        return {c["name"]: (c.get("state"), c.get("pid"), c.get("kernel_id")) for c in self.status()["contexts"]
                if isinstance(c, dict) and isinstance(c.get("name"), str)}

    def wait_all_ready(self, names, timeout=60):
        """Polls until every context in names is ready; returns the snapshot."""
        names = set(names)
        return wait_until(self.snapshot, timeout, f"contexts {sorted(names)} to be ready",
                          check=lambda snap: all(snap.get(n, (None,))[0] == "ready" for n in names))

    def wait_log(self, text, mark=0, timeout=30):
        """Polls until the daemon's log after mark (see log_mark) holds text; returns that part of the log."""
        return wait_until(lambda: self.log_since(mark), timeout, f"{text!r} in the log of kernelsupd",
                          check=lambda log: text in log)

    # -- process

    def env(self):
        env = dict(os.environ)
        for k in ("KERNELSUP_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                  "LISTEN_FDNAMES", "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CONFIGURATION_DIRECTORY",
                  "JPY_PARENT_PID"):
            env.pop(k, None)
        env["NOTIFY_SOCKET"] = self.notify_path
        # Marks every process that inherits the daemon's environment as ours.
        env["KS_TEST_TAG"] = self.tmp
        # The preloaded launcher of this source tree, rather than an installed one.
        if self.preload_script:
            env["KERNELSUP_PRELOAD_SCRIPT"] = self.preload_script
        else:
            env.pop("KERNELSUP_PRELOAD_SCRIPT", None)  # the daemon finds its own (a build tree's)
        return env

    def _open_notify(self):
        self.close_notify()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.notify_path)
        self.notify_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.notify_sock.bind(self.notify_path)
        self.notify_sock.settimeout(0.1)
        self.notifications = []
        # Read all the time, as systemd does: a unix datagram queue holds only a few
        # messages, and a daemon whose sd_notify blocks on a full queue would hang.
        self._notify_stop = threading.Event()
        self._notify_thread = threading.Thread(target=self._read_notify,
                                               args=(self.notify_sock, self._notify_stop, self.notifications),
                                               daemon=True)
        self._notify_thread.start()

    @staticmethod
    def _read_notify(sock, stop, out):
        while True:
            try:
                data = sock.recv(65536)
            except (socket.timeout, BlockingIOError):
                if stop.is_set():
                    return
                continue
            except OSError:
                return
            n = {}
            for line in data.decode(errors="replace").split("\n"):
                k, sep, v = line.partition("=")
                if sep:
                    n[k] = v
            out.append(n)  # list.append is atomic; readers take copies

    def close_notify(self):
        """Stops listening, after reading every datagram already queued."""
        if self.notify_sock is None:
            return
        self.notify_sock.setblocking(False)
        self._notify_stop.set()
        self._notify_thread.join()
        self.notify_sock.close()
        self.notify_sock = None

    def drain_notifications(self):
        """Every notification received so far (a list of dicts of K=V lines)."""
        return list(self.notifications)

    def ready_sent(self):
        return any(n.get("READY") == "1" for n in self.drain_notifications())

    def statuses(self):
        """Every STATUS= text received so far, in order."""
        return [n["STATUS"] for n in self.drain_notifications() if "STATUS" in n]

    # A command that runs kernelsupd in its place (exec), such as systemd-socket-activate -l PATH.
    launcher = ()

    def spawn(self, *extra_args):
        """Runs kernelsupd with our config (and extra arguments) in the background."""
        self._open_notify()
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts + 1}: kernelsupd --config {self.config} {' '.join(extra_args)}\n"
                      .encode())
            log.flush()
            self.proc = subprocess.Popen([*self.launcher, KERNELSUPD, "--config", self.config, *extra_args],
                                         env=self.env(),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True)
        self.starts += 1
        return self.proc

    def start(self, expect_ready=True, poll_status=False, timeout=60):
        """Starts the daemon. With expect_ready, waits for READY=1 (a test point) and
        returns self; raises when the daemon exits first. poll_status reads the status
        while waiting, to see short-lived pids and states. Without expect_ready
        returns the Popen at once."""
        proc = self.spawn()
        self.exit_expected = not expect_ready
        if not expect_ready:
            return proc
        deadline = time.monotonic() + scaled(timeout)
        name = f"kernelsupd (start {self.starts}) sent READY=1"
        while not self.ready_sent():
            rc = proc.poll()
            if rc is not None:
                self.close_notify()
                if self.ready_sent():
                    continue
                self.tap.ok(False, name, f"kernelsupd exited with {rc} before READY=1\n" + self.log_tail())
                raise HarnessError(f"kernelsupd exited with {rc} before READY=1")
            if time.monotonic() >= deadline:
                self.tap.ok(False, name, f"no READY=1 after {scaled(timeout):g}s; notifications "
                                         f"{self.notifications!r}")
                raise WaitTimeout("no READY=1 from kernelsupd")
            if poll_status:
                with contextlib.suppress(HarnessError):
                    self.status(timeout=5)
            time.sleep(0.02)
        self.tap.ok(True, name)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout=30):
        """The daemon's exit code; raises WaitTimeout when it is still running."""
        try:
            return self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            raise WaitTimeout(f"kernelsupd still running after {scaled(timeout):g}s") from None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the daemon and checks that it exits 0, leaves no process of ours
        and logged no sanitizer report (three test points)."""
        signame = signal.Signals(sig).name
        daemon_pid = self.proc.pid
        self.exit_expected = True
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.tap.ok(False, f"kernelsupd exits after {signame}", f"still running after {scaled(timeout):g}s")
        else:
            self.tap.eq(rc, 0, f"kernelsupd exits 0 after {signame}")
        self.close_notify()
        self.check_no_leftovers(f"no process left after {signame} to kernelsupd", daemon_pid=daemon_pid)
        self.check_log()

    def kill9(self, timeout=30):
        """SIGKILLs the daemon alone, as a crash would: its kernels keep running (the test
        looks at them, then start() runs a new daemon on the same directories; cleanup
        still ends every process of ours). Returns the dead daemon's pid."""
        pid = self.proc.pid
        self.exit_expected = True
        self.proc.kill()
        try:
            self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            raise WaitTimeout(f"kernelsupd {pid} still there {scaled(timeout):g}s after SIGKILL") from None
        self.close_notify()
        with open(self.log_path, "ab") as log:
            log.write(f"---- kernelsupd {pid} killed with SIGKILL by the test\n".encode())
        return pid

    def spawn_bystander(self, argv):
        """Starts a process that is not the daemon's and does not carry our tag, so ours()
        and stop() do not count it (a test checks that the daemon leaves it alone);
        cleanup kills it. Returns the Popen."""
        env = {k: v for k, v in os.environ.items() if k != "KS_TEST_TAG"}
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
        self.bystanders.append(p)
        return p

    def log_mark(self):
        """A position in the daemon's log; log_since(mark) is what was logged after it."""
        return len(self.log())

    def log_since(self, mark):
        return self.log()[mark:]

    def rpc(self, method, params=None, timeout=30):
        """One JSON-RPC call on a new raw connection; returns the parsed reply (None when
        the daemon closed the connection without one). timeout (unscaled) bounds the wait."""
        raw = RawControl(self.socket)
        try:
            req = {"jsonrpc": "2.0", "id": 1, "method": method}
            if params is not None:
                req["params"] = params
            return raw.request(json.dumps(req).encode() + b"\n", timeout=timeout)
        finally:
            raw.close()

    def read_state(self, name):
        """The parsed state file of context name."""
        with open(self.state_file(name)) as f:
            return json.load(f)

    def write_state(self, name, obj):
        """Replaces the state file of context name (atomically, keeping its mode)."""
        path = self.state_file(name)
        tmp = path + ".test-tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f)
        os.chmod(tmp, mode_of(path))
        os.rename(tmp, path)

    # -- leftovers

    def _remember(self, pid):
        if isinstance(pid, int) and pid > 0 and pid not in self.seen_pids:
            st = proc_stat(pid)
            self.seen_pids[pid] = st[4] if st else None

    def remember_pid(self, pid):
        """Records a pid (a kernel's or one a cell started) to be checked at stop."""
        self._remember(pid)

    def ours(self, exclude=()):
        """pids of live processes (zombies included) that belong to this test: pids seen
        in a status (same start time), members of their process groups, and processes
        whose command line or environment names our temporary directory."""
        me = os.getpid()
        tag = self.tmp + "/"
        found = set()
        groups = {p for p, t in self.seen_pids.items() if t is not None}
        for pid in all_pids():
            if pid == me or pid in exclude:
                continue
            st = proc_stat(pid)
            if st is None:
                continue
            if pid in self.seen_pids and self.seen_pids[pid] == st[4]:
                found.add(pid)
            elif st[2] in groups:
                found.add(pid)
            elif any(tag in a or a == self.tmp for a in (proc_cmdline(pid) or [])):
                found.add(pid)
            else:
                env = proc_environ(pid)
                if env is not None and env.get("KS_TEST_TAG") == self.tmp:
                    found.add(pid)
        return found

    def leftovers(self, pids=None, daemon_pid=None):
        """(bad, zombies): of pids (default: ours()), those still there after a short grace
        period. A zombie whose parent is the daemon is bad (the daemon must reap); a
        zombie with another parent is only reported (its reaper is not ours: after the
        daemon exits, its orphans belong to PID 1)."""
        exclude = (self.proc.pid,) if self.running() else ()
        parent = daemon_pid if daemon_pid is not None else (self.proc.pid if self.proc else None)

        def classify():
            bad, zombies = [], []
            for p in sorted(pids if pids is not None else self.ours(exclude)):
                st = proc_stat(p)
                if st is None:
                    continue
                (zombies if st[0] == "Z" and st[1] != parent else bad).append(p)
            return bad, zombies

        with contextlib.suppress(WaitTimeout):
            wait_until(classify, 5, "processes to go away", check=lambda r: not r[0])
        return classify()

    def check_no_leftovers(self, name, pids=None, daemon_pid=None):
        bad, zombies = self.leftovers(pids, daemon_pid)
        if zombies:
            self.tap.diag("zombies left to a parent other than kernelsupd (not counted): "
                          + "; ".join(describe(p) for p in zombies))
        return self.tap.ok(not bad, name, "left: " + "; ".join(describe(p) for p in bad))

    def check_group_gone(self, pgid, name):
        """Checks that no process of process group pgid is left."""
        return self.check_no_leftovers(name, pids=set(group_members(pgid)) | {pgid})

    def check_log(self, name="kernelsupd logged no sanitizer report"):
        text = self.log()
        hits = [l for l in text.splitlines() if any(m in l for m in SANITIZER_MARKERS)]
        return self.tap.ok(not hits, name, "\n".join(hits[:20]))

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log().splitlines()[-n:])

    def print_log_tail(self):
        if self.log_reported:
            return
        self.log_reported = True
        self.tap.diag(f"---- last 40 lines of {self.log_path}:")
        self.tap.diag(self.log_tail())

    # -- kernelctl

    def ctl(self, *args, input=None, timeout=30, prefix=(), socket_path=None, errors=None):
        """Runs kernelctl --socket SOCK ARGS (text mode, output captured). errors: decode the output as UTF-8
        exactly as written (no newline translation: a carriage return stays), with that handler for bytes that
        are not UTF-8 ("surrogateescape" keeps them visible as lone surrogates)."""
        argv = [*prefix, KERNELCTL, "--socket", socket_path or self.socket, *args]
        exact = errors is not None
        if exact and input is not None:
            input = input.encode("utf-8", errors)
        try:
            r = subprocess.run(argv, input=input, capture_output=True, text=not exact, timeout=scaled(timeout),
                               stdin=None if input is not None else subprocess.DEVNULL)
            if exact:
                r.stdout, r.stderr = r.stdout.decode("utf-8", errors), r.stderr.decode("utf-8", errors)
        except subprocess.TimeoutExpired as e:
            raise WaitTimeout(f"{' '.join(argv)} did not finish in {scaled(timeout):g}s") from e
        if any(m in r.stderr for m in SANITIZER_MARKERS):
            self.tap.ok(False, f"kernelctl {' '.join(args)} ran without sanitizer reports", r.stderr[-3000:])
        return r

    def ctl_json(self, *args, timeout=30):
        """(exit code, parsed JSON of stdout or None) of kernelctl ARGS --json."""
        r = self.ctl(*args, "--json", timeout=timeout)
        self.last_ctl = r
        try:
            return r.returncode, json.loads(r.stdout)
        except ValueError:
            return r.returncode, None

    def status(self, ctx=None, timeout=30):
        """The parsed `kernelctl status [CTX] --json`; raises unless it exited 0 or 1 with JSON."""
        args = ("status",) if ctx is None else ("status", ctx)
        rc, j = self.ctl_json(*args, timeout=timeout)
        if rc not in (0, 1) or not isinstance(j, dict) or not isinstance(j.get("contexts"), list):
            r = self.last_ctl
            raise HarnessError(f"kernelctl {' '.join(args)} --json: exit {rc}, stdout {r.stdout[:500]!r}, "
                               f"stderr {r.stderr[:500]!r}")
        for c in j["contexts"]:
            if not isinstance(c, dict):
                continue
            self._remember(c.get("pid"))
            if isinstance(c.get("pid"), int):
                pids = self.pids_of.setdefault(c.get("name"), [])
                if c["pid"] not in pids:
                    pids.append(c["pid"])
            h = self.history.setdefault(c.get("name"), [])
            if not h or h[-1] != c.get("state"):
                h.append(c.get("state"))
        return j

    def context(self, name):
        for c in self.status(name)["contexts"]:
            if c.get("name") == name:
                return c
        raise HarnessError(f"context {name!r} not in kernelctl status {name}")

    def wait_state(self, name, state, timeout=30):
        """Polls until context name is in state (a name or a tuple of names); returns its dict."""
        states = (state,) if isinstance(state, str) else tuple(state)
        return wait_until(lambda: self.context(name), timeout, f"context {name} to be {'/'.join(states)}",
                          check=lambda c: c.get("state") in states)

    def wait_context(self, name, check, what, timeout=30):
        """Polls until check(context dict) holds; returns the dict."""
        return wait_until(lambda: self.context(name), timeout, f"context {name}: {what}", check=check)

    # -- files

    def connection_info(self, path):
        with open(path) as f:
            return json.load(f)

    def ports(self, path):
        info = self.connection_info(path)
        return {ch: info.get(f"{ch}_port") for ch in CHANNELS}

    def state_file(self, name):
        return os.path.join(self.state_dir, "contexts", f"{name}.json")

    def mount_tmpfs(self, path, size="1m"):
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path], check=True,
                       capture_output=True)
        self.mounts.append(path)

    # -- cleanup

    def cleanup(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()
        for b in self.bystanders:
            if b.poll() is None:
                b.kill()
                b.wait()
        for p in self.ours():
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        self.close_notify()
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], capture_output=True)
        self.mounts = []
        if os.environ.get("KS_KEEP_TMP"):
            self.tap.diag(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
