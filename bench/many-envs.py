#!/usr/bin/python3
"""Preload with many environments (red-team P8, issue 24.10): N contexts of one interpreter, each with an
environment of its own (env = CONV_ID=conv-I, as `kernelctl add --env` makes per conversation), each kernel
killed with kill -9 in turn, R rounds; for preload = auto and preload = no it prints how many restarts were
preloaded, how many launchers were started and ended to make room (from the log), the CPU of the daemon's
reaped children and the wall time.

Usage: /usr/bin/python3 bench/many-envs.py [BUILDDIR] [-n 10] [-r 2]
Not a test: it asserts nothing, it prints a table."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdaemon import BenchDaemon  # noqa: E402

ARGV = "/usr/bin/python3 -m ipykernel_launcher -f {kernel_file} --HistoryManager.hist_file=:memory:"


def status(d):
    out = subprocess.run(d.ctl + ["--json", "status"], capture_output=True, text=True).stdout
    j = json.loads(out)
    return {c["name"]: c for c in j["contexts"]}


def child_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def one(builddir, preload, n, rounds):
    os.environ["KERNELSUP_PRELOAD_SCRIPT"] = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "src", "daemon", "kernelsup-preload.py")
    sections = "".join(f"[context:e{i}]\nargv = {ARGV}\nenv = CONV_ID=conv-{i}\npreload = {preload}\n"
                       f"backoff_min = 1ms\nstart_timeout = 120s\n" for i in range(n))
    t0 = time.monotonic()
    d = BenchDaemon(builddir, sections)
    try:
        hot = 0
        for _ in range(rounds):
            for i in range(n):
                c = status(d)[f"e{i}"]
                os.kill(c["pid"], signal.SIGKILL)
                while True:
                    x = status(d)[f"e{i}"]
                    if x["state"] == "ready" and x["kernel_id"] != c["kernel_id"]:
                        break
                    time.sleep(0.02)
                hot += x["started"] == "preloaded"
        cpu, wall = child_cpu(d.proc.pid), time.monotonic() - t0
        log = d.log_text()
    finally:
        d.stop()
    started = len(re.findall(r"preloaded launcher [0-9]+ \(.*\) started", log))
    return hot, started, log.count("the least recently used"), cpu, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builddir", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("-r", type=int, default=2)
    a = ap.parse_args()
    print(f"{'preload':8} {'preloaded':>10} {'launchers':>10} {'evicted':>8} {'child CPU s':>12} {'wall s':>7}")
    for preload in ("auto", "no"):
        hot, started, evicted, cpu, wall = one(a.builddir, preload, a.n, a.r)
        print(f"{preload:8} {hot:>5}/{a.n * a.r:<4} {started:>10} {evicted:>8} {cpu:>12.1f} {wall:>7.1f}")


main()
