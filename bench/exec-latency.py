#!/usr/bin/python3
"""Per-cell latency of `kernelctl exec` against the usual ways to run a cell.

Starts its own kernelsupd (a temporary directory holds its config, socket, state
and runtime files), waits until its context is ready, then times N runs of the
trivial cell `x` each way:

  (a) kernelctl   the whole `kernelctl exec CTX x` process, wall time
  (b) kexec.py    a fresh /usr/bin/python3 per cell that loads the published
                  connection file with jupyter_client.BlockingKernelClient,
                  starts the channels, waits for ready, executes and collects
                  until idle (what apps do today)
  (c) floor       one long-lived BlockingKernelClient in this process, over its
                  kept connection: the kernel's own round trip
  (d) floor+count (c) with the user expression each cell through kernelctl exec
                  carries in a patched IPython kernel (output_chunking: the
                  kernel's count of what the cell wrote, src/chunking.h); (d)-(c)
                  is what the count costs per cell

Usage: /usr/bin/python3 bench/exec-latency.py [BUILDDIR] [-n N] [--transport ipc|tcp]
BUILDDIR holds kernelsupd and kernelctl (default: $KS_BUILDDIR, else .).
--transport is the context's (default ipc, as in the daemon): run it once each
way to see the two side by side.
Not a test: it asserts nothing, it prints a table.
"""

import argparse
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import time

from benchdaemon import BenchDaemon

KEXEC = r'''
import sys
from jupyter_client import BlockingKernelClient

kc = BlockingKernelClient()
kc.load_connection_file(sys.argv[1])
kc.start_channels()
kc.wait_for_ready(timeout=30)
msg_id = kc.execute(sys.argv[2], allow_stdin=False)
while True:
    m = kc.get_iopub_msg(timeout=30)
    if m["parent_header"].get("msg_id") != msg_id:
        continue
    if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
        break
while kc.get_shell_msg(timeout=30)["parent_header"].get("msg_id") != msg_id:
    pass
kc.stop_channels()
'''


def count_expression():
    """The count's user expression, as src/chunking.h defines it (CHUNKING_WRITTEN_CODE)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "daemon", "chunking.h")) as f:
        m = re.search(r'#define CHUNKING_WRITTEN_CODE\s*\\\n\s*"(.*)"\n', f.read())
    return {"kernelsup_written": m.group(1)} if m else None


def run_floor_cell(kc, code, user_expressions=None):
    """One cell over a kept connection: execute, collect until idle and the reply."""
    msg_id = kc.execute(code, allow_stdin=False, user_expressions=user_expressions or {})
    idle = reply = False
    while not idle:
        m = kc.get_iopub_msg(timeout=30)
        idle = (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle")
    while not reply:
        reply = kc.get_shell_msg(timeout=30)["parent_header"].get("msg_id") == msg_id


def sync_iopub(kc):
    """kernel_info until its idle arrives on iopub, so that a cell's idle is not missed."""
    while True:
        msg_id = kc.kernel_info()
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            try:
                m = kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status" \
                    and m["content"]["execution_state"] == "idle":
                kc.get_shell_msg(timeout=30)
                return


def timed(fn, n, warmup=3):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def p90(values):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("builddir", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("-n", type=int, default=50, help="timed runs per method (default 50)")
    ap.add_argument("--transport", choices=("ipc", "tcp"), default="ipc", help="the context's transport (default ipc)")
    args = ap.parse_args()

    try:
        from jupyter_client import BlockingKernelClient
    except ImportError:
        sys.exit(f"{sys.executable} has no jupyter_client: run this with /usr/bin/python3")

    daemon = BenchDaemon(args.builddir, f"[context:bench]\ntransport = {args.transport}\n")
    tmp, ctl = daemon.tmp, daemon.ctl
    kc = None
    try:
        subprocess.run(ctl + ["exec", "bench", "x = 1"], check=True, stdout=subprocess.DEVNULL)
        status = subprocess.run(ctl + ["status", "bench", "--json"], check=True, capture_output=True, text=True)
        cf = json.loads(status.stdout)["contexts"][0]["connection_file"]
        script = os.path.join(tmp, "kexec.py")
        with open(script, "w") as f:
            f.write(KEXEC)

        a = timed(lambda: subprocess.run(ctl + ["exec", "bench", "x"], check=True, stdout=subprocess.DEVNULL), args.n)
        b = timed(lambda: subprocess.run(["/usr/bin/python3", script, cf, "x"], check=True), args.n)
        kc = BlockingKernelClient()
        kc.load_connection_file(cf)
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        sync_iopub(kc)
        c = timed(lambda: run_floor_cell(kc, "x"), args.n)
        count = count_expression()
        if count is None:
            sys.exit("src/chunking.h has no CHUNKING_WRITTEN_CODE")
        e = timed(lambda: run_floor_cell(kc, "x", count), args.n)
    finally:
        if kc is not None:
            kc.stop_channels()
        daemon.stop()

    print(f"per-cell latency of the cell 'x', {args.n} runs each (ms), on {os.cpu_count()} CPUs, "
          f"transport {args.transport}")
    print(f"{'method':<34}{'median':>9}{'p90':>9}{'mean':>9}")
    rows = (("(a) kernelctl exec (whole process)", a), ("(b) python kexec.py per cell", b),
            ("(c) kept jupyter_client (floor)", c), ("(d) (c) + the count's expression", e))
    for name, v in rows:
        print(f"{name:<34}{statistics.median(v):>9.2f}{p90(v):>9.2f}{statistics.mean(v):>9.2f}")
    print(f"(b)/(a), median: {statistics.median(b) / statistics.median(a):.1f}x faster through the supervisor")
    print(f"(a)-(c), median: {statistics.median(a) - statistics.median(c):+.2f} ms over the kernel's own floor")
    print(f"(d)-(c), median: {statistics.median(e) - statistics.median(c):+.2f} ms per cell for the count of what "
          "it wrote")


if __name__ == "__main__":
    main()
