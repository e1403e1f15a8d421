"""kernelctl exec, interrupt, check and wait against a real daemon and real ipykernels:
variables persist, errors give exit 7 and keep the namespace, --timeout interrupts
(exit 6) and the next cell still sees the variables, interrupt from a second
process, concurrent execs on one context are serialized while two contexts run in
parallel, a client that goes away gets its cell interrupted, matplotlib yields
image/png, a huge print is cut at output_limit, a kernel killed mid-cell gives a
clear error (exit 1) naming the new kernel, and check --expect tells the same
kernel from a replaced one."""

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

SPIN = "print('spinning', flush=True)\nwhile True: pass"
MARKER = "\n[output truncated: limit of 65536 bytes reached]\n"


def contexts():
    return ("[context:default]\n"
            "\n[context:small]\noutput_limit = 64K\n"
            "\n[context:off]\nautostart = no\n")


def popen_ctl(d, *args):
    """kernelctl ARGS in the background, stdout and stderr as pipes (bytes, unbuffered)."""
    return subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def read_line(proc, timeout=30):
    """The first line proc writes on stdout, or raises WaitTimeout. What came after it is
    kept for finish()."""
    buf = b""
    deadline = time.monotonic() + harness.scaled(timeout)
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise harness.WaitTimeout(f"no line from kernelctl within {harness.scaled(timeout):g}s; got {buf!r}")
        r, _, _ = select.select([proc.stdout], [], [], left)
        if r:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise harness.HarnessError(f"kernelctl closed stdout after {buf!r} (exit {proc.wait()})")
            buf += chunk
    line, proc.leftover = buf.split(b"\n", 1)
    return line.decode()


def finish(proc, timeout=30):
    """(exit code, stdout, stderr) of a background kernelctl."""
    try:
        out, err = proc.communicate(timeout=harness.scaled(timeout))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise harness.WaitTimeout(f"kernelctl did not finish within {harness.scaled(timeout):g}s") from None
    out = getattr(proc, "leftover", b"") + out
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def last_line(text):
    lines = text.rstrip("\n").split("\n")
    return lines[-1] if lines else ""


def ename_of(outputs):
    for o in outputs or []:
        if o.get("output_type") == "error":
            return o.get("ename")
    return None


def text_of(outputs, name=None):
    return "".join(o.get("text", "") for o in outputs or []
                   if o.get("output_type") == "stream" and (name is None or o.get("name") == name))


def test_basics(tap, d):
    r = d.ctl("exec", "default", "x = 41")
    tap.eq(r.returncode, 0, "exec x = 41: exit 0", r.stderr)
    tap.ok(r.returncode == 0 and r.stdout.startswith("[ok #") and r.stdout.endswith("]\n"),
           "exec: the last line is [ok #N]", repr(r.stdout))
    n1 = int(r.stdout.strip()[5:-1]) if r.returncode == 0 else 0

    r = d.ctl("exec", "default", "x + 1")
    tap.eq(r.stdout, f"42\n[ok #{n1 + 1}]\n", "exec x + 1: prints 42, the count goes up", r.stderr)

    r = d.ctl("exec", "default", "-", input="print('from stdin'); x\n")
    tap.eq((r.returncode, r.stdout.split("\n")[:2]), (0, ["from stdin", "41"]), "exec -: the code from stdin",
           r.stderr)
    r = d.ctl("exec", "default", input="import sys; sys.stderr.write('to stderr\\n')\n")
    tap.eq((r.returncode, r.stderr), (0, "to stderr\n"), "exec without CODE reads stdin; stderr goes to stderr")

    r = d.ctl("exec", "default", "print('no newline', end='')")
    tap.ok(r.returncode == 0 and r.stdout.startswith("no newline\n[ok #"), "the summary gets a line of its own",
           repr(r.stdout))

    r = d.ctl("exec", "default", "1/0")
    tap.eq(r.returncode, 7, "1/0: exit 7", r.stderr)
    tap.contains(r.stderr, "ZeroDivisionError: division by zero", "1/0: ename: evalue on stderr")
    tap.ok(last_line(r.stdout).startswith("[error #"), "1/0: the last line is [error #N]", repr(r.stdout))
    r = d.ctl("exec", "default", "1/0", "--traceback")
    tap.ok(r.returncode == 7 and "Traceback" in r.stderr and "\x1b[" not in r.stderr,
           "--traceback: the whole traceback, without colours when not on a terminal", repr(r.stderr[:500]))
    r = d.ctl("exec", "default", "x")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "41"), "an error never resets the namespace")

    r = d.ctl("exec", "default", "input('name? ')")
    tap.eq(r.returncode, 7, "input(): exit 7, not a hang")
    tap.contains(r.stderr, "StdinNotImplementedError", "input(): StdinNotImplementedError")

    rc, j = d.ctl_json("exec", "default", "print('a'); x")
    tap.eq(rc, 0, "--json: exit 0")
    j = j if isinstance(j, dict) else {}
    tap.eq(sorted(j), ["execution_count", "kernel_id", "outputs", "status", "truncated"], "--json: the result's keys")
    tap.eq(j.get("status"), "ok", "--json: status ok")
    tap.ok(isinstance(j.get("kernel_id"), str) and UUID_RE.match(j["kernel_id"]), "--json: a kernel_id",
           repr(j.get("kernel_id")))
    tap.eq(j.get("outputs"), [{"output_type": "stream", "name": "stdout", "text": "a\n"},
                              {"output_type": "execute_result", "execution_count": j.get("execution_count"),
                               "data": {"text/plain": "41"}, "metadata": {}}],
           "--json: nbformat v4 outputs in order")
    tap.eq(j.get("kernel_id"), d.context("default").get("kernel_id"), "--json: kernel_id is the context's")

    r = d.ctl("exec", "default", "import sys\nfor i in range(3): print(i, flush=True)\nx", "--stream")
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    tap.eq(r.returncode, 0, "--stream: exit 0", r.stderr)
    tap.ok(len(lines) >= 3 and all(o.get("output_type") for o in lines[:-1]),
           "--stream: one output per line", r.stdout[:500])
    tap.eq(text_of(lines[:-1]), "0\n1\n2\n", "--stream: the streamed text")
    tap.eq(lines[-1].get("status") if lines else None, "ok", "--stream: the result on the last line")

    c = d.context("default")
    tap.ok(isinstance(c.get("execution_count"), int) and c["execution_count"] >= n1 + 1,
           "status shows the execution_count", repr(c.get("execution_count")))
    tap.ok(isinstance(c.get("last_activity"), str) and c["last_activity"], "status shows last_activity",
           repr(c.get("last_activity")))


def test_timeout_and_interrupt(tap, d):
    r = d.ctl("exec", "default", SPIN, "--timeout", "1", timeout=60)
    tap.eq(r.returncode, 6, "while True with --timeout 1: exit 6", r.stderr)
    tap.ok(r.stdout.startswith("spinning\n") and last_line(r.stdout).startswith("[timeout"),
           "timeout: outputs so far, then [timeout #N]", repr(r.stdout))
    tap.contains(r.stderr, "KeyboardInterrupt", "timeout: the KeyboardInterrupt is shown")
    r = d.ctl("exec", "default", "x")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "41"), "after the timeout the next cell sees x")

    r = d.ctl("interrupt", "default")
    tap.eq((r.returncode, r.stdout), (0, "nothing running\n"), "interrupt with nothing running")
    p = popen_ctl(d, "exec", "default", SPIN)
    tap.eq(read_line(p), "spinning", "a spinning cell started")
    tap.eq(d.wait_state("default", "busy").get("state"), "busy", "the context shows busy while it runs")
    r = d.ctl("interrupt", "default")
    tap.eq((r.returncode, r.stdout), (0, "interrupted\n"), "interrupt from a second process")
    rc, out, err = finish(p)
    tap.eq(rc, 7, "the interrupted cell: exit 7", err)
    tap.contains(err, "KeyboardInterrupt", "the interrupted cell raised KeyboardInterrupt")
    tap.eq(d.wait_state("default", "ready").get("state"), "ready", "ready again")
    r = d.ctl("exec", "default", "x")
    tap.eq(r.stdout.split("\n")[0], "41", "the interrupt kept the namespace")

    # A client that goes away mid-cell: its cell is interrupted, the context is free.
    for how in (signal.SIGKILL, signal.SIGINT, signal.SIGTERM):
        p = popen_ctl(d, "exec", "default", SPIN)
        read_line(p)
        p.send_signal(how)
        try:
            p.wait(timeout=harness.scaled(30))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            tap.ok(False, f"kernelctl exec ends at {how.name}", "it was still running 30 s later")
        r = d.ctl("exec", "default", "x", "--timeout", "20", timeout=40)
        tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "41"),
               f"a client killed with {how.name} mid-cell: its cell is interrupted, the next one runs", r.stderr)


def test_queue(tap, d):
    flag = os.path.join(d.tmp, "go")
    flag2 = os.path.join(d.tmp, "go2")
    wait_flag = ("import os, time\nlog = globals().get('log', [])\nlog.append('a0')\n"
                 f"while not os.path.exists({flag!r}): time.sleep(0.01)\nlog.append('a1')")
    a = popen_ctl(d, "exec", "default", wait_flag)
    d.wait_state("default", "busy")
    b = popen_ctl(d, "exec", "default", "log.append('b'); log")
    # The daemon has b's cell once status counts it queued; b must still be waiting then.
    c = harness.poll_until(lambda: d.context("default"), 30, "the second cell to be queued",
                           check=lambda c: c.get("queued") == 1 or b.poll() is not None)
    tap.ok(c.get("queued") == 1 and c.get("state") == "busy" and b.poll() is None,
           "a second exec on a busy context waits (a queue, not a busy error)",
           f"queued {c.get('queued')}, state {c.get('state')}, kernelctl exit {b.poll()}")

    # Another context runs in parallel: it releases the first one's cell.
    r = d.ctl("exec", "small", f"open({flag!r}, 'w').close(); 'released'", timeout=30)
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "'released'"), "another context runs meanwhile")
    rc_a, out_a, err_a = finish(a)
    rc_b, out_b, err_b = finish(b)
    tap.eq(rc_a, 0, "the first exec completes", err_a)
    tap.eq((rc_b, out_b.split("\n")[0]), (0, "['a0', 'a1', 'b']"), "the second ran after the first, whole",
           err_b)

    # Two at once from the start: both complete, one after the other.
    cell = ("import os, time\nlog.append('{0}0')\n"
            f"while not os.path.exists({flag2!r}): time.sleep(0.01)\n" "log.append('{0}1')")
    log_reset = d.ctl("exec", "default", "log = []")
    tap.eq(log_reset.returncode, 0, "reset the log")
    p1 = popen_ctl(d, "exec", "default", cell.format("p"))
    p2 = popen_ctl(d, "exec", "default", cell.format("q"))
    d.wait_state("default", "busy")
    open(flag2, "w").close()
    r1, r2 = finish(p1), finish(p2)
    tap.eq((r1[0], r2[0]), (0, 0), "two concurrent execs both complete", r1[2] + r2[2])
    r = d.ctl("exec", "default", "log")
    tap.ok(r.stdout.split("\n")[0] in ("['p0', 'p1', 'q0', 'q1']", "['q0', 'q1', 'p0', 'p1']"),
           "two concurrent execs were serialized", repr(r.stdout))


def test_timeout_while_resent(tap, d):
    """A cell the kernel aborted unrun (sent just after one that raised: ipykernel's stop_on_error) waits to be
    sent again; a timeout then withdraws it, and the context is free again at once (it stayed busy for good)."""
    r = d.ctl("exec", "default", "get_ipython().kernel.stop_on_error_timeout = 3.0")
    tap.eq(r.returncode, 0, "the kernel aborts what comes within 3 s of an error", r.stderr)
    flag = os.path.join(d.tmp, "raise")
    a = popen_ctl(d, "exec", "default",
                  f"import os, time\nwhile not os.path.exists({flag!r}): time.sleep(0.01)\nraise ValueError('A')")
    d.wait_state("default", "busy")
    b = popen_ctl(d, "--timeout", "1.2", "exec", "default", "resent = 1")
    harness.poll_until(lambda: d.context("default"), 30, "the second cell to be queued",
                       check=lambda c: c.get("queued") == 1 or b.poll() is not None)
    open(flag, "w").close()
    rc_a, _, err_a = finish(a)
    rc_b, out_b, err_b = finish(b)
    tap.eq(rc_a, 7, "the first cell raised: exit 7", err_a)
    tap.eq((rc_b, last_line(out_b)), (11, "[not started: timeout]"), "the aborted cell at its timeout: not started",
           out_b + err_b)
    tap.contains(err_b, "aborted it unrun each time it was sent", "its stderr says the kernel aborted it")
    c = d.wait_state("default", "ready", timeout=10)
    tap.eq((c.get("running"), c.get("queued")), (None, 0), "then the context is ready, nothing running")
    time.sleep(3.2)  # past the kernel's window of aborting
    r = d.ctl("exec", "default", "get_ipython().kernel.stop_on_error_timeout = 0.0\n'resent' in dir()")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "False"), "a later cell runs; the withdrawn one never ran",
           r.stdout + r.stderr)


def test_outputs(tap, d):
    have_mpl = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode == 0
    if have_mpl:
        rc, j = d.ctl_json("exec", "default", "import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()",
                           timeout=120)
        outs = (j or {}).get("outputs") or []
        png = [o for o in outs if o.get("output_type") == "display_data" and "image/png" in o.get("data", {})]
        tap.eq(rc, 0, "matplotlib: exit 0")
        tap.ok(png and isinstance(png[0]["data"]["image/png"], str) and len(png[0]["data"]["image/png"]) > 100,
               "matplotlib: a display_data with image/png", repr(outs)[:300])
        r = d.ctl("exec", "default", "plt.plot([2,1]); plt.show()")
        tap.ok(r.returncode == 0 and re.match(r"\[image/png \d+(\.\d)? KB\]\n", r.stdout) and "Figure" not in r.stdout,
               "matplotlib in text mode: the image named with its size, its <Figure> placeholder left out",
               repr(r.stdout[:200]))
    else:
        tap.skip("matplotlib: image/png", "/usr/bin/python3 has no matplotlib")
    r = d.ctl("exec", "default", "from IPython.display import display\ndisplay({'image/png': 'AAAA'}, raw=True)")
    tap.eq(r.stdout.split("\n")[0], "[image/png 3 B]", "a display without text/plain is named by its MIME type and size")

    rc, j = d.ctl_json("exec", "small", "print('x' * 5_000_000)\nprint('after')\nz = 1", timeout=60)
    outs = (j or {}).get("outputs") or []
    kept = sum(len(o.get("text", "")) for o in outs)
    tap.eq((rc, (j or {}).get("status")), (0, "ok"), "huge print: the cell ran to its end")
    tap.ok(text_of(outs, "stderr").count(MARKER) == 1, "huge print: the marker, once", repr(outs)[-300:])
    cut = "[output truncated: 4934471 more bytes not kept]\n"  # 5,000,001 + 6 printed, 65536 kept
    tap.ok(text_of(outs, "stderr").endswith(cut), "huge print: the last output says how much was cut",
           repr(outs)[-300:])
    # output_limit = 64K (kernelsup.ini(5)): exactly 65536 bytes of stdout kept, then the marker and the count.
    tap.eq((len(text_of(outs, "stdout")), kept), (65536, 65536 + len(MARKER) + len(cut)),
           "huge print: cut at the limit (65536 bytes of stdout kept, nothing else but the two lines)")
    r = d.ctl("exec", "small", "z")
    tap.eq(r.stdout.split("\n")[0], "1", "huge print: the code after it ran")
    r = d.ctl("exec", "small", "print('y' * 1_000_000)", timeout=60)
    tap.ok(r.returncode == 0 and r.stdout.startswith("y" * 65536) and "y" * 65537 not in r.stdout and
           MARKER.strip() in r.stderr, "huge print in text mode: 65536 bytes kept, with the marker",
           f"stdout {len(r.stdout)} bytes: {r.stdout[65530:65600]!r}, stderr {r.stderr[-300:]!r}")


def test_errors(tap, d):
    r = d.ctl("exec", "nosuch", "1")
    tap.eq(r.returncode, 5, "exec on an unknown context: exit 5", r.stderr)
    r = d.ctl("exec", "off", "1")
    tap.eq(r.returncode, 1, "exec on a stopped context: exit 1")
    tap.contains(r.stderr, "context off is not running (state stopped", "exec on a stopped context: says so")
    r = d.ctl("exec", "default", "1", socket_path=os.path.join(d.tmp, "nosock"))
    tap.eq(r.returncode, 3, "exec without a daemon: exit 3")
    r = d.ctl("exec", "bad/name", "1")
    tap.eq(r.returncode, 2, "exec with a bad context name: exit 2")
    r = d.ctl("status", "--stream")
    tap.eq(r.returncode, 2, "--stream belongs to exec: exit 2")
    r = d.ctl("interrupt", "nosuch")
    tap.eq(r.returncode, 5, "interrupt on an unknown context: exit 5")


def test_stop_under_cells(tap, d):
    a = popen_ctl(d, "exec", "small", SPIN)
    read_line(a)
    b = popen_ctl(d, "exec", "small", "1")
    harness.wait_until(lambda: d.context("small"), 30, "b queued behind a", check=lambda c: c.get("queued") == 1)
    r = d.ctl("stop", "small", timeout=60)
    tap.eq(r.returncode, 0, "stop a context under a running and a queued cell", r.stderr)
    rc_a, out_a, err_a = finish(a)
    rc_b, out_b, err_b = finish(b)
    tap.eq(rc_a, 1, "the running cell: exit 1", err_a)
    tap.ok(last_line(out_a) in ("[died: no kernel]",), "the running cell: [died: no kernel]", repr(out_a))
    tap.contains(err_a, "context small stopped", "the running cell: the message says the context stopped")
    tap.eq((rc_b, last_line(out_b)), (1, "[aborted]"), "the queued cell: aborted, exit 1", err_b)
    tap.contains(err_b, "did not run", "the queued cell: the message says it did not run")
    r = d.ctl("start", "small", timeout=60)
    tap.eq(r.returncode, 0, "the context starts again", r.stderr)
    r = d.ctl("exec", "small", "'back'")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "'back'"), "and runs cells")


def test_check_wait(tap, d):
    c = d.context("default")
    kid = c["kernel_id"]
    r = d.ctl("check", "default", "--expect", kid)
    tap.eq(r.returncode, 0, "check --expect the same kernel: exit 0", r.stderr)
    tap.eq(r.stdout, f"default: ready pid {c['pid']} kernel_id {kid} incarnation {c['incarnation']} generation "
                     f"{d.status()['supervisor']['generation']}: same kernel, namespace intact\n",
           "check --expect: the line says the same kernel")
    r = d.ctl("check", "default")
    tap.ok(r.returncode == 0 and r.stdout.startswith("default: ready pid ") and r.stdout.endswith(
        f"generation {d.status()['supervisor']['generation']}\n"), "check without --expect: ready", repr(r.stdout))
    rc, j = d.ctl_json("check", "default", "--expect", "00000000-0000-4000-8000-000000000000")
    tap.eq(rc, 8, "check --expect another kernel: exit 8")
    j = j or {}
    tap.eq((j.get("verdict"), j.get("expected")), ("replaced", "00000000-0000-4000-8000-000000000000"),
           "check --json: verdict replaced, expected")
    tap.ok(isinstance(j.get("context"), dict) and isinstance(j.get("supervisor"), dict),
           "check --json: context and supervisor objects")
    r = d.ctl("check", "nosuch")
    tap.eq(r.returncode, 5, "check an unknown context: exit 5")
    r = d.ctl("check", "off", "--timeout", "1")
    tap.eq(r.returncode, 6, "check a stopped context: exit 6", r.stderr)
    tap.ok(r.stdout.startswith("off: not ready within 1 s (state stopped"), "check: says it is not ready",
           repr(r.stdout))
    r = d.ctl("wait")
    tap.eq(r.returncode, 0, "wait for the autostart contexts: exit 0", r.stderr)
    r = d.ctl("wait", "default", "off", "--timeout", "1")
    tap.eq(r.returncode, 6, "wait for a stopped context: exit 6")
    tap.contains(r.stderr, "off: not ready", "wait names the context that is not ready")
    tap.ok("default: not ready" not in r.stderr, "wait does not name the ready one", r.stderr)
    for cmd in ("check", "wait"):
        r = d.ctl(cmd, *(["default"] if cmd == "check" else []), "--timeout", "1",
                  socket_path=os.path.join(d.tmp, "nosock"))
        tap.eq(r.returncode, 3, f"{cmd} without a daemon: exit 3 after the timeout", r.stderr)


def test_death(tap, d):
    before = d.context("default")
    d.ctl("exec", "default", "x = 41")
    p = popen_ctl(d, "exec", "default", SPIN)
    read_line(p)
    os.kill(before["pid"], signal.SIGKILL)
    rc, out, err = finish(p, timeout=60)
    after = d.wait_context("default", lambda c: c.get("state") == "ready" and c.get("pid") != before["pid"],
                           "a new kernel ready")
    tap.eq(rc, 1, "kernel killed mid-cell: exit 1", err)
    tap.contains(err, "the kernel died while running the cell (killed by SIGKILL)",
                 "kernel killed mid-cell: a clear message")
    tap.eq(last_line(out), f"[died: kernel now {after['kernel_id']}]", "kernel killed mid-cell: names the new kernel")
    tap.contains(err, after["kernel_id"], "the message names the new kernel_id")
    r = d.ctl("exec", "default", "x")
    tap.eq(r.returncode, 7, "the next exec runs on the new kernel: x is gone (exit 7)")
    tap.contains(r.stderr, "NameError", "NameError")
    r = d.ctl("exec", "default", "y = 2; y")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "2"), "the new kernel runs cells")
    r = d.ctl("check", "default", "--expect", before["kernel_id"])
    tap.eq(r.returncode, 8, "check --expect the old kernel: exit 8")
    tap.ok(r.stdout.endswith(f": kernel replaced (expected {before['kernel_id']}), namespace empty\n"),
           "check: says the kernel was replaced", repr(r.stdout))

    # --stream for a died cell: the outputs as they came, then the error's data and the message.
    p = popen_ctl(d, "exec", "default", SPIN, "--stream")
    first = read_line(p)
    tap.eq(json.loads(first), {"output_type": "stream", "name": "stdout", "text": "spinning\n"},
           "--stream: the first output as it arrives")
    os.kill(after["pid"], signal.SIGKILL)
    rc, out, err = finish(p, timeout=60)
    try:
        j = json.loads(last_line(out))
    except ValueError:
        j = {}
    third = d.wait_context("default", lambda c: c.get("state") == "ready" and c.get("pid") != after["pid"],
                           "a third kernel ready")
    tap.eq((rc, j.get("status"), j.get("kernel_id")), (1, "died", third["kernel_id"]),
           "--stream for a died cell: status died, the new kernel_id", out[:500])
    tap.contains(j.get("message"), "killed by SIGKILL", "--stream for a died cell: the message")
    tap.eq(text_of(j.get("outputs")), "spinning\n", "--stream for a died cell: the outputs so far")


def wchan(pid):
    """Where in the kernel pid sleeps ("hrtimer_nanosleep" in nanosleep), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return None


def test(tap):
    # check and wait started before the daemon: they retry connecting.
    d = harness.Daemon(tap, contexts=contexts())
    early_check = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "check", "default", "--timeout",
                                    str(int(harness.scaled(60)))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
    early_wait = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "wait", "--timeout",
                                   str(int(harness.scaled(60)))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
    # Started before the daemon means: each has tried to connect, found no daemon, and sleeps before retrying.
    retrying = harness.poll_until(lambda: [wchan(p.pid) for p in (early_check, early_wait)], 30,
                                  "check and wait to sleep between connection attempts",
                                  check=lambda w: w == ["hrtimer_nanosleep"] * 2)
    tap.eq(retrying, ["hrtimer_nanosleep"] * 2, "check and wait started before the daemon: they wait to retry",
           f"exit codes {early_check.poll()}, {early_wait.poll()}")
    d.start()
    out, err = early_check.communicate(timeout=harness.scaled(90))
    tap.eq(early_check.returncode, 0, "check started before the daemon: waits for it, exit 0", err)
    tap.ok(out.startswith("default: ready pid "), "check started before the daemon: ready", repr(out))
    out, err = early_wait.communicate(timeout=harness.scaled(90))
    tap.eq(early_wait.returncode, 0, "wait started before the daemon: exit 0", err)
    d.wait_state("small", "ready")

    with tap.guard("basics"):
        test_basics(tap, d)
    with tap.guard("timeout and interrupt"):
        test_timeout_and_interrupt(tap, d)
    with tap.guard("queue"):
        test_queue(tap, d)
    with tap.guard("timeout while resent"):
        test_timeout_while_resent(tap, d)
    with tap.guard("outputs"):
        test_outputs(tap, d)
    with tap.guard("errors"):
        test_errors(tap, d)
    with tap.guard("stop under cells"):
        test_stop_under_cells(tap, d)
    with tap.guard("check and wait"):
        test_check_wait(tap, d)
    with tap.guard("death"):
        test_death(tap, d)
    d.stop()


harness.main(test)
