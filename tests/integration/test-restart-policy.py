"""The end of a ready kernel is no failed start: seven kill -9s in a row, five
shutdown_requests from a stock jupyter_client, and a kernel that acknowledges a
client's shutdown_request but does not exit (a cell left a non-daemon thread) are
each followed by a restart after the backoff, never by `failed`; cells run after.
The start limit itself (a kernel that never answers) is test-failing.py's."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# backoff_max keeps the twelve restarts in a row short; start_limit_burst stays at its default (5 within
# 60 s), which seven kills within a minute would reach if they counted as failed starts.
DEFAULTS = "backoff_max = 2s\n"
THREAD_CELL = "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n'left'"


def wait_replaced(d, before, what, seen):
    """Waits until another kernel than before's is ready; records every state seen on the way."""

    def check(c):
        seen.add(c.get("state"))
        return c.get("state") == "ready" and c.get("pid") not in (None, before["pid"])

    return d.wait_context("default", check, f"a new kernel ready after {what}", timeout=60)


def client_shutdown(tap, cf, what):
    """A stock jupyter_client's shutdown(): shutdown_request on control, from the published file; waits for
    the kernel's reply. (Without the heartbeat channel: jupyter_client's makes a new socket at every missed
    beat, and a kernel that exited leaves them all lingering.)"""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient()
    kc.load_connection_file(cf)
    kc.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
    try:
        msg_id = kc.shutdown()
        reply = kc.get_control_msg(timeout=harness.scaled(30))
        tap.ok(reply["msg_type"] == "shutdown_reply" and reply["parent_header"].get("msg_id") == msg_id,
               f"{what}: the kernel answered shutdown_reply", repr(reply.get("msg_type")))
    finally:
        kc.stop_channels()
        kc.context.destroy(linger=0)


def exec_ok(tap, d, what):
    r = d.ctl("exec", "default", "6 * 7", timeout=60)
    tap.ok(r.returncode == 0 and "42" in r.stdout, f"{what}: kernelctl exec runs a cell", r.stdout + r.stderr)


def test_kills(tap, d):
    seen = set()
    first = d.wait_state("default", "ready")
    before = first
    for i in range(1, 8):
        os.kill(before["pid"], signal.SIGKILL)
        before = wait_replaced(d, before, f"kill -9 number {i}", seen)
    tap.ok("failed" not in seen, "seven kill -9s of a ready kernel: never failed", repr(sorted(seen)))
    tap.eq(before["incarnation"], first["incarnation"] + 7, "seven kill -9s: seven new kernels")
    tap.eq((before.get("last_exit") or {}).get("signal"), "SIGKILL", "last_exit names SIGKILL")
    exec_ok(tap, d, "after seven kill -9s")
    log = d.log()
    tap.ok("failed starts" not in log, "the log calls no kill a failed start")
    tap.ok("ended 7 times in a row; the delay starts over" in log, "the log counts the ends in a row")


def test_client_shutdowns(tap, d):
    seen = set()
    mark = d.log_mark()
    before = d.wait_state("default", "ready")
    cf = before["connection_file"]
    for i in range(1, 6):
        client_shutdown(tap, cf, f"client shutdown_request number {i}")
        before = wait_replaced(d, before, f"client shutdown_request number {i}", seen)
    tap.ok(not seen & {"failed", "stopped"}, "five client shutdown_requests: never failed, never stopped",
           repr(sorted(seen)))
    tap.ok("acknowledged a client's shutdown_request" in d.log_since(mark),
           "the daemon saw the kernel's shutdown_reply on iopub")
    exec_ok(tap, d, "after five client shutdowns")


def test_acked_not_exiting(tap, d):
    """ipykernel acknowledges, then waits for the cell's non-daemon thread at interpreter exit."""
    before = d.wait_state("default", "ready")
    r = harness.run_cell(before["connection_file"], THREAD_CELL)
    tap.eq(r["result"], "'left'", "a cell left a non-daemon thread running")
    mark = d.log_mark()
    client_shutdown(tap, before["connection_file"], "shutdown_request with a thread left")
    # The control reply goes to the client alone; the daemon learns of it from the iopub broadcast, which
    # ipykernel sends a moment later. From then on check waits through the stop and the restart, and answers
    # for the new kernel.
    d.wait_log("acknowledged a client's shutdown_request", mark)
    r = d.ctl("check", "default", "--expect", before["kernel_id"], "--timeout", "60", timeout=90)
    tap.eq(r.returncode, 8, "check after the acknowledged shutdown: kernel replaced (exit 8)", r.stdout + r.stderr)
    tap.ok("(state ready)" not in r.stdout + r.stderr, "check says nothing about a ready state it did not wait for",
           r.stdout + r.stderr)
    after = d.wait_state("default", "ready")
    log = d.log_since(mark)
    tap.ok("of its shutdown_reply to a client; sending SIGTERM" in log,
           "the kernel that did not exit got SIGTERM after shutdown_grace, as in a stop", d.log_tail())
    le = after.get("last_exit") or {}
    tap.eq(le.get("signal"), "SIGTERM", "last_exit: SIGTERM ended it")
    tap.contains(after.get("last_error") or "", "after a client's shutdown_request",
                 "last_error says the client's shutdown_request came first")
    tap.ok(after["pid"] != before["pid"], "a new kernel runs")
    d.check_group_gone(before["pid"], "the stuck kernel's process group is gone")
    exec_ok(tap, d, "after the acknowledged shutdown")


def test(tap):
    d = harness.Daemon(tap, contexts="[context:default]\n", defaults=DEFAULTS)
    d.start()
    test_kills(tap, d)
    test_client_shutdowns(tap, d)
    test_acked_not_exiting(tap, d)
    d.stop()


harness.main(test)
