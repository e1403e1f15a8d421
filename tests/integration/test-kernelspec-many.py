"""`kernelctl kernels` for a user with 20,500 kernelspec directories (the red team's K8): the listing runs off the
loop with the user's rights and stops at 20,000 directory entries, saying so in its reply; root's `status` answers
while the listings run; the daemon's peak memory stays within what kernelctl(1) states a listing may hold
(KERNELSPEC_LISTING_MIB per listing at once), over the peak it had before; that point is measured in the normal
build only (under ASan the sanitizer's own memory dominates), the rest runs in every build: it takes about 15 s."""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MIB = 1 << 20
N_DIRS = 20500
EVERY = 21  # one directory in EVERY holds a small valid spec, the rest a malformed 3 KB one: the scan reaches the
# bound on entries (20,000) before those on specs (1,000) and bytes (2 MiB)
LISTINGS = 3  # at once, as the red team ran them
KERNELSPEC_LISTING_MIB = 16  # kernelctl(1), kernels: what one listing in progress may hold of the daemon's memory
PAD = "p" * 3000


def make_specs(home):
    root = os.path.join(home, ".local", "share", "jupyter", "kernels")
    for i in range(N_DIRS):
        p = os.path.join(root, f"k{i}")
        os.makedirs(p)
        with open(os.path.join(p, "kernel.json"), "w") as f:
            if i % EVERY == 0:
                json.dump({"argv": ["/bin/false", "{connection_file}"], "display_name": f"K{i}", "language": "x"}, f)
            else:
                f.write("{not json " + PAD)


def test(tap):
    if os.geteuid() != 0:
        tap.skip_all("needs root (a test user owns the kernelspecs)")
    d = harness.Daemon(tap, contexts="")
    os.chmod(d.tmp, 0o755)
    d.start()
    pid = d.proc.pid
    user = harness.TestUser(os.path.join(d.tmp, "home"), prefix="ks-many")
    try:
        make_specs(user.home)
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", user.home], check=True)
        os.chmod(d.run_dir, 0o755)
        os.chmod(d.socket, 0o666)
        before = harness.proc_status_kib(pid, "VmHWM") * 1024
        argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "env",
                f"HOME={user.home}", harness.KERNELCTL, "--socket", d.socket, "--json", "kernels"]
        # Their replies (about 1 MiB each) go to files: a pipe nobody reads while the status loop runs would stop
        # them.
        files = [(open(os.path.join(d.tmp, f"out{i}"), "w+"), open(os.path.join(d.tmp, f"err{i}"), "w+"))
                 for i in range(LISTINGS)]
        listings = [subprocess.Popen(argv, stdout=o, stderr=e, text=True) for o, e in files]
        # Root's status while they run: how long each took is reported, not asserted.
        took, during = [], 0
        while any(p.poll() is None for p in listings) or not took:
            running = any(p.poll() is None for p in listings)
            t0 = time.monotonic()
            st = d.status(timeout=60)
            took.append(time.monotonic() - t0)
            during += running and "contexts" in st
        tap.diag(f"{len(took)} status requests ({during} while a listing ran): longest {max(took) * 1000:.0f} ms")
        tap.ok(took, "root's status answered while the listings ran")
        outs = []
        for p, (o, e) in zip(listings, files):
            p.wait(timeout=harness.scaled(120))
            o.seek(0)
            e.seek(0)
            outs.append((o.read(), e.read()))
            o.close()
            e.close()
        for i, (p, (out, err)) in enumerate(zip(listings, outs)):
            try:
                j = json.loads(out)
            except ValueError:
                j = None
            tap.eq(p.returncode, 0, f"listing {i + 1}: the reply arrives (exit 0)", err[-500:])
            tap.eq((j or {}).get("cut"), "more than 20000 directory entries",
                   f"listing {i + 1}: the reply says the directory-entry limit cut it")
            names = [k["name"] for k in (j or {}).get("kernels", [])]
            tap.ok(0 < len(names) <= N_DIRS // EVERY + 1 and names == sorted(names),
                   f"listing {i + 1}: the valid specs read before the cut, sorted ({len(names)})")
        r = d.ctl("kernels", prefix=argv[:6])
        tap.ok("(the list is partial: the daemon stopped at more than 20000 directory entries)" in r.stdout,
               "kernelctl kernels says the list is partial", r.stdout[-500:])
        hwm = harness.proc_status_kib(pid, "VmHWM") * 1024
        bound = before + LISTINGS * KERNELSPEC_LISTING_MIB * MIB
        tap.diag(f"VmHWM {before // 1024} KiB before the listings, {hwm // 1024} KiB after; bound {bound // 1024} KiB")
        name = f"the daemon's peak grows by at most {KERNELSPEC_LISTING_MIB} MiB per listing (kernelctl(1))"
        other = harness.not_normal_build()
        if other:  # ASan's quarantine and shadow memory hold far more than the daemon does
            tap.skip(name, f"the memory bound is measured in the normal build only: {other}")
        else:
            tap.ok(hwm <= bound, name, f"VmHWM {hwm // MIB} MiB, before {before // MIB} MiB")
        os.chmod(d.socket, 0o660)
        d.stop()
    finally:
        user.close()
        shutil.rmtree(user.home, ignore_errors=True)
    d.check_log()


harness.main(test, needs_jupyter=False)
