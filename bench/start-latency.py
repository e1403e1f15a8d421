#!/usr/bin/python3
"""Start latency and memory: preloaded kernels against cold ones, side by side in one run (issue 14).

Starts its own kernelsupd (a temporary directory holds its config, socket, state and runtime files) with
two contexts of one user, identical but for `preload`: `hot` (the default, auto: forked by the preloaded
launcher) and `cold` (preload = no). Once the launcher is ready, N times each, alternating so that both see
the same machine load:

  launch    `kernelctl start CTX` after `kernelctl stop CTX`, wall time: it returns when the new kernel
            answers kernel_info (and its iopub)
  kill -9   SIGKILL of the kernel, until `kernelctl status` shows a new kernel ready (polled every 20 ms;
            backoff_min is 1 ms for both, so the time is the daemon's notice, the launch and the kernel's
            start)

and then PSS (/proc/PID/smaps_rollup) of 5 idle kernels of each kind running at once (contexts h1..h5 and
c1..c5), plus the launcher's own, since it is the price of the sharing. It prints median, p10, p90, min and
max (ms) for each, the ratios preloaded / cold, and the load average before and after, since the numbers move
with the machine's load.

Usage: /usr/bin/python3 bench/start-latency.py [BUILDDIR] [-n 10]
BUILDDIR holds kernelsupd and kernelctl (default: $KS_BUILDDIR, else .). The launcher's file is taken from
this source tree (KERNELSUP_PRELOAD_SCRIPT). Not a test: it asserts nothing, it prints a table.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from benchdaemon import BenchDaemon

HERE = os.path.dirname(os.path.abspath(__file__))
ARGV = "/usr/bin/python3 -m ipykernel_launcher -f {kernel_file} --HistoryManager.hist_file=:memory:"


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def row(name, values, unit="ms"):
    return (f"{name:<28} {statistics.median(values):8.1f} {pct(values, 10):8.1f} {pct(values, 90):8.1f} "
            f"{min(values):8.1f} {max(values):8.1f} {len(values):4d}  {unit}")


def run(argv, ok=(0,)):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode not in ok:
        sys.exit(f"{' '.join(argv)} failed (exit {r.returncode}): {r.stdout.strip()} {r.stderr.strip()}")
    return r.stdout


def status(ctl, name):
    # Exit 1 says some context is not up: the ones started on demand are stopped.
    return json.loads(run(ctl + ["--json", "status", name], ok=(0, 1)))["contexts"][0]


def wall_ms(argv):
    t0 = time.perf_counter()
    run(argv)
    return (time.perf_counter() - t0) * 1000


def launch_ms(ctl, name):
    run(ctl + ["stop", name])
    ms = wall_ms(ctl + ["start", name])
    want = "preloaded" if name == "hot" else "cold"
    got = status(ctl, name)
    if got["started"] != want:
        sys.exit(f"{name} was started {got['started']} ({got['start_note']}), not {want}")
    return ms


def kill_ms(ctl, name):
    before = status(ctl, name)
    t0 = time.perf_counter()
    os.kill(before["pid"], signal.SIGKILL)
    while True:
        c = status(ctl, name)
        if c["state"] == "ready" and c["kernel_id"] != before["kernel_id"]:
            return (time.perf_counter() - t0) * 1000
        if time.perf_counter() - t0 > 120:
            sys.exit(f"{name} not ready again 120 s after kill -9: {c}")
        time.sleep(0.02)


def pss_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))


def launcher_pids(daemon_pid):
    """The daemon's children that run the launcher's file."""
    script = os.environ["KERNELSUP_PRELOAD_SCRIPT"].encode()
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if script in cmd and ppid == daemon_pid:
            out.append(int(p))
    return out


def wait_launcher(daemon, mark):
    t0 = time.time()
    while "is ready" not in daemon.log_text()[mark:]:
        if time.time() - t0 > 120:
            sys.exit("the preloaded launcher was not ready within 120 s")
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("builddir", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("-n", type=int, default=10, help="timed launches and kills per kind (default 10)")
    args = ap.parse_args()
    os.environ.setdefault("KERNELSUP_PRELOAD_SCRIPT", os.path.join(os.path.dirname(HERE), "src",
                                                                    "daemon", "kernelsup-preload.py"))
    sections = (f"[defaults]\nargv = {ARGV}\nenv = PYDEVD_DISABLE_FILE_VALIDATION=1\nbackoff_min = 1ms\n"
                "start_limit_burst = 1000\nstart_timeout = 120s\n\n[context:hot]\n[context:cold]\npreload = no\n"
                + "".join(f"[context:h{i}]\nautostart = no\n[context:c{i}]\nautostart = no\npreload = no\n"
                          for i in range(1, 6)))
    load0 = os.getloadavg()
    daemon = BenchDaemon(args.builddir, sections)
    ctl = daemon.ctl
    try:
        wait_launcher(daemon, 0)
        launch = {"hot": [], "cold": []}
        kill = {"hot": [], "cold": []}
        for _ in range(args.n):
            for name in ("hot", "cold"):
                launch[name].append(launch_ms(ctl, name))
            for name in ("hot", "cold"):
                kill[name].append(kill_ms(ctl, name))
                if status(ctl, name)["started"] != ("preloaded" if name == "hot" else "cold"):
                    sys.exit(f"{name} restarted the other way: {status(ctl, name)}")
        for i in range(1, 6):
            for kind in "hc":
                run(ctl + ["start", f"{kind}{i}"])
        # Idle: every kernel has answered; let their start-up garbage settle the same way for both.
        time.sleep(2)
        pss = {k: [pss_kib(status(ctl, f"{k}{i}")["pid"]) / 1024 for i in range(1, 6)] for k in "hc"}
        launchers = [pss_kib(p) / 1024 for p in launcher_pids(daemon.proc.pid)]
    finally:
        code = daemon.stop()
    load1 = os.getloadavg()

    print(f"load average before {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}, "
          f"after {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}; {os.cpu_count()} CPUs")
    print(f"{'':<28} {'median':>8} {'p10':>8} {'p90':>8} {'min':>8} {'max':>8} {'n':>4}")
    print(row("launch -> answers, cold", launch["cold"]))
    print(row("launch -> answers, preloaded", launch["hot"]))
    print(row("kill -9 -> answers, cold", kill["cold"]))
    print(row("kill -9 -> answers, preloaded", kill["hot"]))
    print(row("PSS per idle kernel, cold", pss["c"], "MiB"))
    print(row("PSS per idle kernel, preloaded", pss["h"], "MiB"))
    total_hot = (sum(pss["h"]) + sum(launchers)) / 5
    print(f"the launcher{'s' if len(launchers) != 1 else ''}: {', '.join(f'{x:.1f}' for x in launchers)} MiB PSS; "
          f"preloaded kernels with it, per kernel: {total_hot:.1f} MiB")
    med = statistics.median
    print(f"ratios preloaded / cold (goal <= 0.4, 0.4, 0.6): launch {med(launch['hot']) / med(launch['cold']):.2f}, "
          f"kill -9 {med(kill['hot']) / med(kill['cold']):.2f}, PSS {med(pss['h']) / med(pss['c']):.2f} "
          f"(with the launcher: {total_hot / (sum(pss['c']) / 5):.2f})")
    if code != 0:
        print(f"kernelsupd exited {code}; its log was {daemon.log_path}")


if __name__ == "__main__":
    main()
