"""Limits where no cgroup can be written, as in a container without privileges: kernelsupd runs as root
without systemd, in a mount namespace whose cgroup hierarchies are read-only. memory_max falls back to
RLIMIT_AS, a soft cap: status says mechanism rlimit, which limits are not enforced and why; a cell that
allocates past memory_max gets MemoryError (kernelctl exit 7) and the kernel, its variables with it, lives
on; no sub-cgroup is made."""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MIB = 1024 * 1024
CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "cpu,cpuacct", "unified")

# Makes every cgroup hierarchy read-only in this mount namespace, then becomes kernelsupd.
READONLY = """
set -e
mount --make-rprivate /
for m in $(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts); do
    mount -o remount,bind,ro "$m"
done
exec "$@"
"""


def made_for(pid):
    """The directories named for the kernel pid (kernelsup-NAME-PID) in each hierarchy of ours and in
    /sys/fs/cgroup itself, where only a v2 fallback gone wrong would make one."""
    found = []
    dirs = {"/sys/fs/cgroup"}
    for ctrl, path in harness.proc_cgroups().items():
        # "" is the v2 line: the daemon's own cgroup, where the root is cgroup v2.
        dirs.add(f"/sys/fs/cgroup/{ctrl}{path}" if ctrl else f"/sys/fs/cgroup{path}")
    for d in dirs:
        if os.path.isdir(d):
            found += [os.path.join(d, e) for e in os.listdir(d) if e.startswith("kernelsup-") and
                      e.endswith(f"-{pid}")]
    return found


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (a mount namespace with read-only cgroup hierarchies)")
    if shutil.which("unshare") is None:
        tap.skip_all("unshare is not installed (util-linux)")
    target = "/sys/fs/cgroup/memory/x" if os.path.isdir("/sys/fs/cgroup/memory") else "/sys/fs/cgroup/x"  # v1 or v2
    probe = subprocess.run(["unshare", "-m", "/bin/sh", "-c", READONLY + f"\ntouch {target}\n", "sh"],
                           capture_output=True, text=True)
    if "Read-only file system" not in probe.stderr:
        tap.skip_all(f"cannot make the cgroup hierarchies read-only in a mount namespace: {probe.stderr.strip()!r}")

    d = harness.Daemon(tap, contexts="[context:boxed]\nmemory_max = 1G\ntasks_max = 64\ncpu_quota = 50%\n")
    d.launcher = ("unshare", "-m", "/bin/sh", "-c", READONLY, "sh")
    d.start()
    boxed = d.wait_state("boxed", "ready")
    lim = boxed.get("limits") or {}
    tap.eq((lim.get("mechanism"), lim.get("enforced"), sorted(lim.get("not_enforced", []))),
           ("rlimit", ["memory_max"], ["cpu_quota", "tasks_max"]),
           "read-only cgroups: memory_max as an rlimit, cpu_quota and tasks_max said not enforced", repr(lim))
    tap.eq(lim.get("note"), "no cgroup of ours could take the limits (Read-only file system)",
           "the note says no cgroup could take the limits, and why")
    with open(f"/proc/{boxed['pid']}/limits") as f:
        as_line = [ln for ln in f if ln.startswith("Max address space")]
    tap.eq(as_line and as_line[0].split()[3:5], [str(1024 * MIB), str(1024 * MIB)],
           "the kernel's RLIMIT_AS is memory_max", repr(as_line))
    tap.ok("kernelsup-" not in open(f"/proc/{boxed['pid']}/cgroup").read(), "the kernel is in no cgroup of ours")
    tap.eq(made_for(boxed["pid"]), [], "no sub-cgroup was made for the kernel, nor a directory in /sys/fs/cgroup")

    r = d.ctl("exec", "boxed", "keep = 'me'")
    tap.eq(r.returncode, 0, "a cell within the limit runs", r.stderr)
    r = d.ctl("exec", "boxed", "b = bytearray(2 * 1024 * 1024 * 1024)", timeout=60)
    tap.eq(r.returncode, 7, "a cell allocating past memory_max raises (exit 7)", r.stderr)
    tap.contains(r.stdout + r.stderr, "MemoryError", "the error is a MemoryError")
    r = d.ctl("exec", "boxed", "keep")
    tap.eq(r.stdout.split("\n")[0], "'me'", "the kernel lives on with its variables")
    now = d.context("boxed")
    tap.eq((now.get("pid"), now.get("incarnation"), now.get("last_exit")),
           (boxed["pid"], boxed["incarnation"], None), "no restart")
    d.stop()


harness.main(test)
