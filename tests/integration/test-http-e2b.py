#!/usr/bin/env python3
"""E2B's stock SDK (@e2b/code-interpreter 2.8.0 from npm, unchanged, in debug mode with sandboxUrl) on
kernelsup-http's E2B routes (doc/e2b-protocol.md): runCode's stdout (and its callback), the main result's text
with E2B's quote stripping, an error with its traceback as one string without ANSI colours, non-ASCII output whole
(the stream is ASCII-only JSON), a plot's PNG, a cell quiet for 6 s (keepalive lines), the SDK's own timeout (the cell runs on, unlike E2B),
language: python, createCodeContext / listCodeContexts / restartCodeContext / removeCodeContext and runCode in
that context, an unknown context as the SDK's NotFoundError. Then the wire itself: the token in
E2B-Traffic-Access-Token (none: 401), the NDJSON lines (keepalive, number_of_executions, end_of_execution last),
both context_id and language (400), env_vars (400, not supported), GET /health. Needs node and the SDK, which
./run-tests installs (tools/deps.sh, ks_install_node_clients); without them a skip that says why."""

import contextlib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import harness_http  # noqa: E402

CACHE = os.environ.get("KS_KERNEL_CACHE") or os.path.join(harness.BUILDDIR, "kernel-cache")
MODULES = os.path.join(CACHE, "node-clients", "node_modules")
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2b-client.mjs")
ANSI = "\x1b["


def skip_reason():
    why = harness_http.main_skip_reason()
    if why:
        return why
    if not shutil.which("node"):
        return "node is not installed (./run-tests installs it)"
    try:
        with open(os.path.join(CACHE, "node-clients.status")) as f:
            status = f.read().strip()
    except OSError:
        return f"no {CACHE}/node-clients.status: the SDK was not installed (./run-tests installs it)"
    if status != "ok":
        return status
    return None


def sdk(front, *steps, token=None, timeout=180):
    """Runs the steps through the SDK; {step: its line}."""
    p = subprocess.run(["node", CLIENT, MODULES, f"http://127.0.0.1:{front.port}", token or front.token, *steps],
                       capture_output=True, text=True, timeout=harness.scaled(timeout))
    out = {}
    for line in p.stdout.splitlines():
        with contextlib.suppress(ValueError):
            j = json.loads(line)
            out[j["step"]] = j
    if not out:
        raise harness.HarnessError(f"the SDK driver printed nothing: exit {p.returncode}: {p.stderr[-2000:]}")
    return out


def value(res, step):
    return (res.get(step) or {}).get("value") or {}


def check_sdk(tap, front):
    res = sdk(front, "hello", "quoted", "error", "unicode", "plot", "quiet", "timeout", "after", "language", "missing")
    for step, r in res.items():
        tap.ok(r.get("ok"), f"SDK {step}: runCode returned", repr(r)[:400])
    v = value(res, "hello")
    tap.eq(v.get("stdout"), ["hello\n"], "runCode: logs.stdout is the print", repr(v))
    tap.eq(v.get("callbacks"), ["hello\n"], "onStdout got the line")
    tap.eq(v.get("text"), "42", "execution.text is the main result")
    tap.ok(isinstance(v.get("executionCount"), int) and v["executionCount"] > 0, "executionCount is the kernel's",
           repr(v.get("executionCount")))
    tap.eq(value(res, "quoted").get("text"), "abc", "a string result's quotes are stripped, as E2B's server does")
    e = value(res, "error").get("error") or {}
    tap.eq((e.get("name"), e.get("value")), ("ZeroDivisionError", "division by zero"), "an error: name and value")
    tb = e.get("traceback")
    tap.ok(isinstance(tb, str) and "Traceback (most recent call last)" in tb and "1/0" in tb and
           "ZeroDivisionError" in tb and ANSI not in tb,
           "its traceback: one string, the whole traceback (its header, the cell's frames), no ANSI colours",
           repr(tb)[:400])
    v = value(res, "unicode")
    tap.eq("".join(v.get("stdout") or []), "h\u00e9 \u20ac \U0001F600 " * 100000 + "\n",
           "non-ASCII output arrives whole (no U+FFFD where a chunk ends)")
    v = value(res, "plot")
    pngs = [r for r in v.get("results") or [] if r.get("png")]
    tap.ok(pngs and "png" in pngs[0]["formats"] and pngs[0]["isMainResult"] is False,
           "a plot: a display result with its PNG", repr(v.get("results")))
    tap.eq(value(res, "quiet").get("stdout"), ["after\n"], "a cell quiet for 6 s ends with its output")
    t = res.get("timeout") or {}
    tap.eq((t.get("value") or {}).get("thrown"), "TimeoutError", "the SDK's timeoutMs: its TimeoutError", repr(t))
    tap.eq(value(res, "after").get("text"), "True",
           "unlike E2B, the cell whose client went away ran on to its end (the next cell ran after it)")
    tap.eq(value(res, "language").get("text"), "2", "language python: the default context")
    m = value(res, "missing")
    tap.eq(m.get("thrown"), "NotFoundError", "an unknown context: NotFoundError", repr(m))


def check_contexts(tap, front, d):
    res = sdk(front, "contexts")
    r = res.get("contexts") or {}
    tap.ok(r.get("ok"), "SDK contexts: created, ran, listed, restarted, removed", repr(r)[:600])
    v = r.get("value") or {}
    ctx = v.get("ctx") or {}
    tap.ok(str(ctx.get("id", "")).startswith("e2b-") and ctx.get("language") == "python" and ctx.get("cwd") == "/tmp",
           "createCodeContext: {id, language, cwd}", repr(ctx))
    tap.eq((v.get("a") or {}).get("text"), "/tmp", "runCode in it: its cwd")
    tap.ok(ctx.get("id") in (v.get("listed") or []) and "default" in (v.get("listed") or []),
           "listCodeContexts: it and the default", repr(v.get("listed")))
    tap.eq((v.get("b") or {}).get("text"), "False", "restartCodeContext: its variables are gone")
    tap.ok(isinstance(v.get("after"), list) and "default" in v["after"] and ctx.get("id") not in v["after"],
           "removeCodeContext: no longer listed", repr(v.get("after")))
    tap.eq((v.get("gone") or {}).get("thrown"), "NotFoundError", "runCode in a removed context: NotFoundError")
    c = d.context("default")
    tap.eq(c.get("state"), "ready", "the default context is untouched")


def lines(front, body, headers=None):
    """POST /execute: (status, the lines)."""
    h = {"E2B-Traffic-Access-Token": front.token, "Content-Type": "application/json"}
    h.update(headers or {})
    r = front.request("POST", "/execute", body=body, headers=h, auth=False, timeout=60)
    return r.status, [json.loads(x) for x in r.body.decode().split("\n") if x] if r.status == 200 else r.body


def check_wire(tap, front):
    st, ls = lines(front, {"code": "import time\nprint('a')\ntime.sleep(8)\n'b'"})
    tap.eq(st, 200, "POST /execute with E2B-Traffic-Access-Token: 200")
    types = [x.get("type") for x in ls]
    tap.ok(types[:1] == ["execution"] and len((ls[0].get("id") or "")) == 36,
           "the first line names the execution (ours; the SDK skips it)", repr(ls[:1]))
    tap.ok("keepalive" in types, "8 s of quiet: a keepalive line (after 5 s)", repr(types))
    tap.eq(types[-2:], ["number_of_executions", "end_of_execution"], "number_of_executions, then end_of_execution last")
    tap.ok([x for x in ls if x.get("type") == "stdout" and x.get("text") == "a\n" and x.get("timestamp")],
           "a stdout line with its text and timestamp", repr(ls)[:400])
    main = [x for x in ls if x.get("type") == "result"]
    tap.ok(main and main[0].get("text") == "b" and main[0].get("is_main_result") is True and main[0].get("extra") == {},
           "the result line: text stripped, is_main_result, extra {}", repr(main))
    r = front.request("POST", "/execute", body={"code": "1"}, auth=False)
    tap.eq(r.status, 401, "POST /execute without a token: 401")
    r = front.request("POST", "/execute", body={"code": "1"}, auth=False,
                      headers={"X-Access-Token": "envd-token", "E2B-Traffic-Access-Token": front.token})
    tap.eq(r.status, 200, "another service's X-Access-Token with ours in E2B-Traffic-Access-Token: 200 (any that "
           "matches)")
    r = front.request("POST", "/execute", body={"code": "1"},
                      headers={"E2B-Traffic-Access-Token": "wrong"}, auth=False)
    tap.eq(r.status, 401, "with a wrong E2B-Traffic-Access-Token: 401")
    st, body = lines(front, {"code": "1", "context_id": "default", "language": "python"})
    tap.eq(st, 400, "both context_id and language: 400")
    st, body = lines(front, {"code": "1", "env_vars": {"A": "b"}})
    tap.ok(st == 400 and b"not supported" in body, "env_vars: 400, not supported", repr(body))
    st, body = lines(front, {"code": "1", "language": "cobol"})
    tap.eq(st, 404, "a language no context runs: 404")
    st, body = lines(front, {"code": 5})
    tap.eq(st, 400, "code that is not a string: 400")
    # Hostile values: a huge context id, one that is a path, bytes that are not UTF-8, code that is not text.
    st, body = lines(front, {"code": "1", "context_id": "x" * 100000})
    tap.ok(st in (400, 404), "a 100 KB context_id: refused (400 or 404), no crash", repr((st, body))[:200])
    st, body = lines(front, {"code": "1", "context_id": "../default"})
    tap.eq(st, 404, "a context_id that is a path: 404 (no such context)")
    h = {"E2B-Traffic-Access-Token": front.token, "Content-Type": "application/json"}
    r = front.request("POST", "/execute", body=b'{"code": "\xff\xfe"}', headers=h, auth=False)
    tap.eq(r.status, 400, "a body that is not UTF-8: 400", repr(r))
    r = front.request("DELETE", "/contexts/%2e%2e", headers=h, auth=False)
    tap.eq(r.status, 404, "DELETE /contexts/.. (encoded): 404", repr(r))
    r = front.request("POST", "/contexts", body={"language": "cobol"}, headers=h, auth=False)
    tap.eq((r.status, r.error_code()), (400, "no_such_language"), "POST /contexts of a language no kernelspec has: 400")
    r = front.request("GET", "/health?source=ci", headers={"E2B-Traffic-Access-Token": front.token}, auth=False)
    tap.eq((r.status, r.body.strip()), (200, b'"OK"'), "GET /health (an unknown query parameter ignored): 200 \"OK\"")


def run(tap):
    why = skip_reason()
    if why:
        tap.skip_all(why)
    d = harness.Daemon(tap).start()
    d.wait_state("default", "ready", timeout=60)
    front = harness_http.HttpFront(tap, d).start()
    with tap.guard("the SDK"):
        check_sdk(tap, front)
    with tap.guard("the SDK's contexts"):
        check_contexts(tap, front, d)
    with tap.guard("the wire"):
        check_wire(tap, front)
    front.stop()
    d.check_log()


harness.main(run)
