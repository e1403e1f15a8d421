"""The cost of a context, where it is a promise (issue 31; the figures are bench/context-scale.py's):
a stopped context holds no descriptor (20 contexts started, ready, then stopped leave the daemon with
exactly the descriptors it had before they started), a ready one a bounded few (the kernel's five
connections, its output pipe, its pidfd and little more), and the daemon runs one thread (it speaks
ZMTP to its kernels itself: no libzmq threads). After a cell's 200 MB print flood the memory the daemon
took for it is given back (VmRSS within 8 MiB of before), and a second flood takes no more."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

N = 20
FDS_PER_READY_MAX = 10  # measured 9: five streams, the output pipe, a pidfd, the journal's and a timer's
FLOOD = "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 1000000)\n"


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def test(tap):
    names = [f"s{i}" for i in range(N)]
    contexts = "".join(f"[context:{n}]\nargv = {harness.STUB_ARGV}\nautostart = no\n\n" for n in names)
    contexts += f"[context:py]\nargv = {harness.IPYKERNEL_ARGV}\n"
    # Kept executions hold their outputs by design (executions_memory): 1M keeps the floods' outputs out of the
    # memory this test says is given back.
    d = harness.Daemon(tap, contexts=contexts, supervisor="executions_memory = 1M\n")
    d.start()
    d.wait_state("py", "ready", timeout=120)
    pid = d.proc.pid
    tap.eq(threads(pid), 1, "kernelsupd runs one thread")
    # A descriptor of the moment (a kernelctl connection the daemon has not closed yet) may be counted before, so
    # the promise is checked as: none more after a start and stop, and none more after a second round.
    before = fds(pid)
    after = []
    for k in (1, 2):
        codes = [d.ctl("start", n, timeout=120).returncode for n in names]
        tap.eq(codes, [0] * N, f"round {k}: {N} stub contexts start")
        d.wait_all_ready(names, timeout=120)
        ready = fds(pid)
        tap.diag(f"round {k}: descriptors {before} before, {ready} with {N} contexts ready")
        tap.ok(0 < ready - before <= N * FDS_PER_READY_MAX,
               f"round {k}: a ready context holds at most {FDS_PER_READY_MAX} descriptors",
               f"{(ready - before) / N:.1f} each")
        codes = [d.ctl("stop", n, timeout=120).returncode for n in names]
        tap.eq(codes, [0] * N, f"round {k}: the {N} stub contexts stop")
        for n in names:
            d.wait_state(n, "stopped", timeout=60)
        # A descriptor of the moment closes within a few seconds; one a stopped context holds stays.
        after.append(harness.poll_until(lambda: fds(pid), 5, "the moment's descriptors to close",
                                        check=lambda k: k <= before))
    tap.ok(after[0] <= before and after[1] <= after[0],
           "a stopped context holds no descriptor: no more after a start and stop than before, none more after "
           "a second", f"{before} before, {after} after")
    tap.eq(threads(pid), 1, "still one thread")

    san = harness.sanitizers()
    rss0 = harness.proc_status_kib(pid, "VmRSS")
    for k in (1, 2):
        r = d.ctl("exec", "py", input=FLOOD, timeout=600)
        tap.eq(r.returncode, 0, f"flood {k}: 200 MB printed, the cell ends ok (its output cut at output_limit)",
               r.stderr[-300:])
        rss = harness.proc_status_kib(pid, "VmRSS")
        tap.diag(f"VmRSS {rss0} KiB before, {rss} KiB after flood {k}")
        if san:
            tap.skip(f"flood {k}: the memory it took is given back (VmRSS within 8 MiB of before)", san)
        else:
            tap.ok(rss - rss0 < 8 * 1024, f"flood {k}: the memory it took is given back (VmRSS within 8 MiB of "
                   "before)", f"{rss0} -> {rss} KiB")
    d.stop()


harness.main(test)
