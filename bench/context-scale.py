#!/usr/bin/python3
"""The cost of a context (issue 31): kernelsupd's memory, descriptors and `kernelctl status` time
at 1, 100 and 1,000 ready contexts of the stub kernel, beside supervisord with as many programs;
then 10,000 contexts with autostart = no.

For each count N it starts its own kernelsupd in a temporary directory (N files in contexts_dir,
argv = BUILD_DIR/tests/stubkernel -f {kernel_file}, transport = ipc), waits with
`kernelctl wait --timeout 300` until all N are ready, and reads the daemon's private memory
(Private_Clean + Private_Dirty of /proc/PID/smaps_rollup), where it lies (/proc/PID/smaps: the
brk heap, the 64 MiB-aligned malloc arenas of the other threads, other anonymous mappings, files),
its descriptors (/proc/PID/fd, by kind), and the wall time of a whole `kernelctl status` and
`kernelctl status --json` process (median of --runs). The same daemon with autostart = no gives the
same figures for N contexts without kernels. Then supervisord (Debian's `supervisor` package) with N
programs, each the same stub kernel on a connection file of its own (it runs without the daemon):
its private memory and the wall time of `supervisorctl status`. Last, 10,000 contexts with
autostart = no: the time from the daemon's start until `kernelctl status` answers, the wall time of
`status` and `metrics`, and the daemon's peak VmHWM.

Usage: /usr/bin/python3 bench/context-scale.py [BUILD_DIR] [--counts 1,100,1000] [--runs 20]
                                                [--idle 10000] [--no-supervisord]
BUILD_DIR holds kernelsupd, kernelctl and tests/stubkernel (default: $KS_BUILDDIR, else .;
`make tests/stubkernel` builds the stub). Not a test: it asserts nothing, it prints figures.
"""

import argparse
import json
import os
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ARENA_ALIGN = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's heap is aligned to it
NOFILE = 65536  # what the daemon gets, as root, if its hard limit is lower (1,000 ready contexts need ~20,000)
FDS_PER_CONTEXT = 20  # the daemon's descriptors per ready context, measured (pipes, eventfds, sockets)
ENV_DROP = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "KERNELSUP_SOCKET",
            "JPY_PARENT_PID")


def bench_env():
    return {k: v for k, v in os.environ.items() if k not in ENV_DROP}


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < NOFILE:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        except (ValueError, OSError):
            pass


def timed(argv, runs):
    """Median wall ms of `runs` whole processes of argv, fork to exit."""
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times)


def private_kib(pid):
    """Private_Clean + Private_Dirty of /proc/PID/smaps_rollup, KiB."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def status_field(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def smaps_split(pid):
    """Private KiB by where it lies: heap (brk), arenas (anonymous, inside a 64 MiB-aligned block that
    starts with an anonymous mapping: the malloc arenas of threads other than the main one), anon
    (other anonymous mappings: thread stacks, large mallocs, libzmq's own), files, stack."""
    maps = []
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                cur = {"lo": lo, "hi": hi, "path": head[5] if len(head) > 5 else "", "priv": 0}
                maps.append(cur)
            elif head[0] in ("Private_Clean:", "Private_Dirty:"):
                cur["priv"] += int(head[1])
    blocks = {m["lo"] for m in maps if m["path"] == "" and m["lo"] % ARENA_ALIGN == 0}
    out = {"heap": 0, "arenas": 0, "anon": 0, "files": 0, "stack": 0}
    for m in maps:
        if m["path"] == "[heap]":
            out["heap"] += m["priv"]
        elif m["path"] == "[stack]":
            out["stack"] += m["priv"]
        elif m["path"] == "":
            out["arenas" if m["lo"] - m["lo"] % ARENA_ALIGN in blocks else "anon"] += m["priv"]
        else:
            out["files"] += m["priv"]
    out["n_arenas"] = len(blocks)
    return out


def fd_kinds(pid):
    """Count of /proc/PID/fd by kind: socket, pipe, eventfd, epoll, pidfd, other."""
    out = {"socket": 0, "pipe": 0, "eventfd": 0, "epoll": 0, "pidfd": 0, "other": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        k = ("socket" if t.startswith("socket:") else "pipe" if t.startswith("pipe:") else
             "eventfd" if "eventfd" in t else "epoll" if "eventpoll" in t else "pidfd" if "pidfd" in t else "other")
        out[k] += 1
    return out


def threads(pid):
    names = []
    for t in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def tree_gone(tmp, timeout=60):
    """Waits until no process names tmp on its command line (the stubs of a run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        if tmp.encode() in f.read():
                            left.append(int(p))
                except OSError:
                    pass
        if not left:
            return []
        time.sleep(0.2)
    return left



def stop_and_remove(proc, tmp):
    """SIGTERM to a supervisor (SIGKILL after 300 s), until nothing of its tree is left; removes tmp. Its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    tree_gone(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return proc.returncode

class Kernelsup:
    """kernelsupd on N contexts of the stub kernel in a temporary directory of its own."""

    def __init__(self, build, n, autostart):
        self.kernelsupd = os.path.join(build, "kernelsupd")
        self.kernelctl = os.path.join(build, "kernelctl")
        self.stub = os.path.join(build, "tests", "stubkernel")
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix="ks-bench-ctx-")
        self.socket = os.path.join(self.tmp, "run", "control.sock")
        self.log_path = os.path.join(self.tmp, "daemon.log")
        cdir = os.path.join(self.tmp, "contexts.d")
        os.makedirs(cdir)
        # ipc: no port is bound, but the configuration's check still wants 5 a context in the range.
        port_min = 10000
        conf = os.path.join(self.tmp, "kernelsup.ini")
        with open(conf, "w") as f:
            f.write("[supervisor]\n"
                    f"socket = {self.socket}\n"
                    f"runtime_dir = {os.path.join(self.tmp, 'run')}\n"
                    f"state_dir = {os.path.join(self.tmp, 'state')}\n"
                    f"contexts_dir = {cdir}\n"
                    f"port_range = {port_min}-{port_min + 5 * n + 99}\n"
                    "\n[defaults]\n"
                    f"argv = {self.stub} -f {{kernel_file}}\n"
                    "transport = ipc\n"
                    f"autostart = {'yes' if autostart else 'no'}\n")
        for i in range(n):
            with open(os.path.join(cdir, f"c{i:05d}.ini"), "w") as f:
                f.write(f"[context:c{i:05d}]\n")
        self.ctl = [self.kernelctl, "--socket", self.socket]
        self.t_start = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([self.kernelsupd, "--config", conf], env=bench_env(),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=raise_nofile)

    def answered(self):
        """Polls `kernelctl status --json` until it parses; seconds since the daemon's start."""
        while True:
            if self.proc.poll() is not None:
                self.fail(f"kernelsupd exited with {self.proc.returncode}")
            r = subprocess.run(self.ctl + ["--json", "status"], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL)
            try:
                json.loads(r.stdout)
                return time.monotonic() - self.t_start
            except ValueError:
                time.sleep(0.01)

    def wait_ready(self):
        r = subprocess.run(self.ctl + ["wait", "--timeout", "300"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            self.fail(f"kernelctl wait exited {r.returncode}: {r.stderr.strip()}")
        return time.monotonic() - self.t_start

    def fail(self, why):
        kept = self.tmp + ".log"
        shutil.copy(self.log_path, kept)
        self.stop()
        sys.exit(f"context-scale: {why}; the daemon's log is kept in {kept}")

    def stop(self):
        return stop_and_remove(self.proc, self.tmp)


class Supervisord:
    """supervisord -n on N programs, each the stub kernel on an ipc connection file of its own."""

    def __init__(self, stub, n):
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix="ks-bench-sv-")
        conf = os.path.join(self.tmp, "supervisord.conf")
        sock = os.path.join(self.tmp, "supervisor.sock")
        logs = os.path.join(self.tmp, "logs")
        ipc = os.path.join(self.tmp, "ipc")
        os.makedirs(logs)
        os.makedirs(ipc)
        with open(conf, "w") as f:
            f.write(f"[unix_http_server]\nfile = {sock}\n\n"
                    f"[supervisord]\nnodaemon = true\nuser = root\nlogfile = {self.tmp}/supervisord.log\n"
                    f"pidfile = {self.tmp}/supervisord.pid\nchildlogdir = {logs}\n\n"
                    "[rpcinterface:supervisor]\n"
                    "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
                    f"[supervisorctl]\nserverurl = unix://{sock}\n\n")
            for i in range(n):
                cf = os.path.join(self.tmp, f"p{i:05d}.json")
                with open(cf, "w") as c:
                    json.dump({"transport": "ipc", "ip": f"{ipc}/p{i:05d}", "shell_port": 1, "iopub_port": 2,
                               "stdin_port": 3, "control_port": 4, "hb_port": 5, "key": secrets.token_hex(16),
                               "signature_scheme": "hmac-sha256"}, c)
                f.write(f"[program:p{i:05d}]\ncommand = {stub} -f {cf}\n\n")
        self.ctl = ["supervisorctl", "-c", conf]
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(["supervisord", "-n", "-c", conf], env=bench_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=raise_nofile)

    def wait_running(self, timeout=600):
        """Polls `supervisorctl status` until all N programs are RUNNING; seconds since the start."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"context-scale: supervisord exited with {self.proc.returncode}; see {self.tmp}")
            r = subprocess.run(self.ctl + ["status"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if sum(1 for line in r.stdout.splitlines() if " RUNNING " in line) == self.n:
                return time.monotonic() - self.t_start
            time.sleep(0.5)
        sys.exit(f"context-scale: supervisord's {self.n} programs not all RUNNING after {timeout} s")

    def stop(self):
        stop_and_remove(self.proc, self.tmp)


def measure_kernelsup(build, n, autostart, runs):
    d = Kernelsup(build, n, autostart)
    try:
        t_ready = d.wait_ready() if autostart else d.answered()
        pid = d.proc.pid
        row = {"n": n, "ready_s": t_ready, "private": private_kib(pid), "split": smaps_split(pid),
               "fds": len(os.listdir(f"/proc/{pid}/fd")), "fd_kinds": fd_kinds(pid), "threads": threads(pid),
               "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}
        with open(f"/proc/{pid}/limits") as f:
            row["nofile"] = next(line.split()[3] for line in f if line.startswith("Max open files"))
        row["status_ms"] = timed(d.ctl + ["status"], runs)
        row["json_ms"] = timed(d.ctl + ["--json", "status"], runs)
        return row
    finally:
        d.stop()


def measure_supervisord(stub, n, runs):
    s = Supervisord(stub, n)
    try:
        t = s.wait_running()
        return {"ready_s": t, "private": private_kib(s.proc.pid), "fds": len(os.listdir(f"/proc/{s.proc.pid}/fd")),
                "status_ms": timed(s.ctl + ["status"], runs)}
    finally:
        s.stop()


def mib(kib):
    return f"{kib / 1024:.1f}"


def main():
    ap = argparse.ArgumentParser(description="What a context costs kernelsupd, beside supervisord.")
    ap.add_argument("build", nargs="?", default=os.environ.get("KS_BUILDDIR", "."),
                    help="the build directory (default: $KS_BUILDDIR, else .)")
    ap.add_argument("--counts", default="1,100,1000", help="context counts (default 1,100,1000)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of each status (default 20)")
    ap.add_argument("--idle", type=int, default=10000, help="contexts of the autostart = no run (0: none)")
    ap.add_argument("--no-supervisord", action="store_true", help="kernelsup's column only")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    counts = [int(c) for c in args.counts.split(",")]
    # A ready context holds ~20 descriptors of the daemon's: a count over what the hard limit holds (the daemon
    # raises its soft limit to it; only CAP_SYS_RESOURCE raises the hard one) is measured at the largest
    # multiple of 50 that fits, and said.
    raise_nofile()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    fit = max(50, (hard - 200) // FDS_PER_CONTEXT // 50 * 50)
    capped = [c for c in counts if FDS_PER_CONTEXT * c + 200 > hard]
    counts = [min(c, fit) for c in counts]
    for p in ("kernelsupd", "kernelctl", "tests/stubkernel"):
        if not os.access(os.path.join(build, p), os.X_OK):
            sys.exit(f"context-scale: {build}/{p} is not built (make && make tests/stubkernel in {build})")
    stub = os.path.join(build, "tests", "stubkernel")
    sv = not args.no_supervisord and shutil.which("supervisord") and shutil.which("supervisorctl")
    if not sv and not args.no_supervisord:
        print("context-scale: supervisord is not installed (Debian: apt-get install supervisor); "
              "kernelsup's column only")
    load = os.getloadavg()
    print(f"stub kernels, transport ipc, {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f}; status times: median of {args.runs} whole processes")
    if capped:
        print(f"open-files hard limit {hard}: {', '.join(map(str, capped))} ready contexts would need more than it "
              f"holds (~{FDS_PER_CONTEXT} a context); measured at {fit} instead (ulimit -Hn, LimitNOFILE=)")

    rows = []
    for n in counts:
        ready = measure_kernelsup(build, n, True, args.runs)
        idle = measure_kernelsup(build, n, False, args.runs)
        s = measure_supervisord(stub, n, args.runs) if sv else None
        rows.append((n, ready, idle, s))
        print(f"  {n} done: ready in {ready['ready_s']:.1f} s"
              + (f", supervisord's programs running in {s['ready_s']:.1f} s" if s else ""), flush=True)

    print()
    print(f"{'contexts':>8}  {'private MiB':>11} {'fds':>6} {'status ms':>9} {'--json ms':>9}  "
          f"{'autostart=no MiB':>16} {'fds':>5}  {'supervisord MiB':>15} {'fds':>5} {'status ms':>9}")
    for n, r, i, s in rows:
        sv_cols = (f"{mib(s['private']):>15} {s['fds']:>5} {s['status_ms']:>9.1f}" if s else
                   f"{'-':>15} {'-':>5} {'-':>9}")
        print(f"{n:>8}  {mib(r['private']):>11} {r['fds']:>6} {r['status_ms']:>9.1f} {r['json_ms']:>9.1f}  "
              f"{mib(i['private']):>16} {i['fds']:>5}  {sv_cols}")

    print()
    print("kernelsupd's private memory by place (MiB) and descriptors by kind")
    print(f"{'contexts':>8} {'kernels':>7}  {'heap':>6} {'arenas':>6} {'n':>2} {'anon':>6} {'files':>6} "
          f"{'stack':>5}   {'socket':>6} {'pipe':>5} {'eventfd':>7} {'epoll':>5} {'pidfd':>5} {'other':>5}")
    for n, r, i, _ in rows:
        for label, x in (("ready", r), ("no", i)):
            sp, fk = x["split"], x["fd_kinds"]
            print(f"{n:>8} {label:>7}  {mib(sp['heap']):>6} {mib(sp['arenas']):>6} {sp['n_arenas']:>2} "
                  f"{mib(sp['anon']):>6} {mib(sp['files']):>6} {mib(sp['stack']):>5}   {fk['socket']:>6} "
                  f"{fk['pipe']:>5} {fk['eventfd']:>7} {fk['epoll']:>5} {fk['pidfd']:>5} {fk['other']:>5}")
    if len(rows) >= 2:
        (n0, r0, i0, s0), (n1, r1, i1, s1) = rows[0], rows[-1]
        dn = n1 - n0

        def per(a, b):
            return (b - a) / dn

        print(f"per context, from {n0} to {n1} (KiB): ready {per(r0['private'], r1['private']):.1f} "
              f"(heap {per(r0['split']['heap'], r1['split']['heap']):.1f}, "
              f"arenas {per(r0['split']['arenas'], r1['split']['arenas']):.1f}, "
              f"anon {per(r0['split']['anon'], r1['split']['anon']):.1f}), "
              f"{per(r0['fds'], r1['fds']):.1f} fds; "
              f"autostart=no {per(i0['private'], i1['private']):.1f} "
              f"(heap {per(i0['split']['heap'], i1['split']['heap']):.1f}), {per(i0['fds'], i1['fds']):.1f} fds"
              + (f"; supervisord {per(s0['private'], s1['private']):.1f}, {per(s0['fds'], s1['fds']):.1f} fds"
                 if s0 and s1 else ""))
    r = rows[-1][1] if rows else None
    if r:
        print(f"kernelsupd's threads: {', '.join(r['threads'])}; its open-files limit: {r['nofile']}")

    if args.idle:
        d = Kernelsup(build, args.idle, False)
        try:
            t = d.answered()
            pid = d.proc.pid
            st = timed(d.ctl + ["status"], args.runs)
            js = timed(d.ctl + ["--json", "status"], args.runs)
            me = timed(d.ctl + ["metrics"], args.runs)
            print()
            print(f"{args.idle} contexts, autostart = no: start until status answers {t:.2f} s; "
                  f"status {st:.1f} ms, status --json {js:.1f} ms, metrics {me:.1f} ms; "
                  f"private {mib(private_kib(pid))} MiB, peak VmHWM {mib(status_field(pid, 'VmHWM'))} MiB, "
                  f"{len(os.listdir(f'/proc/{pid}/fd'))} fds")
        finally:
            d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
