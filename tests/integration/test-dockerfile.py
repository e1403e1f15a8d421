"""The Dockerfile, checked as far as a machine without a Docker engine can: its stages are defined
before they are copied from, what it copies is what `make install` makes (and all of it the programs
use: the preload launcher too), the runtime stage installs
the package of every library the programs link, and the build stage every -dev package the build
needs (tools/deps.sh)."""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from harness import BUILDDIR, KERNELSUPD, KERNELCTL, SRCDIR, main


def parse(path):
    """The Dockerfile as (instruction, argument) pairs, continuation lines joined."""
    text = re.sub(r"\\\n", " ", open(path).read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def apt_packages(run_arg):
    """The packages of an `apt-get install` in a RUN argument."""
    for part in run_arg.split("&&"):
        words = shlex.split(part)
        if "apt-get" in words and "install" in words:
            return {w for w in words[words.index("install") + 1:] if not w.startswith("-")}
    return set()


def stages(instructions):
    """[(name, [instructions])], one per FROM."""
    out = []
    for word, arg in instructions:
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?$", arg, re.I)
            out.append((m.group(2) or str(len(out)), []))
        elif out:
            out[-1][1].append((word, arg))
    return out


def needed_packages(binary):
    """The Debian package of each library the binary links directly."""
    needed = re.findall(r"\(NEEDED\).*\[(.+?)\]", subprocess.run(
        ["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout)
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    pkgs = {}
    for lib in needed:
        path = os.path.realpath(paths.get(lib, lib))
        r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        pkgs[lib] = r.stdout.split(":")[0] if r.returncode == 0 else None
    return pkgs


def run(tap):
    dockerfile = os.path.join(SRCDIR, "Dockerfile")
    if not os.path.exists(dockerfile):
        tap.skip_all("no Dockerfile in the source tree")
    st = stages(parse(dockerfile))
    names = [n for n, _ in st]
    tap.eq(names, ["build", "1"], "two stages: build, then the runtime image")
    build, runtime = dict(st)["build"], st[-1][1]

    for i, (name, body) in enumerate(st):
        for word, arg in body:
            m = re.match(r"--from=(\S+)", arg) if word == "COPY" else None
            if m:
                tap.ok(m.group(1) in names[:i], f"COPY --from={m.group(1)} names a stage defined before it")

    deps = open(os.path.join(SRCDIR, "tools", "deps.sh")).read()
    build_pkgs = set(re.search(r'KS_BUILD_PKGS="([^"]*)"', deps).group(1).split())
    want = {p for p in build_pkgs if not p.startswith("python3")}
    have = set().union(*(apt_packages(a) for w, a in build if w == "RUN"))
    tap.ok(want <= have, "the build stage installs every build package of tools/deps.sh", f"missing {want - have}")

    run_pkgs = set().union(*(apt_packages(a) for w, a in runtime if w == "RUN"))
    tap.ok("python3-ipykernel" in run_pkgs, "the runtime stage installs python3-ipykernel")
    for binary in (KERNELSUPD, KERNELCTL):
        for lib, pkg in needed_packages(binary).items():
            if pkg in ("libc6", None) and lib.startswith(("libc.so", "libm.so")):
                continue
            if "asan" in lib or "ubsan" in lib:
                continue
            tap.ok(pkg in run_pkgs, f"{os.path.basename(binary)} links {lib}: its package {pkg} is in the runtime stage")
    lists = "/var/lib/apt/lists"
    if shutil.which("apt-cache") and os.path.isdir(lists) and any("Packages" in f for f in os.listdir(lists)):
        unknown = [p for p in sorted(run_pkgs | have)
                   if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0]
        tap.ok(not unknown, "every package the Dockerfile installs is in Debian's archive", f"unknown: {unknown}")
    else:
        tap.skip("every package the Dockerfile installs is in Debian's archive", "no apt lists on this machine")

    # What the build stage installs, with its configure paths, holds every file the runtime stage copies.
    configure = next(a for w, a in build if w == "RUN" and "./configure" in a)
    args = shlex.split(configure.split("./configure", 1)[1].split("&&")[0])
    paths = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    dest = tempfile.mkdtemp(prefix="ks-docker-")
    try:
        make = ["make", "-s", "-C", BUILDDIR, "install", f"DESTDIR={dest}"] + [f"{k}={v}" for k, v in paths.items()]
        r = subprocess.run(make, capture_output=True, text=True)
        tap.ok(r.returncode == 0, "make install with the Dockerfile's paths", r.stdout + r.stderr)
        out = next(a for w, a in build if w == "RUN" and "DESTDIR=" in a)
        out_dir = re.search(r"DESTDIR=(\S+)", out).group(1)
        copies = [shlex.split(a) for w, a in runtime if w == "COPY" and a.startswith("--from=build")]
        for c in copies:
            src = c[1]
            rel = os.path.relpath(src, out_dir)
            tap.ok(not rel.startswith("..") and os.path.exists(os.path.join(dest, rel)),
                   f"the build stage installs {src}")
        # Every file make install puts where the programs look at run time is in the image: the systemd
        # unit and the journal catalog are for a host's systemd, which the container has not.
        for_systemd = ("usr/lib/systemd/",)
        left = []
        for root, _, files in os.walk(dest):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), dest)
                srcs = [os.path.relpath(c[1], out_dir) for c in copies]
                inside = any(rel == s or rel.startswith(s + "/") for s in srcs)
                if not inside and not rel.startswith(for_systemd):
                    left.append("/" + rel)
        tap.ok(not left, "the runtime stage copies every installed file the programs use (the preload "
               "launcher in the package's data directory among them)", f"not copied: {sorted(left)}")
        entry = next(a for w, a in runtime if w == "ENTRYPOINT")
        argv = json.loads(entry)
        copied = {c[2] for c in copies}
        tap.ok(argv[0] in copied, "ENTRYPOINT runs the copied kernelsupd", entry)
        conf = argv[argv.index("--config") + 1]
        tap.ok(any(conf.startswith(d.rstrip("/") + "/") or conf == d for d in copied),
               "its --config is among the copied files", conf)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


main(run, needs_jupyter=False)
