"""What a kernel leaves behind does not outlive it. A cell starts a process that double-forks, setsid()s and
ignores SIGTERM, holding the kernel's five listening sockets (inherited by fork). After `kernelctl stop` that
process is gone and the ports are free, and after `start` the kernel has the same ports; the same through
`restart`. Each way of ending it is tried where this host allows: the kernel's own cgroup v2 (cgroup.kill),
the v1 freezer (with the v2 hierarchy read-only in a mount namespace), and the subreaper's search by the
kernel's KERNELSUP_KERNEL_ID (with every cgroup hierarchy read-only). A way the host cannot offer is a skip
that says why."""

import contextlib
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# Prints the pid of a process that left the kernel's process group and session and ignores SIGTERM.
ESCAPE = """
import os, signal, time
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        os.write(w, str(os.getpid()).encode())
        while True:
            time.sleep(1)
    os._exit(0)
os.waitpid(pid, 0)
os.close(w)
print(int(os.read(r, 32)))
"""

# A hostile variant: a process that left the group and forks all the time, its parent exiting each time, so
# its pid changes faster than anyone can list it.
CHAIN = """
import os, signal
pid = os.fork()
if pid == 0:
    os.setsid()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    while True:
        if os.fork() > 0:
            os._exit(0)
os.waitpid(pid, 0)
print(pid)
"""

# Makes the given cgroup mounts read-only in this mount namespace, then becomes kernelsupd.
READONLY = """
set -e
mount --make-rprivate /
for m in $MOUNTS; do
    mount -o remount,bind,ro "$m"
done
exec "$@"
"""


def cgroup_mounts():
    """{mount point: fstype} of every cgroup and cgroup2 mount."""
    found = {}
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype, opts = line.split()[:4]
            if fstype in ("cgroup", "cgroup2"):
                found[mnt] = (fstype, opts)
    return found


def escape(tap, d, ctx, what):
    """Runs the escaping cell; returns the escaped pid."""
    r = d.ctl("exec", ctx, ESCAPE, timeout=60)
    if not tap.eq(r.returncode, 0, f"{what}: a cell starts a process that leaves the kernel's group", r.stderr):
        raise harness.HarnessError(r.stderr)
    pid = int(r.stdout.split()[0])
    d.remember_pid(pid)
    kernel = d.context(ctx)["pid"]
    st = harness.proc_stat(pid)
    tap.ok(st is not None and st[2] != kernel and st[3] != kernel and harness.alive(pid),
           f"{what}: the process runs in a session and group of its own", harness.describe(pid))
    return pid


def group_has_members(pg):
    try:
        os.killpg(pg, 0)
    except ProcessLookupError:
        return False
    return True


def tagged(kernel_id):
    """Running processes whose environment holds KERNELSUP_KERNEL_ID=kernel_id."""
    want = f"KERNELSUP_KERNEL_ID={kernel_id}".encode()
    found = []
    for pid in harness.all_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want in env and harness.alive(pid):
            found.append(pid)
    return found


def holders(ports):
    """Who holds the listening sockets of ports (by inode, through every thread's descriptors)."""
    inodes = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) in ports and fields[3] == "0A":
                inodes[fields[9]] = int(fields[1].split(":")[1], 16)
    found = []
    for pid in harness.all_pids():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fds = os.listdir(f"/proc/{pid}/task/{tid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{pid}/task/{tid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    found.append(f"port {inodes[link[8:-1]]}: {harness.describe(pid)} task {tid}")
    return "\n".join(found) or f"no holder found for inodes {inodes}"


def check_gone(tap, d, pid, ports, what):
    tap.ok(not harness.alive(pid), f"{what}: the escaped process is gone when the command returns",
           harness.describe(pid))
    busy = [p for p in ports.values() if not harness.port_free(p)]
    tap.eq(busy, [], f"{what}: the five ports are free")


def scenario(tap, name, kill, launcher=()):
    d = harness.Daemon(tap)
    d.launcher = launcher
    d.start()
    c0 = d.wait_state("default", "ready")
    cf = c0["connection_file"]
    ports = d.ports(cf)
    lim = c0.get("limits") or {}
    tap.eq(lim.get("group_kill"), kill, f"{name}: status names how the kernel's processes are ended", repr(lim))
    if kill != "subreaper":
        tap.ok(isinstance(lim.get("group"), str) and f"kernelsup-default-{c0['pid']}" in lim["group"],
               f"{name}: the kernel has a cgroup of its own", repr(lim))

    pid = escape(tap, d, "default", f"{name}, stop")
    r = d.ctl("stop", "default")
    tap.eq(r.returncode, 0, f"{name}: kernelctl stop", r.stderr)
    check_gone(tap, d, pid, ports, f"{name}, stop")
    r = d.ctl("start", "default")
    tap.eq(r.returncode, 0, f"{name}: kernelctl start", r.stderr)
    c1 = d.context("default")
    tap.eq(d.ports(cf), ports, f"{name}: after start the ports are unchanged", repr(c1.get("last_error")))

    pid = escape(tap, d, "default", f"{name}, restart")
    r = d.ctl("restart", "default")
    tap.eq(r.returncode, 0, f"{name}: kernelctl restart", r.stderr)
    tap.ok(not harness.alive(pid), f"{name}, restart: the escaped process is gone", harness.describe(pid))
    tap.eq(d.ports(cf), ports, f"{name}, restart: the ports are unchanged",
           repr(d.context("default").get("last_error")))
    c2 = d.context("default")
    r = d.ctl("exec", "default", CHAIN, timeout=60)
    tap.eq(r.returncode, 0, f"{name}, fork chain: a cell starts a process that forks all the time", r.stderr)
    pg = int(r.stdout.split()[0])
    tap.ok(group_has_members(pg), f"{name}, fork chain: it runs (its process group {pg} has members)")
    r = d.ctl("stop", "default")
    tap.eq(r.returncode, 0, f"{name}, fork chain: kernelctl stop", r.stderr)
    left = tagged(c2["kernel_id"])
    tap.eq(left, [], f"{name}, fork chain: no running process carries the kernel's id when stop returns",
           "; ".join(harness.describe(p) for p in left))
    # Its members killed by the daemon may be zombies for a moment, until it reaps them: wait for that.
    with contextlib.suppress(harness.WaitTimeout):
        harness.wait_until(lambda: not group_has_members(pg), 10, f"process group {pg} to be empty")
    tap.ok(not group_has_members(pg), f"{name}, fork chain: its process group is empty (it no longer forks)")
    busy = [p for p in ports.values() if not harness.port_free(p)]
    tap.eq(busy, [], f"{name}, fork chain: the five ports are free",
           holders(ports.values()) if busy else None)
    group = (c2.get("limits") or {}).get("group")

    # An adopted kernel (after kill -9 of the daemon) keeps its cgroup, and it is ended the same way.
    if kill == "subreaper":
        tap.skip(f"{name}: an adopted kernel's leftovers", "an adopted kernel is not the daemon's descendant: "
                 "without a cgroup what it leaves goes to its own reaper, out of the daemon's reach")
    else:
        r = d.ctl("start", "default")
        tap.eq(r.returncode, 0, f"{name}: kernelctl start", r.stderr)
        c3 = d.context("default")
        d.kill9()
        d.start()
        c4 = d.wait_state("default", "ready")
        lim3, lim4 = c3.get("limits") or {}, c4.get("limits") or {}
        tap.eq((c4["pid"], lim4.get("group"), lim4.get("group_kill")), (c3["pid"], lim3.get("group"), kill),
               f"{name}: the adopted kernel keeps its cgroup", repr(lim4))
        pid = escape(tap, d, "default", f"{name}, adopted")
        r = d.ctl("stop", "default")
        tap.eq(r.returncode, 0, f"{name}, adopted: kernelctl stop", r.stderr)
        check_gone(tap, d, pid, ports, f"{name}, adopted")
        group = lim4.get("group")
    d.stop()
    if group:
        tap.ok(not os.path.exists(group), f"{name}: the kernel's cgroup is removed once it is gone", group)


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (cgroups, mount namespaces)")
    mounts = cgroup_mounts()
    v2 = [m for m, (t, _) in mounts.items() if t == "cgroup2"]
    freezer = [m for m, (t, o) in mounts.items() if t == "cgroup" and "freezer" in o.split(",")]
    have_unshare = shutil.which("unshare") is not None

    with tap.guard("cgroup v2"):
        if not v2:
            tap.skip("cgroup.kill", "no cgroup v2 hierarchy is mounted here")
        elif not os.path.exists(os.path.join(v2[0], "cgroup.procs")) or not os.access(v2[0], os.W_OK):
            tap.skip("cgroup.kill", f"{v2[0]} is not writable here")
        else:
            scenario(tap, "cgroup v2", "cgroup.kill")

    with tap.guard("cgroup v1 freezer"):
        if not freezer:
            tap.skip("freezer", "no cgroup v1 freezer hierarchy is mounted here")
        elif not have_unshare:
            tap.skip("freezer", "unshare is not installed (util-linux)")
        elif "/sys/fs/cgroup" in v2:
            tap.skip("freezer", "the v2 hierarchy is /sys/fs/cgroup itself: cannot hide it and keep the freezer")
        else:
            env_mounts = " ".join(v2)
            scenario(tap, "v1 freezer", "freezer",
                     ("env", f"MOUNTS={env_mounts}", "unshare", "-m", "/bin/sh", "-c", READONLY, "sh"))

    with tap.guard("no cgroup: subreaper"):
        if not have_unshare:
            tap.skip("subreaper", "unshare is not installed (util-linux)")
        else:
            probe = subprocess.run(["env", f"MOUNTS={' '.join(mounts)}", "unshare", "-m", "/bin/sh", "-c",
                                    READONLY + "\nmkdir /sys/fs/cgroup/ks-probe 2>&1 || true\n", "sh"],
                                   capture_output=True, text=True)
            if probe.returncode != 0:
                tap.skip("subreaper", f"cannot make the cgroup hierarchies read-only: {probe.stderr.strip()!r}")
            else:
                scenario(tap, "subreaper", "subreaper",
                         ("env", f"MOUNTS={' '.join(mounts)}", "unshare", "-m", "/bin/sh", "-c", READONLY, "sh"))


harness.main(test)
