"""One kernel from the default argv: READY/STATUS, `kernelctl status` (JSON and table),
the connection file and persisted state, cells from two clients sharing a namespace."""

import json
import os
import re
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import CHANNELS, KEY_RE, UUID_RE  # noqa: E402

STATUS_RE = re.compile(r"^\d+/\d+ kernels ready(, .+)?$")


def find_values(obj):
    """Every scalar inside a JSON value."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from find_values(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from find_values(v)
    else:
        yield obj


def test(tap):
    d = harness.Daemon(tap)
    d.start()

    # READY=1 and STATUS=.
    tap.ok(d.running(), "kernelsupd still running after READY=1")
    statuses = harness.wait_until(d.statuses, 10, "a STATUS=1/1 kernels ready notification",
                                  check=lambda s: "1/1 kernels ready" in s)
    bad = [s for s in statuses if not STATUS_RE.match(s)]
    tap.ok(not bad, "every STATUS= reads 'N/M kernels ready[, ...]'", f"bad: {bad!r}")
    ready_n = [n for n in d.notifications if n.get("READY") == "1"]
    tap.eq(len(ready_n), 1, "READY=1 sent exactly once")

    # kernelctl status --json.
    rc, j = d.ctl_json("status")
    tap.eq(rc, 0, "kernelctl status --json exits 0 when every kernel is ready")
    tap.ok(isinstance(j, dict), "kernelctl status --json prints a JSON object", repr(d.last_ctl.stdout))
    sup = j["supervisor"]
    for key in ("pid", "version", "generation", "boot_id", "started_at", "uptime"):
        tap.ok(key in sup, f"supervisor.{key} present", repr(sup))
    tap.eq(sup.get("pid"), d.proc.pid, "supervisor.pid is the daemon's pid")
    tap.eq(sup.get("generation"), 1, "supervisor.generation is 1 on a fresh state dir")
    tap.eq(sup.get("boot_id"), harness.boot_id(), "supervisor.boot_id is /proc/sys/kernel/random/boot_id")
    tap.ok(isinstance(sup.get("version"), str) and sup["version"], "supervisor.version is a string", repr(sup))

    tap.eq([c.get("name") for c in j["contexts"]], ["default"], "status lists the one context")
    c = d.status()["contexts"][0]
    for key in ("name", "state", "pid", "kernel_id", "incarnation", "restarts", "started_at", "uptime",
                "connection_file", "last_exit", "last_error"):
        tap.ok(key in c, f"context.{key} present", repr(c))
    tap.eq(c.get("state"), "ready", "context is ready")
    pid = c.get("pid")
    tap.ok(isinstance(pid, int) and harness.alive(pid), "context.pid is a live process", repr(pid))
    tap.ok(isinstance(c.get("kernel_id"), str) and UUID_RE.match(c["kernel_id"]), "kernel_id is a UUID",
           repr(c.get("kernel_id")))
    tap.eq(c.get("incarnation"), 1, "incarnation is 1")
    tap.eq(c.get("restarts"), 0, "restarts is 0")
    tap.eq(c.get("last_exit"), None, "last_exit is null")
    tap.eq(c.get("last_error"), None, "last_error is null")
    tap.ok("last_error_at" not in c, "no last_error_at without a last_error", repr(c.get("last_error_at")))
    cf = os.path.join(d.run_dir, "connections", "default.json")
    tap.eq(c.get("connection_file"), cf, "connection_file defaults to <runtime_dir>/connections/<name>.json")

    # The kernel process: the default argv, its own session, a clean environment.
    cmd = harness.proc_cmdline(pid) or []
    tap.eq(cmd[:3], ["/usr/bin/python3", "-m", "ipykernel_launcher"], "the kernel runs the default argv")
    tap.ok("-f" in cmd and cmd.index("-f") + 1 < len(cmd), "the kernel gets -f {kernel_file}", repr(cmd))
    st = harness.proc_stat(pid)
    tap.ok(st is not None and st[2] == pid and st[3] == pid, "the kernel leads its own session and process group",
           repr(st))
    tap.eq(st[1] if st else None, d.proc.pid, "the kernel is a child of kernelsupd")
    env = harness.proc_environ(pid) or {}
    for var in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "LISTEN_FDS", "JPY_PARENT_PID"):
        tap.ok(var not in env, f"the kernel's environment has no {var}", f"{var}={env.get(var)!r}")

    # The status table.
    r = d.ctl("status")
    tap.eq(r.returncode, 0, "kernelctl status exits 0")
    lines = r.stdout.splitlines()
    tap.eq(lines[0].split() if lines else None,
           ["NAME", "STATE", "PID", "UPTIME", "RESTARTS", "INCARNATION", "TRANSPORT", "KERNEL", "LANGUAGE", "INFO"],
           "kernelctl status prints the table header")
    rows = [l.split() for l in lines[1:] if l.split()[:1] == ["default"]]
    tap.ok(len(rows) == 1 and rows[0][1] == "ready" and rows[0][2] == str(pid),
           "the table has a row: default ready PID", r.stdout)
    rc, j1 = d.ctl_json("status", "default")
    tap.eq(rc, 0, "kernelctl status default --json exits 0")
    tap.eq([x.get("name") for x in (j1 or {}).get("contexts", [])], ["default"], "status default lists only it")

    # The connection file.
    tap.ok(os.path.isfile(cf) and not os.path.islink(cf), "connection file is a regular file", cf)
    s = os.lstat(cf)
    tap.eq(stat.S_IMODE(s.st_mode), 0o600, "connection file mode is 0600")
    tap.eq((s.st_uid, s.st_gid), (os.getuid(), os.getgid()), "connection file is owned by the context's user")
    info = d.connection_info(cf)
    ports = [info.get(f"{ch}_port") for ch in CHANNELS]
    # The default transport, ipc: Unix sockets <runtime_dir>/ipc/<name>/k-1 ... k-5 (test-transport.py has more).
    tap.eq(ports, [1, 2, 3, 4, 5], "ipc: the ports are 1 to 5, the suffixes of the socket paths")
    tap.eq(info.get("ip"), os.path.join(d.run_dir, "ipc", "default", "k"), "ip is the sockets' path prefix")
    tap.ok(isinstance(info.get("key"), str) and KEY_RE.match(info["key"]), "key is 64 hex digits",
           repr(info.get("key")))
    tap.eq(info.get("transport"), "ipc", "transport is ipc, the default")
    tap.eq(info.get("signature_scheme"), "hmac-sha256", "signature_scheme is hmac-sha256")

    # The state: ports and key persisted per context, and the generation.
    sf = d.state_file("default")
    tap.ok(os.path.isfile(sf), "state_dir/contexts/default.json exists", sf)
    try:
        with open(sf) as f:
            values = list(find_values(json.load(f)))
    except (OSError, ValueError) as e:
        values = [repr(e)]
    tap.ok(info.get("key") in values, "the state file holds the key", repr(values)[:300])
    tap.ok(all(p in values for p in ports), "the state file holds the five ports", repr(values)[:300])
    tap.ok(os.path.isfile(os.path.join(d.state_dir, "supervisor.json")), "state_dir/supervisor.json exists")

    # Cells: a first client defines a variable, a second one sees it.
    r1 = harness.run_cell(cf, "x = 41\nprint('hello')\nx + 1")
    tap.eq(r1["status"], "ok", "first client: cell status ok")
    tap.eq(r1["stdout"], "hello\n", "first client: stdout")
    tap.eq(r1["result"], "42", "first client: execute_result")
    r2 = harness.run_cell(cf, "x * 2")
    tap.eq((r2["status"], r2["result"]), ("ok", "82"), "second client sees the first one's variable")
    r3 = harness.run_cell(cf, "not_defined_anywhere")
    tap.eq((r3["status"], r3["ename"]), ("error", "NameError"), "a failing cell reports NameError")

    c2 = d.context("default")
    tap.eq((c2.get("state"), c2.get("pid"), c2.get("kernel_id"), c2.get("incarnation")),
           ("ready", pid, c["kernel_id"], 1), "after the cells: same kernel, ready")

    d.stop()
    r = d.ctl("status")
    tap.eq(r.returncode, 3, "kernelctl status exits 3 once kernelsupd is gone")


harness.main(test)
