"""A kernel message of many frames against the daemon's memory (the red team's E3): the daemon reads a kernel's
sockets with its own ZMTP reader, which keeps a message's delimiter, signature and four dicts (at most
max_message = 2 x output_limit + 16 MiB together) and reads every other frame past without holding it. libzmq,
which it replaced, hands over a message only whole: a comm_msg of 15 buffers of 16 MiB took the daemon from 12.7
to 258 MB. Here, with output_limit = 1M, the daemon's peak (VmHWM, reset before each message through
/proc/PID/clear_refs) may grow by less than one max_message for each of: 15 buffers of 16 MiB on iopub, 100,000
buffers of 1 KiB (the frame count is the kernel's to choose), a display of 24 MiB of text (dicts over the bound:
dropped whole, the cell told), and 64 routing frames of 1 MiB before the delimiter. Each cell ends ok, the
context stays ready, and the next cell's output is its own."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MIB = 1 << 20
OUTPUT_LIMIT = 1 * MIB
MAX_MESSAGE = 2 * OUTPUT_LIMIT + 16 * MIB  # exec_message_bound(), kernelsup.ini(5)
DROPPED = "[output dropped: a message of more than "

SEND = ("k = get_ipython().kernel\n"
        "k.session.send(k.iopub_socket, {kind!r}, {content}, parent=k.get_parent(), ident={ident},\n"
        "               buffers={buffers})\n"
        "print('sent')")
CASES = [
    ("15 buffers of 16 MiB on iopub", "comm_msg", "{'comm_id': 'b', 'data': {}}", "None",
     "[b'x' * (16 << 20)] * 15", False),
    ("100,000 buffers of 1 KiB on iopub", "comm_msg", "{'comm_id': 'b', 'data': {}}", "None",
     "[b'y' * 1024] * 100000", False),
    ("a display of 24 MiB of text (its dicts over max_message)", "display_data",
     "{'data': {'text/plain': 'z' * (24 << 20)}, 'metadata': {}}", "None", "None", True),
    ("64 routing frames of 1 MiB before the delimiter", "comm_msg", "{'comm_id': 'b', 'data': {}}",
     "[b'i' * (1 << 20)] * 64", "None", False),
]


def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (resetting the daemon's VmHWM through /proc/PID/clear_refs)")
    d = harness.Daemon(tap, contexts="[context:b]\n",
                       defaults=f"argv = {harness.IPYKERNEL_ARGV}\noutput_limit = 1M\noutput_chunking = no\n")
    d.start()
    d.wait_state("b", "ready", timeout=120)
    pid = d.proc.pid
    for name, kind, content, ident, buffers, dropped in CASES:
        reset_peak(pid)
        base = harness.proc_status_kib(pid, "VmHWM") * 1024
        cell = SEND.format(kind=kind, content=content, ident=ident, buffers=buffers)
        r = d.ctl("exec", "b", input=cell, timeout=300)
        peak = harness.proc_status_kib(pid, "VmHWM") * 1024
        tap.eq(r.returncode, 0, f"{name}: the cell ends ok", r.stderr[-300:])
        tap.contains(r.stdout, "sent", f"{name}: its own output arrives")
        if dropped:
            tap.contains(r.stderr, DROPPED, f"{name}: the cell is told the message was dropped")
        else:
            tap.ok(DROPPED not in r.stderr, f"{name}: nothing of the cell is dropped", r.stderr[-300:])
        tap.diag(f"{name}: VmHWM {base // 1024} -> {peak // 1024} KiB")
        tap.ok(peak - base < MAX_MESSAGE, f"{name}: the daemon's peak grows by less than one max_message "
               f"({MAX_MESSAGE // MIB} MiB)", f"+{(peak - base) // MIB} MiB")
        st = d.context("b")
        tap.eq(st.get("state"), "ready", f"{name}: the context is ready afterwards")
    r = d.ctl("exec", "b", "print(6 * 7)", timeout=60)
    tap.eq(r.returncode, 0, "the next cell ends ok", r.stderr[-300:])
    tap.eq(r.stdout.splitlines()[:1], ["42"], "the next cell's output is its own")
    d.stop()


harness.main(test)
