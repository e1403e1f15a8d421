"""Real kernels under the daemon, each named by its kernelspec (kernel = NAME): ipykernel (python3), xeus-python
(xpython), IRkernel (ir) and tslab's JavaScript (jslab) and TypeScript (tslab) kernels. For each: ready, a minute
idle without unresponsive or a missed heartbeat (all kernels at once), a cell with stdout and a result, an error,
an interrupt that keeps the namespace, --timeout, check --expect 0 and 8 around a restart. input() (readline() in
R) ends at once rather than waiting for stdin until the cell's timeout: ipykernel and xeus-python raise (the
request says allow_stdin false), IRkernel asks all the same and gets an empty value, and the cell a note.

./run-tests installs the kernels (ks_install_kernels in tools/deps.sh) into $KS_KERNEL_CACHE and writes
NAME.status there: a kernel that could not be installed is a skip saying why. The matrix is heavy: it runs in the
normal build only, and skips (77, saying so) in the sanitizer build and under make distcheck."""

import concurrent.futures
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CACHE = os.environ.get("KS_KERNEL_CACHE") or os.path.join(harness.BUILDDIR, "kernel-cache")
TSLAB_JUPYTER = os.path.join(CACHE, "npm", "prefix", "share", "jupyter")
IJS_JUPYTER = os.path.join(CACHE, "ijs", "prefix", "share", "jupyter")  # ks_install_ijavascript's
JUPYTER_PATH = f"{TSLAB_JUPYTER}:{IJS_JUPYTER}"
AUTO_TCP = "auto: a kernel not known to bind Unix sockets; tcp is what every Jupyter kernel supports"
IDLE_SECONDS = int(os.environ.get("KS_KERNELS_IDLE_SECONDS", "65"))  # shorter only while developing the test
# KS_KERNELS=jslab,tslab runs only those of the matrix (to run one part again and again); the others are skips.
NO_INPUT = "[kernelsup: input() is not available: cells run without stdin]"
SELECTED = [n for n in os.environ.get("KS_KERNELS", "").replace(",", " ").split() if n]

# Per kernel: the code of each step in its language, and the transport that transport = auto (no setting: every
# kernel runs without one) must pick, with status's reason.
KERNELS = {
    "python3": dict(
        transport=("ipc", "auto: ipykernel binds Unix sockets"), language="python", stdout='print("hello"); 6 * 7', result="42", error="1/0", error_text="ZeroDivisionError",
        set="kept = 41 + 1", get="print(kept)", sleep="import time; time.sleep(60)",
        started='print("started", flush=True)\nimport time; time.sleep(60)',
        input='x = input("? "); print("got[" + x + "]")', input_ends=(7, "StdinNotImplementedError")),
    # xeus-python cannot bind ipc endpoints (libzmq: Invalid argument), and tslab makes them "ipc://PATH:PORT"
    # (jupyter_client's are PATH-PORT, so no client finds them): auto puts those on tcp.
    "xpython": dict(
        transport=("tcp", "auto: xeus-python aborts on an ipc endpoint"), language="python", stdout='print("hello"); 6 * 7', result="42", error="1/0", error_text="ZeroDivisionError",
        set="kept = 41 + 1", get="print(kept)", sleep="import time; time.sleep(60)",
        started='print("started", flush=True)\nimport time; time.sleep(60)',
        input='x = input("? "); print("got[" + x + "]")', input_ends=(7, "")),
    # IRkernel's result comes as text/markdown "42" beside text/plain "[1] 42": the text shows the markdown.
    "ir": dict(
        transport=("ipc", "auto: IRkernel binds Unix sockets"), language="R", stdout='cat("hello\\n"); 6 * 7', result="42", error='stop("boom")', error_text="boom",
        set="kept <- 41 + 1", get="cat(kept, '\\n')", sleep="Sys.sleep(60)", interrupted=(10, "[aborted]"),
        started='cat("started\\n")\nSys.sleep(60)',
        input='x <- readline("? "); cat("got[", x, "]\\n", sep="")', input_ends=(0, "got[]"), input_note=True),
    "jslab": dict(
        transport=("tcp", "auto: tslab writes ipc endpoints that no client finds"), language="javascript", stdout='console.log("hello"); 6 * 7', result="42", error='throw new Error("boom")',
        error_text="boom", set="var kept = 41 + 1", get="console.log(kept)",
        sleep="await new Promise(r => setTimeout(r, 60000))",
        started='console.log("started");\nawait new Promise(r => setTimeout(r, 60000))'),
    "tslab": dict(
        transport=("tcp", "auto: tslab writes ipc endpoints that no client finds"), language="typescript", stdout='console.log("hello"); const n: number = 6 * 7; n', result="42",
        error='throw new Error("boom")', error_text="boom", set="let kept: number = 41 + 1",
        get="console.log(kept)", sleep="await new Promise(r => setTimeout(r, 60000))",
        started='console.log("started");\nawait new Promise(r => setTimeout(r, 60000))'),
    # ijavascript answers SIGINT by starting an empty session in the same process: the daemon restarts it
    # instead, so that check --expect says 8 (namespace lost) rather than vouching for the same pid.
    "ijavascript": dict(
        transport=("tcp", "auto: ijavascript cannot bind an ipc endpoint"), language="javascript",
        stdout='console.log("hello"); 6 * 7', result="42", error='throw new Error("boom")', error_text="boom",
        set="var kept = 41 + 1", get="console.log(kept)",
        sleep='require("child_process").execSync("sleep 60")',
        started='console.log("started");\nrequire("child_process").execSync("sleep 60")', resets=True),
}


def why_missing(name):
    """None when the kernel is installed, else why not (from ks_install_kernels' status file)."""
    status_name = "tslab" if name in ("jslab", "tslab") else name
    if name == "python3":
        return None if os.path.exists("/usr/lib/python3/dist-packages/ipykernel") else "Debian's ipykernel is missing"
    spec = {"xpython": "/usr/share/jupyter/kernels/xpython/kernel.json",
            "ir": "/usr/share/jupyter/kernels/ir/kernel.json",
            "ijavascript": os.path.join(IJS_JUPYTER, "kernels", name, "kernel.json")}.get(name) or \
        os.path.join(TSLAB_JUPYTER, "kernels", name, "kernel.json")
    if os.path.exists(spec):
        return None
    try:
        with open(os.path.join(CACHE, f"{status_name}.status")) as f:
            status = f.read().strip()
    except OSError:
        status = ""
    if status.startswith("skip:"):
        return status[len("skip:"):].strip()
    return f"{spec} is not installed (./run-tests installs it: ks_install_kernels in tools/deps.sh)"


class Results:
    """The points of one kernel, gathered in its thread and printed in order afterwards."""

    def __init__(self, name):
        self.name, self.points = name, []

    def ok(self, cond, what, diag=None):
        self.points.append((bool(cond), f"{self.name}: {what}", diag))
        return bool(cond)


def ctl(d, *args, timeout=60):
    return d.ctl(*args, timeout=timeout)


def matrix(d, name, k):
    """The steps after the idle minute, for one kernel; returns its Results."""
    res = Results(name)
    try:
        steps(d, name, k, res)
    except Exception as e:  # noqa: BLE001 - reported as a point of its own
        res.ok(False, f"the steps ran to their end ({type(e).__name__})", harness._format_exc(e))
    return res


def steps(d, name, k, res):
    r = ctl(d, "exec", name, k["stdout"])
    res.ok(r.returncode == 0, "a cell with stdout and a result exits 0", f"{r.stdout!r} {r.stderr!r}")
    res.ok("hello" in r.stdout, "its stdout is shown", r.stdout)
    res.ok(k["result"] in r.stdout, f"its result {k['result']} is shown", r.stdout)
    res.ok(re.search(r"^\[ok #\d+\]$", r.stdout, re.M), "it ends [ok #N]", r.stdout)

    r = ctl(d, "exec", name, k["error"])
    res.ok(r.returncode == 7, "a cell that raises exits 7", f"{r.returncode} {r.stdout!r} {r.stderr!r}")
    res.ok(k["error_text"] in r.stdout + r.stderr, f"the error names {k['error_text']}", f"{r.stdout!r} {r.stderr!r}")
    res.ok(re.search(r"^\[error( #\d+)?\]$", r.stdout, re.M), "it ends [error ...]", r.stdout)

    if "input" in k:
        read_input(d, name, k, res)

    r = ctl(d, "exec", name, k["set"])
    res.ok(r.returncode == 0, "a variable is set", f"{r.stdout!r} {r.stderr!r}")
    pid, kid0 = d.context(name)["pid"], d.context(name)["kernel_id"]

    # An interrupt ends the running cell and keeps the namespace and the kernel. It is sent once the cell has
    # printed "started": a kernel that says busy has not always entered the cell's code yet, and a SIGINT
    # before that is the kernel's own to handle (ipykernel logs it, R in --slave mode halts).
    p = subprocess.Popen([harness.KERNELCTL, "--socket", d.socket, "exec", name, k["started"]],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
        reader.start()
        harness.wait_until(lambda: list(lines), 30, "the long cell to print started",
                           check=lambda ls: any("started" in line for line in ls))
        r = ctl(d, "interrupt", name)
        res.ok(r.stdout.strip() == "interrupted", "kernelctl interrupt: interrupted", f"{r.stdout!r} {r.stderr!r}")
        p.wait(timeout=harness.scaled(30))
        reader.join(timeout=harness.scaled(10))
        out, err = "".join(lines), p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if k.get("resets"):
        interrupt_resets(d, name, k, res, kid0, p.returncode, out, err)
        return
    # ipykernel, xeus-python and tslab end it with an error; IRkernel answers it "aborted" ([aborted], exit 10).
    code, summary = k.get("interrupted", (7, "[error"))
    res.ok(p.returncode == code and summary in out, f"the interrupted cell ends {summary}... (exit {code})",
           f"{p.returncode} {out!r} {err!r}")
    c = d.wait_state(name, ("ready", "backoff", "starting", "failed"), timeout=30)
    res.ok(c["state"] == "ready" and c["pid"] == pid, "the same kernel is ready after the interrupt",
           f"{c['state']} pid {c['pid']} (was {pid})")
    r = ctl(d, "exec", name, k["get"])
    res.ok(r.returncode == 0 and "42" in r.stdout, "the namespace survived the interrupt", f"{r.stdout!r} {r.stderr!r}")

    # --timeout interrupts the cell; the namespace stays.
    r = ctl(d, "exec", "--timeout", "2", name, k["sleep"])
    res.ok(r.returncode == 6, "exec --timeout 2 of a long cell exits 6", f"{r.returncode} {r.stdout!r} {r.stderr!r}")
    res.ok(re.search(r"^\[timeout( #\d+)?\]$", r.stdout, re.M), "it ends [timeout ...]", r.stdout)
    d.wait_state(name, "ready", timeout=30)
    r = ctl(d, "exec", name, k["get"])
    res.ok(r.returncode == 0 and "42" in r.stdout, "the namespace survived the timeout", f"{r.stdout!r} {r.stderr!r}")

    check_and_restart(d, name, k, res)


def read_input(d, name, k, res):
    """input() ends long before the cell's timeout (exit 6 would be a cell that waited for stdin until then)."""
    code, text = k["input_ends"]
    r = ctl(d, "exec", "--timeout", "100", name, k["input"], timeout=150)
    out = r.stdout + r.stderr
    res.ok(r.returncode == code and text in out, f"input(): the cell ends at once, exit {code}" +
           (f", {text}" if text else ""), f"{r.returncode} {r.stdout!r} {r.stderr!r}")
    if k.get("input_note"):
        res.ok(r.stderr.count(NO_INPUT) == 1, "input(): the cell says once that input is not available",
               f"{r.stdout!r} {r.stderr!r}")
    d.wait_state(name, "ready", timeout=30)


def interrupt_resets(d, name, k, res, kid0, code, out, err):
    """A kernel whose interrupt empties its namespace (ijavascript): never 'same kernel, namespace intact'."""
    res.ok(code != 0 and not re.search(r"^\[ok", out, re.M), "the interrupted cell does not end [ok]",
           f"{code} {out!r} {err!r}")
    c = d.wait_state(name, "ready", timeout=60)
    res.ok(c["kernel_id"] != kid0, "after the interrupt: another kernel_id (the namespace was emptied)",
           c["kernel_id"])
    r = ctl(d, "check", name, "--expect", kid0)
    res.ok(r.returncode == 8, "check --expect of the kernel before the interrupt exits 8 (namespace lost)",
           f"{r.returncode} {r.stdout!r} {r.stderr!r}")
    r = ctl(d, "exec", name, k["get"])
    res.ok("42" not in r.stdout, "the variable is indeed gone", f"{r.stdout!r} {r.stderr!r}")
    r = ctl(d, "exec", name, k["set"])
    kid = d.context(name)["kernel_id"]
    r = ctl(d, "exec", "--timeout", "2", name, k["sleep"])
    res.ok(r.returncode != 0, "exec --timeout 2 of a long cell does not end ok", f"{r.returncode} {r.stdout!r}")
    d.wait_state(name, "ready", timeout=60)
    r = ctl(d, "check", name, "--expect", kid)
    res.ok(r.returncode == 8, "check --expect after the timeout's interrupt exits 8", f"{r.returncode} {r.stdout!r}")
    check_and_restart(d, name, k, res)


def check_and_restart(d, name, k, res):
    # check --expect: 0 for the running kernel, 8 for the one a restart replaced.
    kid = d.context(name)["kernel_id"]
    r = ctl(d, "check", name, "--expect", kid)
    res.ok(r.returncode == 0, "check --expect of the running kernel exits 0", f"{r.stdout!r} {r.stderr!r}")
    r = ctl(d, "restart", name, timeout=120)
    res.ok(r.returncode == 0, "restart exits 0", f"{r.stdout!r} {r.stderr!r}")
    c = d.wait_state(name, "ready", timeout=120)
    res.ok(c["kernel_id"] != kid, "restart: a new kernel", c["kernel_id"])
    r = ctl(d, "check", name, "--expect", kid)
    res.ok(r.returncode == 8, "check --expect of the replaced kernel exits 8", f"{r.returncode} {r.stdout!r}")
    r = ctl(d, "exec", name, k["stdout"])
    res.ok(r.returncode == 0 and k["result"] in r.stdout, "the new kernel runs a cell", f"{r.stdout!r} {r.stderr!r}")


def test(tap):
    other = harness.not_normal_build()
    if other:
        tap.skip_all(f"the kernel matrix runs in the normal build only: {other}")
    unknown = [n for n in SELECTED if n not in KERNELS]
    if unknown:
        tap.ok(False, "KS_KERNELS names kernels of the matrix", f"unknown: {unknown}; the matrix has {list(KERNELS)}")
    present = {}
    for name in KERNELS:
        why = f"not selected: KS_KERNELS={','.join(SELECTED)}" if SELECTED and name not in SELECTED else \
            why_missing(name)
        if why:
            tap.skip(f"{name}: the matrix", why)
        else:
            present[name] = KERNELS[name]
    if not present:
        tap.skip_all("no kernel of the matrix is installed")

    d = harness.Daemon(tap, contexts="", defaults=f"env = JUPYTER_PATH={JUPYTER_PATH}\nstart_timeout = 120s\n")
    # tslab's TypeScript compiler watches the kernel's cwd: a file changed there (the home of a busy user) makes
    # its next cell fail ("Unexpected pending rebuildTimer"). Each context gets a quiet directory of its own.
    contexts = ""
    for name, k in present.items():
        cwd = os.path.join(d.tmp, f"cwd-{name}")
        os.makedirs(cwd)
        contexts += f"[context:{name}]\nkernel = {name}\ncwd = {cwd}\n\n"  # no transport: auto
    d.write_config(contexts, defaults=f"env = JUPYTER_PATH={JUPYTER_PATH}\nstart_timeout = 120s\n")
    d.start()
    d.wait_all_ready(list(present), timeout=180)
    st = {c["name"]: c for c in d.status()["contexts"]}
    for name, k in present.items():
        c = st.get(name, {})
        tap.eq((c.get("state"), c.get("kernel"), c.get("language")), ("ready", name, k["language"]),
               f"{name}: ready, with its kernelspec's name and language")
        tap.eq((c.get("transport"), c.get("transport_why")), k["transport"],
               f"{name}: with no transport set, auto chose {k['transport'][0]}, and status says why")

    # A minute idle, every kernel at once: no unresponsive, no missed heartbeat (5 s apart: 13 beats each).
    mark = d.log_mark()
    seen = {name: set() for name in present}
    end = time.monotonic() + IDLE_SECONDS
    while time.monotonic() < end:
        for c in d.status()["contexts"]:
            if c["name"] in seen:
                seen[c["name"]].add(c["state"])
        time.sleep(1)
    log = d.log_since(mark)
    for name in present:
        tap.eq(sorted(seen[name]), ["ready"], f"{name}: ready throughout {IDLE_SECONDS} s idle")
        # "warning: ir: kernel K missed 3 heartbeats; unresponsive", and any other word of its heartbeat.
        missed = [line for line in log.splitlines() if f" {name}: " in f" {line}" and "heartbeat" in line]
        tap.eq(missed, [], f"{name}: no missed heartbeat in {IDLE_SECONDS} s idle")

    # The steps, the kernels in parallel (each a few cells and a restart).
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(present)) as pool:
        results = list(pool.map(lambda item: matrix(d, *item), present.items()))
    for res in results:
        for cond, what, diag in res.points:
            tap.ok(cond, what, diag)
    d.stop()
    d.check_log()


harness.main(test)
