"""Executions against a real daemon and the real ipykernel: exec --detach prints the id and
leaves the cell running; attach --from N read in pieces, each dropped after a few outputs and
resumed from the number after the last one seen, gives exactly one full read; the listing, cancel
of a running and of a queued cell, a client that goes away without keep (its cell interrupted, as
before) and one killed with keep (the cell runs on, attach gets all), expiry by count
(executions_keep) and by time (executions_ttl), outputs dropped by executions_memory, and
another uid gets "no such execution" as for a missing id; hostile params. A stub kernel that asks for input
on stdin whatever allow_stdin says (as IRkernel's readline() does) gets an empty value at once, and its cell
one note that input is not available."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import UUID_RE  # noqa: E402

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
N_PRINTS = 40
TICKER = ("import time\n"
          f"for i in range({N_PRINTS}):\n"
          "    print(i, flush=True)\n"
          "    time.sleep(0.1)\n")
SPIN = "print('spinning', flush=True)\nwhile True: pass"
CONTEXTS = ("[context:default]\n[context:few]\nexecutions_keep = 2\n[context:brief]\nexecutions_ttl = 1s\n"
            f"[context:stub]\nargv = {harness.STUB_ARGV}\n")
NO_INPUT = "[kernelsup: input() is not available: cells run without stdin]"


def popen_ctl(d, *args):
    return subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def read_lines(proc, n, timeout=60):
    """Up to n whole lines proc writes on stdout (fewer when it exits first)."""
    buf = b""
    deadline = time.monotonic() + harness.scaled(timeout)
    while buf.count(b"\n") < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise harness.WaitTimeout(f"no {n} lines from kernelctl within {harness.scaled(timeout):g}s: {buf!r}")
        r, _, _ = select.select([proc.stdout], [], [], left)
        if r:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    return buf.decode().split("\n")[:min(n, buf.count(b"\n"))]


def state_of(d, exec_id):
    rc, j = d.ctl_json("executions")
    for e in (j or {}).get("executions", []):
        if e.get("id") == exec_id:
            return e
    return None


def wait_state(d, exec_id, states, what):
    return harness.poll_until(lambda: (state_of(d, exec_id) or {}).get("state"), 60, what,
                              check=lambda s: s in states)


def detach(tap, d, code, name, ctx="default"):
    r = d.ctl("exec", ctx, code, "--detach")
    ok = r.returncode == 0 and UUID_RE.fullmatch(r.stdout.strip() or "-") is not None
    tap.ok(ok, f"{name}: exec --detach prints a UUID and exits 0", repr((r.returncode, r.stdout, r.stderr)))
    return r.stdout.strip() if ok else None


def test_pieces(tap, d):
    exec_id = detach(tap, d, TICKER, "pieces")
    if not exec_id:
        return
    # Read in pieces while it runs: attach from the number after the last output seen, drop after three.
    seen, frm, pieces, last = [], 0, 0, None
    while pieces < 50:
        p = popen_ctl(d, "attach", exec_id, "--from", str(frm), "--stream")
        lines = read_lines(p, 3)
        # A piece is three outputs; a line with the result means the cell ended: the last attach, read to its end
        # (kernelctl may not have exited yet when its result line is read).
        if p.poll() is None and len(lines) == 3 and all("output_type" in json.loads(l) for l in lines):
            p.kill()
            p.communicate()
            outs = [json.loads(l) for l in lines]
            seen += outs
            frm += len(outs)
            pieces += 1
            continue
        out, err = p.communicate(timeout=harness.scaled(60))
        rest = [l for l in (b"\n".join(l.encode() for l in lines) + b"\n" + out).decode().split("\n") if l]
        last = (p.returncode, rest, err.decode())
        break
    tap.ok(pieces >= 3, f"pieces: the cell was read in {pieces} dropped pieces of three outputs while it ran")
    tap.ok(last is not None and last[0] == 0, "pieces: the last attach follows the cell to its end, exit 0 as exec",
           repr(last))
    if last is None:
        return
    # The last line of --stream is the result; the ones before it are outputs.
    seen += [json.loads(l) for l in last[1][:-1]]
    result = json.loads(last[1][-1]) if last[1] else {}
    tap.eq(result.get("status"), "ok", "pieces: the result is the cell's (ok)", repr(result)[:300])

    r = d.ctl("attach", exec_id, "--stream")
    full = [json.loads(l) for l in r.stdout.split("\n") if l][:-1]
    tap.eq(r.returncode, 0, "pieces: attach of the ended execution from 0: exit 0", r.stderr)
    tap.eq(seen, full, "pieces: the pieces concatenated are exactly one full read (nothing twice, nothing missing)",
           f"{len(seen)} vs {len(full)}")
    text = "".join(o.get("text", "") for o in full)
    tap.eq(text, "".join(f"{i}\n" for i in range(N_PRINTS)), "pieces: and that read is every print, in order")

    r = d.ctl("attach", exec_id, "--from", str(len(full)), "--stream")
    lines = [l for l in r.stdout.split("\n") if l]
    tap.ok(r.returncode == 0 and len(lines) == 1 and json.loads(lines[0]).get("status") == "ok",
           "pieces: attach --from the count gives no output, only the end", repr(r.stdout[:300]))
    r = d.ctl("attach", exec_id)
    tap.ok(r.returncode == 0 and r.stdout.startswith("0\n1\n2\n") and r.stdout.rstrip().endswith("]"),
           "pieces: attach without --stream renders as exec", repr(r.stdout[-200:]))

    e = state_of(d, exec_id)
    tap.ok(e is not None and e["state"] == "ok" and e["outputs"] == len(full) and e["context"] == "default"
           and e["kernel_id"] and e["ended_at"] and e["execution_count"] is not None,
           "executions: lists it, ok, with its outputs' count, context, kernel, count and end", repr(e))
    r = d.ctl("executions", "default")
    tap.ok(r.returncode == 0 and exec_id in r.stdout and r.stdout.startswith("ID"),
           "executions CTX: a table naming it", repr(r.stdout[:300]))
    return exec_id


def test_others(tap, d, exec_id):
    if os.geteuid() != 0:
        tap.skip("another uid gets no such execution", "not root")
        return
    for p in (d.tmp, d.run_dir):
        os.chmod(p, 0o755)
    probe = subprocess.run(NOBODY + ["test", "-x", harness.KERNELCTL], capture_output=True)
    if probe.returncode != 0:
        tap.skip("another uid gets no such execution", f"nobody cannot execute {harness.KERNELCTL}")
        return
    missing = "00000000-0000-4000-8000-000000000000"
    r = d.ctl("attach", exec_id, prefix=NOBODY)
    tap.eq((r.returncode, r.stderr), (5, f"kernelctl: no such execution: {exec_id}\n"),
           "another uid: attach gets no such execution, exit 5")
    r2 = d.ctl("attach", missing, prefix=NOBODY)
    tap.eq(r2.stderr.replace(missing, exec_id), r.stderr, "another uid: the same answer as for a missing id")
    r = d.ctl("cancel", exec_id, prefix=NOBODY)
    tap.eq(r.returncode, 5, "another uid: cancel gets no such execution", r.stderr)
    r = d.ctl("executions", "--json", prefix=NOBODY)
    tap.ok(r.returncode == 0 and r.stdout.startswith("{") and exec_id not in r.stdout,
           "another uid: executions does not list it", repr((r.returncode, r.stdout[:300], r.stderr)))


def test_cancel(tap, d):
    running = detach(tap, d, SPIN, "cancel")
    queued = detach(tap, d, "print('never')", "cancel queued")
    if not running or not queued:
        return
    wait_state(d, running, ("running",), "the spinning cell to run")
    tap.eq(state_of(d, queued)["state"], "queued", "cancel: the cell behind it is queued")
    r = d.ctl("cancel", queued)
    tap.eq(r.returncode, 0, "cancel of a queued cell: exit 0", r.stderr)
    tap.eq(state_of(d, queued)["state"], "not_started", "cancel: the queued cell is withdrawn (not_started)")
    r = d.ctl("attach", queued)
    tap.eq(r.returncode, 11, "cancel: attach to the withdrawn cell exits 11 as exec (never started)", r.stderr)
    # Sent is not started: the kernel has started it once its first output came (a cancel before would withdraw it).
    harness.poll_until(lambda: state_of(d, running) or {}, 30, "the spinning cell's first output",
                       check=lambda e: (e.get("outputs") or 0) >= 1)
    r = d.ctl("cancel", running)
    tap.eq(r.returncode, 0, "cancel of a running cell: exit 0", r.stderr)
    st = wait_state(d, running, ("interrupted",), "the cancelled cell to end")
    tap.eq(st, "interrupted", "cancel: the running cell is interrupted")
    r = d.ctl("attach", running)
    tap.ok(r.returncode == 7 and "KeyboardInterrupt" in r.stderr and r.stdout.startswith("spinning\n"),
           "cancel: attach shows its output and the KeyboardInterrupt (exit 7)", repr((r.stdout, r.stderr)))
    r = d.ctl("cancel", running)
    tap.ok(r.returncode == 1 and "ended already" in r.stderr, "cancel of an ended execution: exit 1, says so",
           r.stderr)
    r = d.ctl("exec", "default", "print('after')")
    tap.ok(r.returncode == 0 and r.stdout.startswith("after\n"), "cancel: the context runs the next cell",
           r.stderr)


def test_no_keep(tap, d):
    # Without keep (kernelctl exec, the default), a client that goes away interrupts its cell, as before.
    p = popen_ctl(d, "exec", "default", SPIN)
    read_lines(p, 1)
    e = [x for x in d.ctl_json("executions")[1]["executions"] if x["state"] == "running"]
    p.kill()
    p.communicate()
    tap.eq(len(e), 1, "no keep: the exec's cell is an execution, running")
    if e:
        st = wait_state(d, e[0]["id"], ("interrupted",), "the abandoned cell to end")
        tap.eq(st, "interrupted", "no keep: the client gone, the cell is interrupted")
    r = d.ctl("exec", "default", "print('next')")
    tap.ok(r.returncode == 0 and r.stdout.startswith("next\n"), "no keep: the context is free again", r.stderr)


def test_keep_killed(tap, d):
    # A caller that asked keep and went away abruptly (as kill -9 does: the socket just closes) mid-cell.
    raw = harness.RawControl(d.socket)
    first = None
    try:
        req = {"jsonrpc": "2.0", "id": 1, "method": "execute",
               "params": {"context": "default", "code": TICKER, "on_disconnect": "keep"}}
        raw.send(json.dumps(req).encode() + b"\n")
        first = json.loads(raw.read_line(30))
        outs = 0
        while outs < 3:
            m = json.loads(raw.read_line(30))
            outs += m.get("method") == "output"
    finally:
        raw.s.close()
    exec_id = (first or {}).get("params", {}).get("id")
    tap.ok(exec_id and first.get("method") == "execution", "keep: the stream names the execution", repr(first))
    if not exec_id:
        return
    st = wait_state(d, exec_id, ("ok", "interrupted", "error"), "the kept cell to end")
    tap.eq(st, "ok", "keep: the caller gone, the cell ran to its end")
    r = d.ctl("attach", exec_id)
    tap.eq((r.returncode, r.stdout.split("\n")[:N_PRINTS]), (0, [str(i) for i in range(N_PRINTS)]),
           "keep: attach gets every output", r.stderr)


def test_bounds(tap, d):
    ids = [detach(tap, d, f"print({i})", f"count {i}", "few") for i in range(3)]
    if None in ids:
        return
    for i in ids:
        wait_state(d, i, ("ok",), "the cell to end")
    r = d.ctl("attach", ids[0])
    tap.ok(r.returncode == 5 and "no such execution" in r.stderr,
           "executions_keep = 2: the third ended drops the first", r.stderr)
    r = d.ctl("attach", ids[2])
    tap.ok(r.returncode == 0 and r.stdout.startswith("2\n"), "executions_keep = 2: the last is kept", r.stderr)

    brief = detach(tap, d, "print('x')", "ttl", "brief")
    wait_state(d, brief, ("ok",), "the brief cell to end")
    gone = harness.poll_until(lambda: state_of(d, brief) is None, 60, "the brief execution to expire")
    tap.ok(gone, "executions_ttl = 1s: an ended execution is forgotten after it")

    # executions_memory = 512K: a 200 kB cell (kept twice: numbered outputs and result), then another: the
    # first one's outputs are dropped, its record stays.
    big = [detach(tap, d, "print('y' * 200000)", f"memory {i}") for i in range(2)]
    if None in big:
        return
    for i in big:
        wait_state(d, i, ("ok",), "the big cell to end")
    e = state_of(d, big[0])
    tap.ok(e is not None and e["outputs_dropped"] and e["outputs"] >= 1,
           "executions_memory: the older big execution lost its outputs, its record says so", repr(e))
    r = d.ctl("attach", big[0])
    tap.ok(r.returncode == 1 and "no longer kept" in r.stderr, "executions_memory: attach says they are gone",
           r.stderr)
    r = d.ctl("attach", big[1], "--stream")
    tap.ok(r.returncode == 0 and len(r.stdout) > 200000, "executions_memory: the newer one is whole",
           r.stderr)
    # A reload's smaller bound applies at once.
    d.write_config(CONTEXTS, supervisor="executions_memory = 1K\n")
    r = d.ctl("reload")
    e = state_of(d, big[1])
    tap.ok(r.returncode == 0 and e is not None and e["outputs_dropped"],
           "executions_memory: a reload to 1K drops the newer one's outputs at once", repr((r.stderr, e)))
    d.write_config(CONTEXTS, supervisor="executions_memory = 512K\n")
    d.ctl("reload")


def test_lost(tap, d):
    # The kernel dies under a detached cell: the execution ends lost, and attach exits 1 as exec, naming the new
    # kernel.
    before = d.context("few")
    exec_id = detach(tap, d, SPIN, "lost", "few")
    if not exec_id:
        return
    wait_state(d, exec_id, ("running",), "the spinning cell to run")
    harness.poll_until(lambda: (state_of(d, exec_id) or {}).get("outputs"), 60, "its first output")
    os.kill(before["pid"], signal.SIGKILL)
    st = wait_state(d, exec_id, ("lost",), "the cell to be lost")
    tap.eq(st, "lost", "lost: a cell whose kernel died ends lost")
    after = d.wait_context("few", lambda c: c.get("state") == "ready" and c.get("pid") != before["pid"],
                           "a new kernel ready")
    r = d.ctl("attach", exec_id)
    tap.ok(r.returncode == 1 and r.stdout.startswith("spinning\n") and after["kernel_id"] in r.stdout
           and "killed by SIGKILL" in r.stderr,
           "lost: attach gives its output, exit 1, the new kernel and how the old one died", repr((r.stdout, r.stderr)))


def test_input(tap, d):
    # The stub's "input" cell sends an input_request on stdin to the shell request's routing identity and waits
    # (30 s at most) for the reply: the daemon's stdin connection shares its shell connection's identity, answers
    # "" at once, and tells the cell.
    r = d.ctl("exec", "--json", "stub", "input", timeout=120)
    try:
        outs = [(o.get("name"), o.get("text")) for o in json.loads(r.stdout)["outputs"]]
    except (ValueError, KeyError, TypeError):
        outs = None
    tap.ok(r.returncode == 0 and outs and ("stdout", "input: .\n") in outs,
           "input: the kernel's input_request got an empty value", repr((r.returncode, r.stdout, r.stderr)))
    tap.eq(outs and outs[:1], [("stderr", NO_INPUT + "\n")], "input: the cell's first output is the one note that "
           "input is not available (before what the code printed after it)", repr(outs))
    r = d.ctl("exec", "stub", "1", timeout=60)
    tap.ok(r.returncode == 0 and NO_INPUT not in r.stdout, "input: a cell that asks for none has no note",
           repr((r.returncode, r.stdout)))


def test_hostile(tap, d, exec_id):
    rep = d.rpc("attach", {"id": exec_id, "from": -1})
    tap.ok(harness.is_rpc_error(rep, -32602), "attach from -1: invalid params", repr(rep))
    rep = d.rpc("attach", {"id": exec_id, "from": "3"})
    tap.ok(harness.is_rpc_error(rep, -32602), "attach from a string: invalid params", repr(rep))
    rep = d.rpc("attach", {"id": 7})
    tap.ok(harness.is_rpc_error(rep, -32602), "attach id a number: invalid params", repr(rep))
    rep = d.rpc("attach", {"id": "x" * 100000})
    msg = (rep or {}).get("error", {}).get("message", "")
    tap.ok(harness.is_rpc_error(rep, -32006) and len(msg) < 100, "attach with a 100 kB id: no such execution, "
           "the id not echoed whole", repr(msg[:200]))
    rep = d.rpc("execute", {"context": "default", "code": "1", "on_disconnect": "maybe"})
    tap.ok(harness.is_rpc_error(rep, -32602), "execute on_disconnect maybe: invalid params", repr(rep))
    rep = d.rpc("execute", {"context": "default", "code": "1", "detach": "yes"})
    tap.ok(harness.is_rpc_error(rep, -32602), "execute detach a string: invalid params", repr(rep))
    rep = d.rpc("attach", {"id": exec_id, "from": 2 ** 63 - 1})
    tap.ok(isinstance((rep or {}).get("params"), dict) and rep.get("method") == "execution",
           "attach from 2^63-1: the record, then only the end", repr(rep)[:300])
    rep = d.rpc("attach", {"id": exec_id, "from": 2 ** 64})
    tap.ok(harness.is_rpc_error(rep, -32602) or harness.is_rpc_error(rep, -32700),
           "attach from 2^64: refused", repr(rep)[:300])
    rep = d.rpc("executions", {"context": 5})
    tap.ok(harness.is_rpc_error(rep, -32602), "executions with a context that is not a string: invalid params",
           repr(rep))
    rep = d.rpc("cancel", {})
    tap.ok(harness.is_rpc_error(rep, -32602), "cancel without an id: invalid params", repr(rep))
    rep = d.rpc("attach", {"id": "\u00e9\u0000x"})
    tap.ok(harness.is_rpc_error(rep, -32006) or harness.is_rpc_error(rep, -32700),
           "attach with a NUL in the id: no such execution (or refused as JSON)", repr(rep))
    r = d.ctl("attach", exec_id, "--from", "-1")
    tap.eq(r.returncode, 2, "kernelctl attach --from -1: usage error", r.stderr)
    r = d.ctl("status", "--detach")
    tap.eq(r.returncode, 2, "--detach on another verb: usage error", r.stderr)
    # The first message of execute's stream names the execution; each output carries its number.
    raw = harness.RawControl(d.socket)
    msgs = []
    try:
        req = {"jsonrpc": "2.0", "id": 1, "method": "execute",
               "params": {"context": "default", "code": "print(1, flush=True); print(2, flush=True)"}}
        raw.send(json.dumps(req).encode() + b"\n")
        while not msgs or "id" not in msgs[-1]:
            line = raw.read_line(30)
            if line is None:
                break
            msgs.append(json.loads(line))
    finally:
        raw.close()
    tap.ok(msgs and msgs[0].get("method") == "execution" and UUID_RE.fullmatch(msgs[0]["params"].get("id", "")),
           "execute: the first message of its stream names the execution", repr(msgs[:2]))
    seqs = [m["params"]["seq"] for m in msgs if m.get("method") == "output"]
    tap.ok(len(seqs) >= 1 and seqs == list(range(len(seqs))), "execute: each output carries its number, 0, 1, ...",
           repr(seqs))


def test(tap):
    d = harness.Daemon(tap, contexts=CONTEXTS, supervisor="executions_memory = 512K\n")
    d.start()
    for c in ("default", "few", "brief", "stub"):
        d.wait_state(c, "ready")
    exec_id = None
    with tap.guard("pieces"):
        exec_id = test_pieces(tap, d)
    with tap.guard("cancel"):
        test_cancel(tap, d)
    with tap.guard("no keep"):
        test_no_keep(tap, d)
    with tap.guard("keep, killed"):
        test_keep_killed(tap, d)
    with tap.guard("lost"):
        test_lost(tap, d)
    with tap.guard("input"):
        test_input(tap, d)
    with tap.guard("bounds"):
        test_bounds(tap, d)
    if exec_id:
        with tap.guard("hostile"):
            test_hostile(tap, d, exec_id)
        with tap.guard("others"):
            test_others(tap, d, exec_id)
    d.check_log()
    d.stop()


harness.main(test)
