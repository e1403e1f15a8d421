"""What the integration tests read of processes in /proc, and whether a port is free
(re-exported by harness.py)."""

import os
import socket


def cgroup_paths(text):
    """{controller: path} from the text of /proc/PID/cgroup: each v1 controller ("memory", "cpu",
    "name=systemd", ...) and "" for the cgroup v2 line ("0::PATH")."""
    paths = {}
    for line in text.splitlines():
        if line.count(":") >= 2:
            _, ctrls, path = line.split(":", 2)
            paths.update({c: path for c in ctrls.split(",")})
    return paths


def proc_cgroups(pid="self"):
    """cgroup_paths() of a process."""
    with open(f"/proc/{pid}/cgroup") as f:
        return cgroup_paths(f.read())


def proc_stat(pid):
    """(state, ppid, pgid, sid, starttime) of pid, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def proc_status_kib(pid, key):
    """A "KEY: N kB" field of /proc/PID/status (VmRSS, VmHWM) in KiB; ValueError when it has none."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise ValueError(f"no {key} in /proc/{pid}/status")


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return None


def proc_environ(pid):
    """The environment of pid as a dict, or None when unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    env = {}
    for item in data.split(b"\0"):
        k, sep, v = item.decode(errors="replace").partition("=")
        if sep:
            env[k] = v
    return env


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def alive(pid):
    """True when pid exists and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def describe(pid):
    st = proc_stat(pid)
    if st is None:
        return f"pid {pid} (gone)"
    cmd = " ".join(proc_cmdline(pid) or [])
    return f"pid {pid} state {st[0]} ppid {st[1]} pgid {st[2]}: {cmd[:200]}"


def group_members(pgid):
    """Processes (zombies included) whose process group is pgid."""
    return [p for p in all_pids() if (st := proc_stat(p)) is not None and st[2] == pgid]


def boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def port_free(port, ip="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True
