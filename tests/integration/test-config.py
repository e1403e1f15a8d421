"""Configuration: --check-config on good and bad files, the daemon refusing a bad
config with FILE:LINE: [SECTION] KEY = VALUE: reason and starting nothing, unknown
keys, duplicate contexts across files, the launch and restart keys together (all
accepted; connection_file, cwd, env, autostart and restart seen in effect here,
the timing keys in test-failing, test-lifecycle and test-resume), and a state
directory on a full file system."""

import errno
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

RESTART_REASON = "expected always, on-failure or no"


def daemon_cmd(d, *args, config=None, timeout=30):
    """Runs kernelsupd --config CONFIG ARGS to completion (killed at the timeout)."""
    env = d.env()
    env.pop("NOTIFY_SOCKET")
    try:
        return subprocess.run([harness.KERNELSUPD, "--config", config or d.config, *args], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=harness.scaled(timeout))
    except subprocess.TimeoutExpired as e:
        raise harness.WaitTimeout(f"kernelsupd {' '.join(args)} still running after {e.timeout:g}s") from None


def nothing_started(tap, d, what):
    tap.ok(not os.path.exists(d.socket), f"{what}: no control socket")
    tap.ok(not os.path.exists(os.path.join(d.state_dir, "supervisor.json")), f"{what}: no generation recorded")
    d.check_no_leftovers(f"{what}: no process left")


def bad_config(tap, what, expect, **kw):
    """A Daemon whose config is bad: --check-config and a real start must both exit 1
    with every text of expect(d) on stderr, and start nothing."""
    d = harness.Daemon(tap, **kw)
    with tap.guard(what):
        texts = expect(d)
        r = daemon_cmd(d, "--check-config")
        tap.eq(r.returncode, 1, f"{what}: --check-config exits 1", r.stdout + r.stderr)
        tap.ok(": OK" not in r.stdout, f"{what}: --check-config does not say OK", r.stdout)
        for t in texts:
            tap.contains(r.stderr, t, f"{what}: --check-config says {t!r}")
        nothing_started(tap, d, f"{what} (--check-config)")

        d.start(expect_ready=False)
        rc = d.wait_exit(30)
        d.close_notify()
        tap.eq(rc, 1, f"{what}: kernelsupd refuses to start (exit 1)")
        log = d.log()
        for t in texts:
            tap.contains(log, t, f"{what}: kernelsupd says {t!r}")
        tap.ok(not d.ready_sent(), f"{what}: no READY=1")
        nothing_started(tap, d, f"{what} (start)")
        d.check_log(f"{what}: no sanitizer report")


def test(tap):
    # Options.
    d = harness.Daemon(tap, contexts="[context:a]\nautostart = no\n")
    r = daemon_cmd(d, "--version")
    tap.ok(r.returncode == 0 and r.stdout.strip(), "kernelsupd --version exits 0 and prints a version", repr(r))
    r = daemon_cmd(d, "--help")
    tap.ok(r.returncode == 0 and "--config" in r.stdout, "kernelsupd --help exits 0 and lists --config", repr(r))
    r = daemon_cmd(d, "--no-such-option")
    tap.ok(r.returncode != 0 and r.stderr.strip(), "kernelsupd with an unknown option fails with a message",
           repr(r))
    r = daemon_cmd(d, "--log-level", "loud", "--check-config")
    tap.ok(r.returncode != 0 and r.stderr.strip(), "kernelsupd --log-level loud fails with a message", repr(r))
    r = daemon_cmd(d, "--log-level", "debug", "--check-config")
    tap.eq(r.returncode, 0, "kernelsupd --log-level debug --check-config exits 0", r.stderr)
    r = daemon_cmd(d, "--check-config")
    tap.eq(r.returncode, 0, "--check-config of a good config exits 0", r.stderr)
    tap.contains(r.stdout, f"{d.config}: OK", "--check-config prints PATH: OK")
    nothing_started(tap, d, "--check-config of a good config")
    missing = os.path.join(d.tmp, "nonexistent.ini")
    r = daemon_cmd(d, "--check-config", config=missing)
    tap.eq(r.returncode, 1, "--check-config of a missing file exits 1", r.stdout)
    tap.contains(r.stderr, missing, "--check-config of a missing file names it")

    # Bad values, each with FILE:LINE: [SECTION] KEY = VALUE: reason.
    bad_config(tap, "bad restart", lambda d: [
        f"{d.config}:{d.config_line('restart = sometimes')}: [context:default] restart = sometimes: {RESTART_REASON}"],
        contexts="[context:default]\nrestart = sometimes\n")
    bad_config(tap, "bad restart in [defaults]", lambda d: [
        f"{d.config}:{d.config_line('restart = sometimes')}: [defaults] restart = sometimes: {RESTART_REASON}"],
        defaults="restart = sometimes\n")
    bad_config(tap, "bad duration", lambda d: [
        f"{d.config}:{d.config_line('start_timeout = soon')}: [context:default] start_timeout = soon:"],
        contexts="[context:default]\nstart_timeout = soon\n")
    bad_config(tap, "bad boolean", lambda d: [
        f"{d.config}:{d.config_line('autostart = maybe')}: [context:default] autostart = maybe:"],
        contexts="[context:default]\nautostart = maybe\n")
    bad_config(tap, "bad number", lambda d: [
        f"{d.config}:{d.config_line('start_limit_burst = lots')}: [context:default] start_limit_burst = lots:"],
        contexts="[context:default]\nstart_limit_burst = lots\n")
    bad_config(tap, "unknown context key", lambda d: [
        f"{d.config}:{d.config_line('frobnicate = 1')}: [context:default] frobnicate = 1:", "frobnicate"],
        contexts="[context:default]\nfrobnicate = 1\n")
    bad_config(tap, "unknown supervisor key", lambda d: [
        f"{d.config}:{d.config_line('colour = blue')}: [supervisor] colour = blue:"],
        supervisor="colour = blue\n")
    bad_config(tap, "invalid context name", lambda d: [
        f"{d.config}:{d.config_line('[context:bad/name]')}:", "bad/name"],
        contexts="[context:bad/name]\n")
    bad_config(tap, "bad value in contexts.d", lambda d: [
        f"{os.path.join(d.contexts_dir, '20-b.ini')}:2: [context:b] restart = nope: {RESTART_REASON}"],
        contexts="[context:a]\nautostart = no\n", extra_files={"20-b.ini": "[context:b]\nrestart = nope\n"})
    bad_config(tap, "duplicate context in main file and contexts.d", lambda d: [
        d.config, os.path.join(d.contexts_dir, "10-dup.ini"), "dup"],
        contexts="[context:dup]\nautostart = no\n", extra_files={"10-dup.ini": "[context:dup]\nautostart = no\n"})
    bad_config(tap, "duplicate context in two contexts.d files", lambda d: [
        os.path.join(d.contexts_dir, "a.ini"), os.path.join(d.contexts_dir, "b.ini"), "twice"],
        contexts="", extra_files={"a.ini": "[context:twice]\nautostart = no\n",
                                  "b.ini": "\n[context:twice]\nautostart = no\n"})
    bad_config(tap, "bad shutdown_grace", lambda d: [
        f"{d.config}:{d.config_line('shutdown_grace = soon')}: [context:default] shutdown_grace = soon: expected a "
        "duration"], contexts="[context:default]\nshutdown_grace = soon\n")
    bad_config(tap, "shutdown_grace = 0 in [defaults]", lambda d: [
        f"{d.config}:{d.config_line('shutdown_grace = 0')}: [defaults] shutdown_grace = 0: must be greater than 0"],
        defaults="shutdown_grace = 0\n")
    bad_config(tap, "huge shutdown_grace in contexts.d", lambda d: [
        f"{os.path.join(d.contexts_dir, 'big.ini')}:2: [context:big] shutdown_grace = 99999999999999999999s: too "
        "large"], contexts="", extra_files={"big.ini": "[context:big]\nshutdown_grace = 99999999999999999999s\n"})
    bad_config(tap, "bad output_chunking", lambda d: [
        f"{d.config}:{d.config_line('output_chunking = sometimes')}: [context:default] output_chunking = sometimes: "
        "expected yes or no (or true/false, on/off, 1/0)"], contexts="[context:default]\noutput_chunking = sometimes\n")

    with tap.guard("launch and restart keys together"):
        every_key(tap)
    with tap.guard("full state file system"):
        full_disk(tap)


def every_key(tap):
    """The launch and restart keys at once, valid: --check-config OK; those whose effect shows within one
    kernel's life are checked (the timing keys are checked where they act, in their own tests)."""
    d = harness.Daemon(tap, contexts="")
    work = os.path.join(d.tmp, "work")
    custom = os.path.join(d.tmp, "custom", "full.json")
    os.makedirs(work)
    os.makedirs(os.path.dirname(custom))
    root = "user = root\ngroup = root\n" if os.geteuid() == 0 else ""
    d.write_config(
        "[context:full]\n"
        f"argv = {harness.IPYKERNEL_ARGV}\n"
        "restart = on-failure\n"
        f"connection_file = {custom}\n" + root +
        f"cwd = {work}\n"
        "env = KS_A=1\n"
        "env = KS_B=two words\n"
        "autostart = yes\n"
        "start_timeout = 60s\n"
        "stop_timeout = 5s\n"
        "start_limit_burst = 4\n"
        "start_limit_interval = 5min\n"
        "failed_cooldown = 1min\n"
        "backoff_min = 100ms\n"
        "backoff_max = 2s\n"
        "backoff_reset = 10s\n"
        "\n[context:manual]\nautostart = no\n",
        defaults="stop_timeout = 3s\nrestart = always\n")
    r = daemon_cmd(d, "--check-config")
    tap.eq(r.returncode, 0, "launch and restart keys together: --check-config exits 0", r.stderr)
    tap.contains(r.stdout, f"{d.config}: OK", "launch and restart keys together: --check-config prints PATH: OK")

    d.start()
    c = d.context("full")
    tap.eq(c["state"], "ready", "launch and restart keys together: the kernel is ready")
    tap.eq(c["connection_file"], custom, "connection_file = PATH is used")
    tap.ok(os.path.isfile(custom) and stat.S_IMODE(os.lstat(custom).st_mode) == 0o600,
           "the custom connection file exists with mode 0600")
    r = harness.run_cell(custom, "import os\n(os.getcwd(), os.environ.get('KS_A'), os.environ.get('KS_B'))")
    tap.eq(r["result"], repr((work, "1", "two words")), "the kernel runs in cwd with the env = settings")
    m = d.context("manual")
    tap.eq((m["state"], m["pid"]), ("stopped", None), "autostart = no: stopped")
    # restart = on-failure (the context's own, over [defaults]' always): a clean exit is not restarted.
    d.ctl("exec", "full", "import os; os._exit(0)", timeout=60)
    # Gone means a pid other than this kernel's: none (stopped), or a new one had it been restarted.
    c2 = harness.poll_until(lambda: d.context("full"), 30, "the kernel of full to be gone",
                            check=lambda x: x.get("pid") != c["pid"] and x.get("state") in ("stopped", "ready"))
    tap.eq((c2["state"], c2["incarnation"], (c2.get("last_exit") or {}).get("code")), ("stopped", c["incarnation"], 0),
           "restart = on-failure over [defaults]' always: a kernel that exits 0 is not restarted")
    d.stop()


def full_disk(tap):
    if os.geteuid() != 0:
        tap.skip("full state file system: kernelsupd exits 1", "not root (needs a tmpfs)")
        return
    d = harness.Daemon(tap)
    try:
        d.mount_tmpfs(d.state_dir, "1m")
    except subprocess.CalledProcessError as e:
        tap.skip("full state file system: kernelsupd exits 1", f"cannot mount a tmpfs: {e.stderr!r}")
        return
    try:
        with open(os.path.join(d.state_dir, "filler"), "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError as e:
        tap.eq(e.errno, errno.ENOSPC, "the state tmpfs is full")
    d.start(expect_ready=False)
    rc = d.wait_exit(60)
    d.close_notify()
    tap.eq(rc, 1, "full state file system: kernelsupd exits 1")
    lines = [l for l in d.log().splitlines() if "No space left on device" in l]
    tap.ok(lines, "full state file system: the error says No space left on device", d.log_tail(10))
    tap.ok(any("supervisor.json" in l or "default.json" in l or d.state_dir in l for l in lines),
           "full state file system: the error names the state file", "\n".join(lines))
    tap.ok(not d.ready_sent(), "full state file system: no READY=1")
    d.check_no_leftovers("full state file system: no process left")
    d.check_log("full state file system: no sanitizer report")


harness.main(test)
