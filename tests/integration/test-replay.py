"""restore = replay: the cells a context's kernel ran (through exec and through a stock jupyter_client) are
journaled; a kernel lost without being asked (kill -9; the daemon and the kernel killed together) comes back
with the cells that succeeded run again, and check --expect OLD exits 9; an explicit restart starts empty
(8); a replay that fails halfway names the cell; a corrupted, truncated or linked journal, a cell past
journal_max and a full state disk never claim a rebuild."""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CTX = "[context:r]\nrestore = replay\nrestore_timeout = 60s\n"


def journal_path(d, name="r"):
    return os.path.join(d.state_dir, "journals", f"{name}.journal")


def ready_after(d, before, what, name="r"):
    """Waits until name runs another kernel than before (a context dict), ready."""
    return d.wait_context(name, lambda c: c.get("state") == "ready" and c.get("kernel_id") != before["kernel_id"]
                          and c.get("pid"), f"a new kernel ready after {what}", timeout=60)


def kill_kernel(d, before, what, name="r"):
    os.kill(before["pid"], signal.SIGKILL)
    return ready_after(d, before, what, name)


def check(d, expect, name="r"):
    """(exit code, stdout, --json's object) of check NAME --expect ID."""
    r = d.ctl("check", name, "--expect", expect)
    rc, j = d.ctl_json("check", name, "--expect", expect)
    return r.returncode, r.stdout, j if rc == r.returncode else {"differs": rc}


def exec_(d, code, name="r"):
    r = d.ctl("exec", name, code)
    return r.returncode, r.stdout


def test_kill_and_crash(tap):
    d = harness.Daemon(tap, contexts=CTX)
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(c0.get("journal"), {"cells": 0, "bytes": 8 + 45, "complete": True, "note": None},
           "status: an empty journal naming the kernel", repr(c0.get("journal")))
    tap.eq(exec_(d, "a = 1"), (0, "[ok #1]\n"), "exec: a = 1")
    client = harness.KernelClient(c0["connection_file"])
    try:
        r = client.run("b = a + 1\nb")
        tap.eq((r["status"], r["result"]), ("ok", "2"), "a stock jupyter_client: b = a + 1")
    finally:
        client.close()
    rc, out = exec_(d, "c = 99\n1/0")
    tap.eq(rc, 7, "exec: a cell that assigns c and raises exits 7", out)
    tap.eq(exec_(d, "text = 'x' * 3")[0], 0, "exec: a fourth cell")
    j = d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 4, "four cells journaled")
    tap.ok(j["journal"]["complete"], "the journal is complete", repr(j["journal"]))
    r = d.ctl("history", "r")
    tap.eq(r.returncode, 0, "kernelctl history", r.stderr)
    tap.contains(r.stdout, "r: 4 cells journaled\n[1] ok ", "history: the count, then cell 1 ok")
    tap.contains(r.stdout, "\nb = a + 1\nb\n[3] error ", "history: the client's cell, then cell 3 an error")
    rc, h = d.ctl_json("history", "r")
    cells = (h or {}).get("cells") or []
    tap.eq([(c.get("index"), c.get("outcome"), c.get("code")) for c in cells],
           [(1, "ok", "a = 1"), (2, "ok", "b = a + 1\nb"), (3, "error", "c = 99\n1/0"), (4, "ok", "text = 'x' * 3")],
           "history --json: every cell in order, with its outcome", repr(h))
    tap.ok(len(cells) == 4 and cells[0]["client"] != cells[1]["client"] and cells[0]["client"] == cells[2]["client"],
           "history --json: the stock client's cell has its own session", repr([c.get("client") for c in cells]))

    c1 = kill_kernel(d, c0, "kill -9 of the kernel")
    rc, out, js = check(d, c0["kernel_id"])
    tap.eq(rc, 9, "check --expect OLD after kill -9: exit 9", out)
    tap.contains(out, "kernel replaced (expected %s), namespace rebuilt by replaying 3 cells" % c0["kernel_id"],
                 "check says the namespace was rebuilt by replaying 3 cells")
    tap.eq((js.get("verdict"), js.get("replayed")), ("rebuilt", 3), "check --json: verdict rebuilt, replayed 3",
           repr(js))
    tap.eq(exec_(d, "a, b, text"), (0, "(1, 2, 'xxx')\n[ok #4]\n"), "the variables of the three good cells are back")
    r = d.ctl("exec", "r", "c")
    tap.eq(r.returncode, 7, "the failing cell's assignment is not (exit 7)", r.stdout)
    tap.contains(r.stderr, "NameError: name 'c' is not defined", "c is not defined")
    rp = d.context("r").get("replay") or {}
    tap.eq((rp.get("phase"), rp.get("cells"), rp.get("replayed"), rp.get("from_kernel"), rp.get("failed_cell")),
           ("done", 3, 3, c0["kernel_id"], None), "status: replay done, 3 of 3, from the lost kernel", repr(rp))
    tap.ok("restoring" in d.history.get("r", []) or "replaying 3 cells" in d.log(),
           "the context went through restoring (the log says so)")
    tap.eq(check(d, c1["kernel_id"])[0], 0, "check --expect NEW: 0, the same kernel")

    # The daemon and the kernel killed together: the next daemon launches a kernel that replays.
    tap.eq(exec_(d, "e = b * 10")[0], 0, "a cell after the replay")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 7, "seven cells journaled")
    d.kill9()
    os.kill(c1["pid"], signal.SIGKILL)
    d.start()
    c2 = ready_after(d, c1, "the daemon and the kernel killed together")
    rc, out, js = check(d, c1["kernel_id"])
    tap.eq(rc, 9, "check --expect the kernel before the crash: exit 9", out)
    tap.eq(js.get("replayed"), 5, "5 cells replayed: from before and after the first replay", repr(js))
    tap.eq(check(d, c0["kernel_id"])[0], 9, "check --expect the first kernel: 9 as well")
    tap.eq(exec_(d, "a, b, e"), (0, "(1, 2, 20)\n[ok #6]\n"), "cells from before and after the first replay")

    # An explicit restart starts empty, and clears the journal.
    r = d.ctl("restart", "r")
    tap.eq(r.returncode, 0, "kernelctl restart", r.stderr)
    c3 = ready_after(d, c2, "restart")
    rc, out, js = check(d, c2["kernel_id"])
    tap.eq(rc, 8, "check --expect OLD after an explicit restart: exit 8", out)
    tap.eq(js.get("verdict"), "replaced", "check --json: replaced", repr(js))
    tap.eq(exec_(d, "a")[0], 7, "the namespace is empty (NameError)")
    j = d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 1, "the journal holds the one cell since")
    tap.eq(j.get("replay"), None, "status shows no replay after the restart", repr(j.get("replay")))
    tap.eq(check(d, c0["kernel_id"])[0], 8, "nor for the first kernel")

    # stop and start: empty as well.
    tap.eq(d.ctl("stop", "r").returncode, 0, "kernelctl stop")
    tap.eq(d.ctl("start", "r").returncode, 0, "kernelctl start")
    c4 = ready_after(d, c3, "stop and start")
    tap.eq(check(d, c3["kernel_id"])[0], 8, "check --expect OLD after stop and start: exit 8")
    d.stop()


def test_fails_halfway(tap):
    d = harness.Daemon(tap, contexts=CTX)
    flag = os.path.join(d.tmp, "flag")
    with open(flag, "w") as f:
        f.write("there")
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(exec_(d, "x = 1")[0], 0, "x = 1")
    tap.eq(exec_(d, f"import pathlib\nv = pathlib.Path({flag!r}).read_text()")[0], 0, "a cell that reads a file")
    tap.eq(exec_(d, "y = 2")[0], 0, "y = 2")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 3, "three cells journaled")
    os.unlink(flag)
    c1 = kill_kernel(d, c0, "kill -9 with the file gone")
    rp = d.context("r").get("replay") or {}
    tap.eq((rp.get("phase"), rp.get("failed_cell"), rp.get("replayed"), rp.get("cells")), ("failed", 2, 1, 3),
           "status: the replay failed at journal cell 2, one cell replayed", repr(rp))
    tap.contains(rp.get("error") or "", "FileNotFoundError", "status names the cell's error")
    tap.contains(rp.get("text") or "", "replay stopped at journal cell 2 (1 of 3 cells replayed): FileNotFoundError",
                 "status's text says where it stopped")
    rc, out, js = check(d, c0["kernel_id"])
    tap.eq(rc, 8, "check --expect OLD: 8, the namespace was not rebuilt", out)
    tap.contains(out, "namespace not rebuilt: replay stopped at journal cell 2", "check says why")
    tap.eq((js.get("replay") or {}).get("failed_cell"), 2, "check --json names the failed cell", repr(js))
    tap.eq(exec_(d, "x"), (0, "1\n[ok #3]\n"), "what was rebuilt before it is there")
    tap.eq(exec_(d, "y")[0], 7, "what came after it is not")
    tap.contains(d.ctl("status").stdout, "replay stopped at journal cell 2", "status's table says so")

    # A clean stop of the daemon (as at a reboot) is nobody asking the kernel to go: the next daemon replays.
    d.stop()
    d.start()
    ready_after(d, c1, "a clean restart of the daemon")
    rc, out, js = check(d, c1["kernel_id"])
    tap.eq((rc, js.get("replayed")), (9, 2), "after a clean restart of the daemon: exit 9, x = 1 and x replayed",
           out)
    tap.eq(exec_(d, "x"), (0, "1\n[ok #3]\n"), "x is back")
    d.stop()


def test_asked(tap):
    """Every way of asking a kernel to go starts the next one empty."""
    d = harness.Daemon(tap, contexts=CTX)
    d.start()
    c0 = d.wait_state("r", "ready")
    exec_(d, "a = 1")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 1, "one cell journaled")
    client = harness.KernelClient(c0["connection_file"])
    mark = d.log_mark()
    try:
        client.kc.shutdown(restart=True)
    finally:
        client.close()
    c1 = ready_after(d, c0, "a client's shutdown_request (a notebook's restart)")
    log = d.log_since(mark)
    tap.ok("acknowledged a client's shutdown_request" in log and "error:" not in log,
           "a client's shutdown_request is acknowledged and logs no error line", log)
    tap.eq(check(d, c0["kernel_id"])[0], 8, "after a client's shutdown_request: check exits 8")
    tap.eq((c1.get("journal") or {}).get("cells"), 0, "and the journal is empty", repr(c1.get("journal")))

    exec_(d, "a = 2")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 1, "one cell journaled again")
    d.write_config(CTX + "env = KS_TEST_CHANGED=1\n")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload with a changed env", r.stderr)
    c2 = ready_after(d, c1, "a change of process settings")
    tap.eq(check(d, c1["kernel_id"])[0], 8, "after a change of process settings: check exits 8")
    tap.eq(exec_(d, "a")[0], 7, "and the namespace is empty")

    d.write_config("[context:r]\nenv = KS_TEST_CHANGED=1\n")
    tap.eq(d.ctl("reload").returncode, 0, "reload with restore = none")
    j = d.wait_context("r", lambda c: "journal" not in c, "status has no journal with restore = none")
    tap.eq(j.get("kernel_id"), c2["kernel_id"], "restore = none applies without a restart")
    tap.ok(not os.path.exists(journal_path(d)), "the journal file is removed")
    d.write_config(CTX + "env = KS_TEST_CHANGED=1\n")
    tap.eq(d.ctl("reload").returncode, 0, "reload with restore = replay again")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 0, "an empty journal again")
    tap.eq(kill_and_check(d, c2), 8, "the kernel that ran while restore was none is rebuilt by no replay: 8")
    d.stop()


def test_timeout_and_death(tap):
    """A replayed cell that now hangs is interrupted at restore_timeout; one that now kills its kernel goes from
    the journal, so the next kernel rebuilds what came before it instead of dying too."""
    timeout = max(2, round(harness.scaled(2)))
    d = harness.Daemon(tap, contexts=f"[context:slow]\nrestore = replay\nrestore_timeout = {timeout}s\n"
                                     "[context:dies]\nrestore = replay\n")
    flag = os.path.join(d.tmp, "flag")
    with open(flag, "w"):
        pass
    d.start()
    s0, k0 = d.wait_state("slow", "ready"), d.wait_state("dies", "ready")
    for name, cell in (("slow", f"import os, time\nif not os.path.exists({flag!r}): time.sleep(3600)"),
                       ("dies", f"import os\nif not os.path.exists({flag!r}): os._exit(3)")):
        tap.eq(exec_(d, "before = 1", name)[0], 0, f"{name}: a first cell")
        tap.eq(exec_(d, cell, name)[0], 0, f"{name}: a cell that behaves while the flag file is there")
        tap.eq(exec_(d, "after = 2", name)[0], 0, f"{name}: a cell after it")
        d.wait_context(name, lambda c: (c.get("journal") or {}).get("cells") == 3, f"{name}: three cells journaled")
    os.unlink(flag)

    s1 = kill_kernel(d, s0, "kill -9 of slow", "slow")
    rp = s1.get("replay") or {}
    tap.eq((rp.get("phase"), rp.get("failed_cell"), rp.get("replayed")), ("timed-out", 2, 1),
           "slow: the replay timed out at journal cell 2, one cell replayed", repr(rp))
    tap.contains(rp.get("error") or "", f"restore_timeout ({timeout}s) passed", "status says restore_timeout passed")
    tap.eq(check(d, s0["kernel_id"], "slow")[0], 8, "slow: check exits 8")
    tap.eq(exec_(d, "before", "slow")[0], 0, "slow: the cell before is there, and the kernel takes cells again")

    os.kill(k0["pid"], signal.SIGKILL)
    ready_after(d, k0, "kill -9 of dies, and the replay that killed its kernel", "dies")
    tap.eq(check(d, k0["kernel_id"], "dies")[0], 8, "dies: check --expect the first kernel exits 8")
    tap.eq(exec_(d, "before", "dies")[0:2], (0, "1\n[ok #2]\n"), "dies: the cell before the deadly one is back")
    tap.eq(exec_(d, "after", "dies")[0], 7, "dies: what came after it is not")
    tap.contains(d.log(), "dies: replay lost its kernel at journal cell 2", "the log says the replay lost its kernel")
    d.stop()


def flip_last_byte(path):
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x55]))


def test_hostile_journal(tap):
    d = harness.Daemon(tap, contexts=CTX + "[context:small]\nrestore = replay\njournal_max = 2K\n")
    d.start()
    c0 = d.wait_state("r", "ready")
    for code in ("p = 1", "q = 2"):
        exec_(d, code)
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 2, "two cells journaled")

    # Corrupt the last frame while the daemon is down (it stops its kernels, which it was not asked to lose).
    d.stop()
    flip_last_byte(journal_path(d))
    d.start()
    c1 = ready_after(d, c0, "a restart of the daemon with a corrupt journal")
    tap.contains(d.log(), "r: the cell journal had a torn or corrupt tail", "the cut is logged")
    tap.eq(check(d, c0["kernel_id"])[0], 8, "a journal that lost a cell promises no rebuild: check exits 8")
    rp = d.context("r").get("replay") or {}
    tap.eq(rp.get("phase"), "skipped", "status: replay skipped", repr(rp))
    tap.eq(exec_(d, "p")[0], 7, "nothing was replayed")

    # Truncated to half its header: taken as empty.
    d.stop()
    with open(journal_path(d), "r+b") as f:
        f.truncate(4)
    d.start()
    c2 = ready_after(d, c1, "a restart with a truncated journal")
    tap.contains(d.log(), "r: the cell journal had a torn or corrupt tail: 4 bytes cut off", "the cut is logged")
    tap.eq(check(d, c1["kernel_id"])[0], 8, "a journal without its header names no kernel: check exits 8")
    j = c2.get("journal") or {}
    tap.eq((j.get("cells"), j.get("complete")), (0, True), "the new kernel starts a fresh journal", repr(j))

    # A symlink in place of the journal is never followed.
    d.stop()
    target = os.path.join(d.tmp, "elsewhere")
    with open(target, "w") as f:
        f.write("not yours")
    os.unlink(journal_path(d))
    os.symlink(target, journal_path(d))
    d.start()
    c3 = ready_after(d, c2, "a restart with a linked journal")
    j = c3.get("journal") or {}
    tap.eq(j.get("complete"), False, "a linked journal: incomplete", repr(j))
    tap.contains(j.get("note") or "", "r.journal: Too many levels of symbolic links", "its note names the file")
    with open(target) as f:
        tap.eq(f.read(), "not yours", "the link's target is untouched")
    exec_(d, "z = 1")
    tap.eq(kill_and_check(d, c3), 8, "no journal: a kill -9 is answered 8")

    # A cell past journal_max: the journal says it is incomplete, and check cannot promise a rebuild.
    s0 = d.wait_state("small", "ready")
    rc, _ = exec_(d, "big = '%s'" % ("x" * 4096), name="small")
    tap.eq(rc, 0, "a 4 KiB cell runs")
    j = d.wait_context("small", lambda c: (c.get("journal") or {}).get("complete") is False,
                       "the journal is incomplete")["journal"]
    tap.contains(j.get("note") or "", "journal_max", "its note says why")
    tap.contains(d.ctl("status").stdout, "journal incomplete", "the status table says so")
    tap.eq(kill_and_check(d, s0, "small"), 8, "past journal_max: a kill -9 is answered 8")
    j = d.context("small").get("journal") or {}
    tap.eq(j.get("complete"), True, "the next kernel starts a complete journal", repr(j))
    d.stop()


def test_history_pages(tap):
    d = harness.Daemon(tap, contexts=CTX + "[context:plain]\n")
    d.start()
    c0 = d.wait_state("r", "ready")
    client = harness.KernelClient(c0["connection_file"])
    try:
        for i in range(120):
            client.run(f"n{i} = {i}")
        # A huge cell: 3 MiB of code, more than a history page holds.
        r = client.run("h = len('%s')" % ("y" * (3 << 20)), timeout=120)
        tap.eq(r["status"], "ok", "a 3 MiB cell runs")
    finally:
        client.close()
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 121, "121 cells journaled")
    page = d.rpc("history", {"context": "r"}).get("result") or {}
    tap.eq((len(page.get("cells") or []), page.get("next"), page.get("total")), (100, 100, 121),
           "the first page: 100 cells, next at 100", repr({k: v for k, v in page.items() if k != "cells"}))
    page = d.rpc("history", {"context": "r", "offset": 100, "limit": 1000}).get("result") or {}
    cells = page.get("cells") or []
    tap.eq((len(cells), page.get("next")), (21, None), "the last page: 21 cells, no next")
    tap.ok(cells and cells[-1].get("truncated") is True and len(cells[-1].get("code") or "") <= (1 << 20),
           "the huge cell is cut to the page's 1 MiB in history", repr(cells[-1].get("code", "")[:40] if cells else None))
    rc, h = d.ctl_json("history", "r", timeout=60)
    tap.eq([c.get("index") for c in (h or {}).get("cells") or []], list(range(1, 122)),
           "kernelctl history --json reads every page: cells 1 to 121")
    for params, what in (({"context": "r", "limit": 0}, "limit 0"), ({"context": "r", "offset": -1}, "offset -1"),
                         ({"context": "r", "limit": "all"}, "a limit that is no number"),
                         ({"context": "r", "limit": 1001}, "limit 1001")):
        rep = d.rpc("history", params)
        tap.ok(harness.is_rpc_error(rep, -32602), f"history with {what}: invalid params", repr(rep))
    rep = d.rpc("history", {"context": "plain"})
    tap.ok(harness.is_rpc_error(rep) and "keeps no cell journal (restore = none)" in rep["error"]["message"],
           "history of a context with restore = none says so", repr(rep))
    tap.eq(d.ctl("history", "nosuch").returncode, 5, "history of no such context: exit 5")
    tap.eq(kill_and_check(d, c0), 9, "after a kill -9 the 121 cells are replayed: check exits 9")
    tap.eq(exec_(d, "h, n119"), (0, "(%d, 119)\n[ok #122]\n" % (3 << 20)), "the huge cell ran again in full")
    d.stop()


def kill_and_check(d, before, name="r"):
    os.kill(before["pid"], signal.SIGKILL)
    ready_after(d, before, "kill -9", name)
    return check(d, before["kernel_id"], name)[0]


def test_full_disk(tap):
    d = harness.Daemon(tap, contexts=CTX)
    d.mount_tmpfs(d.state_dir, "256k")
    d.start()
    c0 = d.wait_state("r", "ready")
    exec_(d, "k = 1")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 1, "one cell journaled")
    filler = os.path.join(d.state_dir, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 1024)
    except OSError:
        pass
    finally:
        os.close(fd)
    exec_(d, "m = '%s'" % ("y" * 8192))
    j = d.wait_context("r", lambda c: (c.get("journal") or {}).get("complete") is False,
                       "a full disk makes the journal incomplete")["journal"]
    tap.ok(j.get("note"), "its note says so", repr(j))
    os.unlink(filler)
    tap.eq(kill_and_check(d, c0), 8, "a journal that missed a cell on a full disk: kill -9 is answered 8")
    d.stop()


def test_late_input(tap):
    """iopub and shell are separate sockets: a replayed cell's execute_input can be read after its reply (here it
    waits behind the flood the cell before it printed again), and is no new cell of the journal."""
    d = harness.Daemon(tap, contexts=CTX)
    d.start()
    c0 = d.wait_state("r", "ready")
    flood = "import sys\nfor i in range(32): sys.stdout.write('x' * (1 << 20))"
    cells = [flood] + [f"n{i} = {i}" for i in range(5)]
    tap.ok(all(exec_(d, code)[0] == 0 for code in cells), "a flood of 32 MiB, then five small cells")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 6, "six cells journaled")
    kill_kernel(d, c0, "kill -9 after the flood")
    d.wait_context("r", lambda c: (c.get("replay") or {}).get("phase") == "done", "the replay done", timeout=120)
    # A cell's reply comes after all iopub sent before it, so the replayed cells' messages are all read by then.
    tap.eq(exec_(d, "n0 + n4"), (0, "4\n[ok #7]\n"), "the five small cells are back")
    j = (d.context("r").get("journal") or {})
    tap.eq(j.get("cells"), 7, "the journal holds the six cells and the new one: no replayed cell journaled again",
           repr(j))
    r = d.ctl("history", "r")
    tap.ok(r.returncode == 0 and r.stdout.startswith("r: 7 cells journaled"), "history says 7 cells",
           r.stdout[:200])
    d.stop()


def history_codes(d, name="r"):
    rc, h = d.ctl_json("history", name)
    return [c.get("code") for c in ((h or {}).get("cells") or [])]


def test_exit_cell(tap):
    """exit() keeps the kernel, and is never journaled: a kill -9 after it replays once, with x back."""
    d = harness.Daemon(tap, contexts=CTX)
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(exec_(d, "x = 1"), (0, "[ok #1]\n"), "x = 1")
    tap.eq(exec_(d, "exit()")[0], 0, "exit(): exit 0")
    tap.eq(exec_(d, "y = x")[0], 0, "a cell after it: the kernel was kept")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells", 0) >= 2, "the cells journaled")
    tap.eq(history_codes(d), ["x = 1", "y = x"], "exit() is not in the journal")
    c1 = kill_kernel(d, c0, "kill -9 after exit()")
    c1 = d.wait_context("r", lambda c: (c.get("replay") or {}).get("phase") == "done" and c.get("state") == "ready",
                        "the replay done", timeout=60)
    tap.eq(exec_(d, "print(x, y)")[0:2], (0, "1 1\n[ok #3]\n"), "x and y are back")
    c2 = d.context("r")
    tap.eq((c2.get("kernel_id"), c2.get("incarnation")), (c1["kernel_id"], c0["incarnation"] + 1),
           "one replay: the same kernel after it, incarnation + 1 only")
    tap.eq(check(d, c0["kernel_id"])[0], 9, "check --expect the first kernel: 9")
    d.stop()


def test_replay_loop(tap):
    """A journaled cell that ends its kernel a moment after it ran (here only once a marker file exists, made after
    it ran): the kernels of two replays in a row die right after them, and the third starts empty, saying why."""
    d = harness.Daemon(tap, contexts=CTX)
    marker = os.path.join(d.tmp, "marker")
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(exec_(d, "before = 1")[0], 0, "a first cell")
    tap.eq(exec_(d, f"import os, threading\nif os.path.exists({marker!r}): threading.Timer(1, os._exit, (3,)).start()")[0],
           0, "a cell that ends its kernel a second later once the marker exists")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 2, "two cells journaled")
    with open(marker, "w"):
        pass
    os.kill(c0["pid"], signal.SIGKILL)
    c3 = d.wait_context("r", lambda c: c.get("state") == "ready" and (c.get("replay") or {}).get("phase") == "skipped",
                        "a kernel whose replay was skipped", timeout=180)
    rp = c3.get("replay") or {}
    tap.contains(rp.get("text") or "", "nothing replayed: the kernels of the last 2 replays died during or right "
                 "after them, so this one starts empty", "status says why it starts empty")
    tap.eq(c3.get("incarnation"), c0["incarnation"] + 3, "the third kernel after the first", repr(c3.get("incarnation")))
    rc, out, _ = check(d, c0["kernel_id"])
    tap.eq(rc, 8, "check --expect the first kernel: 8", out)
    tap.contains(out, "namespace not rebuilt: nothing replayed: the kernels of the last 2 replays died", "check says why")
    tap.eq(exec_(d, "before")[0], 7, "the namespace is empty")
    tap.eq(d.context("r").get("kernel_id"), c3["kernel_id"], "and the kernel stays")
    d.stop()


def raw_client(cf):
    """A jupyter_client that sends at once, without waiting for kernel_info (the shell may be busy)."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient()
    kc.load_connection_file(cf)
    kc.start_channels()
    return kc


def shell_reply(kc, msg_id, timeout=60):
    deadline = time.monotonic() + harness.scaled(timeout)
    while time.monotonic() < deadline:
        m = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if m["parent_header"].get("msg_id") == msg_id:
            return m
    raise harness.WaitTimeout("no reply")


def outside_during_first_cell(tap, d, c0, hold, code):
    """Kills c0's kernel while the hold file exists, so that the replay's first cell waits; another client sends
    code then, and the hold goes. Returns the replaying context."""
    with open(hold, "w"):
        pass
    os.kill(c0["pid"], signal.SIGKILL)
    c1 = d.wait_context("r", lambda c: c.get("state") == "restoring" and c.get("kernel_id") != c0["kernel_id"],
                        "the replay runs, held in its first cell", timeout=60)
    kc = raw_client(c1["connection_file"])
    try:
        msg_id = kc.execute(code)
        # The request must reach the kernel while the replayed cell holds it: it then runs before the next one.
        time.sleep(harness.scaled(1))
        os.unlink(hold)
        tap.eq(shell_reply(kc, msg_id)["content"].get("status"), "ok", "the outside cell ran during the replay")
    finally:
        kc.stop_channels()
    return c1


def test_outside_during_replay(tap):
    """Another client's cell that runs between two replayed cells is journaled there: the next rebuild gives what
    the kernel it ran in had."""
    d = harness.Daemon(tap, contexts=CTX)
    hold = os.path.join(d.tmp, "hold")
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(exec_(d, f"import os, time\nwhile os.path.exists({hold!r}): time.sleep(0.05)\nb = 1")[0], 0,
           "a cell that waits while the hold file exists, then b = 1")
    tap.eq(exec_(d, "b = b + 10")[0], 0, "b = b + 10")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 2, "two cells journaled")
    c1 = outside_during_first_cell(tap, d, c0, hold, "b = b * 2")
    d.wait_context("r", lambda c: c.get("state") == "ready" and (c.get("replay") or {}).get("phase") == "done",
                   "the replay done")
    r = d.ctl("exec", "r", "print(b)")
    k2_b = r.stdout.split("\n")[0]
    tap.eq(k2_b, "12", "the kernel ran the outside cell between the replayed ones (b = 12)", r.stdout)
    tap.eq(history_codes(d)[:3], [f"import os, time\nwhile os.path.exists({hold!r}): time.sleep(0.05)\nb = 1",
                                   "b = b * 2", "b = b + 10"], "the journal has the cells in the order they ran")
    kill_kernel(d, c1, "a second kill -9")
    d.wait_context("r", lambda c: (c.get("replay") or {}).get("phase") == "done", "the second replay done")
    r = d.ctl("exec", "r", "print(b)")
    tap.eq(r.stdout.split("\n")[0], k2_b, "the next kernel rebuilds what the one before had", r.stdout)
    tap.eq(check(d, c1["kernel_id"])[0], 9, "check --expect the kernel the outside cell ran in: 9")
    d.stop()


def test_outside_then_failed(tap):
    """The replay fails at its second cell after another client's cell ran during its first: the journal keeps the
    cell before the failure and the other client's, so the next rebuild has both."""
    d = harness.Daemon(tap, contexts=CTX)
    hold, flag = os.path.join(d.tmp, "hold"), os.path.join(d.tmp, "flag")
    with open(flag, "w"):
        pass
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(exec_(d, f"import os, time\nwhile os.path.exists({hold!r}): time.sleep(0.05)\nb = 1")[0], 0,
           "a cell that waits while the hold file exists")
    tap.eq(exec_(d, f"assert os.path.exists({flag!r})\nc = 1")[0], 0, "a cell that fails once the flag is gone")
    d.wait_context("r", lambda c: (c.get("journal") or {}).get("cells") == 2, "two cells journaled")
    os.unlink(flag)
    c1 = outside_during_first_cell(tap, d, c0, hold, "xval = 42")
    c1 = d.wait_context("r", lambda c: c.get("state") == "ready" and (c.get("replay") or {}).get("phase") == "failed",
                        "the replay failed at its second cell")
    tap.eq(history_codes(d)[1:], ["xval = 42"], "the journal keeps the other client's cell after the one kept")
    kill_kernel(d, c1, "a second kill -9")
    d.wait_context("r", lambda c: (c.get("replay") or {}).get("phase") == "done", "the second replay done")
    tap.eq(exec_(d, "print(xval, b)")[0:2], (0, "42 1\n[ok #3]\n"), "the next kernel has the other client's cell")
    tap.eq(check(d, c1["kernel_id"])[0], 9, "check --expect the kernel of the failed replay: 9")
    d.stop()


def test_silent_cell(tap):
    """A silent cell of another client announces no execute_input: the journal cannot have it, says so, and a
    kill -9 is answered 8, not 9."""
    d = harness.Daemon(tap, contexts=CTX)
    d.start()
    c0 = d.wait_state("r", "ready")
    tap.eq(exec_(d, "a = 1")[0], 0, "a = 1")
    client = harness.KernelClient(c0["connection_file"])
    try:
        msg_id = client.kc.execute("silent_var = 7", silent=True)
        tap.eq(shell_reply(client.kc, msg_id)["content"].get("status"), "ok", "an outside silent cell ran")
    finally:
        client.close()
    tap.eq(exec_(d, "normal_var = 9")[0], 0, "a cell after it")
    j = d.wait_context("r", lambda c: (c.get("journal") or {}).get("complete") is False, "the journal incomplete")
    tap.contains(j["journal"].get("note") or "", "a silent cell", "its note says a silent cell may be why")
    tap.eq(kill_and_check(d, c0), 8, "kill -9: check exits 8, not 9")
    d.stop()


def test(tap):
    with tap.guard("kill -9 and a crash of the daemon"):
        test_kill_and_crash(tap)
    with tap.guard("a replay that fails halfway"):
        test_fails_halfway(tap)
    with tap.guard("a replay that hangs, one that kills its kernel"):
        test_timeout_and_death(tap)
    with tap.guard("asked to go"):
        test_asked(tap)
    with tap.guard("hostile journals"):
        test_hostile_journal(tap)
    with tap.guard("history in pages, a huge cell"):
        test_history_pages(tap)
    with tap.guard("a full disk"):
        test_full_disk(tap)
    with tap.guard("a replayed cell's execute_input after its reply"):
        test_late_input(tap)
    with tap.guard("exit() in a journaled kernel"):
        test_exit_cell(tap)
    with tap.guard("a replay loop ends"):
        test_replay_loop(tap)
    with tap.guard("another client's cell during a replay"):
        test_outside_during_replay(tap)
    with tap.guard("another client's cell during a replay that fails"):
        test_outside_then_failed(tap)
    with tap.guard("a silent cell of another client"):
        test_silent_cell(tap)


if __name__ == "__main__":
    harness.main(test)
