"""kernelctl metrics: the OpenMetrics text, read with Debian's real parser
(python3-prometheus-client's openmetrics parser), and its counters moving as the
events happen: a cell, a cell's timeout, an interrupt with a cell queued, an output
past output_limit, heartbeats a stopped kernel misses, a kill -9 of the kernel.
The daemon's own series (generation, resumes, uptime, contexts by state, control
connections, RSS) agree with status and /proc. Another uid sees only its own
contexts' series and none of the daemon-wide ones that tell about other users."""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402

try:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
except ImportError:
    text_string_to_metric_families = None

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# Small enough that a print of 5000 characters is cut; heartbeats fast enough that a stopped kernel misses some soon.
DEFAULTS = "output_limit = 1K\nheartbeat_interval = 200ms\nheartbeat_misses = 3\n"
CONTEXTS = "[context:default]\n[context:theirs]\nuser = nobody\nautostart = no\n"
FAMILIES = (
    "kernelsup_daemon", "kernelsup_daemon_generation", "kernelsup_daemon_resumes", "kernelsup_daemon_uptime_seconds",
    "kernelsup_contexts", "kernelsup_control_connections", "kernelsup_daemon_resident_memory_bytes",
    "kernelsup_context_state", "kernelsup_kernel_deaths", "kernelsup_cells", "kernelsup_cell_duration_seconds",
    "kernelsup_context_restarts", "kernelsup_kernel_oom_kills", "kernelsup_heartbeat_misses",
    "kernelsup_cells_timed_out", "kernelsup_cell_interrupts", "kernelsup_kernel_kills",
    "kernelsup_cell_output_cut_bytes",
    "kernelsup_cells_queued",
)


class Metrics:
    """One scrape: families by name, and sample values by (sample name, labels)."""

    def __init__(self, text):
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.values = {}
        for f in self.families.values():
            for s in f.samples:
                self.values[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def get(self, name, **labels):
        return self.values.get((name, tuple(sorted(labels.items()))))

    def contexts(self):
        """The context label values of every sample."""
        return {dict(labels).get("context") for (_, labels) in self.values if "context" in dict(labels)}


def scrape(d, prefix=()):
    r = d.ctl("metrics", prefix=prefix)
    if r.returncode != 0:
        raise harness.HarnessError(f"kernelctl metrics: exit {r.returncode}, stderr {r.stderr[-500:]!r}")
    return Metrics(r.stdout)


def moved(tap, d, before, name, what, by=1, **labels):
    """Waits until the sample moved by `by` from before (a scrape), and says so."""
    want = (before.get(name, **labels) or 0) + by
    try:
        m = wait_until(lambda: scrape(d), 30, f"{name}{labels} to reach {want}",
                       check=lambda m: m.get(name, **labels) == want)
    except harness.WaitTimeout as e:
        tap.ok(False, what, str(e))
        return scrape(d)
    tap.ok(True, what)
    return m


def check_format(tap, d):
    r = d.ctl("metrics")
    tap.eq(r.returncode, 0, "kernelctl metrics exits 0", r.stderr)
    tap.ok(r.stdout.endswith("# EOF\n"), "the text ends with # EOF", r.stdout[-200:])
    try:
        m = Metrics(r.stdout)
    except Exception as e:  # noqa: BLE001 - the parser's complaint is the diagnostic
        tap.ok(False, "the OpenMetrics parser reads it", f"{type(e).__name__}: {e}\n{r.stdout[:3000]}")
        return None
    tap.ok(True, "the OpenMetrics parser reads it")
    tap.eq(sorted(set(FAMILIES) - set(m.families)), [], "every family is there")
    tap.eq(m.families["kernelsup_cell_duration_seconds"].type, "histogram", "the cell duration is a histogram")
    tap.eq(m.families["kernelsup_kernel_deaths"].type, "counter", "deaths are a counter")
    j = d.ctl_json("metrics")[1] or {}
    tap.eq(j.get("content_type"), "application/openmetrics-text; version=1.0.0; charset=utf-8",
           "metrics --json: the content type")
    tap.eq(sorted(Metrics(j.get("text") or "# EOF\n").values), sorted(m.values),
           "metrics --json: the text holds the same series")
    return m


def check_daemon(tap, d, m):
    sup = d.status()["supervisor"]
    tap.eq(m.get("kernelsup_daemon_generation"), sup["generation"], "generation as status says")
    # No freeze happens here (test-resume.py freezes the daemon and reads this counter then): 0, as status says.
    tap.eq((m.get("kernelsup_daemon_resumes_total"), sup["resumes"]), (0.0, 0),
           "resumes: 0 in the metric and in status before any freeze")
    tap.ok(0 < m.get("kernelsup_daemon_uptime_seconds") <= sup["uptime"] + 60, "uptime is there and plausible",
           repr((m.get("kernelsup_daemon_uptime_seconds"), sup["uptime"])))
    tap.eq(m.get("kernelsup_daemon_info", version=sup["version"]), 1.0, "kernelsup_daemon_info names the version")
    tap.eq((m.get("kernelsup_contexts", state="ready"), m.get("kernelsup_contexts", state="stopped")), (1.0, 1.0),
           "contexts by state: default ready, theirs stopped")
    tap.eq((m.get("kernelsup_context_state", context="default", state="ready"),
            m.get("kernelsup_context_state", context="default", state="busy")), (1.0, 0.0),
           "the state gauge: default is ready and not busy")
    # Counted while kernelctl's own connection is open.
    tap.ok((m.get("kernelsup_control_connections") or 0) >= 1, "control connections count kernelctl's own",
           repr(m.get("kernelsup_control_connections")))
    with open(f"/proc/{d.proc.pid}/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    got = m.get("kernelsup_daemon_resident_memory_bytes") or 0
    tap.ok(rss / 2 <= got <= rss * 2, "RSS is the daemon's (as /proc/PID/statm says, within a factor 2)",
           repr((got, rss)))


def check_cells(tap, d, m):
    r = d.ctl("exec", "default", "1 + 1")
    tap.eq(r.returncode, 0, "a cell runs", r.stderr)
    m2 = moved(tap, d, m, "kernelsup_cells_total", "a cell: cells_total{status=ok} + 1", context="default",
               status="ok")
    tap.eq(m2.get("kernelsup_cell_duration_seconds_count", context="default"),
           (m.get("kernelsup_cell_duration_seconds_count", context="default") or 0) + 1,
           "a cell: the duration histogram's count + 1")
    tap.eq(m2.get("kernelsup_cell_duration_seconds_bucket", context="default", le="+Inf"),
           m2.get("kernelsup_cell_duration_seconds_count", context="default"), "the +Inf bucket holds every cell")
    tap.ok(m2.get("kernelsup_cell_duration_seconds_sum", context="default") >
           (m.get("kernelsup_cell_duration_seconds_sum", context="default") or 0), "the duration sum grew")

    r = d.ctl("exec", "default", "print('x' * 5000)")
    tap.eq(r.returncode, 0, "a cell printing 5000 characters past output_limit = 1K", r.stderr)
    m3 = scrape(d)
    cut = (m3.get("kernelsup_cell_output_cut_bytes_total", context="default") or 0) - \
        (m2.get("kernelsup_cell_output_cut_bytes_total", context="default") or 0)
    # 5001 bytes written ('x' * 5000 and a newline), 1024 kept (kernelsup.ini(5), output_limit): 3977 cut, exactly,
    # by the kernel's own count (ipykernel with output_chunking, kernelctl(1)).
    tap.eq(cut, 5001 - 1024, "output past the limit: output_cut_bytes grew by what was not kept (5001 - 1024)")
    tap.contains(r.stderr + r.stdout, f"[output truncated: {5001 - 1024} more bytes not kept]",
                 "output past the limit: the cell's last line says the same count")

    r = d.ctl("--timeout", "1", "exec", "default", "import time; time.sleep(60)", timeout=60)
    tap.eq(r.returncode, 6, "a cell past its timeout: exit 6", r.stderr)
    m4 = moved(tap, d, m3, "kernelsup_cells_timed_out_total", "a timeout: cells_timed_out + 1", context="default")
    tap.eq(m4.get("kernelsup_cells_total", context="default", status="timeout"),
           (m3.get("kernelsup_cells_total", context="default", status="timeout") or 0) + 1,
           "a timeout: cells_total{status=timeout} + 1")
    tap.eq(m4.get("kernelsup_cell_interrupts_total", context="default"),
           (m3.get("kernelsup_cell_interrupts_total", context="default") or 0) + 1, "a timeout: interrupts + 1")
    return m4


def check_queue(tap, d, m):
    """A long cell with one behind it: the queue depth shows it; an interrupt counts."""
    argv = [harness.KERNELCTL, "--socket", d.socket, "exec", "default"]
    started = os.path.join(d.tmp, "started")
    # An interrupt that lands before the kernel runs the code is lost: the cell says when it runs.
    first = subprocess.Popen(argv + [f"import time; open({started!r}, 'w').close(); time.sleep(60)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    second = None
    try:
        wait_until(lambda: os.path.exists(started), 30, "the long cell to run")
        second = subprocess.Popen(argv + ["2 + 2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        m2 = moved(tap, d, m, "kernelsup_cells_queued", "a cell behind a running one: cells_queued is 1",
                   context="default")
        r = d.ctl("interrupt", "default")
        tap.eq(r.returncode, 0, "kernelctl interrupt default", r.stderr)
        moved(tap, d, m2, "kernelsup_cell_interrupts_total", "kernelctl interrupt: interrupts + 1", context="default")
        first.wait(harness.scaled(30))
        second.wait(harness.scaled(30))
        tap.eq((first.returncode, second.returncode), (7, 0), "the interrupted cell raised, the queued one ran")
        m4 = scrape(d)
        tap.eq(m4.get("kernelsup_cells_queued", context="default"), 0.0, "the queue is empty again")
        # Against the scrape before the interrupt: the cell may have been answered by the time interrupts moved.
        tap.eq(m4.get("kernelsup_cells_total", context="default", status="error"),
               (m2.get("kernelsup_cells_total", context="default", status="error") or 0) + 1,
               "the interrupted cell: cells_total{status=error} + 1")
        return m4
    finally:
        for p in (first, second):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def check_kernel(tap, d, m):
    c = d.context("default")
    before = m.get("kernelsup_heartbeat_misses_total", context="default") or 0
    os.kill(c["pid"], signal.SIGSTOP)
    try:
        # Once it counts as unresponsive (heartbeat_misses in a row), the misses must have been counted.
        d.wait_state("default", "unresponsive")
        m2 = scrape(d)
        tap.ok((m2.get("kernelsup_heartbeat_misses_total", context="default") or 0) >= before + 3,
               "a stopped kernel, unresponsive: heartbeat_misses grew by heartbeat_misses (3) at least",
               repr((before, m2.get("kernelsup_heartbeat_misses_total", context="default"))))
    finally:
        os.kill(c["pid"], signal.SIGCONT)
    d.wait_state("default", "ready")
    os.kill(c["pid"], signal.SIGKILL)
    d.wait_context("default", lambda x: x.get("state") == "ready" and x.get("pid") not in (None, c["pid"]),
                   "a new kernel ready after kill -9", timeout=60)
    m3 = moved(tap, d, m2, "kernelsup_kernel_deaths_total", "kill -9: deaths{reason=signal} + 1", context="default",
               reason="signal")
    tap.eq(m3.get("kernelsup_context_restarts_total", context="default"),
           (m2.get("kernelsup_context_restarts_total", context="default") or 0) + 1, "kill -9: restarts + 1")
    tap.eq((m3.get("kernelsup_kernel_deaths_total", context="default", reason="exit-code"),
            m3.get("kernelsup_kernel_deaths_total", context="default", reason="oom-kill"),
            m3.get("kernelsup_kernel_oom_kills_total", context="default")), (0.0, 0.0, 0.0),
           "no other reason counted")


def check_other_uid(tap, d):
    if os.geteuid() != 0:
        tap.skip("another uid sees only its contexts' series", "not root")
        return
    if subprocess.run(NOBODY + ["test", "-x", harness.KERNELCTL], capture_output=True).returncode != 0:
        tap.skip("another uid sees only its contexts' series", f"nobody cannot execute {harness.KERNELCTL}")
        return
    for p in (d.tmp, d.run_dir):
        os.chmod(p, 0o755)
    os.chmod(d.socket, 0o666)
    try:
        m = scrape(d, prefix=NOBODY)
    finally:
        os.chmod(d.socket, 0o660)
    tap.eq(m.contexts(), {"theirs"}, "as nobody: only the series of its own context (theirs)")
    tap.eq(sum(v for (n, _), v in m.values.items() if n == "kernelsup_contexts"), 1.0,
           "as nobody: contexts by state count its own only")
    hidden = [f for f in ("kernelsup_control_connections", "kernelsup_daemon_resident_memory_bytes")
              if f in m.families]
    tap.eq(hidden, [], "as nobody: no control connections or RSS (they tell about other users)")
    tap.ok("default" not in m.text, "as nobody: the text does not name the other context")


def test(tap):
    if text_string_to_metric_families is None:
        tap.skip_all(f"{sys.executable} has no prometheus_client (apt-get install python3-prometheus-client)")
    d = harness.Daemon(tap, contexts=CONTEXTS, defaults=DEFAULTS)
    d.start()
    d.wait_state("default", "ready")
    m = check_format(tap, d)
    if m is None:
        return
    with tap.guard("daemon"):
        check_daemon(tap, d, m)
    with tap.guard("cells"):
        m = check_cells(tap, d, m)
    with tap.guard("queue"):
        m = check_queue(tap, d, scrape(d))
    with tap.guard("kernel"):
        check_kernel(tap, d, scrape(d))
    with tap.guard("other uid"):
        check_other_uid(tap, d)
    tap.ok(d.running(), "the daemon is still running")
    d.check_log()
    d.stop()


harness.main(test)
