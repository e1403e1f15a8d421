"""The built programs carry the hardening a root daemon should have: PIE, full RELRO, a stack
protector and (outside the sanitizer build) fortified libc calls. Read off the ELF files."""
import os
import re
import shutil
import subprocess

from harness import BUILDDIR, KERNELCTL, KERNELSUPD, main


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True).stdout


def sanitized(path):
    return re.search(r"\b__asan_init\b", readelf("--dyn-syms", path)) is not None or \
        "libasan" in readelf("-d", path)


def check(tap, path):
    name = os.path.basename(path)
    tap.contains(readelf("-h", path), "DYN (Position-Independent Executable", f"{name} is a PIE")
    dynamic = readelf("-d", path)
    tap.ok(re.search(r"\(FLAGS_1\).*\bNOW\b", dynamic) and re.search(r"\(FLAGS\).*\bBIND_NOW\b", dynamic),
           f"{name} binds every symbol at start (full RELRO: BIND_NOW)", dynamic)
    tap.contains(readelf("-l", path), "GNU_RELRO", f"{name} has a read-only relocation segment")
    syms = readelf("--dyn-syms", path)
    tap.ok("__stack_chk_fail" in syms, f"{name} is built with the stack protector (__stack_chk_fail)")
    if sanitized(path):
        tap.skip(f"{name} calls fortified libc functions", "the sanitizer build leaves _FORTIFY_SOURCE out")
    else:
        tap.ok(re.search(r"\b__\w+_chk\b", syms.replace("__stack_chk_fail", "")),
               f"{name} calls fortified libc functions (_FORTIFY_SOURCE)")


def run(tap):
    if not shutil.which("readelf"):
        tap.skip_all("readelf is not installed (binutils)")
    for path in (KERNELSUPD, KERNELCTL):
        check(tap, path)
    tap.diag(f"read from {BUILDDIR}")


main(run, needs_jupyter=False)
