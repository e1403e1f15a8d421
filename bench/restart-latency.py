#!/usr/bin/python3
"""Restart latency: `kernelctl restart` against jupyter_client's KernelManager.restart_kernel.

Starts its own kernelsupd (a temporary directory holds its config, socket, state and
runtime files) with one context, and a jupyter_client KernelManager running the same
kernel (same interpreter, same arguments, same environment). Then, N times each,
alternating so that both see the same machine load, and after one untimed cell each
time (a restart usually follows work):

  (a) kernelctl      the whole `kernelctl restart CTX` process, wall time: it returns
                     when the new kernel answers (kernel_info and iopub)
  (b) jupyter_client km.restart_kernel() (shutdown_request, wait for the old process,
                     launch) and then a new client's wait_for_ready(): the new
                     kernel answers

and, M times, `kernelctl remove` of a context added for it (it returns once the
removed context's kernel is gone). It prints median, p95 and max (ms) of each, how
many of the daemon's stops needed SIGTERM after shutdown_grace, and the goal's two
ratios: max / median of (a), and median (a) / median (b).

Usage: /usr/bin/python3 bench/restart-latency.py [BUILDDIR] [-n 50] [--removes 20]
       [--shutdown-grace 500ms]
BUILDDIR holds kernelsupd and kernelctl (default: $KS_BUILDDIR, else .).
Not a test: it asserts nothing, it prints a table.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

from benchdaemon import BenchDaemon

KERNEL_ARGS = ["--HistoryManager.hist_file=:memory:"]
KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def row(name, values):
    return (f"{name:<40} {statistics.median(values):9.1f} {pct(values, 95):9.1f} {max(values):9.1f}"
            f" {len(values):5d}")


def wall_ms(argv):
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {r.returncode}): {r.stderr.strip()}")
    return ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("builddir", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("-n", type=int, default=50, help="timed restarts per method (default 50)")
    ap.add_argument("--removes", type=int, default=20, help="timed kernelctl remove (default 20)")
    ap.add_argument("--shutdown-grace", default=None, help="shutdown_grace for the daemon's contexts "
                    "(default: the daemon's own default)")
    args = ap.parse_args()

    try:
        from jupyter_client import KernelManager
    except ImportError:
        sys.exit(f"{sys.executable} has no jupyter_client: run this with /usr/bin/python3")
    grace = f"shutdown_grace = {args.shutdown_grace}\n" if args.shutdown_grace else ""
    argv = " ".join(["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{kernel_file}"] + KERNEL_ARGS)
    daemon = BenchDaemon(args.builddir, f"[defaults]\nargv = {argv}\n" + grace +
                         "".join(f"env = {k}={v}\n" for k, v in KERNEL_ENV.items()) + "\n[context:bench]\n")
    ctl = daemon.ctl
    km = None
    try:
        # The kernel inherits this environment (jupyter_client 7.4 does not take env= from start_kernel).
        os.environ.update(KERNEL_ENV)
        km = KernelManager(kernel_name="python3")
        km.start_kernel(extra_arguments=KERNEL_ARGS)

        def km_ready():
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=60)
            finally:
                kc.stop_channels()

        def km_cell():
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=60)
                kc.execute_interactive("x = 1", timeout=60)
            finally:
                kc.stop_channels()

        km_ready()
        a, b = [], []
        for _ in range(args.n):
            subprocess.run(ctl + ["exec", "bench", "x = 1"], check=True, stdout=subprocess.DEVNULL)
            a.append(wall_ms(ctl + ["restart", "bench"]))
            km_cell()
            t0 = time.perf_counter()
            km.restart_kernel()
            km_ready()
            b.append((time.perf_counter() - t0) * 1000)

        c = []
        for i in range(args.removes):
            name = f"gone{i}"
            subprocess.run(ctl + ["add", name], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(ctl + ["start", name], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(ctl + ["exec", name, "x = 1"], check=True, stdout=subprocess.DEVNULL)
            c.append(wall_ms(ctl + ["remove", name]))
    finally:
        if km is not None:
            km.shutdown_kernel(now=True)
        sigterms = daemon.log_text().count("sending SIGTERM")
        daemon.stop()

    print(f"restart until the new kernel answers, after one cell ({os.cpu_count()} CPUs); ms")
    print(f"{'method':<40} {'median':>9} {'p95':>9} {'max':>9} {'runs':>5}")
    print(row("(a) kernelctl restart (whole process)", a))
    print(row("(b) KernelManager.restart_kernel+ready", b))
    if c:
        print(row("(c) kernelctl remove (old kernel gone)", c))
    print(f"stops that needed SIGTERM after shutdown_grace: {sigterms} of {args.n + len(c)}")
    print(f"(a) max / median: {max(a) / statistics.median(a):.2f} (goal: at most 2)")
    print(f"(a) median / (b) median: {statistics.median(a) / statistics.median(b):.2f} (goal: at most 1)")


if __name__ == "__main__":
    main()
