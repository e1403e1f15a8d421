"""A persisted port taken by another process while kernelsupd was down: the daemon
moves that one channel to a free port, persists it, rewrites the connection file,
logs it and says so in last_error; the other ports and the key stay. Ports are
transport = tcp's (ipc's socket paths live in the context's own directory:
test-transport.py)."""

import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import CHANNELS  # noqa: E402


def state_values(d, name):
    def walk(o):
        if isinstance(o, dict):
            for v in o.values():
                yield from walk(v)
        elif isinstance(o, list):
            for v in o:
                yield from walk(v)
        else:
            yield o

    with open(d.state_file(name)) as f:
        return list(walk(json.load(f)))


def test(tap):
    d = harness.Daemon(tap, defaults="transport = tcp\n")
    d.start()
    c1 = d.wait_state("default", "ready")
    cf = c1["connection_file"]
    info1 = d.connection_info(cf)
    ports1 = d.ports(cf)
    r = harness.run_cell(cf, "1 + 1")
    tap.eq(r["result"], "2", "first start: cells run")
    d.stop()

    # Occupy the iopub port as another program would (a listening socket). SO_REUSEADDR
    # lets it bind over the TIME_WAIT connections the old kernel left on that port.
    old = ports1["iopub"]
    occupier = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    occupier.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        occupier.bind(("127.0.0.1", old))
        occupier.listen(1)
        tap.ok(not harness.port_free(old), f"iopub port {old} is now in use")

        d.start()
        c2 = d.context("default")
        tap.eq(c2["state"], "ready", "second start with the iopub port taken: ready")
        tap.eq(c2["connection_file"], cf, "same connection file path")
        ports2 = d.ports(cf)
        info2 = d.connection_info(cf)
        new = ports2["iopub"]
        tap.ok(new != old and isinstance(new, int) and d.port_min <= new <= d.port_max,
               "iopub moved to another port within port_range", f"{old} -> {new}")
        tap.eq({ch: ports2[ch] for ch in CHANNELS if ch != "iopub"},
               {ch: ports1[ch] for ch in CHANNELS if ch != "iopub"}, "the other four ports are unchanged")
        tap.eq(len(set(ports2.values())), 5, "the five ports are still distinct")
        tap.eq(info2.get("key"), info1.get("key"), "the key is unchanged")
        tap.contains(c2.get("last_error"), f"iopub port {old} was in use; moved to {new}",
                     "last_error keeps a note of the move")
        tap.ok(any(str(old) in l and str(new) in l for l in d.log().splitlines()), "the move is logged",
               d.log_tail(10))
        tap.ok(new in state_values(d, "default") and old not in state_values(d, "default"),
               "the new port is persisted in the state file", repr(state_values(d, "default")))
        tap.eq(d.status()["supervisor"].get("generation"), 2, "generation is 2 on the second start")
        r = harness.run_cell(cf, "print('moved')\n6 * 7")
        tap.eq((r["status"], r["stdout"], r["result"]), ("ok", "moved\n", "42"), "cells run on the moved ports")
        d.stop()
    finally:
        occupier.close()

    # Third start, the port is free again: the moved port stays (a cached file keeps working).
    d.start()
    c3 = d.wait_state("default", "ready")
    tap.eq(d.ports(cf), ports2, "third start: the persisted ports are used, the move is kept")
    tap.eq(d.connection_info(cf).get("key"), info1.get("key"), "third start: the key is unchanged")
    tap.eq(c3["incarnation"], 3, "incarnation counts launches across daemon starts")
    r = harness.run_cell(cf, "'third'")
    tap.eq(r["result"], "'third'", "third start: cells run")
    d.stop()


harness.main(test)
