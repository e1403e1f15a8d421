"""Every document the sources, tests, man pages and README cite is in the repository, and every
"doc/design.md, section N" names a section that exists."""
import os
import re

from harness import SRCDIR, main

CITED = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)\b")
SECTION = re.compile(r"doc/design" r"\.md,? section (\d+)")


def files():
    for top in ("src", "tests", "man", "bench", "units", "conf", "tools"):
        for root, dirs, names in os.walk(os.path.join(SRCDIR, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "fuzz")]
            for name in names:
                if name.endswith((".c", ".h", ".py", ".1", ".5", ".8", ".in", ".ini", ".sh", ".md")) or name == "README":
                    yield os.path.join(root, name)
    for name in ("README.md", "Makefile.am", "configure.ac", "run-tests", "quickstart", "Dockerfile"):
        if os.path.exists(os.path.join(SRCDIR, name)):
            yield os.path.join(SRCDIR, name)


def run(tap):
    design = os.path.join(SRCDIR, "doc", "design" ".md")
    if not tap.ok(os.path.exists(design), "the project carries its design document, doc/design.md"):
        return
    sections = set(re.findall(r"^## (\d+)\.", open(design).read(), re.M))
    missing, bad_sections, cited = [], [], 0
    for path in files():
        text = open(path, errors="replace").read()
        rel = os.path.relpath(path, SRCDIR)
        for m in CITED.finditer(text):
            cited += 1
            ref = m.group(1)
            here = os.path.join(os.path.dirname(path), ref)
            if not (os.path.exists(os.path.join(SRCDIR, ref)) or os.path.exists(here)):
                missing.append(f"{rel}: {ref}")
        for m in SECTION.finditer(text):
            if m.group(1) not in sections:
                bad_sections.append(f"{rel}: section {m.group(1)}")
    tap.ok(cited > 0, "the scan finds citations of documents (it reads the tree)", f"searched {SRCDIR}")
    tap.ok(not missing, "every cited document is in the repository", "\n".join(missing))
    tap.ok(not bad_sections, "every doc/design.md section cited exists", "\n".join(bad_sections))


main(run, needs_jupyter=False)
