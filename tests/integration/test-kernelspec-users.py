"""Kernelspecs that users write: a user's bad or missing spec fails only that user's context (state failed, its
last_error naming the file and what is wrong), never the configuration nor the daemon: reload and add keep
working and the daemon starts with it; --check-config warns (exit 0), while a bad spec in a root-owned place stays
an error. A user's python3 spec shadows the system one for that user's contexts only. A context run as root takes
nothing from a place a user can change, and says why such a place was not searched (K2a). `kernelctl kernels` as
a user reads with that user's rights: a root-only spec reached through the user's link is not listed (K1)."""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def write_spec(kernels_root, name, spec, owner=None, mode=0o644):
    """kernels_root/kernels/name/kernel.json, the directories above made as needed; owner: (uid, gid) of the
    spec's directory and file (the directories above are chowned by the caller)."""
    d = os.path.join(kernels_root, "kernels", name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "kernel.json")
    with open(path, "w") as f:
        f.write(spec if isinstance(spec, str) else json.dumps(spec))
    os.chmod(path, mode)
    if owner:
        os.chown(d, *owner)
        os.chown(path, *owner)
    return path


def stub_spec(**fields):
    return {"argv": [harness.STUBKERNEL, "-f", "{connection_file}"], "display_name": "Stub", **fields}


def chown_tree(top, user):
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", top], check=True)


def as_user(user):
    return ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "env", f"HOME={user.home}"]


def contexts(stub, user):
    return (f"[context:other]\nargv = {stub} -f {{kernel_file}}\n\n"
            f"[context:rootpy]\nkernel = python3\nargv = {stub} -f {{kernel_file}}\n\n"
            f"[context:mine]\nuser = {user.name}\nkernel = mine\n\n"
            f"[context:upy]\nuser = {user.name}\nkernel = python3\nargv = {stub} -f {{kernel_file}}\n")


def check_config(d):
    return subprocess.run([harness.KERNELSUPD, "--check-config", "--config", d.config], capture_output=True,
                          text=True, env=d.env(), timeout=harness.scaled(60))


def test_user_specs(tap, d, user, jp):
    """Item 1 of issue 24: what a user's own spec can do."""
    share = os.path.join(user.home, ".local", "share", "jupyter")
    mine = write_spec(share, "mine", stub_spec(language="minelang"))
    upy = write_spec(share, "python3", stub_spec(language="shadowlang"))
    chown_tree(os.path.join(user.home, ".local"), user)
    d.write_config(contexts(harness.STUBKERNEL, user))
    d.start()
    d.wait_all_ready(["other", "rootpy", "mine", "upy"])
    st = {c["name"]: c for c in d.status()["contexts"]}
    tap.eq((st["upy"].get("language"), st["mine"].get("language")), ("shadowlang", "minelang"),
           "the user's python3 spec shadows the system one for her context, and her own spec is used")
    tap.ok(st["rootpy"].get("language") != "shadowlang", "a root context's python3 is not the user's",
           repr(st["rootpy"]))
    other_pid = st["other"]["pid"]

    # 1. Her spec becomes malformed: reload works, her context alone fails with the file and the reason.
    user.run("sh", "-c", f"echo '{{not json' > {mine}")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload succeeds with a user's malformed kernel.json", r.stderr)
    c = d.wait_state("mine", "failed")
    tap.ok(mine in (c.get("last_error") or "") and "not JSON" in (c.get("last_error") or ""),
           "her context is failed, last_error naming the file and what is wrong", repr(c.get("last_error")))
    tap.ok("kernel = mine" in (c.get("last_error") or "") and d.config in (c.get("last_error") or ""),
           "... and the context's file, line and key", repr(c.get("last_error")))
    tap.eq((d.context("other")["state"], d.context("other")["pid"]), ("ready", other_pid),
           "another context keeps running, untouched")
    r = d.ctl("add", "added", "--kernel", "rootstub", "--wait", timeout=90)
    tap.eq(r.returncode, 0, "kernelctl add works meanwhile", r.stdout + r.stderr)
    r = check_config(d)
    tap.eq(r.returncode, 0, "--check-config exits 0 with a user's bad spec", r.stdout + r.stderr)
    tap.ok("warning" in r.stderr and mine in r.stderr, "--check-config warns about it, naming the file", r.stderr)

    # 2. Her python3 spec becomes malformed: only her python3 context fails; root's python3 context stays.
    rootpy_pid = d.context("rootpy")["pid"]
    user.run("sh", "-c", f"echo '{{not json' > {upy}")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload succeeds with a user's malformed python3 spec", r.stderr)
    c = d.wait_state("upy", "failed")
    tap.ok(upy in (c.get("last_error") or ""), "her python3 context is failed, naming her file",
           repr(c.get("last_error")))
    tap.eq((d.context("rootpy")["state"], d.context("rootpy")["pid"]), ("ready", rootpy_pid),
           "the root context of kernel = python3 is not affected")

    # 3. The daemon starts with those specs in place; the next start has them failed again, the rest ready.
    d.stop()
    d.start()
    d.wait_all_ready(["other", "rootpy", "added"])
    tap.eq((d.context("mine")["state"], d.context("upy")["state"]), ("failed", "failed"),
           "after a restart of the daemon her two contexts are failed, the others ready")

    # 4. A spec she deletes: the same (no kernelspec of that name), the configuration still loads.
    os.unlink(mine)
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload succeeds when a user deleted her spec", r.stderr)
    c = d.wait_state("mine", "failed")
    tap.contains(c.get("last_error") or "", "no kernelspec of that name", "... her context says there is none")

    # 5. She repairs it: the next reload starts her context.
    user.run("sh", "-c", f"echo '{json.dumps(stub_spec(language='fixed'))}' > {mine}")
    r = d.ctl("reload")
    tap.eq(r.returncode, 0, "reload with the repaired spec", r.stderr)
    c = d.wait_state("mine", "ready")
    tap.eq(c.get("language"), "fixed", "her context runs her repaired spec")

    # 6. A bad spec in a root-owned place, for a user's context: still an error of the configuration.
    write_spec(jp, "rootbad", "{not json")
    d.write_context_file("rb", f"[context:rb]\nuser = {user.name}\nkernel = rootbad\n")
    r = check_config(d)
    tap.eq(r.returncode, 1, "--check-config exits 1 for a bad spec in a root-owned place", r.stdout + r.stderr)
    tap.contains(r.stderr, "rootbad/kernel.json: not JSON", "... naming the file")
    r = d.ctl("reload")
    with open(d.context_file("rb")) as f:
        line = next(i for i, l in enumerate(f, 1) if l.startswith("kernel ="))
    tap.ok(r.returncode != 0 and f"{d.context_file('rb')}:{line}: [context:rb] kernel = rootbad: " in r.stderr,
           "reload refuses it, naming file:line and key", r.stderr)
    d.remove_context_file("rb")


def test_root_context(tap, d, user):
    """A root context never takes a spec from a place a user can change, and says why it skipped it (K2a)."""
    evil = os.path.join(user.home, "evil")
    write_spec(evil, "evil", stub_spec())
    chown_tree(evil, user)
    d.write_context_file("rootevil", f"[context:rootevil]\nenv = JUPYTER_PATH={evil}\nkernel = evil\n")
    r = d.ctl("reload")
    tap.ok(r.returncode != 0 and "no kernelspec of that name" in r.stderr, "a root context does not take a spec "
           "from a user's directory in JUPYTER_PATH", r.stderr)
    tap.ok(f"not searched: {evil}/kernels: lies where a user other than root can change it" in r.stderr,
           "... and says which directory was not searched, and why", r.stderr)
    # Root's own files below a directory the user owns: she could swap them for others, so they do not count.
    below = os.path.join(user.home, "below")
    os.makedirs(below)
    os.chown(below, user.uid, user.gid)
    write_spec(below, "rootfiles", stub_spec())
    d.write_context_file("rootevil", f"[context:rootevil]\nenv = JUPYTER_PATH={below}\nkernel = rootfiles\n")
    r = d.ctl("reload")
    tap.ok(r.returncode != 0 and f"not searched: {below}/kernels: lies where a user other than root can change it"
           in r.stderr, "a root context does not take root's spec from below a user's directory", r.stderr)
    d.remove_context_file("rootevil")
    tap.eq(d.ctl("reload").returncode, 0, "reload without it")


def test_listing_link(tap, d):
    """K1: a user links ~/.local/share into a root-only directory; the listing as that user does not show it."""
    user = harness.TestUser(os.path.join(d.tmp, "home-k1"), prefix="ks-k1")
    try:
        priv = os.path.join(d.tmp, "rootpriv")
        secret = stub_spec()
        secret["argv"].append("--token=ROOT-SECRET-TOKEN-1234")
        write_spec(os.path.join(priv, "share", "jupyter"), "rootsecret", secret)
        os.chmod(priv, 0o700)
        os.makedirs(os.path.join(user.home, ".local"))
        chown_tree(os.path.join(user.home, ".local"), user)
        user.run("ln", "-s", os.path.join(priv, "share"), os.path.join(user.home, ".local", "share"))
        os.chmod(d.socket, 0o666)
        try:
            r = d.ctl("kernels", "--json", prefix=as_user(user))
        finally:
            os.chmod(d.socket, 0o660)
        tap.eq(r.returncode, 0, "kernels as the user answers", r.stderr)
        tap.ok("rootsecret" not in r.stdout and "ROOT-SECRET" not in r.stdout,
               "the listing as the user does not show a root-only spec reached through the user's link", r.stdout)
        # The same spec through the same link, for a context of that user: not used either.
        d.write_context_file("k1", f"[context:k1]\nuser = {user.name}\nkernel = rootsecret\n")
        r = d.ctl("reload")
        tap.eq(r.returncode, 0, "reload with a user context naming the root-only spec", r.stderr)
        c = d.wait_state("k1", "failed")
        tap.contains(c.get("last_error") or "", "no kernelspec of that name",
                     "her context does not get the root-only spec through her link")
        d.remove_context_file("k1")
        d.ctl("reload")
    finally:
        user.close()


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (a test user owns the specs)")
    if not os.access(harness.STUBKERNEL, os.X_OK):
        tap.skip_all(f"{harness.STUBKERNEL} is not built (make tests/stubkernel)")
    d = harness.Daemon(tap)
    os.chmod(d.tmp, 0o755)
    jp = os.path.join(d.tmp, "jupyter")
    write_spec(jp, "rootstub", stub_spec(language="rootlang"))
    os.environ["JUPYTER_PATH"] = jp
    user = harness.TestUser(os.path.join(d.tmp, "home"))
    try:
        test_user_specs(tap, d, user, jp)
        test_root_context(tap, d, user)
        for p in (d.run_dir,):
            os.chmod(p, 0o755)
        test_listing_link(tap, d)
        d.stop()
    finally:
        user.close()
        shutil.rmtree(user.home, ignore_errors=True)
    d.check_log()


harness.main(test, needs_jupyter=False)
