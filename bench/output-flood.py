#!/usr/bin/python3
"""The daemon's peak memory (VmHWM) under heavy cell output, against its stated bound.

For each flood a fresh kernelsupd (temporary directory, one context, the given
output_limit) runs one cell, then the daemon's VmHWM is read from /proc/PID/status:

  1gib      1 GiB in 1 MiB writes        sys.stdout.write('x' * (1 << 20)), 1024 times
  300mib    one 300 MiB write            n = sys.stdout.write('x' * (300 << 20))
  displays  100,000 tiny display messages  display({'text/plain': 'y' * 20}, raw=True)

each two ways, with output_chunking = yes and = no (--chunking to pick one):

  exec      `kernelctl exec CTX CODE` (the daemon runs the cell and collects its output)
  client    a stock jupyter_client.BlockingKernelClient on the published connection
            file runs it; the daemon only listens on iopub as it always does

Printed next to output_limit and the bound kernelsup.ini(5) states for one context
(48 MiB + 64 MiB + 16 x output_limit), with what the caller got: exit status or reply
status; "head", the bytes of the flood's text it got from the start (exec: up to
output_limit; a jupyter_client gets everything); "cut", what the marker says was not
kept (">=N" where it says "at least N"; "dropped" when a message over the bound was
dropped instead); "lost", what the kernel's count of what the cell wrote says never
reached the daemon (0 when nothing was lost, "?" without a count); the markers.

Usage: /usr/bin/python3 bench/output-flood.py [BUILDDIR] [--limit 10M] [--only NAME]
       [--chunking yes|no] [--exec-only]
BUILDDIR holds kernelsupd and kernelctl (default: $KS_BUILDDIR, else .).
Not a test: it asserts nothing, it prints a table.
"""

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
FLOODS = {
    "1gib": ("1 GiB in 1 MiB writes", "import sys\nfor i in range(1024): sys.stdout.write('x' * (1 << 20))"),
    "300mib": ("one 300 MiB write", "import sys; n = sys.stdout.write('x' * (300 << 20))"),
    "displays": ("100,000 tiny displays", "from IPython.display import display\n"
                                          "for i in range(100000): display({'text/plain': 'y' * 20}, raw=True)"),
}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def vm_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class Daemon:
    def __init__(self, builddir, limit_text, chunking):
        self.tmp = tempfile.mkdtemp(prefix="ks-bench-")
        self.sock = os.path.join(self.tmp, "run", "control.sock")
        for d in ("conf/contexts.d", "run", "state"):
            os.makedirs(os.path.join(self.tmp, d))
        port_min = 20000 + (os.getpid() % 50) * 200
        config = os.path.join(self.tmp, "conf", "kernelsup.ini")
        with open(config, "w") as f:
            f.write(f"[supervisor]\nsocket = {self.sock}\nruntime_dir = {self.tmp}/run\n"
                    f"state_dir = {self.tmp}/state\ncontexts_dir = {self.tmp}/conf/contexts.d\n"
                    f"port_range = {port_min}-{port_min + 199}\n"
                    f"\n[context:bench]\noutput_limit = {limit_text}\noutput_chunking = {chunking}\n")
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID",
                                                                "WATCHDOG_USEC", "WATCHDOG_PID",
                                                                "JPY_PARENT_PID")}
        self.log = open(os.path.join(self.tmp, "daemon.log"), "wb")
        self.proc = subprocess.Popen([os.path.join(builddir, "kernelsupd"), "--config", config], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.ctl = [os.path.join(builddir, "kernelctl"), "--socket", self.sock]
        subprocess.run(self.ctl + ["wait", "--timeout", "120"], check=True, stdout=subprocess.DEVNULL)
        status = subprocess.run(self.ctl + ["status", "bench", "--json"], check=True, capture_output=True,
                                text=True)
        self.connection_file = json.loads(status.stdout)["contexts"][0]["connection_file"]

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def head_bytes(data):
    """How many bytes at the start are the flood's text ('x'), before anything else."""
    return len(data) - len(data.lstrip(b"x"))


def run_exec(d, code):
    r = subprocess.run(d.ctl + ["exec", "bench", code], capture_output=True, timeout=3600)
    markers = sum(r.stderr.count(m) for m in (b"[output truncated", b"[output dropped", b"[no reply"))
    last = r.stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode(errors="replace")
    cut = re.search(rb"\[output truncated: (at least )?(\d+) more bytes not kept\]", r.stderr)
    lost = re.search(rb"\[output dropped: the kernel wrote (\d+) bytes to stdout and stderr, only (\d+) of them",
                     r.stderr)
    if cut:
        lost = str(int(lost.group(1)) - int(lost.group(2))) if lost else "?" if cut.group(1) else "0"
        cut = (">=" if cut.group(1) else "") + cut.group(2).decode()
    else:
        cut, lost = "dropped" if b"[output dropped" in r.stderr else "-", "?"
    return f"exit {r.returncode} {last}", head_bytes(r.stdout), cut, lost, markers


def run_client(d, code):
    """As an app would: execute, collect iopub, end at the execute_reply. iopub is lossy
    for a subscriber slower than the kernel (its idle may never come), so after the
    reply iopub is read until the cell's idle or 10 s without a message."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient()
    kc.load_connection_file(d.connection_file)
    kc.start_channels()
    received = 0
    head = None

    def take(timeout):
        """Reads one iopub message; True when it is the cell's idle."""
        nonlocal received, head
        m = kc.get_iopub_msg(timeout=timeout)
        if m["parent_header"].get("msg_id") != msg_id:
            return False
        if m["msg_type"] == "stream":
            text = m["content"]["text"]
            if head is None or head == received:
                head = received + len(text) - len(text.lstrip("x"))
            received += len(text)
        elif m["msg_type"] == "display_data":
            received += len(m["content"]["data"].get("text/plain", ""))
        return m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"

    try:
        kc.wait_for_ready(timeout=60)
        msg_id = kc.execute(code, allow_stdin=False)
        status = None
        while status is None:
            try:
                m = kc.get_shell_msg(timeout=0.01)
                if m["parent_header"].get("msg_id") == msg_id:
                    status = m["content"]["status"]
            except queue.Empty:
                pass
            try:
                while True:
                    take(0)
            except queue.Empty:
                pass
        try:
            while not take(10):
                pass
        except queue.Empty:
            pass
        return f"reply {status}", head or 0, "-", "-", 0
    finally:
        kc.stop_channels()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("builddir", nargs="?", default=os.environ.get("KS_BUILDDIR", "."))
    ap.add_argument("--limit", default="10M", help="output_limit of the context (default 10M)")
    ap.add_argument("--only", choices=sorted(FLOODS), action="append", help="run only this flood")
    ap.add_argument("--chunking", choices=("yes", "no"), action="append",
                    help="output_chunking of the context (default: both)")
    ap.add_argument("--exec-only", action="store_true", help="leave out the jupyter_client runs")
    args = ap.parse_args()
    try:
        import jupyter_client  # noqa: F401
    except ImportError:
        sys.exit(f"{sys.executable} has no jupyter_client: run this with /usr/bin/python3")

    limit = parse_size(args.limit)
    bound = 48 * MiB + 64 * MiB + 16 * limit
    rows = []
    d = Daemon(args.builddir, args.limit, "yes")
    idle = vm_hwm(d.proc.pid)
    d.close()
    ways = (("kernelctl exec", run_exec),) if args.exec_only else (("kernelctl exec", run_exec),
                                                                    ("jupyter_client", run_client))
    for key in args.only or FLOODS:
        what, code = FLOODS[key]
        for how, fn in ways:
            for chunking in args.chunking or ("yes", "no"):
                d = Daemon(args.builddir, args.limit, chunking)
                try:
                    t0 = time.monotonic()
                    outcome, head, cut, lost, markers = fn(d, code)
                    secs = time.monotonic() - t0
                    hwm = vm_hwm(d.proc.pid)
                finally:
                    d.close()
                rows.append((what, how, chunking, hwm, outcome, head, cut, lost, markers, secs))
                print(f"# {what} through {how}, chunking {chunking}: VmHWM {hwm / MiB:.1f} MiB, {outcome}, "
                      f"head {head} bytes, cut {cut}, lost {lost}, {markers} markers, {secs:.1f} s", file=sys.stderr)

    print(f"kernelsupd peak RSS (VmHWM) under cell output; output_limit {limit / MiB:g} MiB, "
          f"stated bound {bound / MiB:g} MiB (48 MiB + 64 MiB + 16 x output_limit); idle daemon {idle / MiB:.1f} MiB; "
          f"{os.cpu_count()} CPUs")
    print(f"{'flood':<24}{'through':<16}{'chunking':<9}{'VmHWM MiB':>10}  {'caller got':<20}{'head bytes':>12}"
          f"{'cut':>12}{'lost':>12}{'markers':>8}{'s':>7}")
    for what, how, chunking, hwm, outcome, head, cut, lost, markers, secs in rows:
        print(f"{what:<24}{how:<16}{chunking:<9}{hwm / MiB:>10.1f}  {outcome:<20}{head:>12}{cut:>12}{lost:>12}"
              f"{markers:>8}{secs:>7.1f}")


if __name__ == "__main__":
    main()
