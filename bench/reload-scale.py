#!/usr/bin/python3
"""What a reload costs with many contexts (issue 5: "with 500 context files, a reload
that changes one file restarts exactly one kernel and takes well under 100 ms of
daemon time").

Starts its own kernelsupd in a temporary directory with N context files in
contexts_dir, each running the stub kernel (BUILD_DIR/tests/stubkernel, a few MiB,
answers kernel_info and the heartbeat), and waits until all N are ready. Then, on 5
different files in turn, edits that file's env and times `kernelctl reload`: the wall
time of the whole kernelctl process and the daemon's own figure from its log
("reload applied in Nms"), and checks through `kernelctl status --json` that exactly
that one kernel_id changed. Last, one reload with nothing changed. Stops the daemon
and checks that no process is left.

Usage: /usr/bin/python3 bench/reload-scale.py [BUILD_DIR] [--contexts 500] [--port-min 10000]
BUILD_DIR holds kernelsupd, kernelctl and tests/stubkernel (default: $KS_BUILDDIR,
else .; `make tests/stubkernel` builds the stub). Not a test: beyond sanity checks it
asserts nothing, it prints figures.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

EDITS = 5
APPLIED_RE = re.compile(r"reload applied in (\d+)(ms|s)\b")


class Bench:
    def __init__(self, build, n, port_min):
        self.kernelsupd = os.path.join(build, "kernelsupd")
        self.kernelctl = os.path.join(build, "kernelctl")
        self.stub = os.path.join(build, "tests", "stubkernel")
        for p in (self.kernelsupd, self.kernelctl, self.stub):
            if not os.access(p, os.X_OK):
                sys.exit(f"reload-scale: {p} is not built (make && make tests/stubkernel in {build})")
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix="ks-bench-reload-")
        self.conf = os.path.join(self.tmp, "kernelsup.ini")
        self.contexts_dir = os.path.join(self.tmp, "contexts.d")
        self.socket = os.path.join(self.tmp, "run", "control.sock")
        self.log_path = os.path.join(self.tmp, "daemon.log")
        self.names = [f"ctx-{i:04d}" for i in range(n)]
        self.proc = None
        os.makedirs(self.contexts_dir)
        # Five ports per kernel, from a range of our own below the ephemeral ports.
        port_max = port_min + 5 * n + 99
        if port_max > 32767:
            sys.exit(f"reload-scale: {n} contexts need ports {port_min}-{port_max}; lower --port-min")
        with open(self.conf, "w") as f:
            f.write("[supervisor]\n"
                    f"socket = {self.socket}\n"
                    f"runtime_dir = {os.path.join(self.tmp, 'run')}\n"
                    f"state_dir = {os.path.join(self.tmp, 'state')}\n"
                    f"contexts_dir = {self.contexts_dir}\n"
                    f"port_range = {port_min}-{port_max}\n"
                    "\n[defaults]\n"
                    f"argv = {self.stub} -f {{kernel_file}}\n")
        for name in self.names:
            self.write_context(name, 0)

    def write_context(self, name, generation):
        """contexts_dir/NAME.ini, replaced atomically so the daemon never reads half of it."""
        path = os.path.join(self.contexts_dir, f"{name}.ini")
        with open(path + ".tmp", "w") as f:
            f.write(f"[context:{name}]\nenv = GEN={generation}\n")
        os.rename(path + ".tmp", path)

    def start(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                            "KERNELSUP_SOCKET")}
        # Marks every process of this run, so that the end can check none is left.
        env["KS_BENCH_TAG"] = self.tmp
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([self.kernelsupd, "--config", self.conf], env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, close_fds=True)

    def ctl(self, *args, timeout=120):
        return subprocess.run([self.kernelctl, "--socket", self.socket, *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def status(self):
        """{name: (state, kernel_id)}, or None while the daemon does not answer."""
        r = self.ctl("status", "--json")
        try:
            j = json.loads(r.stdout)
        except ValueError:
            return None
        return {c["name"]: (c.get("state"), c.get("kernel_id")) for c in j.get("contexts", [])}

    def wait(self, pred, what, timeout=300):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"reload-scale: kernelsupd exited with {self.proc.returncode} while waiting for {what}; "
                         f"see {self.log_path}")
            st = self.status()
            if st is not None and pred(st):
                return st
            if time.monotonic() >= deadline:
                sys.exit(f"reload-scale: timed out waiting for {what}")
            time.sleep(0.1)

    def all_ready(self, st):
        return len(st) == self.n and all(s == "ready" for s, _ in st.values())

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def rss_kib(self, pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def reload(self, expect_changed):
        """One timed `kernelctl reload`: (wall ms, daemon ms, names whose kernel_id changed)."""
        before = self.status()
        mark = len(self.log())
        t0 = time.monotonic()
        r = self.ctl("reload")
        wall = (time.monotonic() - t0) * 1000
        if r.returncode != 0:
            sys.exit(f"reload-scale: kernelctl reload exited {r.returncode}: {r.stderr.strip()}")
        # The report is printed once the reload is applied; the restarted kernel comes up after that.
        after = self.wait(lambda st: self.all_ready(st) and all(
            st[n][1] != before[n][1] for n in expect_changed), "the restarted kernel to be ready")
        m = None
        deadline = time.monotonic() + 10
        while m is None and time.monotonic() < deadline:
            m = APPLIED_RE.search(self.log()[mark:])
            if m is None:
                time.sleep(0.05)
        daemon = None if m is None else int(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
        changed = sorted(n for n in before if after.get(n, (None, None))[1] != before[n][1])
        return wall, daemon, changed, r.stdout.strip().splitlines()

    def ours(self):
        """pids of live processes that carry our tag or name our directory."""
        found = []
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    env = f.read()
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if f"KS_BENCH_TAG={self.tmp}".encode() in env.split(b"\0") or self.tmp.encode() in cmd:
                found.append(int(p))
        return found

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for p in self.ours():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def triple(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main():
    ap = argparse.ArgumentParser(description="Time kernelsupd's reload with many context files.")
    ap.add_argument("build", nargs="?", default=os.environ.get("KS_BUILDDIR", "."),
                    help="the build directory (default: $KS_BUILDDIR, else .)")
    ap.add_argument("--contexts", type=int, default=500, help="number of context files (default 500)")
    ap.add_argument("--port-min", type=int, default=10000, help="first port of the range (default 10000)")
    args = ap.parse_args()
    if args.contexts < EDITS + 1:
        sys.exit(f"reload-scale: --contexts must be at least {EDITS + 1}")

    b = Bench(os.path.abspath(args.build), args.contexts, args.port_min)
    try:
        t0 = time.monotonic()
        b.start()
        b.wait(b.all_ready, f"all {b.n} contexts to be ready")
        ready_s = time.monotonic() - t0
        rss = b.rss_kib(b.proc.pid)

        runs = []
        step = b.n // EDITS
        for i in range(EDITS):
            name = b.names[i * step + step // 2]
            b.write_context(name, i + 1)
            wall, daemon, changed, report = b.reload([name])
            ok = changed == [name] and report[:1] == [f"restarted {name} (env changed)"]
            runs.append((name, wall, daemon, changed, ok))
        wall0, daemon0, changed0, report0 = b.reload([])
        rss_after = b.rss_kib(b.proc.pid)

        print(f"contexts                     {b.n} (stub kernels, {os.cpu_count()} CPUs)")
        print(f"time to all ready            {ready_s:.2f} s")
        print(f"daemon RSS                   {rss / 1024:.1f} MiB at all-ready, {rss_after / 1024:.1f} MiB at the end"
              if rss and rss_after else "daemon RSS                   -")
        print("reload after editing one file's env:")
        print("  file           wall ms   daemon ms   kernels restarted")
        for name, wall, daemon, changed, ok in runs:
            shown = "-" if daemon is None else str(daemon)
            odd = "" if ok else f"  (UNEXPECTED: {', '.join(changed)})"
            print(f"  {name:<12} {wall:9.1f} {shown:>11}   {len(changed)}{odd}")
        print(f"  min/median/max: wall {triple([r[1] for r in runs])} ms, daemon {triple([r[2] for r in runs])} ms")
        print(f"  kernels restarted per reload: {', '.join(str(len(r[3])) for r in runs)}")
        print(f"reload with nothing changed: wall {wall0:.1f} ms, daemon "
              f"{'-' if daemon0 is None else daemon0} ms, kernels restarted {len(changed0)}, "
              f"report {' / '.join(report0)!r}")

        rc = b.stop()
        left = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = b.ours()
            if not left:
                break
            time.sleep(0.1)
        print(f"kernelsupd exit code {rc}; processes left: {len(left)}")
        sane = rc == 0 and not left and all(r[4] for r in runs) and not changed0
        if not sane:
            shutil.copy(b.log_path, b.tmp + ".log")
            print(f"reload-scale: UNEXPECTED results above; the daemon's log is kept in {b.tmp}.log")
        return 0 if sane else 1
    finally:
        b.cleanup()


if __name__ == "__main__":
    sys.exit(main())
