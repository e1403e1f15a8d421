"""A context's files that hold its key, and the small things a new user meets:
kernelctl add (--wait, an existing name), check's words for a ready kernel that does
not answer, remove taking the state, the published
connection file and the kernel's private copy with it (also when the daemon exits
right after), what a clean exit keeps, kernelctl help, and ipykernel's banner in
the log naming the published connection file."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# The kernels' output must come to the daemon's log (a journal stream would take it elsewhere).
os.environ.pop("JOURNAL_STREAM", None)


def files_holding(root, key):
    """Every file below root whose bytes hold key."""
    hits = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            try:
                with open(p, "rb") as f:
                    if key.encode() in f.read():
                        hits.append(p)
            except OSError:
                pass
    return hits


def private_copy(d, name):
    return os.path.join(d.run_dir, "kernels", name, "kernel.json")


def test_help(tap, d):
    h = d.ctl("--help")
    r = d.ctl("help")
    tap.eq(r.returncode, 0, "kernelctl help exits 0", r.stderr)
    tap.eq(r.stdout, h.stdout, "kernelctl help prints what --help prints")
    tap.ok(r.stdout.startswith("kernelctl [--socket PATH]"), "kernelctl help prints the usage", r.stdout[:200])
    r = d.ctl("status", "--wait")
    tap.eq(r.returncode, 2, "--wait with another command than add is a usage error (exit 2)", r.stderr)


def all_threads_stopped(pid):
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        st = harness.proc_stat(int(tid))
        states.append(st[0] if st else None)
    return all(s == "T" for s in states)


def test_check_message(tap, d):
    """A ready kernel that does not answer the probe (stopped with SIGSTOP) is not called "not ready"."""
    c = d.wait_state("default", "ready")
    os.kill(c["pid"], signal.SIGSTOP)
    try:
        # The group stop reaches every thread a moment later; until then the heartbeat may still echo.
        harness.wait_until(lambda: all_threads_stopped(c["pid"]), 30, "the kernel's threads to stop")
        r = d.ctl("check", "default", "--timeout", "1")
    finally:
        os.kill(c["pid"], signal.SIGCONT)
    tap.eq(r.returncode, 6, "check of a stopped ready kernel: timed out (exit 6)", r.stdout + r.stderr)
    tap.ok(r.stdout.startswith("default: no heartbeat answer within 1 s (state ready"),
           "check names the missed heartbeat, not a readiness the state contradicts", r.stdout)


def test_add(tap, d):
    r = d.ctl("add", "gone", "--wait", timeout=90)
    tap.eq(r.returncode, 0, "kernelctl add gone --wait exits 0", r.stdout + r.stderr)
    tap.contains(r.stdout, "added gone", "add --wait prints the report")
    tap.contains(r.stdout, "gone: ready (pid", "add --wait prints the ready context")
    c = d.context("gone")
    tap.eq(c["state"], "ready", "the context is ready when add --wait returns")
    rc, j = d.ctl_json("add", "other", "--wait", timeout=90)
    tap.eq(rc, 0, "add --wait --json exits 0", d.last_ctl.stderr)
    tap.eq(((j or {}).get("context") or {}).get("state"), "ready", "add --wait --json: the report's context is ready",
           repr(j))
    r = d.ctl("add", "nouser", "--user", "ks-no-such-user", "--wait", timeout=90)
    tap.eq(r.returncode, 1, "add --wait of a context whose kernel cannot start exits 1", r.stdout + r.stderr)
    tap.contains(r.stderr, "user 'ks-no-such-user' does not exist", "add --wait says why it did not start")
    tap.ok(os.path.exists(d.context_file("nouser")), "add --wait that failed to start keeps the context's file")
    r = d.ctl("remove", "nouser", timeout=60)
    tap.eq(r.returncode, 0, "remove nouser exits 0", r.stdout + r.stderr)
    r = d.ctl("add", "gone")
    tap.eq(r.returncode, 1, "add of an existing name exits 1, as kernelctl(1) says", r.stderr)
    tap.contains(r.stderr, "context gone exists already", "add of an existing name says so")
    test_add_kernel(tap, d)
    return c


def test_add_kernel(tap, d):
    """add --kernel, --transport, --restore: the keys in the file, loaded; a bad value named, nothing written."""
    if not os.path.exists("/usr/share/jupyter/kernels/ir/kernel.json"):
        tap.skip("add --kernel ir", "IRkernel's kernelspec is not installed (r-cran-irkernel)")
        return
    r = d.ctl("add", "conv-r", "--kernel", "ir", "--transport", "tcp", "--restore", "replay", "--wait", timeout=90)
    tap.eq(r.returncode, 0, "add conv-r --kernel ir --transport tcp --restore replay --wait exits 0",
           r.stdout + r.stderr)
    with open(d.context_file("conv-r")) as f:
        lines = f.read().splitlines()
    tap.ok({"kernel = ir", "transport = tcp", "restore = replay"} <= set(lines), "the file has the three keys", lines)
    c = d.context("conv-r")
    tap.eq((c.get("kernel"), c.get("language"), c.get("transport"), c.get("transport_why")),
           ("ir", "R", "tcp", "set in the configuration"), "the context loaded them: ir's spec, tcp as set")
    tap.ok(c.get("journal") is not None, "restore = replay: the context keeps a journal", c)
    r = d.ctl("remove", "conv-r", timeout=60)
    tap.eq(r.returncode, 0, "remove conv-r exits 0", r.stdout + r.stderr)
    for opt, value, reason in (("--transport", "udp", "transport = udp: expected auto, ipc or tcp"),
                               ("--restore", "always", "restore = always: expected none or replay"),
                               ("--kernel", "no/such", "kernel = no/such: expected a kernelspec name")):
        r = d.ctl("add", "conv-bad", opt, value)
        tap.eq(r.returncode, 1, f"add {opt} {value} exits 1", r.stdout + r.stderr)
        # Checked by the key's own parser before anything is written (not by a reload of a written file).
        tap.contains(r.stderr, reason, f"add {opt} {value}: the error names the value and why")
        tap.contains(r.stderr, "nothing was written", f"add {opt} {value}: refused before a file was written")
        tap.ok(not os.path.exists(d.context_file("conv-bad")), f"add {opt} {value}: nothing written")


def test_remove(tap, d, gone):
    key = d.connection_info(gone["connection_file"])["key"]
    paths = [gone["connection_file"], private_copy(d, "gone"), d.state_file("gone")]
    tap.ok(all(os.path.exists(p) for p in paths), "while it runs: the published file, the private copy and the state",
           repr([p for p in paths if not os.path.exists(p)]))
    r = d.ctl("remove", "gone", timeout=60)
    tap.eq(r.returncode, 0, "kernelctl remove gone exits 0", r.stdout + r.stderr)
    left = [p for p in paths if os.path.lexists(p)]
    tap.eq(left, [], "remove: the published connection file, the private copy and the state file are gone")
    tap.ok(not os.path.lexists(os.path.join(d.run_dir, "kernels", "gone")), "remove: kernels/gone is gone")
    tap.eq(files_holding(d.tmp, key), [], "remove: no file below the test's directory holds gone's key")


def test_remove_stopped(tap, d):
    """A context whose kernel is stopped already loses its files at once too."""
    r = d.ctl("add", "idle", "--wait", timeout=90)
    tap.eq(r.returncode, 0, "add idle --wait exits 0", r.stdout + r.stderr)
    c = d.context("idle")
    key = d.connection_info(c["connection_file"])["key"]
    r = d.ctl("stop", "idle", timeout=60)
    tap.eq(r.returncode, 0, "stop idle exits 0", r.stderr)
    tap.ok(not os.path.exists(private_copy(d, "idle")), "stop: the kernel's private copy went with the kernel")
    tap.ok(os.path.exists(c["connection_file"]), "stop: the published connection file stays")
    r = d.ctl("remove", "idle", timeout=60)
    tap.eq(r.returncode, 0, "remove of a stopped context exits 0", r.stdout + r.stderr)
    tap.eq(files_holding(d.tmp, key), [], "remove of a stopped context: no file holds its key")
    tap.ok("idle" not in [x["name"] for x in d.status()["contexts"]], "the stopped context is gone from status")


def test_remove_link(tap, d):
    """A link put where the published file was is not what the daemon wrote: remove leaves it, and its target."""
    r = d.ctl("add", "linked", "--wait", timeout=90)
    tap.eq(r.returncode, 0, "add linked --wait exits 0", r.stdout + r.stderr)
    c = d.context("linked")
    precious = os.path.join(d.tmp, "precious.json")
    with open(precious, "w") as f:
        f.write("precious\n")
    os.unlink(c["connection_file"])
    os.symlink(precious, c["connection_file"])
    mark = d.log_mark()
    r = d.ctl("remove", "linked", timeout=60)
    tap.eq(r.returncode, 0, "remove linked exits 0", r.stdout + r.stderr)
    with open(precious) as f:
        tap.eq(f.read(), "precious\n", "remove: the link's target is untouched")
    tap.ok(os.path.islink(c["connection_file"]), "remove: the link is left as it is")
    tap.contains(d.log_since(mark), "is not a regular file (not one the daemon wrote); left as it is",
                 "remove: the log says why the link was left")
    os.unlink(c["connection_file"])


def test_remove_then_exit(tap, d):
    """A context whose kernel takes a while to stop is removed; the daemon gets SIGTERM before it has stopped."""
    d.write_context_file("slow", f"[context:slow]\nargv = {harness.STUBKERNEL} --ignore-shutdown -f {{kernel_file}}\n"
                                 "shutdown_grace = 3s\nstop_timeout = 6s\n")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload adds slow", r.stderr)
    slow = d.wait_state("slow", "ready")
    key = d.connection_info(slow["connection_file"])["key"]
    other = d.context("other")
    other_key = d.connection_info(other["connection_file"])["key"]
    r = d.ctl("remove", "slow", "--timeout", "0.2")
    tap.contains(r.stdout, "stopping slow", "remove answers before slow's kernel is gone")
    d.stop()
    tap.eq(files_holding(d.tmp, key), [], "after SIGTERM: no file holds the removed context's key")
    # A context still configured keeps its published file (and state) for the next daemon; its kernel stopped,
    # so its private copy is gone.
    tap.eq(sorted(files_holding(d.tmp, other_key)), sorted([other["connection_file"], d.state_file("other")]),
           "after SIGTERM: a configured context's key is in its published file and its state only")


def test_banner(tap, d):
    c = d.wait_state("default", "ready")
    log = harness.wait_until(d.log, 30, "ipykernel's banner in the log", check=lambda t: "--existing" in t)
    lines = [l for l in log.splitlines() if "--existing" in l]
    tap.ok(lines and all(c["connection_file"] in l for l in lines),
           "the banner names the published connection file", repr(lines))
    tap.ok(not any(private_copy(d, "default") in l for l in lines), "the banner does not name the private copy")


def test(tap):
    d = harness.Daemon(tap, contexts="[context:default]\n",
                       defaults="")
    d.start()
    test_help(tap, d)
    test_banner(tap, d)
    test_check_message(tap, d)
    # The contexts added below run the stub kernel ([defaults] argv applies to contexts_dir's files).
    d.write_config("[context:default]\nargv = " + harness.IPYKERNEL_ARGV + "\n",
                   defaults=f"argv = {harness.STUB_ARGV}\n")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload: the stub kernel is the default argv", r.stderr)
    gone = test_add(tap, d)
    test_remove(tap, d, gone)
    test_remove_stopped(tap, d)
    test_remove_link(tap, d)
    test_remove_then_exit(tap, d)


harness.main(test)
