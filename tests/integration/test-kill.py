"""kill -9 of a kernel: it is restarted on the same ports and key with a new pid,
kernel_id and incarnation; a client that loaded the connection file before the kill
works again, and the namespace is new."""

import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402


def kill_and_wait(tap, d, before, what):
    """SIGKILLs the kernel of before (a context dict) and waits until another kernel is ready."""
    os.kill(before["pid"], signal.SIGKILL)
    after = d.wait_context("default",
                           lambda c: c.get("state") == "ready" and c.get("pid") not in (None, before["pid"]),
                           f"a new kernel ready after {what}", timeout=30)
    d.check_group_gone(before["pid"], f"{what}: the killed kernel's process group is gone")
    return after


def check_restart(tap, before, after, what):
    tap.ok(isinstance(after.get("kernel_id"), str) and UUID_RE.match(after["kernel_id"])
           and after["kernel_id"] != before["kernel_id"], f"{what}: new kernel_id",
           f"{before.get('kernel_id')!r} -> {after.get('kernel_id')!r}")
    tap.eq(after.get("incarnation"), before["incarnation"] + 1, f"{what}: incarnation + 1")
    tap.eq(after.get("restarts"), before["restarts"] + 1, f"{what}: restarts + 1")
    le = after.get("last_exit")
    tap.ok(isinstance(le, dict), f"{what}: last_exit is an object", repr(le))
    le = le if isinstance(le, dict) else {}
    tap.eq(le.get("signal"), "SIGKILL", f"{what}: last_exit.signal is SIGKILL")
    tap.eq(le.get("code"), None, f"{what}: last_exit.code is null")
    tap.eq(le.get("oom"), False, f"{what}: last_exit.oom is false")
    tap.ok(isinstance(le.get("at"), str) and le["at"], f"{what}: last_exit.at is a timestamp", repr(le.get("at")))
    tap.eq(after.get("connection_file"), before["connection_file"], f"{what}: same connection_file")


def test(tap):
    d = harness.Daemon(tap, contexts="[context:default]\nrestart = always\n")
    d.start()
    first = d.wait_state("default", "ready")
    sup1 = d.status()["supervisor"]
    cf = first["connection_file"]
    info1 = d.connection_info(cf)

    client = harness.KernelClient(cf)
    try:
        r = client.run("secret = 1234\nsecret")
        tap.eq((r["status"], r["result"]), ("ok", "1234"), "a kept client defines a variable")

        second = kill_and_wait(tap, d, first, "kill -9")
        check_restart(tap, first, second, "kill -9")
        info2 = d.connection_info(cf)
        tap.eq({k: info2.get(k) for k in info1}, info1,
               "the connection file is unchanged (same ports and key)")

        r = client.run("secret")
        tap.eq((r["status"], r["ename"]), ("error", "NameError"),
               "the kept client reaches the new kernel; its namespace is new (NameError)")
        r = client.run("y = 5\ny * 3")
        tap.eq((r["status"], r["result"]), ("ok", "15"), "the kept client runs cells on the new kernel")
    finally:
        client.close()

    r = harness.run_cell(cf, "secret")
    tap.eq(r["ename"], "NameError", "a new client sees the new namespace too")
    r = harness.run_cell(cf, "y")
    tap.eq(r["result"], "5", "a new client sees the kept client's variable on the new kernel")

    # A second kill: the backoff keeps restarting within the default start limit.
    third = kill_and_wait(tap, d, second, "second kill -9")
    check_restart(tap, second, third, "second kill -9")
    tap.eq(d.connection_info(cf), info2, "after the second kill the connection file is still the same")
    r = harness.run_cell(cf, "1 + 1")
    tap.eq(r["result"], "2", "cells run after the second restart")

    # A killed kernel closes its connections, which the daemon sees break: that is its death, not a message
    # over the bound, so no warning about dropped connections. The check makes the new kernel answer a heartbeat,
    # when a dropped connection of a live kernel would be said.
    r = d.ctl("check", "default")
    tap.eq(r.returncode, 0, "check after the kills: the new kernel answers", r.stderr)
    # Uptimes to the millisecond, as kernelctl prints them: "uptime": 7.978, never 7.9778529999999996.
    r = d.ctl("status", "--json")
    uptimes = re.findall(r'"uptime": ([^,\n]+)', r.stdout)
    tap.ok(len(uptimes) == 2 and all(re.fullmatch(r"[0-9]+(\.[0-9]{1,3})?", u) for u in uptimes),
           "status --json: the daemon's and the kernel's uptime have at most 3 decimals", repr(uptimes))
    dropped = [l for l in d.log().splitlines() if "connection was lost" in l]
    tap.eq(dropped, [], "two kills -9 logged no 'connection was lost' warning")

    sup2 = d.status()["supervisor"]
    tap.eq((sup2.get("pid"), sup2.get("generation")), (sup1.get("pid"), sup1.get("generation")),
           "kernel restarts leave the supervisor's pid and generation alone")
    d.stop()


harness.main(test)
