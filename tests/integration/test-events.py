"""The journal events' MESSAGE_IDs: each one src/log.h defines is sent by the daemon (a log_event() in
src/ names it), explained in catalog/kernelsup.catalog (for journalctl -x) and listed in kernelsupd(8);
the catalog and the man page name no other. Then, with no journald: a daemon whose stderr is the file
JOURNAL_STREAM names (as a unit's stream would be) but with no /run/systemd/journal/socket writes its
events to stderr, where sd_journal_sendv() would have dropped them without an error. The events as
journal entries are tested under a real journald by tests/systemd/test-package.py."""

import os
import re

import harness
from harness import SRCDIR

JOURNAL_SOCKET = "/run/systemd/journal/socket"
DEFINE = re.compile(r'^#define (LOG_ID_[A-Z_]+) "([0-9a-f]{32})"$', re.M)


def read(*parts):
    with open(os.path.join(SRCDIR, *parts)) as f:
        return f.read()


def message_ids():
    """{LOG_ID_NAME: id} as src/log.h defines them."""
    return dict(DEFINE.findall(read("src", "shared", "log.h")))


def sent(names):
    """The LOG_ID_ names a log_event() call (or an event macro handed to one) in src/ uses."""
    used = set()
    for folder in sorted(os.listdir(os.path.join(SRCDIR, "src"))):
        for name in sorted(os.listdir(os.path.join(SRCDIR, "src", folder))):
            if name.endswith(".c") and name != "log.c":
                used |= set(re.findall(r"\bLOG_ID_[A-Z_]+\b", read("src", folder, name))) & set(names)
    return used


def catalog_entries():
    """{id: text of its entry} of catalog/kernelsup.catalog."""
    parts = re.split(r"^-- ([0-9a-f]{32})\s*$", read("catalog", "kernelsup.catalog"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def check_sources(tap):
    ids = message_ids()
    tap.ok(len(ids) >= 11, f"src/log.h defines the events' MESSAGE_IDs ({len(ids)})", repr(ids))
    tap.eq(len(set(ids.values())), len(ids), "no two events share a MESSAGE_ID")
    unused = sorted(set(ids) - sent(ids))
    tap.eq(unused, [], "every MESSAGE_ID is sent by a log_event() in src/")
    catalog = catalog_entries()
    tap.eq(sorted(n for n, i in ids.items() if i not in catalog), [],
           "every MESSAGE_ID has an entry in catalog/kernelsup.catalog")
    tap.eq(sorted(set(catalog) - set(ids.values())), [], "the catalog has no entry for an id src/log.h lacks")
    bad = sorted(i for i, text in catalog.items()
                 if not all(re.search(rf"^{k}: \S", text, re.M) for k in ("Subject", "Defined-By", "Documentation")))
    tap.eq(bad, [], "every catalog entry has a Subject, Defined-By and Documentation")
    man = read("man", "kernelsupd.8")
    section = man.split(".SH JOURNAL EVENTS", 1)[-1].split("\n.SH ", 1)[0]
    listed = set(re.findall(r"^\.B ([0-9a-f]{32})$", section, re.M))
    tap.eq(sorted(n for n, i in ids.items() if i not in listed), [],
           "kernelsupd(8), JOURNAL EVENTS, lists every MESSAGE_ID")
    tap.eq(sorted(listed - set(ids.values())), [], "and no id src/log.h lacks")
    readme = read("README.md")
    tap.ok(ids.get("LOG_ID_KERNEL_DIED", "-") in readme, "README gives the kernel-died id (the OOM kill query)")


def check_stale_stream(tap):
    if os.path.exists(JOURNAL_SOCKET):
        tap.skip("a JOURNAL_STREAM without journald: the events stay on stderr",
                 f"{JOURNAL_SOCKET} exists on this machine (a journald runs)")
        return
    d = harness.Daemon(tap, defaults=f"argv = {harness.STUB_ARGV}\n")
    open(d.log_path, "ab").close()
    st = os.stat(d.log_path)
    base_env = d.env
    d.env = lambda: {**base_env(), "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    d.start()
    ctx = d.wait_state("default", "ready")
    kid, pid = ctx.get("kernel_id"), ctx.get("pid")
    os.kill(pid, 9)
    d.wait_context("default", lambda c: c.get("state") == "ready" and c.get("pid") != pid, "a new kernel")
    log = d.log()
    # log_internal's sd-daemon prefix (<6> info, <4> warning): stderr was taken for the journal stream.
    tap.ok(re.search(rf"^<6>default: kernel {kid} ready \(pid {pid}, incarnation 1", log, re.M),
           "with JOURNAL_STREAM naming stderr but no journald socket, the kernel-ready event is a line on stderr",
           log[-2000:])
    tap.ok(re.search(rf"^<4>default: kernel {kid} \(pid {pid}\) kernel killed by SIGKILL$", log, re.M),
           "so is the kernel-died event after kill -9", log[-2000:])
    tap.ok(re.search(r"^<6>default: restarting in ", log, re.M), "and the restarting event", log[-2000:])
    d.stop()


def test(tap):
    check_sources(tap)
    check_stale_stream(tap)


if __name__ == "__main__":
    harness.main(test, needs_jupyter=False)
