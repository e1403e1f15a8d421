"""Reload (issue 5): `kernelctl reload [--dry-run]`, SIGHUP, `kernelctl add` and `remove`.

A reload re-reads the main file and every contexts_dir/*.ini and applies only the
difference: a new context starts; a removed one stops (its whole process group) and
its state file goes; a change to a setting of the process (argv, user, group, cwd,
env, connection_file) restarts that one context; any other change is applied in
place; every other kernel keeps its pid, its kernel_id and its variables. A
configuration with an error changes nothing at all. Two real ipykernels carry
variables across the reloads; stub kernels make up the numbers."""

import json
import os
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
STUBS = [f"s{i:02d}" for i in range(12)]
# A kernel that is slow to stop: the stub answers shutdown_request, but the shell that leads its process group
# ignores SIGTERM and sleeps on, so only the SIGKILL at stop_timeout ends the group.
SLOW_STOP = (f"argv = /bin/sh -c \"trap '' TERM; {harness.STUBKERNEL} -f {{kernel_file}}; sleep 60\"\n"
             "stop_timeout = 4s\n")


def stub(name, extra=""):
    return f"[context:{name}]\n{extra}"


def lines(*items):
    return "".join(f"{i}\n" for i in items)


def untouched(tap, d, before, what, skip=()):
    """Checks that every context of the snapshot before (but those in skip) has the same state, pid and
    kernel_id now; returns the current snapshot."""
    now = d.snapshot()
    diff = {n: (v, now.get(n)) for n, v in before.items() if n not in skip and now.get(n) != v}
    tap.ok(not diff, f"{what}: the {len(before) - len(set(skip) & set(before))} other contexts kept state, pid "
                     "and kernel_id", f"changed (before, after): {diff!r}")
    return now


def reloads_announced(d):
    """(number of RELOADING=1, whether a READY=1 came after the last of them)."""
    ns = d.drain_notifications()
    idx = [i for i, n in enumerate(ns) if n.get("RELOADING") == "1"]
    return len(idx), bool(idx) and any(n.get("READY") == "1" for n in ns[idx[-1] + 1:])


def state_file_gone(d, name):
    """Whether the state file of name is deleted, waiting for it a while: a removed context leaves the status at
    once, its state file goes once its kernel has stopped."""
    try:
        harness.wait_until(lambda: not os.path.exists(d.state_file(name)), 10, f"{d.state_file(name)} to be deleted")
    except harness.WaitTimeout:
        return False
    return True


def wait_gone(tap, d, name, pid, what):
    """Waits until name is gone from the status, then checks its process group and state file are gone."""
    rc = harness.poll_until(lambda: d.ctl("status", name).returncode, 30, f"{name} to be gone from the status",
                            check=lambda rc: rc == 5)
    tap.eq(rc, 5, f"{what}: {name} is gone from the status (kernelctl status {name} exits 5)")
    if isinstance(pid, int):
        d.check_group_gone(pid, f"{what}: no process of {name}'s group is left")
    else:
        tap.ok(False, f"{what}: {name} had a pid", repr(pid))
    tap.ok(state_file_gone(d, name), f"{what}: the state file of {name} is deleted", d.state_file(name))


def reload_ok(tap, d, want, what, *args):
    """kernelctl reload ARGS: exit 0 and exactly the lines want on stdout."""
    r = d.ctl("reload", *args)
    tap.eq((r.returncode, r.stdout), (0, want), f"{what}: kernelctl reload {' '.join(args)} prints the report",
           r.stderr)
    return r


def test(tap):
    if not os.access(harness.STUBKERNEL, os.X_OK):
        tap.skip_all(f"{harness.STUBKERNEL} not built (make tests/stubkernel)")
    files = {"b.ini": f"[context:b]\nargv = {harness.IPYKERNEL_ARGV}\nenv = FOO=1\n"}
    for s in STUBS:
        files[f"{s}.ini"] = stub(s, "env = A=1\nenv = B=2\n" if s == "s01" else f"env = N={s}\n")
    main_contexts = f"[context:a]\nargv = {harness.IPYKERNEL_ARGV}\n\n[context:p]\nrestart = always\n"
    d = harness.Daemon(tap, contexts=main_contexts, defaults=f"argv = {harness.STUB_ARGV}\n", extra_files=files)
    d.start()
    snap = d.wait_all_ready(["a", "b", "p", *STUBS])
    tap.eq(sorted(snap), sorted(["a", "b", "p", *STUBS]), "the main file and contexts_dir define 15 contexts")
    main_text = d.config_text(main_contexts, f"argv = {harness.STUB_ARGV}\n")

    r = harness.run_cell(d.context("a")["connection_file"], "secret_a = 'kept-a'")
    tap.eq(r["status"], "ok", "a (ipykernel) holds a variable")
    r = harness.run_cell(d.context("b")["connection_file"], "secret_b = 'kept-b'")
    tap.eq(r["status"], "ok", "b (ipykernel) holds a variable")
    # The daemon sees an outside client's cell end on iopub, after the client had its reply: the snapshot waits
    # for that, or it may catch a or b busy (one fresh-clone run did).
    d.wait_all_ready(["a", "b"])

    # -- A new file + reload: the context starts, nobody else is touched.
    before = d.snapshot()
    d.write_context_file("c", stub("c", "env = C=1\n"))
    reload_ok(tap, d, lines("added c", "unchanged 15"), "new file c.ini")
    c1 = d.wait_state("c", "ready")
    tap.ok(isinstance(c1.get("kernel_id"), str) and UUID_RE.match(c1["kernel_id"]), "c is ready with a kernel_id",
           repr(c1))
    untouched(tap, d, before, "after adding c")

    # -- --dry-run prints what a reload would do, and does nothing; the real reload then does just that.
    n_reloading, _ = reloads_announced(d)
    d.write_context_file("c", stub("c", "env = C=2\n"))  # restarted
    d.write_context_file("n", stub("n"))  # added
    d.write_context_file("s10", stub("s10", "env = N=s10\nrestart = on-failure\n"))  # updated in place
    d.remove_context_file("s11")  # removed
    want = lines("added n", "restarted c (env changed)",
                 "updated s10 (restart changed, applied without a restart)", "removed s11", "unchanged 13")
    before = d.snapshot()
    reload_ok(tap, d, want, "four changes", "--dry-run")
    rc, dry = d.ctl_json("reload", "--dry-run")
    tap.eq(rc, 0, "kernelctl reload --dry-run --json exits 0")
    tap.eq(dry, {"added": ["n"], "removed": ["s11"], "restarted": [{"name": "c", "reason": "env changed"}],
                 "updated": [{"name": "s10", "setting": "restart"}], "unchanged": 13, "not_applied": []},
           "--dry-run --json: the report object")
    untouched(tap, d, before, "after two dry runs")
    tap.ok("n" not in d.snapshot(), "--dry-run did not add n")
    rc, rep = d.ctl_json("reload")
    tap.eq((rc, rep), (0, dry), "the real reload reports what --dry-run said (so the dry run applied nothing)")
    c2 = d.wait_context("c", lambda c: c.get("state") == "ready" and c.get("kernel_id") not in (None,
                        c1["kernel_id"]), "a new kernel ready after the env change")
    tap.ok(c2["pid"] != c1["pid"], "c: a new pid after the env change")
    tap.eq((harness.proc_environ(c2["pid"]) or {}).get("C"), "2", "c's new kernel has C=2")
    d.wait_state("n", "ready")
    wait_gone(tap, d, "s11", before["s11"][1], "s11.ini removed")
    untouched(tap, d, before, "after the four changes", skip=("c", "n", "s11"))
    harness.wait_until(lambda: reloads_announced(d), 10, "READY=1 after RELOADING=1",
                       check=lambda x: x[0] > n_reloading and x[1])
    tap.eq(reloads_announced(d)[0], n_reloading + 1,
           "one RELOADING=1 (then READY=1) for the reload; none for the dry runs")
    tap.ok("reload applied in " in d.log(), "the daemon logs how long the reload took")

    # -- An env edit of a real kernel: only that one restarts, its namespace is new; a's is intact.
    before = d.snapshot()
    d.write_context_file("b", f"[context:b]\nargv = {harness.IPYKERNEL_ARGV}\nenv = FOO=2\n")
    reload_ok(tap, d, lines("restarted b (env changed)", f"unchanged {len(before) - 1}"), "env of b")
    b2 = d.wait_context("b", lambda c: c.get("state") == "ready" and c.get("kernel_id") != before["b"][2],
                        "a new kernel ready after the env change")
    r = harness.run_cell(b2["connection_file"], "import os\nos.environ['FOO']")
    tap.eq(r["result"], "'2'", "b's new kernel sees FOO=2")
    r = harness.run_cell(b2["connection_file"], "secret_b")
    tap.eq(r["ename"], "NameError", "b's namespace is new (NameError)")
    r = harness.run_cell(d.context("a")["connection_file"], "secret_a")
    tap.eq(r["result"], "'kept-a'", "a kept its variable through every reload so far")
    untouched(tap, d, before, "after b's env change", skip=("b",))

    # -- Edits that change nothing: a comment, env reordered, a context moved to another file.
    before = d.snapshot()
    d.write_context_file("s00", "; a comment\n" + stub("s00", "env = N=s00   ; why\n"))
    d.write_context_file("s01", stub("s01", "env = B=2\nenv = A=1\n"))
    d.remove_context_file("s02")
    moved = d.write_context_file("moved-s02", stub("s02", "env = N=s02\n"))
    reload_ok(tap, d, lines(f"unchanged {len(before)}"), "a comment, env reordered, s02 moved")
    untouched(tap, d, before, "after edits that change nothing")

    # -- restart= applied in place: nobody restarts, and the new policy is the one that applies.
    p1 = d.context("p")
    os.kill(p1["pid"], signal.SIGKILL)
    p2 = harness.poll_until(lambda: d.context("p"), 30, "p restarted after kill -9 (restart = always)",
                            check=lambda c: c.get("state") == "ready" and c.get("kernel_id") != p1["kernel_id"])
    tap.ok(p2.get("state") == "ready" and p2.get("kernel_id") != p1["kernel_id"],
           "p with restart = always: kill -9 gets a new kernel", f"{p1} -> {p2}")
    before = d.snapshot()
    main_text = main_text.replace("restart = always", "restart = no")
    d.write_file(d.config, main_text)
    reload_ok(tap, d, lines("updated p (restart changed, applied without a restart)", f"unchanged {len(before) - 1}"),
              "restart = no for p")
    untouched(tap, d, before, "after the restart= change (p included)")
    os.kill(p2["pid"], signal.SIGKILL)
    p3 = d.wait_state("p", ("stopped", "failed"))
    tap.eq((p3.get("state"), p3.get("pid"), p3.get("kernel_id"), (p3.get("last_exit") or {}).get("signal")),
           ("stopped", None, p2["kernel_id"], "SIGKILL"), "p with restart = no: kill -9 leaves it stopped")
    d.check_group_gone(p2["pid"], "p's killed group is gone")

    # -- autostart = no, then yes: applied in place, and it starts.
    d.write_context_file("q", stub("q", "autostart = no\n"))
    reload_ok(tap, d, lines("added q", f"unchanged {len(d.snapshot())}"), "q with autostart = no")
    tap.eq(d.context("q").get("state"), "stopped", "q (autostart = no) is added stopped")
    d.write_context_file("q", stub("q", "autostart = yes\n"))
    reload_ok(tap, d, lines("updated q (autostart changed, applied without a restart)",
                            f"unchanged {len(d.snapshot()) - 1}"), "autostart = yes for q")
    d.wait_state("q", "ready")

    # -- A removed file: stopped, no process left, state file gone.
    before = d.snapshot()
    d.remove_context_file("c")
    reload_ok(tap, d, lines("removed c", f"unchanged {len(before) - 1}"), "c.ini removed")
    wait_gone(tap, d, "c", before["c"][1], "c.ini removed")
    untouched(tap, d, before, "after removing c", skip=("c",))

    # -- A broken file: exit 1 naming file and line; nothing of the other changes is applied.
    before = d.snapshot()
    broken = d.write_context_file("broken", "[context:x]\nrestart = sometimes\n")
    d.write_context_file("y", stub("y"))
    d.write_context_file("s03", stub("s03", "env = N=changed\n"))
    err = f"{broken}:2: [context:x] restart = sometimes: "
    for args in ((), ("--dry-run",)):
        r = d.ctl("reload", *args)
        tap.eq((r.returncode, r.stdout), (1, ""), f"broken file: kernelctl reload {' '.join(args)} exits 1",
               r.stderr)
        tap.contains(r.stderr, err, f"broken file: reload {' '.join(args)} names file, line, key and value")
    untouched(tap, d, before, "after the rejected reloads")
    tap.ok(not {"x", "y"} & set(d.snapshot()), "neither x (broken) nor y (fine) was added")
    mark = d.log_mark()
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log(f"reload rejected, nothing changed: {err}", mark)
    tap.ok(d.running(), "SIGHUP with a broken file: kernelsupd logs the error and keeps running")
    untouched(tap, d, before, "after SIGHUP with a broken file")
    r = d.ctl("add", "z")
    tap.eq(r.returncode, 1, "broken file: kernelctl add z exits 1", r.stderr)
    tap.ok(err in r.stderr and "z.ini was not kept" in r.stderr, "add: stderr names the error, z.ini not kept",
           r.stderr)
    tap.ok(not os.path.lexists(d.context_file("z")), "add refused: no z.ini left")
    n_text = open(d.context_file("n")).read()
    r = d.ctl("remove", "n")
    tap.eq(r.returncode, 1, "broken file: kernelctl remove n exits 1", r.stderr)
    tap.ok(err in r.stderr and "was put back" in r.stderr, "remove: stderr names the error, n.ini put back",
           r.stderr)
    tap.eq(open(d.context_file("n")).read(), n_text, "remove refused: n.ini is back, the same")
    untouched(tap, d, before, "after add and remove were refused")
    for f in ("broken", "y"):
        d.remove_context_file(f)
    d.write_context_file("s03", stub("s03", "env = N=s03\n"))
    reload_ok(tap, d, lines(f"unchanged {len(before)}"), "the broken file removed, s03 edited back")

    # -- Duplicate context names: exit 1 naming both places.
    before = d.snapshot()
    dup = d.write_context_file("dup", stub("a"))
    line_a = d.config_line("[context:a]")
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "[context:a] again in contexts_dir: reload exits 1", r.stderr)
    tap.contains(r.stderr, f"{dup}:1: [context:a] defined again (first at {d.config}:{line_a})",
                 "the duplicate of a main-file context: both places named")
    d.remove_context_file("dup")
    z1 = d.write_context_file("z1", stub("z"))
    z2 = d.write_context_file("z2", "\n" + stub("z"))
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "[context:z] in two files of contexts_dir: reload exits 1", r.stderr)
    tap.contains(r.stderr, f"{z2}:2: [context:z] defined again (first at {z1}:1)",
                 "the duplicate across two files: both places named")
    d.remove_context_file("z1")
    d.remove_context_file("z2")
    untouched(tap, d, before, "after the duplicates were refused")

    # -- SIGHUP does what kernelctl reload does.
    before = d.snapshot()
    n_reloading, _ = reloads_announced(d)
    d.write_context_file("h", stub("h", "env = H=1\n"))
    mark = d.log_mark()
    os.kill(d.proc.pid, signal.SIGHUP)
    h1 = harness.poll_until(lambda: d.status()["contexts"], 30, "h added and ready",
                            check=lambda cs: any(c.get("name") == "h" and c.get("state") == "ready" for c in cs))
    h1 = next((c for c in h1 if c.get("name") == "h"), {})
    tap.eq(h1.get("state"), "ready", "SIGHUP: h is added and ready", d.log_since(mark)[-2000:])
    untouched(tap, d, before, "after SIGHUP added h")
    seen = harness.poll_until(lambda: reloads_announced(d), 10, "READY=1 after RELOADING=1",
                              check=lambda x: x[0] > n_reloading and x[1])
    tap.ok(seen[0] > n_reloading and seen[1], "SIGHUP: RELOADING=1 then READY=1", repr(seen))
    d.write_context_file("h", stub("h", "env = H=2\n"))
    mark = d.log_mark()
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("reload: restarted h (env changed)", mark)
    h2 = d.wait_context("h", lambda c: c.get("state") == "ready" and c.get("kernel_id") != h1["kernel_id"],
                        "a new kernel after SIGHUP")
    tap.eq((harness.proc_environ(h2["pid"]) or {}).get("H"), "2", "SIGHUP: h restarted with H=2")
    d.remove_context_file("h")
    mark = d.log_mark()
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("reload: removed h", mark)
    wait_gone(tap, d, "h", h2["pid"], "SIGHUP after h.ini was removed")
    untouched(tap, d, before, "after the SIGHUPs")

    # -- add / remove round trip.
    before = d.snapshot()
    r = d.ctl("add", "r1", "--env", "FOO=bar", "--env", "X=1", "--cwd", d.tmp)
    tap.eq((r.returncode, r.stdout), (0, lines("added r1", f"unchanged {len(before)}")), "kernelctl add r1",
           r.stderr)
    path = d.context_file("r1")
    st = os.lstat(path) if os.path.lexists(path) else None
    tap.ok(st is not None and stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644,
           "add wrote contexts_dir/r1.ini, a regular file of mode 0644", repr(st))
    text = open(path).read() if st else ""
    tap.ok(all(part in text.splitlines() for part in ("[context:r1]", "env = FOO=bar", "env = X=1", f"cwd = {d.tmp}")),
           "r1.ini holds the section, both env entries and cwd", text)
    r1 = d.wait_state("r1", "ready")
    env = harness.proc_environ(r1["pid"]) or {}
    tap.eq((env.get("FOO"), env.get("X"), os.readlink(f"/proc/{r1['pid']}/cwd")), ("bar", "1", d.tmp),
           "r1's kernel runs with its env and cwd")
    r = d.ctl("add", "r1", "--env", "FOO=other")
    tap.eq(r.returncode, 1, "add of an existing context (r1) exits 1", r.stderr)
    tap.contains(r.stderr, "exists already", "add r1 again: stderr says it exists")
    tap.eq(open(path).read(), text, "add r1 again left r1.ini alone")
    r = d.ctl("add", "a")
    tap.eq(r.returncode, 1, "add of a context of the main file exits 1", r.stderr)
    tap.ok(not os.path.lexists(d.context_file("a")), "add a wrote no a.ini")
    r = d.ctl("add", "r1x", "--env", "NOEQUALS")
    tap.eq(r.returncode, 1, "add --env without '=' exits 1", r.stderr)
    tap.ok(not os.path.lexists(d.context_file("r1x")), "add --env NOEQUALS wrote nothing")
    r = d.ctl("add", "r1y", "--cwd", "relative")
    tap.eq(r.returncode, 1, "add --cwd relative exits 1", r.stderr)
    tap.contains(r.stderr, f"{d.context_file('r1y')}:3: [context:r1y] cwd = relative: ",
                 "add --cwd relative: the config error names the file, line, key and value")
    tap.ok(not os.path.lexists(d.context_file("r1y")) and "r1y" not in d.snapshot(),
           "add --cwd relative: no file kept, no context")
    untouched(tap, d, before, "after add r1 and the refused adds")
    r = d.ctl("remove", "r1")
    tap.eq((r.returncode, r.stdout), (0, lines("removed r1", f"unchanged {len(before)}")), "kernelctl remove r1",
           r.stderr)
    tap.ok(not os.path.lexists(path), "remove deleted r1.ini")
    wait_gone(tap, d, "r1", r1["pid"], "remove r1")
    r = d.ctl("remove", "r1")
    tap.eq(r.returncode, 5, "remove r1 again exits 5 (no such context)", r.stderr)
    r = d.ctl("remove", "a")
    tap.eq(r.returncode, 1, "remove of a context of the main file exits 1", r.stderr)
    tap.contains(r.stderr, f"{d.config}:{line_a}", "remove a: stderr names the main file and line")
    r = d.ctl("remove", "s02")
    tap.eq(r.returncode, 1, "remove of a context defined in another file of contexts_dir exits 1", r.stderr)
    tap.contains(r.stderr, f"{moved}:1", "remove s02: stderr names the file that defines it")
    rc, rep = d.ctl_json("add", "r3")
    tap.eq((rc, (rep or {}).get("added"), (rep or {}).get("unchanged")), (0, ["r3"], len(before)), "add --json")
    rc, rep = d.ctl_json("remove", "r3")
    tap.eq((rc, (rep or {}).get("removed"), (rep or {}).get("added")), (0, ["r3"], []), "remove --json")
    long_name = "L" * 64
    r = d.ctl("add", long_name)
    tap.eq((r.returncode, os.path.exists(d.context_file(long_name))), (0, True), "add of a 64-character name works",
           r.stderr)
    r = d.ctl("remove", long_name)
    tap.eq((r.returncode, os.path.exists(d.context_file(long_name))), (0, False), "and remove of it", r.stderr)

    # A user that does not exist: a runtime error of the context, not a config error.
    r = d.ctl("add", "u", "--user", "no-such-user-xyz")
    tap.eq((r.returncode, r.stdout.splitlines()[:1]), (0, ["added u"]), "add u --user no-such-user-xyz is added",
           r.stderr)
    u = d.wait_context("u", lambda c: c.get("last_error") is not None, "a last_error")
    tap.eq((u.get("last_error"), u.get("pid"), u.get("state") in ("backoff", "failed", "stopped")),
           ("user 'no-such-user-xyz' does not exist", None, True), "u fails to launch: last_error names the user")
    r = d.ctl("remove", "u")
    tap.eq(r.returncode, 0, "remove u", r.stderr)
    harness.wait_until(lambda: d.ctl("status", "u").returncode, 30, "u to be gone", check=lambda rc: rc == 5)
    tap.ok(state_file_gone(d, "u"), "u's state file is deleted")

    # A leading dot would make a hidden file, which the reload skips: refused by kernelctl and by the daemon.
    r = d.ctl("add", ".hidden")
    refused = r.returncode == 2 and not os.path.lexists(d.context_file(".hidden"))
    tap.ok(refused, "add .hidden: refused (a hidden file in contexts_dir is ignored), nothing left behind",
           f"exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}, "
                       f"files {sorted(os.listdir(d.contexts_dir))}")
    reply = d.rpc("add", {"context": ".hidden"})
    tap.eq((reply.get("error") or {}).get("code"), -32602, "the daemon refuses .hidden too (invalid params)",
           repr(reply))
    if os.path.lexists(d.context_file(".hidden")):
        d.remove_context_file(".hidden")
    untouched(tap, d, before, "after the add/remove round trips")

    # -- Hostile names and values: refused by kernelctl (exit 2) and by the daemon (-32602); nothing written.
    def tree():
        return sorted((dp, tuple(sorted(dn)), tuple(sorted(fn))) for dp, dn, fn in os.walk(d.tmp)
                      if not dp.startswith((d.run_dir, d.state_dir)))
    files_before = tree()
    before = d.snapshot()
    for name in ("../x", "", "a" * 200, "a" * 65, "a/b", "..", ".", "x y", "x\ny", "é"):
        for cmd in ("add", "remove"):
            r = d.ctl(cmd, name)
            tap.eq(r.returncode, 2, f"kernelctl {cmd} {name[:20]!r} exits 2", r.stderr)
            rep = d.rpc(cmd, {"context": name})
            tap.ok(harness.is_rpc_error(rep, -32602), f"raw {cmd} {name[:20]!r}: -32602", repr(rep))
    for cmd in ("add", "remove"):
        for params in ({"context": 7}, {"context": None}, {}):
            rep = d.rpc(cmd, params)
            tap.ok(harness.is_rpc_error(rep, -32602), f"raw {cmd} {params!r}: -32602", repr(rep))
    for params in ({"context": "inj", "env": ["A=1\n[context:evil]"]}, {"context": "inj", "env": "A=1"},
                   {"context": "inj", "env": [7]}, {"context": "inj", "cwd": "/tmp\nargv = /bin/false"},
                   {"context": "inj", "user": ""}, {"context": "inj", "group": "\rroot"},
                   {"context": "inj", "connection_file": 7}):
        rep = d.rpc("add", params)
        tap.ok(harness.is_rpc_error(rep, -32602), f"raw add {json.dumps(params)}: -32602", repr(rep))
    target = os.path.join(d.tmp, "target.ini")
    os.symlink(target, d.context_file("evil"))
    r = d.ctl("add", "evil")
    tap.eq(r.returncode, 1, "add over a symlink planted as evil.ini exits 1", r.stderr)
    tap.ok(not os.path.lexists(target), "the symlink's target was not written")
    os.unlink(d.context_file("evil"))
    tap.eq(tree(), files_before, "no file was written or removed by the hostile requests")
    untouched(tap, d, before, "after the hostile requests")
    tap.ok(not {"inj", "evil", "x"} & set(d.snapshot()), "no hostile context was added")

    # -- [supervisor] settings that only a daemon restart applies are reported, not applied.
    d.write_file(d.config, main_text.replace(f"socket = {d.socket}", f"socket = {d.socket}.new"))
    r = d.ctl("reload")
    tap.eq((r.returncode, r.stdout), (0, lines(f"unchanged {len(before)}")), "socket changed: reload exits 0",
           r.stderr)
    tap.contains(r.stderr, f"not applied: [supervisor] socket changed to {d.socket}.new",
                 "socket changed: stderr says it is not applied")
    tap.ok(d.running() and not os.path.exists(d.socket + ".new"), "the daemon still listens on the old socket")
    d.write_file(d.config, main_text)
    rc, rep = d.ctl_json("reload")
    tap.eq((rc, (rep or {}).get("not_applied")), (0, []), "socket changed back: nothing left unapplied")

    # -- Only root (and the daemon's user) may change the configuration.
    if os.geteuid() != 0:
        tap.skip("reload/add/remove as nobody exit 4", "not root")
    elif subprocess.run(NOBODY + ["test", "-x", harness.KERNELCTL], capture_output=True).returncode != 0:
        tap.skip("reload/add/remove as nobody exit 4", f"nobody cannot execute {harness.KERNELCTL}")
    else:
        for p in (d.tmp, d.run_dir):
            os.chmod(p, 0o755)
        # A uid other than root adds only its own contexts, with none of root's keys (test-useradd.py), and
        # removes only those it added: root's n is, to nobody, no context at all.
        cmds = (("reload",), ("reload", "--dry-run"), ("add", "zz", "--group", "root"), ("remove", "n"))
        for mode, how in ((0o660, "cannot connect to the 0660 socket"), (0o666, "the daemon refuses")):
            os.chmod(d.socket, mode)
            for args in cmds:
                r = d.ctl(*args, prefix=NOBODY)
                if mode == 0o666 and args[0] == "remove":
                    tap.eq(r.returncode, 5, f"as nobody ({how}): kernelctl {' '.join(args)} exits 5", r.stderr)
                    tap.contains(r.stderr, "no such context: n", "as nobody: root's n answers as a missing one")
                    continue
                tap.eq(r.returncode, 4, f"as nobody ({how}): kernelctl {' '.join(args)} exits 4", r.stderr)
                tap.ok("permission denied" in r.stderr.lower(), f"as nobody: {' '.join(args)} says permission denied",
                       r.stderr)
        os.chmod(d.socket, 0o660)
        tap.ok(not os.path.lexists(d.context_file("zz")) and os.path.exists(d.context_file("n")),
               "as nobody: nothing was added or removed")
        untouched(tap, d, before, "after the attempts as nobody")

    # -- Remove, then at once add again a context whose kernel is slow to stop.
    d.write_context_file("w", stub("w", SLOW_STOP))
    reload_ok(tap, d, lines("added w", f"unchanged {len(before)}"), "w (slow to stop)")
    w1 = d.wait_state("w", "ready")
    # remove waits for the kernel to be gone; given 1 s, it returns while the old w is still stopping.
    mark = d.log_mark()
    r = d.ctl("remove", "w", "--timeout", "1")
    tap.eq((r.returncode, r.stdout.splitlines()[:2]), (0, ["removed w", "stopping w (its kernel has not exited yet)"]),
           "remove w --timeout 1: it says the old w is still stopping", r.stderr)
    d.write_context_file("w", stub("w", SLOW_STOP))
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "w added again while the old w is still stopping", r.stderr)
    d.wait_log("w: removed", mark)
    d.check_group_gone(w1["pid"], "the old w's process group is gone")
    w2 = d.wait_state("w", "ready")
    tap.ok(w2.get("kernel_id") not in (None, w1["kernel_id"]) and w2.get("pid") != w1["pid"],
           "the new w runs its own kernel", f"{w1!r} -> {w2!r}")
    tap.ok(os.path.exists(d.state_file("w")), "the new w keeps its state file after the old w retired",
           d.state_file("w"))
    r = d.ctl("remove", "w")
    tap.eq(r.returncode, 0, "remove w again", r.stderr)
    wait_gone(tap, d, "w", w2["pid"], "remove w")

    # -- Files are the truth: contexts added with kernelctl add come back after a daemon restart.
    r = d.ctl("add", "r2", "--env", "R=2")
    tap.eq(r.returncode, 0, "add r2", r.stderr)
    r2 = d.wait_state("r2", "ready")
    names = sorted(d.snapshot())
    d.stop()
    d.start()
    snap = d.wait_all_ready([n for n in names if n != "p"])
    tap.eq(sorted(snap), names, "after a daemon restart: the same contexts, r2 included, no removed one")
    r2b = d.context("r2")
    tap.ok(r2b.get("kernel_id") != r2["kernel_id"] and (harness.proc_environ(r2b["pid"]) or {}).get("R") == "2",
           "r2 runs again with its settings")
    r = d.ctl("remove", "r2")
    tap.eq(r.returncode, 0, "remove r2", r.stderr)
    wait_gone(tap, d, "r2", r2b["pid"], "remove r2 after the restart")
    d.stop()


harness.main(test)
