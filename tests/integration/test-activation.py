"""The control socket systemd passes (socket activation, sd_listen_fds): kernelsupd serves on it instead
of binding its configured path, and leaves it alone when it exits."""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def test(tap):
    activate = shutil.which("systemd-socket-activate")
    if not activate:
        tap.skip_all("systemd-socket-activate is not installed (Debian's systemd package)")
    d = harness.Daemon(tap)
    passed = os.path.join(d.tmp, "passed.sock")
    configured = d.socket
    # systemd-socket-activate binds and listens, then execs kernelsupd with LISTEN_FDS=1.
    d.launcher = (activate, "-l", passed, "-E", "NOTIFY_SOCKET")  # it passes on only what it is told
    d.socket = passed
    # As with a .socket unit, the daemon starts on the first connection: kernelctl wait makes it.
    d.start(expect_ready=False)
    d.exit_expected = False
    r = d.ctl("wait", "--timeout", "60", timeout=90)
    tap.eq(r.returncode, 0, "kernelctl wait on the passed socket starts the daemon and sees it ready", r.stderr)
    tap.ok(harness.poll_until(d.ready_sent, 10, "READY=1 from the activated daemon"),
           "the activated daemon sent READY=1")
    tap.ok(not os.path.exists(configured), "the configured socket path is not bound", configured)
    c = d.wait_state("default", "ready")
    tap.eq(c.get("state"), "ready", "kernelctl reaches the daemon through the passed socket")
    r = d.ctl("exec", "default", "6 * 7")
    tap.eq(r.stdout.split("\n")[0], "42", "cells run through the passed socket")
    d.stop()
    tap.ok(os.path.exists(passed), "the passed socket is left alone at exit (it is not ours to remove)")


harness.main(test)
