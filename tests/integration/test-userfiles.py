"""Files the root daemon writes where someone else chose: a published connection_file is written with the
context user's own rights and through no link in any component (the trial of issue 10: a user's link to a
root-owned directory made the daemon replace a root-owned file); a connection_file inside the daemon's own
directories is refused by the config check and by `kernelctl add`; `kernelctl add` writes only values that read
back exactly; a symlink in contexts_dir is not followed. Needs root (it creates a test user, removed at the end)."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PRECIOUS = "precious, root's\n"


def put(path, text, uid=0, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    os.chown(path, uid, uid)


def read(path):
    with open(path) as f:
        return f.read()


def owner_mode(path):
    st = os.lstat(path)
    return st.st_uid, st.st_mode & 0o7777


def files_test(tap, d, user):
    t = d.tmp
    # A root-owned tree like /srv: only root may write in it.
    os.makedirs(f"{t}/srv/rootdir/sub", mode=0o755)
    put(f"{t}/srv/rootdir/sub/k2.json", PRECIOUS)
    put(f"{t}/srv/rootdir/victim.json", PRECIOUS)
    # The user's links, made as the user in their own home.
    user.run("ln", "-s", f"{t}/srv/rootdir", f"{t}/home/p")
    user.run("ln", "-s", f"{t}/srv/rootdir/victim.json", f"{t}/home/k.json")
    user.run("mkdir", f"{t}/home/ok")
    # A sticky directory like /tmp, holding a file of root's and one of the user's.
    os.makedirs(f"{t}/sticky")
    os.chmod(f"{t}/sticky", 0o1777)
    put(f"{t}/sticky/roots.json", PRECIOUS)
    put(f"{t}/sticky/users.json", "the user's\n", uid=user.uid)

    as_user = f"user = {user.name}\n"
    d.write_config(
        f"[context:middle]\n{as_user}connection_file = {t}/home/p/sub/k2.json\n"
        f"[context:last]\n{as_user}connection_file = {t}/home/k.json\n"
        f"[context:rootdir]\n{as_user}connection_file = {t}/srv/rootdir/r.json\n"
        f"[context:mine]\n{as_user}connection_file = {t}/home/ok/k.json\n"
        f"[context:sticky-user]\n{as_user}connection_file = {t}/sticky/roots.json\n"
        f"[context:sticky-root]\nconnection_file = {t}/sticky/users.json\n",
        defaults=f"argv = {harness.STUB_ARGV}\ncwd = /\n")
    d.start()

    def fails_with(name, path, reason):
        want = f"Failed to write the connection file {path}: {reason}"
        # Ready instead would mean the file was written: the points below then say what it overwrote.
        c = d.wait_context(name, lambda c: c.get("last_error") or c.get("state") == "ready", "a last_error")
        tap.eq(c.get("last_error"), want, f"{name}: last_error names the path and the reason")
        tap.contains(d.log(), f"{name}: {want}", f"{name}: the log names the context, the path and the reason")

    # The case: a link in a middle component, to a root-owned directory.
    fails_with("middle", f"{t}/home/p/sub/k2.json",
               f"{t}/home/p is a symbolic link; no component of the path may be one")
    tap.eq(read(f"{t}/srv/rootdir/sub/k2.json"), PRECIOUS, "middle: the root-owned file is intact")
    tap.eq(owner_mode(f"{t}/srv/rootdir/sub/k2.json"), (0, 0o644), "middle: still root's, mode 0644")

    # A directory root could write to but the user cannot.
    fails_with("rootdir", f"{t}/srv/rootdir/r.json",
               f"cannot create a file in {t}/srv/rootdir as user {user.name}: Permission denied")
    tap.ok(not os.path.lexists(f"{t}/srv/rootdir/r.json"), "rootdir: nothing was written there")
    tap.eq(sorted(os.listdir(f"{t}/srv/rootdir")), ["sub", "victim.json"], "rootdir: no temporary file left")

    # Sticky directory, context with user=: the kernel's rule for the user decides (root's file stays).
    fails_with("sticky-user", f"{t}/sticky/roots.json",
               f"cannot replace {t}/sticky/roots.json as user {user.name}: Operation not permitted")
    tap.eq(read(f"{t}/sticky/roots.json"), PRECIOUS, "sticky-user: root's file in the sticky directory is intact")
    # Sticky directory, context without user=: root is held to the same rule.
    fails_with("sticky-root", f"{t}/sticky/users.json",
               f"{t}/sticky/users.json belongs to uid {user.uid} in a sticky directory, and root replaces only its "
               "own files there")
    tap.eq(read(f"{t}/sticky/users.json"), "the user's\n", "sticky-root: the user's file is intact")

    # A link as the last component is replaced by the file, never followed; the user's own directory works.
    for name, path in (("last", f"{t}/home/k.json"), ("mine", f"{t}/home/ok/k.json")):
        c = d.wait_state(name, "ready")
        tap.eq(c.get("last_error"), None, f"{name}: ready, no error")
        tap.eq(owner_mode(path), (user.uid, 0o600), f"{name}: the file is the user's, mode 0600")
        tap.eq(json.loads(read(path)).get("shell_port"), d.ports(c["connection_file"])["shell"],
               f"{name}: it holds the kernel's connection info")
    tap.eq(read(f"{t}/srv/rootdir/victim.json"), PRECIOUS, "last: the link's root-owned target is intact")
    d.stop()


def own_paths_test(tap, d):
    """kernelctl add --connection-file into the daemon's own directories: refused, nothing written or kept."""
    d.write_config("[context:a]\n", defaults=f"argv = {harness.STUB_ARGV}\n")
    d.start()
    d.wait_state("a", "ready")
    before = sorted(os.listdir(d.contexts_dir))
    for what, path in (("contexts_dir", f"{d.contexts_dir}/f1.ini"), ("state_dir", f"{d.state_dir}/x.json"),
                       ("runtime_dir", f"{d.run_dir}/kernels/a/kernel.json"),
                       ("contexts_dir, through '..'", f"{d.tmp}/elsewhere/../conf/contexts.d/f1.ini")):
        r = d.ctl("add", "f1", "--connection-file", path)
        tap.eq(r.returncode, 1, f"add --connection-file in {what}: exits 1", r.stdout + r.stderr)
        tap.contains(r.stderr, f"{d.contexts_dir}/f1.ini:3: [context:f1] connection_file = {path}: ",
                     f"add --connection-file in {what}: the error names file, line, key and value")
        tap.contains(r.stderr, "the daemon's own", f"add --connection-file in {what}: and why")
        tap.eq(sorted(os.listdir(d.contexts_dir)), before, f"add --connection-file in {what}: nothing kept")
    # Through a link (root's own) to contexts_dir, the path passes the check by its text, and the write refuses it.
    os.symlink(d.contexts_dir, os.path.join(d.tmp, "lnk"))
    r = d.ctl("add", "f2", "--connection-file", f"{d.tmp}/lnk/f2.ini")
    tap.eq(r.returncode, 0, "add --connection-file through a link to contexts_dir: added", r.stderr)
    c = d.wait_context("f2", lambda c: c.get("last_error") or c.get("state") == "ready", "a last_error")
    tap.eq(c.get("last_error"), f"Failed to write the connection file {d.tmp}/lnk/f2.ini: {d.tmp}/lnk is a symbolic "
           "link; no component of the path may be one", "through a link to contexts_dir: the write is refused")
    tap.ok(read(d.context_file("f2")).startswith("; written by kernelctl add\n"),
           "through a link to contexts_dir: f2.ini still holds what add wrote")
    tap.eq(d.ctl("remove", "f2").returncode, 0, "remove f2")
    tap.eq(d.ctl("reload").returncode, 0, "a reload afterwards succeeds")
    tap.eq(d.wait_state("a", "ready").get("last_error"), None, "context a is untouched")

    # A symlink in contexts_dir is not followed: the reload is refused and says why.
    target = os.path.join(d.tmp, "linked.ini")
    put(target, "[context:linked]\n")
    link = os.path.join(d.contexts_dir, "linked.ini")
    os.symlink(target, link)
    r = d.ctl("reload")
    tap.eq(r.returncode, 1, "reload with a symlink in contexts_dir: exits 1", r.stdout + r.stderr)
    tap.contains(r.stderr, f"{link}: is a symbolic link, which contexts_dir does not follow",
                 "reload with a symlink in contexts_dir: the error names the link")
    tap.ok("linked" not in {c["name"] for c in d.status()["contexts"]}, "the linked context was not added")
    os.unlink(link)

    # add: a value the INI format would cut or change is refused, and nothing is written.
    for what, args in (("' ;' in env", ("--env", "A=x ;user = root")), ("a trailing blank", ("--env", "A=x ")),
                       ("a line break", ("--env", "A=x\nuser = root")), ("' ;' in cwd", ("--cwd", "/tmp ;x")),
                       ("a leading blank", ("--connection-file", " /tmp/x.json"))):
        r = d.ctl("add", "v1", *args)
        tap.eq(r.returncode, 1, f"add with {what}: refused (exit 1)", r.stdout + r.stderr)
        tap.contains(r.stderr, "cannot be written to an INI file so that it reads back the same",
                     f"add with {what}: the error says why")
        tap.ok(not os.path.lexists(d.context_file("v1")), f"add with {what}: no file written")
    r = d.ctl("add", "v1", "--env", "A=" + "x" * 100000)
    tap.eq(r.returncode, 1, "add with a value of 100 kB: refused (exit 1)", r.stderr[:300])
    tap.contains(r.stderr, "is too long for one line of an INI file", "add with a value of 100 kB: the error says why")
    tap.ok(len(r.stderr) < 500, "add with a value of 100 kB: the error quotes only the start of it",
           f"{len(r.stderr)} bytes")
    tap.ok(not os.path.lexists(d.context_file("v1")), "add with a value of 100 kB: no file written")
    rep = d.rpc("add", {"context": "v1", "env": ["A=x\u0000;user = root"]})
    # The protocol's JSON parser refuses a NUL already (-32700); add would too (-32602).
    tap.ok(harness.is_rpc_error(rep, -32700) or harness.is_rpc_error(rep, -32602), "raw add with a NUL in env: refused",
           repr(rep))
    tap.ok(not os.path.lexists(d.context_file("v1")), "raw add with a NUL: no file written")

    # What add accepts reads back exactly: the kernel gets these values in its environment.
    values = {"A": "x;y #z [w] = 'q' \"r\"", "B": "é€;x", "C": " lead"}
    r = d.ctl("add", "v2", *[a for k, v in values.items() for a in ("--env", f"{k}={v}")])
    tap.eq(r.returncode, 0, "add with ';', '#', '[', quotes and UTF-8 in env values", r.stdout + r.stderr)
    c = d.wait_state("v2", "ready")
    env = harness.proc_environ(c["pid"]) or {}
    tap.eq({k: env.get(k) for k in values}, values, "the kernel's environment holds exactly the values given")
    d.stop()


def run(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root: writes as another user and creates a test user")
    d = harness.Daemon(tap)
    # The test user must reach its home and the kernels' directories below the test's directory.
    os.chmod(d.tmp, 0o755)
    try:
        user = harness.TestUser(os.path.join(d.tmp, "home"), prefix="ks-uf")
    except (OSError, subprocess.CalledProcessError) as e:
        tap.skip_all(f"cannot create a test user: {e}")
    try:
        with tap.guard("user-rights writes"):
            files_test(tap, d, user)
    finally:
        user.close()
    with tap.guard("the daemon's own paths, add values, contexts_dir links"):
        own_paths_test(tap, harness.Daemon(tap))


harness.main(run, needs_jupyter=False)
