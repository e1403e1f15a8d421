"""Kernel text that is not what jansson accepts, from a real ipykernel, reaches the caller as jupyter_client
shows it, with U+FFFD for each bad unit (doc/design.md, "Text that is not valid Unicode"): a lone surrogate (a
file name decoded with surrogateescape) in print, display and an exception, on exec's text, --json and --stream;
a NUL in output and in an exception, kept; under restore = replay an exception holding a NUL is journaled error
and the replay after a kill -9 runs the later cells; a session username holding a NUL does not wedge the kernel;
kernelctl history shows an outside client's surrogate code with U+FFFD; ipykernel 6.17's pipe watcher survives a
subprocess's invalid UTF-8 and a multi-byte character cut at its 1000-byte reads."""

import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FFFD = "\ufffd"
CONTEXTS = "[context:t]\n\n[context:r]\nrestore = replay\nrestore_timeout = 120s\n"
SURROGATE_PRINT = "print('before'); print('bad: \\udcff'); print('after')"
SURROGATE_WANT = f"before\nbad: {FFFD}\nafter\n"


def parse_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return {}


def stream_text(outputs, name="stdout"):
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o.get("name") == name)


ESCAPED = """import json, sys
from jupyter_client.jsonutil import json_default
_s = get_ipython().kernel.session
_p = _s.pack
_s.pack = lambda o: json.dumps(o, default=json_default).encode()
try:
    {}
    sys.stdout.flush()
finally:
    _s.pack = _p
"""


def test_surrogates(tap, d):
    r = d.ctl("exec", "t", SURROGATE_PRINT)
    tap.eq((r.returncode, r.stdout), (0, SURROGATE_WANT + "[ok #1]\n"),
           "text: a lone surrogate between two good lines: all three, the bad one with U+FFFD", r.stderr)
    r = d.ctl("exec", "t", SURROGATE_PRINT, "--json")
    j = parse_json(r.stdout)
    tap.eq((r.returncode, j.get("status"), stream_text(j.get("outputs", []))), (0, "ok", SURROGATE_WANT),
           "--json: the three lines, U+FFFD", r.stdout[-500:])
    r = d.ctl("exec", "t", SURROGATE_PRINT, "--stream")
    lines = [parse_json(x) for x in r.stdout.splitlines()]
    streamed = "".join(x.get("text", "") for x in lines if x.get("output_type") == "stream")
    tap.eq((r.returncode, streamed), (0, SURROGATE_WANT), "--stream: the three lines, U+FFFD", r.stdout[-500:])
    tap.eq(lines[-1].get("status") if lines else None, "ok", "--stream: the summary says ok")

    # What a DataFrame of such names sends: text/html and text/plain, both with the surrogate.
    r = d.ctl("exec", "t", "display({'text/plain': 'caf\\udce9.txt', 'text/html': '<td>caf\\udce9.txt</td>'}, raw=True)",
              "--json")
    j = parse_json(r.stdout)
    data = [o.get("data", {}) for o in j.get("outputs", []) if o.get("output_type") == "display_data"]
    tap.eq(data, [{"text/plain": f"caf{FFFD}.txt", "text/html": f"<td>caf{FFFD}.txt</td>"}],
           "display_data with a surrogate in two MIME types: both arrive, with U+FFFD", r.stdout[-500:])
    r = d.ctl("exec", "t", "display({'text/plain': 'caf\\udce9.txt'}, raw=True)")
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, f"caf{FFFD}.txt"), "text: the display's text/plain")

    # A kernel whose session writes JSON with ensure_ascii (as Python's json does by default): the escape.
    r = d.ctl("exec", "t", ESCAPED.format(SURROGATE_PRINT), "--json")
    j = parse_json(r.stdout)
    tap.eq((r.returncode, stream_text(j.get("outputs", []))), (0, SURROGATE_WANT),
           "a kernel that sends the \\udcff escape: the three lines, U+FFFD", r.stdout[-500:])

    r = d.ctl("exec", "t", "raise ValueError('name \\udcff')")
    tap.eq(r.returncode, 7, "raise ValueError('name \\udcff'): exit 7, an error", r.stdout + r.stderr)
    tap.contains(r.stderr, f"ValueError: name {FFFD}", "the error's text with U+FFFD")
    tap.ok("[error" in r.stdout + r.stderr, "the summary is [error]", r.stdout + r.stderr)


def test_nul(tap, d):
    r = d.ctl("exec", "t", "print('before'); print('a\\x00b'); print('after')")
    tap.eq((r.returncode, r.stdout.split("[ok")[0]), (0, "before\na\x00b\nafter\n"),
           "text: a NUL in output is kept as the byte, the lines around it too", repr(r.stdout))
    r = d.ctl("exec", "t", "print('a\\x00b')", "--json")
    tap.ok('"a\\u0000b\\n"' in r.stdout, "--json: the NUL as \\u0000", r.stdout[-300:])
    r = d.ctl("exec", "t", "display({'text/plain': 'd\\x00d'}, raw=True)", "--json")
    j = parse_json(r.stdout)
    data = [o.get("data", {}).get("text/plain") for o in j.get("outputs", []) if o.get("output_type") == "display_data"]
    tap.eq(data, ["d\x00d"], "display_data holding a NUL arrives", r.stdout[-300:])
    r = d.ctl("exec", "t", "raise ValueError('bad\\x00byte')")
    tap.eq(r.returncode, 7, "raise ValueError('bad\\x00byte'): exit 7", r.stdout + r.stderr)
    tap.contains(r.stderr, "ValueError: bad\x00byte", "the error's text with its NUL")
    rc, j = d.ctl_json("exec", "t", "raise ValueError('bad\\x00byte')")
    errs = [o for o in j.get("outputs", []) if o.get("output_type") == "error"]
    tap.eq([e.get("evalue") for e in errs], ["bad\x00byte"], "--json: the evalue whole")


def test_replay_nul(tap, d):
    c0 = d.context("r")
    r = d.ctl("exec", "r", "raise ValueError('bad\\x00byte')")
    tap.eq(r.returncode, 7, "restore = replay: the NUL error: exit 7", r.stdout + r.stderr)
    r = d.ctl("exec", "r", "later = 41 + 1")
    tap.eq(r.returncode, 0, "a later cell runs")
    r = d.ctl("history", "r")
    tap.ok("error" in r.stdout.split("later")[0] and "ValueError" in r.stdout, "history: the NUL cell is journaled error",
           r.stdout)
    os.kill(c0["pid"], signal.SIGKILL)
    d.wait_context("r", lambda c: c.get("state") == "ready" and c.get("kernel_id") != c0["kernel_id"],
                   "a new kernel ready after kill -9", timeout=120)
    r = d.ctl("check", "r", "--expect", c0["kernel_id"])
    tap.eq(r.returncode, 9, "check --expect OLD: 9, the namespace rebuilt", r.stdout + r.stderr)
    r = d.ctl("exec", "r", "print(later)")
    tap.eq(r.stdout.split("\n")[0], "42", "the later cell's variable is back")


def test_username_nul(tap, d):
    r = d.ctl("exec", "r", "get_ipython().kernel.session.username = 'a\\x00b'", timeout=60)
    tap.eq(r.returncode, 0, "session.username with a NUL: the cell ends ok", r.stdout + r.stderr)
    r = d.ctl("exec", "r", "print(1)", timeout=60)
    tap.eq((r.returncode, r.stdout.split("\n")[0]), (0, "1"), "a later cell runs and prints", r.stdout + r.stderr)
    r = d.ctl("exec", "r", "get_ipython().kernel.session.username = 'username'", timeout=60)


def test_history_surrogate(tap, d):
    # jupyter_client writes a surrogateescape str as its raw byte (ensure_ascii=False, surrogateescape), which
    # the kernel reads as U+FFFD. (Code holding the surrogate itself, sent as an escape, is refused by IPython
    # 8: should_run_async raises and the cell gets no reply.)
    kc = harness.KernelClient(d.context("r")["connection_file"], timeout=60)
    try:
        res = kc.run("sname = 'caf\udce9.txt'; print(sname)")
    finally:
        kc.close()
    tap.eq((res["status"], res["stdout"]), ("ok", f"caf{FFFD}.txt\n"),
           "an outside client's cell with a surrogate: ok, U+FFFD in its output")
    # The daemon reads iopub in order: once its own cell has ended, the client's cell's idle was read.
    d.ctl("exec", "r", "pass")
    r = d.ctl("history", "r")
    tap.contains(r.stdout, f"sname = 'caf{FFFD}.txt'", "kernelctl history: the surrogate cell's code with U+FFFD")


def test_client_header(tap, d):
    """R4: a client header the daemon could not parse (an int over jansson's range, a NUL) hid the cell."""
    kc = harness.KernelClient(d.context("r")["connection_file"], timeout=60)
    try:
        for i, extra in enumerate((10**30, "a\x00b")):
            msg = kc.kc.session.msg("execute_request", {"code": f"hdr{i} = {i} + 1", "silent": False,
                                                        "store_history": True, "user_expressions": {},
                                                        "allow_stdin": False, "stop_on_error": True})
            msg["header"]["x"] = extra
            kc.kc.shell_channel.send(msg)
            reply = kc.kc.get_shell_msg(timeout=harness.scaled(60))
            tap.eq(reply["content"].get("status"), "ok", f"a client header holding {extra!r}: the cell ran")
    finally:
        kc.close()
    # The daemon reads iopub in order: once its own cell has ended, the client's cells' idles were read.
    d.ctl("exec", "r", "pass")
    r = d.ctl("history", "r")
    tap.contains(r.stdout, "hdr0 = 0 + 1", "history: the cell whose header held 10**30 is journaled")
    tap.contains(r.stdout, "hdr1 = 1 + 1", "history: the cell whose header held a NUL is journaled")


# The cell waits (an Event, not a sleep) until the watcher thread has handed the marker to sys.stdout.
WATCH = """import subprocess, sys, threading
seen = threading.Event()
_w = type(sys.stdout).write
def _spy(self, s, _w=_w):
    r = _w(self, s)
    if {marker!r} in s: seen.set()
    return r
type(sys.stdout).write = _spy
try:
    subprocess.run({argv!r})
    got = seen.wait(30)
finally:
    type(sys.stdout).write = _w
"""


def test_pipe_watcher(tap, d):
    argv = ["/usr/bin/python3", "-c", "print('\\u20ac' * 2000 + 'END')"]
    r = d.ctl("exec", "t", WATCH.format(marker="END", argv=argv), timeout=90)
    tap.eq((r.returncode, r.stdout.split("[ok")[0]), (0, "\u20ac" * 2000 + "END\n"),
           "a subprocess prints 2,000 x U+20AC: all of it arrives", r.stdout[-200:] + r.stderr[-300:])
    r = d.ctl("exec", "t", WATCH.format(marker="child output", argv=["echo", "child output"]), timeout=90)
    tap.eq((r.returncode, r.stdout.split("[ok")[0]), (0, "child output\n"), "a later subprocess's output arrives",
           r.stdout[-200:] + r.stderr[-300:])
    code = WATCH.replace("subprocess.run({argv!r})", "import os; os.write(1, b'bad \\xff\\xfe\\n')")
    r = d.ctl("exec", "t", code.format(marker="bad", argv=None), timeout=90)
    tap.eq((r.returncode, r.stdout.split("[ok")[0]), (0, f"bad {FFFD}{FFFD}\n"),
           "os.write(1, b'bad \\xff\\xfe\\n') arrives with U+FFFD", repr(r.stdout[-200:]) + r.stderr[-300:])
    r = d.ctl("exec", "t", WATCH.format(marker="still", argv=["echo", "still"]), timeout=90)
    tap.eq(r.stdout.split("[ok")[0], "still\n", "and subprocess output after it still arrives")


def test(tap):
    d = harness.Daemon(tap, contexts=CONTEXTS)
    d.start()
    d.wait_all_ready(["t", "r"], timeout=90)
    with tap.guard("surrogates"):
        test_surrogates(tap, d)
    with tap.guard("NUL"):
        test_nul(tap, d)
    with tap.guard("pipe watcher"):
        test_pipe_watcher(tap, d)
    with tap.guard("replay of a NUL error"):
        test_replay_nul(tap, d)
    with tap.guard("username with a NUL"):
        test_username_nul(tap, d)
    with tap.guard("client headers"):
        test_client_header(tap, d)
    with tap.guard("history of a surrogate cell"):
        test_history_surrogate(tap, d)
    d.check_log()
    d.stop()


harness.main(test)
