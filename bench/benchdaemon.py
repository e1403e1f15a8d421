"""The kernelsupd a benchmark runs against: its own, in a temporary directory that holds its config,
socket, state and runtime files, with a port range of its own. Not a test helper: the benchmarks
assert nothing."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile


class BenchDaemon:
    """Starts BUILDDIR/kernelsupd on a config of [supervisor] paths followed by `sections` (INI text),
    and waits until every context is ready. ctl is the kernelctl argv for it; stop() ends it and removes
    the directory."""

    def __init__(self, builddir, sections):
        self.kernelsupd = os.path.join(builddir, "kernelsupd")
        kernelctl = os.path.join(builddir, "kernelctl")
        for p in (self.kernelsupd, kernelctl):
            if not os.access(p, os.X_OK):
                sys.exit(f"{p} is not built")
        self.tmp = tempfile.mkdtemp(prefix="ks-bench-")
        sock = os.path.join(self.tmp, "run", "control.sock")
        for d in ("conf/contexts.d", "run", "state"):
            os.makedirs(os.path.join(self.tmp, d))
        port_min = 20000 + (os.getpid() % 50) * 200
        self.config = os.path.join(self.tmp, "conf", "kernelsup.ini")
        with open(self.config, "w") as f:
            f.write(f"[supervisor]\nsocket = {sock}\nruntime_dir = {self.tmp}/run\nstate_dir = {self.tmp}/state\n"
                    f"contexts_dir = {self.tmp}/conf/contexts.d\nport_range = {port_min}-{port_min + 199}\n\n"
                    + sections)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC", "WATCHDOG_PID",
                                 "JPY_PARENT_PID")}
        self.log_path = os.path.join(self.tmp, "daemon.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([self.kernelsupd, "--config", self.config], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.ctl = [kernelctl, "--socket", sock]
        try:
            subprocess.run(self.ctl + ["wait", "--timeout", "60"], check=True, stdout=subprocess.DEVNULL)
        except BaseException:
            self.stop()
            raise

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM, SIGKILL after 30 s; removes the directory. Returns the daemon's exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self.proc.returncode
