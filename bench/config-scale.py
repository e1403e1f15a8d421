#!/usr/bin/python3
"""What loading the configuration costs with many contexts (issue 10: 50,000 contexts took 11 s, quadratic).

Writes, in a temporary directory, a main file and N files in contexts_dir (one context each, with an env line),
for each N of --counts, and times `kernelsupd --check-config` on it: the whole parse and check, as a start or a
reload does it. With a second build directory, times that build too, side by side (e.g. a build of main).
port_range is 1024-65535, which holds 12,902 contexts: a larger N is refused by a build that checks the range's
capacity, after the whole load, so the time still counts; the verdict column says which.

Usage: /usr/bin/python3 bench/config-scale.py [BUILD_DIR] [BASELINE_BUILD_DIR] [--counts 1000,10000,50000]
       [--runs 3]
Not a test: it asserts nothing, it prints figures (the median of --runs runs).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def write_config(root, n):
    conf = os.path.join(root, "kernelsup.ini")
    ctx = os.path.join(root, "contexts.d")
    os.makedirs(ctx)
    with open(conf, "w") as f:
        f.write("[supervisor]\n"
                f"runtime_dir = {root}/run\nstate_dir = {root}/state\ncontexts_dir = {ctx}\n"
                "port_range = 1024-65535\n")
    for i in range(n):
        with open(os.path.join(ctx, f"c{i:05d}.ini"), "w") as f:
            f.write(f"[context:c{i:05d}]\nenv = N={i}\n")
    return conf


def time_check(kernelsupd, conf, runs):
    times, out = [], ""
    for _ in range(runs):
        t0 = time.monotonic()
        r = subprocess.run([kernelsupd, "--check-config", "--config", conf], capture_output=True, text=True)
        times.append(time.monotonic() - t0)
        out = (r.stdout + r.stderr).strip()
    verdict = "OK" if "OK" in out else ("port_range too small" if "port_range" in out else out[:60])
    return statistics.median(times), verdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("baseline", nargs="?")
    ap.add_argument("--counts", default="1000,10000,50000")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    builds = [b for b in (a.build, a.baseline) if b]
    for b in builds:
        if not os.access(os.path.join(b, "kernelsupd"), os.X_OK):
            sys.exit(f"config-scale: {b}/kernelsupd is not built")
    print(f"kernelsupd --check-config, median of {a.runs} runs (s)")
    print(f"{'contexts':>9}  " + "  ".join(f"{b[-40:]:<40}" for b in builds))
    for n in (int(x) for x in a.counts.split(",")):
        root = tempfile.mkdtemp(prefix="ks-bench-config-")
        try:
            conf = write_config(root, n)
            cols = []
            for b in builds:
                t, verdict = time_check(os.path.join(b, "kernelsupd"), conf, a.runs)
                cols.append(f"{t:8.3f}  {verdict:<30}")
            print(f"{n:>9}  " + "  ".join(cols))
        finally:
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
