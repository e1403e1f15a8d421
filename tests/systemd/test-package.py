"""The Debian package: builds it from this tree's distribution (`make distdir`, then
`dpkg-buildpackage -us -uc -b`), checks what it holds, runs lintian (no errors;
its warnings are printed), installs it with dpkg into a throwaway Debian 12 root
(the nspawn suite's overlay of this machine's root, tests/systemd/test-nspawn.py)
and boots that root: debhelper's postinst enabled kernel.service, so systemd
starts it, and its kernel becomes ready and runs a cell. There, under journald,
the daemon's events are journal entries found by MESSAGE_ID and KERNELSUP_*
fields (kernel ready; kill -9 of the kernel: died with reason signal, restarting,
ready again with the next incarnation; a reload), and journalctl -x shows the
installed catalog's text.

Runs in the normal build only: the package is built from source with the flags
Debian gives, whatever this build was configured with, so the sanitizer build
and make distcheck (which already checks the distribution) would only build the
same package again. Needs root, dpkg-buildpackage, debhelper, lintian and
systemd-nspawn; skipped (exit 77) with the reason otherwise."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

# The nspawn suite's overlay, boot and teardown, reused as they are.
_spec = importlib.util.spec_from_file_location("nspawn_suite", os.path.join(HERE, "test-nspawn.py"))
nspawn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nspawn)
run, out = nspawn.run, nspawn.out

UNIT = nspawn.UNIT
# What the package must hold (paths in the .deb), Debian 12's layout.
CONTENTS = ("./usr/sbin/kernelsupd", "./usr/bin/kernelctl", "./lib/systemd/system/kernel.service",
            "./etc/kernelsup/kernelsup.ini", "./etc/kernelsup/contexts.d/",
            "./usr/share/man/man1/kernelctl.1.gz", "./usr/share/man/man5/kernelsup.ini.5.gz",
            "./usr/share/man/man8/kernelsupd.8.gz", "./usr/share/doc/kernelsup/copyright",
            "./usr/lib/systemd/catalog/kernelsup.catalog")
# The journal events' MESSAGE_IDs (src/log.h, catalog/kernelsup.catalog).
ID_READY = "abd8406c81a34d4eab7e1a58a7d0e8f7"
ID_DIED = "8695e72080884b10b77fff8a7b566899"
ID_RESTARTING = "f91625f728bf408ebb62f79158f2367a"
ID_RELOAD = "9d177a05d34a4a7daced8f6b31162af6"
TOOLS = {"dpkg-buildpackage": "dpkg-dev", "dh": "debhelper", "lintian": "lintian", "dpkg-deb": "dpkg",
         "systemd-nspawn": "systemd-container", "nsenter": "util-linux", "chroot": "coreutils"}


def skip_reason():
    """Why this machine or this build does not run the test, or None."""
    if os.geteuid() != 0:
        return "needs root (mounts, systemd-nspawn, dpkg into a root)"
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install {' '.join(missing)})"
    san = nspawn.make_vars(harness.BUILDDIR, ("SAN_CFLAGS",))["SAN_CFLAGS"]
    if san:
        return ("runs in the normal build only: this build has the sanitizers, and the package is built from "
                "source with Debian's flags either way")
    # automake's distcheck configures in DISTDIR/_build/sub.
    if os.path.relpath(harness.BUILDDIR, harness.SRCDIR) == os.path.join("_build", "sub"):
        return "runs in the normal build only, not again under make distcheck"
    return None


def build(tap, tmp):
    """make distdir, dpkg-buildpackage: returns the .deb's path (None when the build failed)."""
    version = nspawn.make_vars(harness.BUILDDIR, ("PACKAGE_VERSION",))["PACKAGE_VERSION"]
    src = os.path.join(tmp, f"kernelsup-{version}")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    r = run(["make", "-s", "--no-print-directory", "-C", harness.BUILDDIR, "distdir", f"distdir={src}"],
            timeout=300, env=env)
    if not tap.ok(r.returncode == 0 and os.path.isfile(os.path.join(src, "debian", "rules")),
                  "make distdir holds debian/", out(r)):
        return None
    # The tests are not run in the package build (debian/rules says why), nor a debug symbols package made.
    env["DEB_BUILD_OPTIONS"] = f"nocheck noautodbgsym parallel={os.cpu_count() or 1}"
    t0 = time.monotonic()
    r = run(["dpkg-buildpackage", "-us", "-uc", "-b"], timeout=1200, cwd=src, env=env)
    tap.diag(f"dpkg-buildpackage -us -uc -b took {time.monotonic() - t0:.0f} s")
    debs = sorted(f for f in os.listdir(tmp) if re.fullmatch(rf"kernelsup_{re.escape(version)}_[a-z0-9]+\.deb", f))
    if not tap.ok(r.returncode == 0 and len(debs) == 1, "dpkg-buildpackage -us -uc -b builds kernelsup_VERSION_ARCH.deb",
                  out(r) + f"\nfiles: {os.listdir(tmp)}"):
        return None
    return os.path.join(tmp, debs[0])


def inspect(tap, deb):
    """What the package holds and declares."""
    r = run(["dpkg-deb", "-c", deb])
    paths = {line.split()[-1] if " -> " not in line else line.split()[-3] for line in r.stdout.splitlines()}
    missing = [p for p in CONTENTS if p not in paths]
    tap.eq(missing, [], "the package holds the daemon, kernelctl, the unit, the config, contexts.d, the man pages",
           r.stdout[-2000:])
    depends = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    tap.ok(re.search(r"(^|, )python3-ipykernel\b", depends), "it depends on python3-ipykernel", depends)
    conffiles = run(["dpkg-deb", "-I", deb, "conffiles"]).stdout.split()
    tap.ok("/etc/kernelsup/kernelsup.ini" in conffiles, "/etc/kernelsup/kernelsup.ini is a conffile", repr(conffiles))
    postinst = run(["dpkg-deb", "-I", deb, "postinst"]).stdout
    # Without --no-enable: enable is not guarded by "debian-installed" (which only renews an existing install).
    tap.ok(re.search(rf"deb-systemd-helper enable '?{re.escape(UNIT)}", postinst) and "debian-installed" not in postinst,
           f"its postinst enables {UNIT} on installation (debhelper's systemd support)", postinst[-2000:])


def lint(tap, deb):
    t0 = time.monotonic()
    r = run(["lintian", "--no-tag-display-limit", deb], timeout=600)
    tap.diag(f"lintian took {time.monotonic() - t0:.0f} s")
    errors = [line for line in r.stdout.splitlines() if line.startswith("E:")]
    warnings = [line for line in r.stdout.splitlines() if line.startswith("W:")]
    tap.eq(errors, [], "lintian reports no errors", out(r))
    tap.diag("lintian warnings: " + ("\n".join(warnings) if warnings else "none"))


def install_and_boot(tap, deb):
    """Installs the .deb with dpkg into the overlay, then boots it."""
    c = nspawn.Container(tap)
    try:
        c.mount_overlay()
    except nspawn.Skip as e:
        tap.skip("install into a Debian 12 root and boot it", str(e))
        return
    c.prepare()
    inside = "/var/cache/kernelsup-test/" + os.path.basename(deb)
    os.makedirs(os.path.dirname(c.path(inside)))
    shutil.copy(deb, c.path(inside))
    # Without a running systemd in the root, postinst enables the unit and starts nothing (as in an image build).
    r = run(["chroot", c.root, "dpkg", "-i", inside], timeout=300,
            env={**nspawn.CONTAINER_ENV, "DEBIAN_FRONTEND": "noninteractive"})
    tap.ok(r.returncode == 0, "dpkg -i kernelsup.deb in a Debian 12 root", out(r))
    wants = c.path(f"/etc/systemd/system/multi-user.target.wants/{UNIT}")
    tap.ok(os.path.islink(wants), f"postinst enabled {UNIT} (multi-user.target.wants)", out(r))
    if r.returncode != 0:
        return
    c.ctl_argv = ["/usr/bin/kernelctl"]
    c.boot()
    try:
        seen = wait_until(lambda: c.sh("systemctl", "is-active", UNIT, timeout=10).stdout.strip(), 90,
                          f"{UNIT} to be active after the boot", check=lambda st: st in ("active", "failed"))
    except harness.WaitTimeout as e:
        seen = str(e)
    if not tap.eq(seen, "active", f"after the boot, {UNIT} is active (Type=notify: its kernel is ready)",
                  c.journal()[-3000:]):
        return
    ctx = c.context("default")
    tap.eq(ctx.get("state"), "ready", "kernelctl status: the default context is ready", repr(ctx))
    r = c.ctl("exec", "default", "6 * 7")
    tap.eq((r.returncode, r.stdout.splitlines()[:1]), (0, ["42"]), "kernelctl exec default '6 * 7' prints 42", out(r))
    with tap.guard("journal events"):
        journal_events(tap, c, ctx)
    r = c.sh("systemctl", "poweroff", timeout=30)
    tap.eq(c.wait_nspawn(60), 0, "systemctl poweroff: systemd-nspawn exits 0", c.nspawn_tail())


def entries(c, *matches):
    """The journal entries (dicts) of the container that match FIELD=value..."""
    r = c.sh("journalctl", "--no-pager", "-o", "json", *matches, timeout=30)
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def journal_events(tap, c, ctx):
    kid, pid = ctx.get("kernel_id"), ctx.get("pid")
    ready = entries(c, f"MESSAGE_ID={ID_READY}", "KERNELSUP_CONTEXT=default")
    tap.ok(any(e.get("KERNELSUP_KERNEL_ID") == kid and e.get("KERNELSUP_PID") == str(pid)
               and e.get("KERNELSUP_INCARNATION") == "1" and e.get("_SYSTEMD_UNIT") == UNIT for e in ready),
           "journal: the kernel-ready event of default, with its kernel_id, pid and incarnation, from kernel.service",
           repr(ready)[-2000:])
    c.sh("kill", "-9", str(pid))
    new = wait_until(lambda: c.context("default"), 60, "a new kernel ready after kill -9",
                     check=lambda x: x.get("state") == "ready" and x.get("pid") not in (None, pid))
    died = entries(c, f"MESSAGE_ID={ID_DIED}", "KERNELSUP_REASON=signal", f"KERNELSUP_KERNEL_ID={kid}")
    tap.ok(len(died) == 1 and died[0].get("KERNELSUP_SIGNAL") == "SIGKILL" and died[0].get("KERNELSUP_PID") == str(pid)
           and died[0].get("PRIORITY") == "4",
           "journal: kill -9 is one kernel-died event (reason signal, SIGKILL, its pid, priority warning)",
           repr(died)[-2000:])
    tap.eq(len(entries(c, f"MESSAGE_ID={ID_RESTARTING}", "KERNELSUP_CONTEXT=default")), 1,
           "journal: one restarting event")
    again = entries(c, f"MESSAGE_ID={ID_READY}", f"KERNELSUP_KERNEL_ID={new.get('kernel_id')}")
    tap.ok(len(again) == 1 and again[0].get("KERNELSUP_INCARNATION") == "2",
           "journal: the new kernel's ready event, incarnation 2", repr(again)[-2000:])
    r = c.sh("journalctl", "--no-pager", "-x", f"MESSAGE_ID={ID_DIED}", timeout=30)
    tap.ok("The kernel of context default died" in r.stdout,
           "journalctl -x shows the installed catalog's text for it", out(r))
    c.write("/etc/kernelsup/contexts.d/extra.ini", "[context:extra]\nautostart = no\n")
    r = c.sh("systemctl", "reload", UNIT, timeout=60)
    tap.eq(r.returncode, 0, "systemctl reload with a new context file", out(r))
    reload = wait_until(lambda: entries(c, f"MESSAGE_ID={ID_RELOAD}"), 30, "the reload event")
    tap.eq(reload[-1].get("KERNELSUP_REASON"), "added=1 removed=0 restarted=0 updated=0",
           "journal: the reload event says what changed")


def test(tap):
    reason = skip_reason()
    if reason:
        tap.skip_all(reason)
    tap.diag("the package test runs in the normal build only (not with the sanitizers, not under make distcheck)")
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="ks-package-")
    try:
        deb = build(tap, tmp)
        if deb:
            inspect(tap, deb)
            lint(tap, deb)
            install_and_boot(tap, deb)
    finally:
        if os.environ.get("KS_KEEP_TMP"):
            tap.diag(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    tap.diag(f"the package test took {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    harness.main(test, needs_jupyter=False)
