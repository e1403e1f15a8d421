"""The Debian package: builds it from this tree's distribution (`make distdir`, then
`dpkg-buildpackage -us -uc -b`), checks what it holds, runs lintian (no errors;
its warnings are printed), installs it with dpkg into a throwaway Debian 12 root
(the nspawn suite's overlay of this machine's root, tests/systemd/test-nspawn.py)
and boots that root: debhelper's postinst enabled kernel.service, so systemd
starts it, and its kernel becomes ready and runs a cell. There, under journald,
the daemon's events are journal entries found by MESSAGE_ID and KERNELSUP_*
fields, and journalctl -x shows the installed catalog's text: kernel ready; kill -9
of the kernel (died with reason signal, restarting, ready again with the next
incarnation); a reload; a context that fails its start limit; a freeze (SIGSTOP of
the daemon for 6 s); a uid past its connection limit; systemctl restart and kill -9
of the daemon (the next one adopts the kernel, variables kept); a kernel that died
while no daemon ran (not adopted, reason gone); an OOM kill (memory_max = 200M, a
cell allocating 400 MiB; skipped where the container's systemd cannot enforce it);
kernelctl stop, and systemctl stop (every kernel stopped).

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
# The journal events' MESSAGE_IDs, as src/shared/log.h defines them (LOG_ID_KERNEL_READY -> ID["KERNEL_READY"]).
with open(os.path.join(harness.SRCDIR, "src", "shared", "log.h")) as _f:
    ID = dict(re.findall(r'^#define LOG_ID_([A-Z_]+) "([0-9a-f]{32})"$', _f.read(), re.M))
ID_READY, ID_DIED, ID_RESTARTING, ID_RELOAD = (ID.get(k) for k in ("KERNEL_READY", "KERNEL_DIED",
                                                                   "KERNEL_RESTARTING", "RELOAD_APPLIED"))
# A uid's control connections: past this many open at once, the next is refused (src/daemon/control.c, kernelsupd(8)).
PER_UID = 64
# Run as a user in the container: PER_UID connections, each answered once (so the daemon admitted them
# all), then one more; prints the refused one's first line and this process's pid (the event's KERNELSUP_PID).
CONNECT_PAST_LIMIT = r"""
import json, os, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    return s
held = []
for i in range(n):
    s = connect()
    s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": "status"}).encode() + b"\n")
    s.makefile("rb").readline()
    held.append(s)
last = connect().makefile("rb").readline()
print(json.dumps({"pid": os.getpid(), "line": last.decode(errors="replace")}))
"""
# A context whose kernel never starts: two failed starts make it failed (and it is not tried again for an hour).
BROKEN_INI = """[context:broken]
argv = /bin/false
start_limit_burst = 2
start_limit_interval = 60s
backoff_min = 100ms
backoff_max = 200ms
failed_cooldown = 1h
"""
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
    for name, step in (("failed", event_failed), ("freeze", event_freeze), ("refused", event_refused),
                       ("adopted", event_adopted), ("not adopted", event_not_adopted), ("oom-kill", event_oom),
                       ("stopped", event_stopped)):
        with tap.guard(f"journal: {name}"):
            step(tap, c)
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


def wait_entries(c, what, *matches, n=1, timeout=60):
    """Waits until at least n entries match; returns them all."""
    try:
        return wait_until(lambda: entries(c, *matches), timeout, what, check=lambda es: len(es) >= n)
    except harness.WaitTimeout:
        return entries(c, *matches)


def main_pid(c):
    return c.show("MainPID").get("MainPID")


def event_failed(tap, c):
    c.write("/etc/kernelsup/contexts.d/broken.ini", BROKEN_INI)
    r = c.sh("systemctl", "reload", UNIT, timeout=60)
    tap.eq(r.returncode, 0, "systemctl reload adds context broken (argv = /bin/false)", out(r))
    failed = wait_entries(c, "the failed event of broken", f"MESSAGE_ID={ID['KERNEL_FAILED']}",
                          "KERNELSUP_CONTEXT=broken")
    tap.ok(len(failed) == 1 and failed[0].get("KERNELSUP_REASON") == "start-limit" and failed[0].get("PRIORITY") == "3"
           and failed[0].get("_SYSTEMD_UNIT") == UNIT,
           "journal: one failed event of broken (reason start-limit, priority err)", repr(failed)[-2000:])
    retries = entries(c, f"MESSAGE_ID={ID['KERNEL_RESTARTING']}", "KERNELSUP_CONTEXT=broken",
                      "KERNELSUP_REASON=failed-start")
    tap.eq(len(retries), 1, "journal: before it, one restarting event of broken (reason failed-start)",
           repr(retries)[-2000:])
    os.unlink(c.path("/etc/kernelsup/contexts.d/broken.ini"))
    r = c.sh("systemctl", "reload", UNIT, timeout=60)
    tap.eq(r.returncode, 0, "systemctl reload removes broken again", out(r))


def event_freeze(tap, c):
    pid = main_pid(c)
    match = (f"MESSAGE_ID={ID['FREEZE_DETECTED']}", f"_PID={pid}")
    seen = len(entries(c, *match))  # a loaded machine may have held the loop for 2 s before
    c.sh("kill", "-STOP", pid)
    time.sleep(6)  # the freeze itself (the unit's watchdog is 30 s)
    c.sh("kill", "-CONT", pid)
    frozen = wait_entries(c, "the freeze event", *match, n=seen + 1)[seen:]
    usec = frozen[0].get("KERNELSUP_FREEZE_USEC", "") if len(frozen) == 1 else ""
    tap.ok(usec.isdigit() and 2_000_000 <= int(usec) <= 60_000_000 and frozen[0].get("KERNELSUP_REASON") == "freeze",
           "journal: SIGSTOP of kernelsupd for 6 s is one freeze event, KERNELSUP_FREEZE_USEC of seconds",
           repr(frozen)[-2000:])


def event_refused(tap, c):
    user = f"ks-ev-{os.getpid()}"
    r = c.sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user, timeout=30)
    tap.eq(r.returncode, 0, f"useradd {user} in the container", out(r))
    uid = c.sh("id", "-u", user, timeout=10).stdout.strip()
    c.sh("chmod", "0666", "/run/kernelsup/control.sock", timeout=10)  # socket_mode's default already; kept explicit
    r = c.sh("setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "/usr/bin/python3", "-c",
             CONNECT_PAST_LIMIT, "/run/kernelsup/control.sock", str(PER_UID), timeout=120)
    try:
        seen = json.loads(r.stdout.splitlines()[-1])
    except (ValueError, IndexError):
        seen = {}
    tap.ok("too many connections" in seen.get("line", ""), f"connection {PER_UID + 1} of uid {uid} is refused",
           out(r))
    refused = wait_entries(c, "the connection-refused event", f"MESSAGE_ID={ID['CONNECTION_REFUSED']}")
    tap.ok(len(refused) == 1 and refused[0].get("KERNELSUP_PID") == str(seen.get("pid"))
           and f"uid {uid} (at most {PER_UID})" in refused[0].get("KERNELSUP_REASON", ""),
           "journal: one connection-refused event, with the peer's pid and the limit in KERNELSUP_REASON",
           f"{refused!r}"[-2000:] + f"\nclient: {seen}")


def event_adopted(tap, c):
    """systemctl restart, then SIGKILL of kernelsupd: each time the next daemon adopts the kernel."""
    before = c.context("default")
    kid = before.get("kernel_id")
    r = c.ctl("exec", "default", "kept = 6 * 7")
    tap.eq(r.returncode, 0, "a cell sets kept = 6 * 7", out(r))
    # Remounted writable for the OOM step (nspawn mounts the v1 controllers read-only; test-nspawn.py, 6b):
    # systemd re-executed enforces MemoryMax=, and the daemon restarted below sees the writable hierarchy.
    for ctrl in ("memory", "pids", "cpu", "cpuacct", "cpu,cpuacct"):
        c.sh("mount", "-o", "remount,bind,rw", f"/sys/fs/cgroup/{ctrl}", timeout=10)
    c.sh("systemctl", "daemon-reexec", timeout=60)
    wait_until(lambda: c.sh("systemctl", "is-system-running", timeout=10).stdout.strip(), 60,
               "systemd back after daemon-reexec", check=lambda st: st in ("running", "degraded"))
    old = main_pid(c)
    r = c.sh("systemctl", "restart", UNIT, timeout=120)
    tap.eq(r.returncode, 0, f"systemctl restart {UNIT}", out(r))
    new = main_pid(c)
    now = wait_until(lambda: c.context("default"), 60, "default ready after the restart",
                     check=lambda x: x.get("state") == "ready")
    tap.eq((new != old, now.get("kernel_id"), now.get("pid")), (True, kid, before.get("pid")),
           "after systemctl restart, a new kernelsupd runs the same kernel (kernel_id and pid)",
           f"{old} -> {new}: {now}")
    r = c.ctl("exec", "default", "kept")
    tap.eq((r.returncode, r.stdout.splitlines()[:1]), (0, ["42"]), "its variables are kept (kept prints 42)", out(r))
    adopted = wait_entries(c, "the adopted event", f"MESSAGE_ID={ID['KERNEL_ADOPTED']}", f"KERNELSUP_KERNEL_ID={kid}")
    tap.ok(len(adopted) == 1 and adopted[0].get("KERNELSUP_PID") == str(before.get("pid"))
           and adopted[0].get("KERNELSUP_INCARNATION") == str(before.get("incarnation"))
           and adopted[0].get("KERNELSUP_CONTEXT") == "default" and adopted[0].get("_PID") == new,
           "journal: one adopted event from the new daemon, with kernel_id, pid and incarnation", repr(adopted)[-2000:])
    tap.eq(entries(c, f"MESSAGE_ID={ID['KERNEL_STOPPED']}", f"KERNELSUP_KERNEL_ID={kid}"), [],
           "journal: no stopped event for that kernel")
    log = c.journal()
    tap.ok(f"a restart of {UNIT} is running" in log, "the old daemon said it left the kernels for the restart",
           log[-3000:])

    r = c.sh("kill", "-9", new, timeout=10)
    tap.eq(r.returncode, 0, f"kill -9 of kernelsupd (pid {new})", out(r))
    wait_until(lambda: main_pid(c), 60, "systemd to start kernelsupd again", check=lambda p: p not in ("0", new))
    third = main_pid(c)
    adopted = wait_entries(c, "a second adopted event", f"MESSAGE_ID={ID['KERNEL_ADOPTED']}",
                           f"KERNELSUP_KERNEL_ID={kid}", n=2)
    tap.ok(len(adopted) == 2 and adopted[-1].get("_PID") == third
           and adopted[-1].get("KERNELSUP_PID") == str(before.get("pid")),
           "journal: after kill -9 of kernelsupd, the daemon systemd restarted adopts it again", repr(adopted)[-2000:])


def event_not_adopted(tap, c):
    """The kernel dies while no daemon runs (SIGSTOP the daemon, kill -9 its kernel, then kill -9 it)."""
    ctx = c.context("default")
    daemon = main_pid(c)
    c.sh("kill", "-STOP", daemon, timeout=10)
    c.sh("kill", "-9", str(ctx.get("pid")), timeout=10)
    c.sh("kill", "-9", daemon, timeout=10)
    gone = wait_entries(c, "the not-adopted event", f"MESSAGE_ID={ID['KERNEL_NOT_ADOPTED']}",
                        f"KERNELSUP_KERNEL_ID={ctx.get('kernel_id')}")
    tap.ok(len(gone) == 1 and gone[0].get("KERNELSUP_REASON") == "gone" and gone[0].get("KERNELSUP_CONTEXT") == "default"
           and gone[0].get("KERNELSUP_PID") == str(ctx.get("pid")),
           "journal: the next daemon's not-adopted event, reason gone, with the kernel's pid", repr(gone)[-2000:])
    now = wait_until(lambda: c.context("default"), 60, "a new kernel of default",
                     check=lambda x: x.get("state") == "ready" and x.get("kernel_id") != ctx.get("kernel_id"))
    tap.ok(now.get("incarnation") == ctx.get("incarnation", 0) + 1, "and it starts a new kernel", repr(now))


def event_oom(tap, c):
    probe = c.sh("systemd-run", "--scope", "--quiet", "-p", "MemoryMax=200M", "-p", "TasksMax=256",
                 "/bin/sh", "-c", nspawn.SCOPE_LIMITS_PROBE, timeout=30)
    if probe.stdout.split() != ["209715200", "256"]:
        for name in ("a kernel over memory_max is killed", "journal: one kernel-died event with reason oom-kill",
                     "journalctl -x explains it"):
            tap.skip(f"oom: {name}", "this container's systemd does not enforce a scope's MemoryMax (systemd-run "
                     f"--scope read back {out(probe)!r}): the host's cgroups are not delegated to it")
        return
    c.write("/etc/kernelsup/contexts.d/boxed.ini", "[context:boxed]\nmemory_max = 200M\n")
    r = c.sh("systemctl", "reload", UNIT, timeout=60)
    boxed = wait_until(lambda: {x.get("name"): x for x in c.status().get("contexts", [])}.get("boxed"), 60,
                       "context boxed to be ready", check=lambda x: x and x.get("state") == "ready")
    r = c.ctl("exec", "boxed", "b = bytearray(400 * 1024 * 1024)\nb[::4096] = b'x' * (len(b) // 4096)", timeout=120)
    after = wait_until(lambda: c.context("boxed"), 60, "boxed ready again with a new kernel",
                       check=lambda x: x.get("state") == "ready" and x.get("pid") != boxed.get("pid"))
    tap.eq((r.returncode, (after.get("last_exit") or {}).get("reason")), (1, "oom-kill"),
           "oom: a kernel over memory_max is killed (exec exits 1, last_exit oom-kill)", out(r))
    died = entries(c, f"MESSAGE_ID={ID_DIED}", "KERNELSUP_REASON=oom-kill")
    want = {"KERNELSUP_CONTEXT": "boxed", "KERNELSUP_KERNEL_ID": boxed.get("kernel_id"),
            "KERNELSUP_PID": str(boxed.get("pid")), "KERNELSUP_INCARNATION": str(boxed.get("incarnation")),
            "KERNELSUP_SIGNAL": "SIGKILL"}
    tap.eq([{k: e.get(k) for k in want} for e in died], [want],
           f"oom: journalctl MESSAGE_ID={ID_DIED} KERNELSUP_REASON=oom-kill finds exactly one entry: boxed's kernel, "
           "its pid, incarnation and SIGKILL", repr(died)[-2000:])
    r = c.sh("journalctl", "--no-pager", "-x", f"MESSAGE_ID={ID_DIED}", "KERNELSUP_REASON=oom-kill", timeout=30)
    tap.ok("The kernel of context boxed died" in r.stdout and "Here: oom-kill" in r.stdout,
           "oom: journalctl -x explains it with the catalog's text", out(r))


def event_stopped(tap, c):
    ctx = c.context("default")
    r = c.ctl("stop", "default", timeout=60)
    tap.eq(r.returncode, 0, "kernelctl stop default", out(r))
    stopped = wait_entries(c, "the stopped event", f"MESSAGE_ID={ID['KERNEL_STOPPED']}",
                           f"KERNELSUP_KERNEL_ID={ctx.get('kernel_id')}")
    tap.ok(len(stopped) == 1 and stopped[0].get("KERNELSUP_PID") == str(ctx.get("pid"))
           and stopped[0].get("KERNELSUP_CONTEXT") == "default" and stopped[0].get("KERNELSUP_REASON") == "stopped",
           "journal: kernelctl stop is one stopped event with the kernel's id and pid", repr(stopped)[-2000:])
    r = c.ctl("start", "default", timeout=60)
    wait_until(lambda: c.context("default"), 60, "default ready again", check=lambda x: x.get("state") == "ready")
    running = [x for x in c.status().get("contexts", []) if x.get("pid")]
    r = c.sh("systemctl", "stop", UNIT, timeout=120)
    tap.eq(r.returncode, 0, f"systemctl stop {UNIT}", out(r))
    ids = [x.get("kernel_id") for x in running]
    got = {x: len(entries(c, f"MESSAGE_ID={ID['KERNEL_STOPPED']}", f"KERNELSUP_KERNEL_ID={x}")) for x in ids}
    left = [line for line in c.sh("ps", "-eo", "args=", timeout=10).stdout.splitlines() if "ipykernel" in line]
    tap.ok(ids and got == {x: 1 for x in ids} and not left,
           "systemctl stop (no restart job) stops every running kernel, one stopped event each, none left",
           f"{got} left: {left}")


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
