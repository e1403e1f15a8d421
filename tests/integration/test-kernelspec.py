"""kernel = NAME with the stub kernel's kernelspecs: the spec's argv, env, language and interrupt_mode reach the
kernel and the status; `kernelctl kernels` lists what is installed; a REP heartbeat stays answered; an interrupt
by message; a cell the kernel aborts is [aborted], exit 10, with its message; and the kernelspecs the daemon
refuses (missing, a link, huge, malformed, another user's) are errors naming file:line, key and value."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def write_spec(root, name, spec, mode=0o644):
    d = os.path.join(root, "kernels", name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "kernel.json")
    with open(path, "w") as f:
        f.write(spec if isinstance(spec, str) else json.dumps(spec))
    os.chmod(path, mode)
    return path


def stub_spec(*extra, **fields):
    return {"argv": [harness.STUBKERNEL, *extra, "-f", "{connection_file}"], "display_name": "Stub", **fields}


CONTEXTS = (
    "[context:stub]\nkernel = stub\nenv = FROM_CONTEXT=yes\n\n"
    "[context:rep]\nkernel = Rep\n\n"
    "[context:own]\nkernel = stub\nargv = {stub} -f {{kernel_file}}\n\n"
    "[context:plain]\nargv = {stub} -f {{kernel_file}}\n"
)


def test(tap):
    if not os.access(harness.STUBKERNEL, os.X_OK):
        tap.skip_all(f"{harness.STUBKERNEL} is not built (make tests/stubkernel)")
    d = harness.Daemon(tap, contexts=CONTEXTS.format(stub=harness.STUBKERNEL),
                       defaults="heartbeat_interval = 200ms\nheartbeat_misses = 2\n")
    jp = os.path.join(d.tmp, "jupyter")
    write_spec(jp, "stub", stub_spec(language="stublang", interrupt_mode="message",
                                      env={"FROM_SPEC": "spec", "FROM_CONTEXT": "spec"}))
    write_spec(jp, "rep", stub_spec("--rep-heartbeat", language="replang"))
    os.chmod(d.tmp, 0o755)
    # The daemon's own JUPYTER_PATH: kernelctl kernels looks there; the contexts inherit it.
    os.environ["JUPYTER_PATH"] = jp
    d.start()
    d.wait_all_ready(["stub", "rep", "own", "plain"])

    # The status: kernel, language and interrupt_mode per context.
    want = {"stub": ("stub", "stublang", "message"), "rep": ("rep", "replang", "signal"),
            "own": ("stub", "stublang", "message"), "plain": (None, None, "signal")}
    st = {c["name"]: c for c in d.status()["contexts"]}
    for name, (kernel, language, mode) in want.items():
        c = st.get(name, {})
        tap.eq((c.get("kernel"), c.get("language"), c.get("interrupt_mode")), (kernel, language, mode),
               f"status {name}: kernel, language, interrupt_mode")
    r = d.ctl("status")
    lines = r.stdout.splitlines()
    header = lines[0].split() if lines else []
    rows = {l.split()[0]: l.split() for l in lines[1:] if l.split()}
    if "KERNEL" in header and "LANGUAGE" in header:
        k, lang = header.index("KERNEL"), header.index("LANGUAGE")
        tap.eq([rows.get(n, [])[k:lang + 1] for n in ("stub", "rep", "plain")],
               [["stub", "stublang"], ["rep", "replang"], ["-", "-"]],
               "the status table shows KERNEL and LANGUAGE (- for argv alone)", r.stdout)
    else:
        tap.ok(False, "the status table has KERNEL and LANGUAGE columns", r.stdout)

    # The spec's env under the context's own; argv beside kernel = is the context's.
    env = harness.proc_environ(st["stub"]["pid"])
    tap.eq((env.get("FROM_SPEC"), env.get("FROM_CONTEXT")), ("spec", "yes"),
           "the kernel has the spec's env, the context's variables over it")
    tap.ok("--rep-heartbeat" in harness.proc_cmdline(st["rep"]["pid"]), "rep runs the spec's argv",
           repr(harness.proc_cmdline(st["rep"]["pid"])))
    tap.ok("--rep-heartbeat" not in harness.proc_cmdline(st["own"]["pid"]) and
           "FROM_SPEC" in harness.proc_environ(st["own"]["pid"]),
           "argv beside kernel = overrides the spec's argv and keeps its env")

    # A REP heartbeat answers pings that carry the REQ delimiter: ready for 10 beats and more.
    mark = d.log_mark()
    hb_base = d.context("rep")
    harness.poll_until(lambda: d.context("rep")["state"], 3, "rep to leave ready", check=lambda s: s != "ready")
    c = d.context("rep")
    tap.eq(c["state"], "ready", "a kernel with a REP heartbeat stays ready over 15 beats")
    tap.ok("missed" not in d.log_since(mark), "no missed heartbeat logged for it", d.log_since(mark)[-2000:])
    tap.eq(c["pid"], hb_base["pid"], "... and was not restarted")

    # kernelctl kernels.
    rc, j = d.ctl_json("kernels")
    tap.eq(rc, 0, "kernelctl kernels --json exits 0")
    specs = {k["name"]: k for k in (j or {}).get("kernels", [])}
    tap.ok({"stub", "rep"} <= set(specs), "kernels lists the specs of JUPYTER_PATH", repr(sorted(specs)))
    tap.eq((j or {}).get("dirs", [None])[0], os.path.join(jp, "kernels"), "kernels: JUPYTER_PATH is searched first")
    s = specs.get("stub", {})
    tap.eq((s.get("language"), s.get("interrupt_mode"), s.get("display_name"), s.get("path")),
           ("stublang", "message", "Stub", os.path.join(jp, "kernels", "stub", "kernel.json")),
           "kernels: language, interrupt_mode, display name and path")
    tap.eq(s.get("argv", [None])[-1], "{kernel_file}", "kernels: argv with {connection_file} as {kernel_file}")
    r = d.ctl("kernels")
    tap.eq(r.returncode, 0, "kernelctl kernels exits 0")
    lines = r.stdout.splitlines()
    tap.eq(lines[0].split()[:4] if lines else None, ["NAME", "LANGUAGE", "INTERRUPT", "PATH"],
           "kernelctl kernels prints a table", r.stdout)
    tap.ok(any(l.split()[:3] == ["stub", "stublang", "message"] for l in lines), "its row for stub", r.stdout)

    # interrupt_mode = message: an interrupt_request on control ends the cell (the stub ignores SIGINT).
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", "stub", "hang"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    d.wait_context("stub", lambda c: c["state"] == "busy", "the hanging cell to run", timeout=10)
    r = d.ctl("interrupt", "stub")
    tap.eq(r.stdout.strip(), "interrupted", "kernelctl interrupt stub: interrupted", r.stderr)
    out, err = p.communicate(timeout=harness.scaled(10))
    tap.eq(p.returncode, 7, "the hanging cell ends as an error (exit 7): the interrupt came by message",
           f"{out!r} {err!r}")
    tap.contains(out + err, "KeyboardInterrupt", "its KeyboardInterrupt is shown")
    d.wait_state("stub", "ready")

    # A cell the kernel answers "abort" (tslab's word) is [aborted], exit 10, with the daemon's message.
    r = d.ctl("exec", "stub", "abort")
    tap.eq(r.returncode, 10, "a cell the kernel aborted exits 10", f"{r.stdout!r} {r.stderr!r}")
    tap.eq(r.stdout.strip().splitlines()[-1:], ["[aborted]"], "... and shows [aborted]", r.stdout)
    tap.contains(r.stderr, "the kernel aborted the cell without running it", "... with its message on stderr")
    rc, j = d.ctl_json("exec", "stub", "abort")
    tap.eq((rc, (j or {}).get("status")), (10, "kernel_aborted"), "--json: status kernel_aborted, exit 10")
    tap.ok("aborted the cell" in ((j or {}).get("message") or ""), "--json: with its message", repr(j))
    r = d.ctl("exec", "stub", "1")
    tap.eq(r.returncode, 0, "the next cell runs")

    # What the daemon refuses, each at reload with file:line, key and value; the old config stays.
    def refused(spec_text, name, want, mode=0o644, setup=None):
        if spec_text is not None:
            write_spec(jp, name, spec_text, mode)
        if setup:
            setup()
        d.write_context_file("bad", f"[context:bad]\nkernel = {name}\n")
        r = d.ctl("reload")
        line = f"{d.context_file('bad')}:2: [context:bad] kernel = {name}: "
        tap.ok(r.returncode != 0 and line in r.stderr and want in r.stderr, f"reload refuses kernel = {name}: {want}",
               r.stderr)
        d.remove_context_file("bad")

    refused(None, "nosuch", f"no kernelspec of that name in {jp}/kernels, ")
    os.makedirs(os.path.join(d.tmp, "elsewhere"), exist_ok=True)

    def link_spec():
        target = write_spec(os.path.join(d.tmp, "elsewhere"), "x", stub_spec())
        os.makedirs(os.path.join(jp, "kernels", "linked"), exist_ok=True)
        os.symlink(target, os.path.join(jp, "kernels", "linked", "kernel.json"))
    refused(None, "linked", "linked/kernel.json: is a symbolic link", setup=link_spec)
    refused('{"argv": ["/bin/true"], "display_name": "' + "x" * (70 * 1024) + '"}', "huge",
            "huge/kernel.json: is larger than 64 KiB")
    refused('{"argv": ', "broken", "broken/kernel.json: not JSON")
    refused('{"argv": "/bin/true"}', "notarray", "argv: expected a non-empty array of strings")
    refused(json.dumps(stub_spec(interrupt_mode="sometimes")), "badmode", "interrupt_mode sometimes")
    refused(json.dumps(stub_spec()), "groupw", "groupw/kernel.json: is writable by group or others", mode=0o664)

    user = harness.TestUser(os.path.join(d.tmp, "home"))
    try:
        def other_owner():
            os.chown(os.path.join(jp, "kernels", "others", "kernel.json"), user.uid, user.gid)
        refused(json.dumps(stub_spec()), "others", "others/kernel.json: is owned by another user", setup=other_owner)

        # The user's own spec in their home is theirs to use, and kernels lists it for them alone.
        home_spec = write_spec(os.path.join(user.home, ".local", "share", "jupyter"), "mine",
                               stub_spec(language="minelang"))
        for sub in ("", ".local", ".local/share", ".local/share/jupyter", ".local/share/jupyter/kernels",
                    ".local/share/jupyter/kernels/mine"):
            os.chown(os.path.join(user.home, sub), user.uid, user.gid)
        os.chown(home_spec, user.uid, user.gid)
        d.write_context_file("mine", f"[context:mine]\nuser = {user.name}\nkernel = mine\n")
        r = d.ctl("reload")
        tap.eq(r.returncode, 0, "a context of the user's own kernelspec in their home loads", r.stderr)
        c = d.wait_state("mine", "ready")
        tap.eq((c.get("kernel"), c.get("language")), ("mine", "minelang"), "it runs with the user's spec")
        rc, j = d.ctl_json("kernels")
        tap.ok("mine" not in {k["name"] for k in (j or {}).get("kernels", [])},
               "kernels for root does not list another user's home spec")
        for p in (d.tmp, d.run_dir):
            os.chmod(p, 0o755)
        os.chmod(d.socket, 0o666)
        try:
            r = d.ctl("kernels", "--json", prefix=["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}",
                                                   "--clear-groups"])
        finally:
            os.chmod(d.socket, 0o660)
        try:
            listed = {k["name"] for k in json.loads(r.stdout).get("kernels", [])}
        except ValueError:
            listed = set()
        tap.ok("mine" in listed, "kernels as the user lists their own spec", repr(listed))
        d.remove_context_file("mine")
        d.ctl("reload")
    finally:
        d.stop()
        user.close()
    d.check_log()


harness.main(test)
