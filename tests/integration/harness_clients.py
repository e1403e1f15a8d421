"""The integration tests' clients of a daemon and its kernels (re-exported by harness.py):
a system user of the test's own, a jupyter_client connection, the raw control socket."""

import contextlib
import json
import os
import queue
import socket
import stat
import subprocess
import threading
import time

from harness_wait import HarnessError, WaitTimeout, scaled


# ---------------------------------------------------------------------------
# Jupyter


class TestUser:
    """A system user of the test's own, with its home at home (made, 0755, theirs); removed by close(). Needs root."""

    def __init__(self, home, prefix="ks-u"):
        import pwd
        self.name = f"{prefix}-{os.getpid() % 100000}"
        subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--home-dir", home,
                        "--shell", "/usr/sbin/nologin", self.name], check=True, capture_output=True)
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid, self.home = pw.pw_uid, pw.pw_gid, home
        os.makedirs(home, mode=0o755)
        os.chown(home, self.uid, self.gid)

    def run(self, *argv):
        """Runs argv as this user (a link it makes is its own)."""
        return subprocess.run(argv, user=self.uid, group=self.gid, extra_groups=[], check=True, capture_output=True)

    def close(self):
        # --force: after a failed point the user's kernels may still run (the harness ends them at exit).
        subprocess.run(["userdel", "--force", self.name], capture_output=True)


class KernelClient:
    """A jupyter_client connection made from a connection file, kept across cells
    (and across a kernel restart on the same ports and key)."""

    def __init__(self, connection_file, timeout=30):
        from jupyter_client import BlockingKernelClient

        self.kc = BlockingKernelClient()
        self.kc.load_connection_file(connection_file)
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=scaled(timeout))
        except RuntimeError as e:
            self.close()
            raise HarnessError(f"kernel of {connection_file} not ready: {e}") from e

    def close(self):
        self.kc.stop_channels()

    def _sync(self, deadline):
        """Sends kernel_info until both its reply (shell) and its idle status (iopub)
        arrive, so that iopub is connected before a cell's output is published."""
        while True:
            msg_id = self.kc.kernel_info()
            reply = idle = False
            step_end = min(deadline, time.monotonic() + scaled(1))
            while time.monotonic() < step_end and not (reply and idle):
                if not reply:
                    with contextlib.suppress(queue.Empty):
                        m = self.kc.get_shell_msg(timeout=0.05)
                        reply = m["parent_header"].get("msg_id") == msg_id
                if not idle:
                    with contextlib.suppress(queue.Empty):
                        m = self.kc.get_iopub_msg(timeout=0.05)
                        idle = (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                                and m["content"].get("execution_state") == "idle")
            if reply and idle:
                return
            if time.monotonic() >= deadline:
                raise WaitTimeout("kernel did not answer kernel_info on shell and iopub")

    def run(self, code, timeout=30):
        """Executes code; returns {"status", "stdout", "stderr", "result", "ename", "evalue"}."""
        deadline = time.monotonic() + scaled(timeout)
        self._sync(deadline)
        msg_id = self.kc.execute(code, allow_stdin=False)
        res = {"status": None, "stdout": "", "stderr": "", "result": None, "ename": None, "evalue": None}
        while True:
            try:
                m = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise WaitTimeout(f"no idle status for cell {code!r}; so far {res!r}") from None
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            t, c = m["msg_type"], m["content"]
            if t == "stream":
                res["stdout" if c.get("name") == "stdout" else "stderr"] += c.get("text", "")
            elif t == "execute_result":
                res["result"] = c.get("data", {}).get("text/plain")
            elif t == "error":
                res["ename"], res["evalue"] = c.get("ename"), c.get("evalue")
            elif t == "status" and c.get("execution_state") == "idle":
                break
        while True:
            try:
                m = self.kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise WaitTimeout(f"no execute_reply for cell {code!r}") from None
            if m["parent_header"].get("msg_id") == msg_id:
                res["status"] = m["content"].get("status")
                res["ename"] = res["ename"] or m["content"].get("ename")
                return res


def run_cell(connection_file, code, timeout=30):
    """Runs one cell with a new client: {"status", "stdout", "result", "ename", ...}."""
    kc = KernelClient(connection_file, timeout)
    try:
        return kc.run(code, timeout)
    finally:
        kc.close()


# ---------------------------------------------------------------------------
# The raw control socket


class RawControl:
    """A plain connection to the control socket, for malformed requests."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.s.settimeout(scaled(10))
        self.s.connect(path)
        self.buf = b""
        self.eof = False

    def send(self, data):
        self.s.sendall(data)

    def read_line(self, timeout=10):
        """One line (without the newline), or None at end of stream / reset."""
        deadline = time.monotonic() + scaled(timeout)
        while b"\n" not in self.buf:
            if self.eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"no complete line from the control socket; got {self.buf[:200]!r}")
            self.s.settimeout(left)
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def request(self, data, timeout=10):
        """Sends data and returns the next line parsed as JSON (None at end of stream)."""
        self.send(data)
        line = self.read_line(timeout)
        if line is None:
            return None
        try:
            return json.loads(line)
        except ValueError:
            raise HarnessError(f"reply is not JSON: {line[:200]!r}") from None

    def wait_closed(self, timeout=10):
        """True when the daemon closes the connection (lines before that are dropped)."""
        try:
            while self.read_line(timeout) is not None:
                pass
        except WaitTimeout:
            return False
        return True

    def close(self):
        self.s.close()


def send_in_background(sock, data):
    """sendall in a thread (the peer may stop reading and close); returns the thread,
    whose .error is the exception the send ended with, if any."""

    def run():
        try:
            sock.sendall(data)
        except OSError as e:
            t.error = e

    t = threading.Thread(target=run, daemon=True)
    t.error = None
    t.start()
    return t


def is_rpc_error(reply, code=None):
    return (isinstance(reply, dict) and reply.get("jsonrpc") == "2.0" and isinstance(reply.get("error"), dict)
            and isinstance(reply["error"].get("code"), int) and isinstance(reply["error"].get("message"), str)
            and (code is None or reply["error"]["code"] == code))


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)
