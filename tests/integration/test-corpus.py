"""The corpus of real cells (tests/corpus/cases.json) through every way a cell arrives: `kernelctl exec` text,
`exec --json`, `exec --stream`, an outside jupyter_client (BlockingKernelClient on the published connection
file), kernelsup-http's POST /v1/contexts/CTX/execute as Server-Sent Events, and its E2B route, POST /execute
with context_id, as E2B's SDK calls it (JSON lines). One TAP point per case per path, "corpus CASE via PATH"; tests/corpus/README.md says what each field of a
case means. Each path has a context of its own, so a case that leaves one busy or dead does not touch the others.

A case that needs a fix from another branch ("needs") is a TODO point until that branch is merged (then an
unexpected pass fails the run: drop the "needs" field). Heavy cases ("heavy") run in the normal build only and skip
in the sanitizer build and under make distcheck, saying so. KS_CORPUS=NAME,... runs only those cases."""

import base64
import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import harness_http  # noqa: E402

CASES = os.path.join(harness.SRCDIR, "tests", "corpus", "cases.json")
PATHS = ("text", "json", "stream", "jupyter", "http", "e2b")
# A path that gives what another gives (the daemon's outputs as they come) takes that one's overrides (paths.PATH),
# unless a case names the path itself.
ALIAS = {"http": "stream"}
# The paths with no exit code of kernelctl's.
NO_EXIT = ("jupyter", "http", "e2b")
# E2B's members of a result, by MIME type (doc/e2b-protocol.md, section 4).
E2B_MIME = {"text": "text/plain", "html": "text/html", "markdown": "text/markdown", "svg": "image/svg+xml",
            "png": "image/png", "jpeg": "image/jpeg", "pdf": "application/pdf", "latex": "text/latex",
            "json": "application/json", "javascript": "application/javascript"}
# The status a cell's last error of E2B's kind stands for (kernelsup-http(8)).
E2B_STATUS = {"ExecutionTimeout": "timeout", "ContextRestarting": "died", "ExecutionAborted": "aborted"}
EXIT = {"ok": 0, "error": 7, "timeout": 6, "aborted": 10, "died": 1}
SUMMARY = re.compile(r"^\[(ok|error|timeout|died|aborted|not started)\b.*\]$")
SELECTED = [n for n in os.environ.get("KS_CORPUS", "").replace(",", " ").split() if n]
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def load_cases():
    with open(CASES, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise harness.HarnessError(f"{CASES}: case names repeat: {sorted(dup)}")
    return cases


def code_of(cell):
    code = cell["code"]
    return "\n".join(code) if isinstance(code, list) else code


def expectation(case, path):
    """The case's fields with its paths.PATH overrides applied (a null override removes the field)."""
    e = {k: v for k, v in case.items() if k not in ("paths", "then")}
    paths = case.get("paths") or {}
    if path not in paths and ALIAS.get(path) in paths:
        path = ALIAS[path]
    for k, v in paths.get(path, {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


# ---------------------------------------------------------------------------
# What a path gave, in one shape: {"status", "exit", "stdout", "stderr", "outputs", "message", "kernel_id"}.
# stdout/stderr are what a reader sees: the streams, plus text/plain of results and displays on stdout and
# "ename: evalue" of an error on stderr, in the order they came.


def render(outputs):
    out, err = [], []
    for o in outputs:
        t = o.get("output_type") or o.get("msg_type")
        if t == "stream":
            (out if o.get("name") == "stdout" else err).append(o.get("text", ""))
        elif t in ("execute_result", "display_data", "update_display_data"):
            text = (o.get("data") or {}).get("text/plain")
            if text is not None:
                out.append(text + "\n")
        elif t == "error":
            err.append(f"{o.get('ename')}: {o.get('evalue')}\n")
    return "".join(out), "".join(err)


def via_text(d, ctx, code, timeout_args):
    r = d.ctl("exec", ctx, "-", *timeout_args, input=code, timeout=300, errors="surrogateescape")
    lines = r.stdout.split("\n")
    last = lines[-2] if len(lines) >= 2 and lines[-1] == "" else lines[-1]
    m = SUMMARY.match(last)
    stdout = r.stdout[: len(r.stdout) - len(last) - 1] if m else r.stdout
    return {"status": m.group(1) if m else None, "exit": r.returncode, "stdout": stdout, "stderr": r.stderr,
            "outputs": None, "message": r.stderr, "raw": r.stdout[-300:] + r.stderr[-300:]}


def note_of(result):
    """What kernelctl says about the cell in --json and --stream: its message and its exit field (kernelctl(1))."""
    return " ".join(v for v in (result.get("message"), result.get("exit")) if isinstance(v, str))


def via_json(d, ctx, code, timeout_args):
    r = d.ctl("exec", ctx, "-", "--json", *timeout_args, input=code, timeout=300, errors="surrogateescape")
    try:
        j = json.loads(r.stdout)
    except ValueError:
        j = {}
    outs = j.get("outputs") or []
    stdout, stderr = render(outs)
    return {"status": j.get("status"), "exit": r.returncode, "stdout": stdout, "stderr": stderr, "outputs": outs,
            "message": note_of(j), "raw": r.stdout[-300:] + r.stderr[-300:]}


def via_stream(d, ctx, code, timeout_args):
    r = d.ctl("exec", ctx, "-", "--stream", *timeout_args, input=code, timeout=300, errors="surrogateescape")
    lines = []
    for line in r.stdout.splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(line))
    final = lines[-1] if lines and "status" in lines[-1] else {}
    outs = lines[:-1] if final else lines
    stdout, stderr = render(outs)
    return {"status": final.get("status"), "exit": r.returncode, "stdout": stdout, "stderr": stderr,
            "outputs": outs, "message": note_of(final), "raw": r.stdout[-300:] + r.stderr[-300:]}


class ViaHttp:
    """kernelsup-http's execute, answered as Server-Sent Events: the outputs as they come, then the end."""

    def __init__(self, front):
        self.front = front

    def __call__(self, d, ctx, code, timeout_args):
        body = {"code": code}
        if timeout_args:
            body["timeout"] = float(timeout_args[1])
        r = self.front.request("POST", f"/v1/contexts/{ctx}/execute", body=body,
                               headers={"Accept": "text/event-stream"}, timeout=300)
        if r.status != 200:
            raise harness.HarnessError(f"POST /v1/contexts/{ctx}/execute: {r!r}")
        events = harness_http.sse_events(r.body.decode("utf-8", "surrogateescape"))
        outs = [e["data"] for e in events if e["event"] == "output"]
        end = next((e["data"] for e in events if e["event"] == "end"), {})
        stdout, stderr = render(outs)
        return {"status": end.get("status"), "exit": None, "stdout": stdout, "stderr": stderr, "outputs": outs,
                "message": note_of(end), "raw": r.body[-600:].decode("utf-8", "replace")}


class ViaE2b:
    """kernelsup-http's E2B route, POST /execute with context_id: its lines brought back to nbformat outputs (a result's
    members to a MIME bundle, text/plain as E2B strips it); the status from the last error line."""

    def __init__(self, front):
        self.front = front

    def __call__(self, d, ctx, code, timeout_args):
        body = {"code": code, "context_id": ctx}
        if timeout_args:
            body["timeout"] = float(timeout_args[1])  # kernelsup's own member: E2B's SDK sends none
        r = self.front.request("POST", "/execute", body=body, timeout=300)
        if r.status != 200:
            raise harness.HarnessError(f"POST /execute: {r!r}")
        text = r.body.decode("ascii")  # ASCII-only JSON: a byte that is not fails here
        outs, last_error, ended = [], None, False
        for line in text.split("\n"):
            if not line:
                continue
            j = json.loads(line)
            t = j.get("type")
            if t in ("stdout", "stderr"):
                outs.append({"output_type": "stream", "name": t, "text": j.get("text")})
            elif t == "result":
                data = {E2B_MIME[k]: v for k, v in j.items() if k in E2B_MIME}
                data.update(j.get("extra") or {})
                outs.append({"output_type": "execute_result" if j.get("is_main_result") else "display_data",
                             "data": data})
            elif t == "error":
                last_error = j
                if j.get("name") not in E2B_STATUS:
                    outs.append({"output_type": "error", "ename": j.get("name"), "evalue": j.get("value")})
            elif t == "end_of_execution":
                ended = True
        if not ended:
            raise harness.HarnessError(f"no end_of_execution line: {text[-300:]!r}")
        name = (last_error or {}).get("name")
        status = E2B_STATUS.get(name) or ("error" if last_error else "ok")
        stdout, stderr = render(outs)
        # What kernelsup-http says of the cell: a last error of E2B's kind, a stderr line of its own.
        message = " ".join([(last_error or {}).get("value") or "" if name in E2B_STATUS else ""] +
                           [o["text"] for o in outs if o["output_type"] == "stream" and o["text"].startswith("[kernelsup:")])
        return {"status": status, "exit": None, "stdout": stdout, "stderr": stderr, "outputs": outs,
                "message": message, "raw": text[-600:]}


class Outside:
    """An outside jupyter_client on the published connection file of ctx (kept across cells and kernel restarts)."""

    def __init__(self, d, ctx):
        self.d, self.ctx = d, ctx
        self.kc = harness.KernelClient(os.path.join(d.run_dir, "connections", f"{ctx}.json"), timeout=60)

    def __call__(self, d, ctx, code, timeout_args):
        deadline = time.monotonic() + harness.scaled(300)
        self.kc._sync(deadline)
        kernel_id = d.context(ctx).get("kernel_id")
        msg_id = self.kc.kc.execute(code, allow_stdin=False)
        outs, idle, reply, died = [], False, None, False
        next_look = time.monotonic()
        while not (idle and reply is not None) and not died:
            if time.monotonic() > deadline:
                raise harness.WaitTimeout(f"no end of cell {code[:60]!r} through jupyter_client")
            with contextlib.suppress(queue.Empty):
                m = self.kc.kc.get_iopub_msg(timeout=0.05)
                if m["parent_header"].get("msg_id") == msg_id:
                    t, c = m["msg_type"], m["content"]
                    if t == "status":
                        idle = idle or c.get("execution_state") == "idle"
                    elif t not in ("execute_input",):
                        outs.append(dict(c, output_type=t))
                continue
            with contextlib.suppress(queue.Empty):
                m = self.kc.kc.get_shell_msg(timeout=0.01)
                if m["parent_header"].get("msg_id") == msg_id:
                    reply = m["content"]
            if time.monotonic() >= next_look:
                # The kernel died under the cell: the daemon replaced it (a new kernel_id), so no reply comes.
                next_look = time.monotonic() + 0.5
                died = d.context(ctx).get("kernel_id") != kernel_id
        stdout, stderr = render(outs)
        status = "died" if died else (reply or {}).get("status")
        return {"status": status, "exit": None, "stdout": stdout, "stderr": stderr, "outputs": outs,
                "message": "", "raw": repr(outs)[-300:] + repr(reply)[:300]}


# ---------------------------------------------------------------------------
# Checks: each returns a list of what is wrong (empty: the cell gave what it must).


def in_order(text, parts, what):
    pos = 0
    for p in parts:
        i = text.find(p, pos)
        if i < 0:
            seen = text[pos:pos + 200] if len(text) < 100000 else f"{len(text)} characters"
            return [f"{what}: {p!r} not found (in order) in {seen!r}"]
        pos = i + len(p)
    return []


def collapse(types):
    """Output types with consecutive streams (a long print comes in several messages) counted once."""
    out = []
    for t in types:
        if not (t == "stream" and out and out[-1] == "stream"):
            out.append(t)
    return out


def check_cell(e, got, path):
    bad = []
    if got["status"] != e["status"]:
        bad.append(f"status {got['status']!r}, want {e['status']!r}")
    if path not in NO_EXIT:
        want_exit = e.get("exit", EXIT[e["status"]])
        if got["exit"] != want_exit:
            bad.append(f"exit {got['exit']}, want {want_exit}")
    if e.get("ename"):
        enames = [o.get("ename") for o in got["outputs"] or [] if (o.get("output_type")) == "error"]
        if got["outputs"] is None:
            bad += in_order(got["stderr"], [e["ename"]], "stderr (ename)")
        elif e["ename"] not in enames:
            bad.append(f"ename {enames!r}, want {e['ename']!r}")
    bad += in_order(got["stdout"], e.get("stdout", []), "stdout")
    bad += in_order(got["stderr"], e.get("stderr", []), "stderr")
    for a in e.get("absent", []):
        if a in got["stdout"] or a in got["stderr"]:
            bad.append(f"{a!r} is there and must not be")
    for ch, n in (e.get("stdout_count") or {}).items():
        if got["stdout"].count(ch) != n:
            bad.append(f"stdout holds {got['stdout'].count(ch)} x {ch!r}, want {n}")
    if "stdout_len" in e:
        lo, hi = e["stdout_len"]
        if not lo <= len(got["stdout"]) <= hi:
            bad.append(f"stdout is {len(got['stdout'])} characters, want {lo}..{hi}")
    # On every path, kernel text that is not valid Unicode arrives with U+FFFD in place of each bad unit.
    for name in ("stdout", "stderr", "message"):
        m = LONE_SURROGATE.search(got[name] or "")
        if m:
            bad.append(f"{name} holds {m.group()!r}: not valid Unicode (a raw byte or a lone surrogate)")
    if e.get("note") and path != "jupyter" and not re.search(e["note"], got["message"] or ""):
        bad.append(f"no note matching /{e['note']}/ in {got['message'][:300]!r}")
    if got["outputs"] is not None:
        bad += check_outputs(e, got["outputs"])
    return bad


def check_outputs(e, outs):
    bad = []
    types = collapse([o.get("output_type") for o in outs])
    if "output_types" in e and types != e["output_types"]:
        bad.append(f"output types {types}, want {e['output_types']}")
    datas = [o.get("data") or {} for o in outs if o.get("output_type") in
             ("execute_result", "display_data", "update_display_data")]
    mimes = {m for data in datas for m in data}
    missing = [m for m in e.get("mime", []) if m not in mimes]
    if missing:
        bad.append(f"MIME types {sorted(mimes)}, missing {missing}")
    for mime, part in (e.get("data") or {}).items():
        if not any(part in (data.get(mime) or "") for data in datas):
            bad.append(f"no {mime} holding {part!r} in {[data.get(mime) for data in datas]!r}"[:400])
    if e.get("png"):
        pngs = [data["image/png"] for data in datas if isinstance(data.get("image/png"), str)]
        if not pngs or not base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n"):
            bad.append("no image/png that decodes to a PNG")
    return bad


# ---------------------------------------------------------------------------


def run_case(tap, d, ctx, path, runner, case, heavy_skip, have):
    name = f"corpus {case['name']} via {path}"
    e = expectation(case, path)
    if e.get("skip"):
        return tap.skip(name, e["skip"])
    if e.get("heavy") and heavy_skip:
        return tap.skip(name, f"{e['heavy']}: normal build only ({heavy_skip})")
    if e.get("needs_module") and not have(e["needs_module"]):
        return tap.skip(name, f"/usr/bin/python3 has no {e['needs_module']}")
    bad = []
    try:
        probe = f"probe-{case['name']}"
        r = d.ctl("exec", ctx, f"_corpus_probe = {probe!r}", timeout=120)
        if r.returncode != 0:
            raise harness.HarnessError(f"setting the probe: exit {r.returncode} {r.stdout!r} {r.stderr!r}")
        before = d.context(ctx).get("kernel_id")
        timeout_args = ("--timeout", str(e["timeout"])) if "timeout" in e else ()
        got = runner(d, ctx, code_of(case), timeout_args)
        bad += check_cell(e, got, path)
        if case.get("then"):
            then = expectation(case["then"], path)
            got2 = runner(d, ctx, code_of(then), ())
            bad += [f"the next cell: {b}" for b in check_cell(then, got2, path)]
        bad += check_kept(d, ctx, e, before, probe)
    except harness.HarnessError as ex:
        bad.append(str(ex))
        got = {"raw": ""}
    diag = "\n".join(bad + [f"tail: {got.get('raw', '')!r}"[:800]]) if bad else None
    needs = e.get("needs")
    if needs:
        return tap.todo(not bad, name, f"needs branch {needs}", diag)
    return tap.ok(not bad, name, diag)


def check_kept(d, ctx, e, before, probe):
    """Whether the namespace and the kernel_id are kept after the case (keeps_namespace, default true)."""
    keep = e.get("keeps_namespace", True)
    if e.get("settle"):
        # A kernel that may be ending: the settle cell prints True when it is; then wait for the next kernel.
        r = d.ctl("exec", ctx, e["settle"], timeout=120)
        if r.stdout.split("\n")[0] == "True":
            d.wait_context(ctx, lambda c: c.get("kernel_id") != before, "the kernel that was ending replaced",
                           timeout=120)
    if not keep or e.get("settle"):
        d.wait_state(ctx, "ready", timeout=120)
    r = d.ctl("exec", ctx, "print(_corpus_probe)", timeout=120)
    after = d.context(ctx).get("kernel_id")
    bad = []
    if keep and (r.returncode, r.stdout.split("\n")[0]) != (0, probe):
        bad.append(f"the namespace was not kept: exit {r.returncode} {r.stdout[:200]!r} {r.stderr[:200]!r}")
    if not keep and "NameError" not in r.stderr:
        bad.append(f"the namespace was kept, want a new one: {r.stdout[:200]!r}")
    if keep != (after == before):
        bad.append(f"kernel_id {before} -> {after}: want {'the same' if keep else 'a new one'}")
    return bad


def test(tap):
    cases = load_cases()
    if SELECTED:
        unknown = set(SELECTED) - {c["name"] for c in cases}
        tap.ok(not unknown, "KS_CORPUS names cases of the corpus", f"unknown: {sorted(unknown)}")
        cases = [c for c in cases if c["name"] in SELECTED]
    heavy_skip = harness.not_normal_build()
    modules = {}

    def have(mod):
        if mod not in modules:
            modules[mod] = subprocess.run(["/usr/bin/python3", "-c", f"import {mod}"],
                                          capture_output=True).returncode == 0
        return modules[mod]

    d = harness.Daemon(tap, contexts="".join(f"[context:via-{p}]\n" for p in PATHS))
    d.start()
    d.wait_all_ready([f"via-{p}" for p in PATHS], timeout=120)
    runners = {"text": via_text, "json": via_json, "stream": via_stream}
    no_http, front = harness_http.main_skip_reason(), None
    if not no_http:
        # Bodies as large as the largest cell of the corpus.
        front = harness_http.HttpFront(tap, d, args=["--max-body", "64M"]).start()
        runners["http"] = ViaHttp(front)
        runners["e2b"] = ViaE2b(front)
    for path in PATHS:
        ctx = f"via-{path}"
        if path in ("http", "e2b") and no_http:
            tap.skip(f"corpus via {path}", no_http)
            continue
        with tap.guard(f"corpus via {path}"):
            runner = runners.get(path) or Outside(d, ctx)
            try:
                for case in cases:
                    run_case(tap, d, ctx, path, runner, case, heavy_skip, have)
            finally:
                if isinstance(runner, Outside):
                    runner.kc.close()
    if front:
        front.stop()
    d.stop()


harness.main(test)
