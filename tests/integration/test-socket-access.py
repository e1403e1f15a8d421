"""Who may connect to the control socket: [supervisor] socket_mode (default 0666), socket_user and socket_group.

With the default mode a non-root uid runs kernelctl and sees only its own contexts; socket_mode = 0600 refuses it
(kernelctl says "permission denied", exit 4); socket_group gives the socket to a group whose members get in while
others do not; the mode, owner and group on disk are the ones configured; a bad value fails the load naming
file:line and the value; --check-config shows the socket's access.

Needs root: it creates two test users (removed at the end) to be the other uids. No kernel is started.
"""

import os
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CONTEXTS = "[context:mine]\nuser = {user}\nautostart = no\n[context:roots]\nautostart = no\n"


def as_user(u):
    return ["setpriv", f"--reuid={u.uid}", f"--regid={u.gid}", "--clear-groups"]


def daemon(tap, member, supervisor=""):
    d = harness.Daemon(tap, contexts=CONTEXTS.format(user=member.name), supervisor=supervisor)
    d.start()
    # Let the test users reach the socket file, so that its own mode alone decides.
    for p in (d.tmp, d.run_dir):
        os.chmod(p, 0o755)
    return d


def names_seen(d, prefix=()):
    r = d.ctl("status", "--json", prefix=prefix)
    d.last_ctl = r
    try:
        j = harness.json.loads(r.stdout)
    except ValueError:
        return r.returncode, None
    return r.returncode, sorted(c.get("name") for c in j.get("contexts", []))


def trial_default(tap, member, other):
    d = daemon(tap, member)
    st = os.lstat(d.socket)
    tap.eq((stat.S_IMODE(st.st_mode), st.st_uid), (0o666, 0), "default: the socket is mode 0666, owned by root")
    rc, seen = names_seen(d, as_user(member))
    # Both contexts are stopped, so status exits 1 whoever asks; what matters is what it lists.
    tap.eq((rc, seen), (1, ["mine"]), "default: a non-root uid runs kernelctl status and sees only its own context",
           repr(d.last_ctl))
    rc, seen = names_seen(d, as_user(other))
    tap.eq(seen, [], "default: a uid with no context sees none", repr(d.last_ctl))
    rc, seen = names_seen(d)
    tap.eq(seen, ["mine", "roots"], "default: root sees both contexts", repr(d.last_ctl))
    r = d.ctl("status", "roots", prefix=as_user(member))
    tap.eq(r.returncode, 5, "default: root's context is no such context to that uid", r.stderr)
    d.stop()


def trial_private(tap, member):
    d = daemon(tap, member, "socket_mode = 0600\n")
    st = os.lstat(d.socket)
    tap.eq(stat.S_IMODE(st.st_mode), 0o600, "socket_mode = 0600: the socket on disk is 0600")
    r = d.ctl("status", prefix=as_user(member))
    tap.eq((r.returncode, r.stderr.strip()), (4, f"kernelctl: permission denied on {d.socket}."),
           "socket_mode = 0600: the context's own uid is refused, kernelctl says permission denied (exit 4)")
    rc, seen = names_seen(d)
    tap.eq(seen, ["mine", "roots"], "socket_mode = 0600: root still gets in", repr(d.last_ctl))
    d.stop()


def trial_group(tap, member, other):
    d = daemon(tap, member, f"socket_mode = 0660\nsocket_user = {other.name}\nsocket_group = {member.name}\n")
    st = os.lstat(d.socket)
    tap.eq((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid), (0o660, other.uid, member.gid),
           "socket_user and socket_group: the socket is 0660, owned by that user and that group")
    rc, seen = names_seen(d, as_user(member))
    tap.eq(seen, ["mine"], "socket_group: a member of the group gets in (and sees its own context)",
           repr(d.last_ctl))
    rc, seen = names_seen(d, as_user(other))
    tap.eq(seen, [], "socket_user: the socket's owner gets in (and sees no context of its own)", repr(d.last_ctl))
    d.stop()
    d = daemon(tap, member, f"socket_mode = 0660\nsocket_group = {member.name}\n")
    r = d.ctl("status", prefix=as_user(other))
    tap.eq(r.returncode, 4, "socket_group: a uid outside the group is refused (exit 4)", r.stderr)
    d.stop()


def check_config(d):
    return subprocess.run([harness.KERNELSUPD, "--check-config", "--config", d.config], capture_output=True,
                          text=True, timeout=harness.scaled(30))


def trial_bad_values(tap, member):
    for line, why in (("socket_mode = 0888", "expected an octal mode such as 0666 (digits 0-7)"),
                      ("socket_mode = 1777", "only the permission bits (at most 0777)"),
                      ("socket_user = ks-nosuch-user", "no such user"),
                      ("socket_group = ks-nosuch-group", "no such group")):
        d = harness.Daemon(tap, contexts=CONTEXTS.format(user=member.name), supervisor=line + "\n")
        key, _, value = line.partition(" = ")
        want = f"{d.config}:{d.config_line(line)}: [supervisor] {key} = {value}: {why}"
        r = check_config(d)
        tap.ok(r.returncode == 1 and want in r.stderr, f"{line}: --check-config fails naming file:line and value",
               f"{r.returncode} {r.stderr!r}")
        d.spawn()
        rc = d.proc.wait(timeout=harness.scaled(30))
        d.exit_expected = True
        with open(d.log_path) as f:
            log = f.read()
        tap.ok(rc == 1 and want in log, f"{line}: the daemon refuses to start, saying so", f"{rc} {log[-400:]!r}")


def trial_check_config(tap, member):
    d = harness.Daemon(tap, contexts=CONTEXTS.format(user=member.name),
                       supervisor=f"socket_mode = 0640\nsocket_group = {member.name}\n")
    r = check_config(d)
    tap.ok(r.returncode == 0 and f"control socket {d.socket}: mode 0640, owner (the daemon's), group {member.name}"
           in r.stdout, "--check-config shows the socket's mode, owner and group", f"{r.stdout!r} {r.stderr!r}")
    d = harness.Daemon(tap, contexts=CONTEXTS.format(user=member.name))
    r = check_config(d)
    tap.ok(r.returncode == 0 and f"control socket {d.socket}: mode 0666, owner (the daemon's), group (the daemon's)"
           in r.stdout, "--check-config shows the default mode 0666", f"{r.stdout!r} {r.stderr!r}")


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: creates test users to be the other uids and binds root's socket")
    for tool in ("useradd", "userdel", "setpriv"):
        if not shutil.which(tool):
            tap.skip_all(f"no {tool}")
    base = harness.tempfile.mkdtemp(prefix="ks-sa-")
    os.chmod(base, 0o755)
    member = harness.TestUser(os.path.join(base, "a"), prefix="ks-sa")
    try:
        other = harness.TestUser(os.path.join(base, "b"), prefix="ks-sb")
        try:
            probe = subprocess.run(as_user(member) + ["test", "-x", harness.KERNELCTL], capture_output=True)
            if probe.returncode != 0:
                tap.skip_all(f"the test users cannot execute {harness.KERNELCTL}")
            with tap.guard("default mode"):
                trial_default(tap, member, other)
            with tap.guard("socket_mode = 0600"):
                trial_private(tap, member)
            with tap.guard("socket_user and socket_group"):
                trial_group(tap, member, other)
            with tap.guard("bad values"):
                trial_bad_values(tap, member)
            with tap.guard("--check-config"):
                trial_check_config(tap, member)
        finally:
            other.close()
    finally:
        member.close()
        shutil.rmtree(base, ignore_errors=True)


harness.main(test)
