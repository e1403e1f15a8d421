"""kernelctl exec's text for a model (issue 26), real cells against a real ipykernel: a progress bar's \\r frames
collapse to the last, ANSI colour is removed (the raw text stays in --json), a plot is named with its size
(when /usr/bin/python3 has matplotlib), Markdown and HTML displays show their text, an error in a nested function
shows the cell's frames and not the library's, a big print with --max-output keeps head and tail exact (in whole
UTF-8 characters) with the marker and --json's truncated, a timeout says so in words, and --max-output's values
are checked."""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SUMMARY = re.compile(r"\[ok #\d+\]\n\Z")


def body(stdout):
    """stdout without its last line, the summary."""
    return stdout[:stdout.rstrip("\n").rfind("\n") + 1] if "\n" in stdout.rstrip("\n") else ""


def test_streams(tap, d):
    code = ("import sys, time\n"
            "for i in range(5):\n"
            "    print(f'\\rprogress {i * 25}%', end='', flush=True)\n"
            "    time.sleep(0.05)\n"
            "print()\n"
            "print('\\x1b[31mred\\x1b[0m and \\x1b[1mbold\\x1b[0m')\n"
            "print('\\x1b]0;a title\\x07after the title', file=sys.stderr)")
    r = d.ctl("exec", "default", code, timeout=60)
    tap.ok(r.returncode == 0 and SUMMARY.search(r.stdout), "streams: exit 0, [ok #N]", r.stdout + r.stderr)
    tap.eq(body(r.stdout), "progress 100%\nred and bold\n",
           "a progress bar's \\r frames collapse to the last; ANSI colour removed")
    tap.eq(r.stderr, "after the title\n", "an OSC on stderr removed")
    rc, j = d.ctl_json("exec", "default", code, timeout=60)
    raw = "".join(o.get("text", "") for o in (j or {}).get("outputs", []) if o.get("name") == "stdout")
    tap.ok("\rprogress 25%" in raw and "\x1b[31m" in raw and "truncated" in (j or {}) and j["truncated"] is None,
           "--json keeps the raw text (\\r and ANSI), truncated null without --max-output", repr(raw[:200]))
    r = d.ctl("exec", "default", "print('\\r'.join(str(i) for i in range(200000)))", timeout=60)
    tap.eq(body(r.stdout), "199999\n", "200,000 frames of one line: the last")


def test_rich(tap, d):
    have_mpl = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode == 0
    if have_mpl:
        r = d.ctl("exec", "default", "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()", timeout=120)
        tap.ok(r.returncode == 0 and re.fullmatch(r"\[image/png \d+(\.\d)? KB\]\n", body(r.stdout)),
               "a plot: one line naming the image and its size, no <Figure> placeholder", repr(r.stdout[:300]))
    else:
        tap.skip("a plot: the image named", "/usr/bin/python3 has no matplotlib")
    r = d.ctl("exec", "default", "from IPython.display import display, Markdown, HTML\n"
              "display(Markdown('# Title\\n\\n*some* text'))\n"
              "display(HTML('<h2>Report</h2><table><tr><td>a</td><td>1</td></tr></table><script>x()</script>'))")
    tap.eq(body(r.stdout), "# Title\n\n*some* text\nReport\na\t1\n",
           "Markdown shows its text/markdown; HTML its text, reduced", r.stderr)


def read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def test_save_images(tap, d):
    out = os.path.join(d.tmp, "images")
    os.mkdir(out)
    open(os.path.join(out, "output-1.png"), "wb").write(b"someone else's")
    code = ("from IPython.display import display\n"
            "display({'image/png': 'iVBORw0KGgo=', 'text/plain': '<Figure size 1x1>'}, raw=True)\n"
            "display({'image/jpeg': '/9j/'}, raw=True)")
    r = d.ctl("exec", "default", code, "--save-images", out)
    want = f"[image/png 8 B: {out}/output-2.png]\n[image/jpeg 3 B: {out}/output-3.jpeg]\n"
    tap.eq(body(r.stdout), want, "--save-images: each image's line names its file; an existing file is not overwritten",
           r.stderr)
    files = {name: read_or_none(os.path.join(out, name)) for name in ("output-1.png", "output-2.png", "output-3.jpeg")}
    tap.eq(files, {"output-1.png": b"someone else's", "output-2.png": b"\x89PNG\r\n\x1a\n", "output-3.jpeg": b"\xff\xd8\xff"},
           "--save-images: the files hold the decoded bytes, the one there before is untouched")
    os.symlink(os.path.join(d.tmp, "target"), os.path.join(out, "output-3.png"))
    r = d.ctl("exec", "default", "from IPython.display import display\ndisplay({'image/png': 'AAAA'}, raw=True)",
              "--save-images", out)
    tap.ok(body(r.stdout) == f"[image/png 3 B: {out}/output-4.png]\n" and not os.path.exists(os.path.join(d.tmp, "target")),
           "--save-images: a symlink in the way is skipped, not followed", repr(r.stdout))
    # /proc takes no new file, for root too.
    r = d.ctl("exec", "default", "from IPython.display import display\ndisplay({'image/png': 'AAAA'}, raw=True)",
              "--save-images", "/proc")
    tap.ok(r.returncode == 0 and re.fullmatch(r"\[image/png 3 B: not saved: [A-Z][a-z ]+\]\n", body(r.stdout)),
           "--save-images into a directory that takes no file: the image's line says why, the cell is ok",
           repr(r.stdout))
    for args, why in (([out + "/none"], "No such file or directory"), ([out + "/output-1.png"], "not a directory")):
        r = d.ctl("exec", "default", "1", "--save-images", *args)
        tap.ok(r.returncode == 2 and f"invalid --save-images '{args[0]}': {why}" in r.stderr,
               f"--save-images on {why}: usage error naming the path", r.stderr)
    r = d.ctl("exec", "default", "1", "--save-images", out, "--json")
    tap.ok(r.returncode == 2 and "--json and --stream carry the images" in r.stderr, "--save-images with --json: usage",
           r.stderr)


def test_errors(tap, d):
    r = d.ctl("exec", "default", "def f():\n    return 1 / 0\n\ndef g():\n    return f()\n\ng()")
    err = r.stderr
    tap.eq(r.returncode, 7, "an error in a nested function: exit 7", err)
    frames = re.findall(r"^Cell In ?\[\d+\], line (\d+)", err, re.M)
    tap.ok(frames == ["7", "5", "2"] and "----> 2" in err and "\x1b" not in err and
           err.endswith("ZeroDivisionError: division by zero\n"),
           "the cell's frames (g(), f()), without ANSI, then Name: value", repr(err))
    r = d.ctl("exec", "default", "import json\njson.loads('{')")
    tap.ok("/json/" not in r.stderr and re.search(r"^Cell In ?\[\d+\], line 2", r.stderr, re.M) and
           r.stderr.rstrip("\n").endswith("double quotes: line 1 column 2 (char 1)"),
           "a library's frames are left out, the cell's frame and the error kept", repr(r.stderr))
    r = d.ctl("exec", "default", "import json\njson.loads('{')", "--traceback")
    tap.ok("/json/" in r.stderr and "\x1b" not in r.stderr, "--traceback: the library's frames too, no ANSI",
           repr(r.stderr[:300]))


def test_budget(tap, d):
    code = "print('HEAD')\nprint('x' * 1000000)\nprint('THE END')"
    r = d.ctl("exec", "default", code, "--max-output", "4K", timeout=60)
    # 5 + 1,000,001 + 8 bytes; the first 2048 and the last 2048 kept; the x line's end is in the tail.
    want = ("HEAD\n" + "x" * 2043 + "\n[... 995918 bytes, 0 lines dropped ...]\n" + "x" * 2039 + "\nTHE END\n")
    tap.eq(body(r.stdout), want, "--max-output 4K: head, marker naming bytes and lines, tail with THE END",
           f"{len(r.stdout)} bytes, stderr {r.stderr!r}")
    rc, j = d.ctl_json("exec", "default", code, "--max-output", "4K", timeout=60)
    tap.eq((rc, (j or {}).get("truncated")), (0, {"kept": 4096, "dropped": 995918}),
           "--json --max-output: truncated {kept, dropped} as data")
    tap.eq(sum(len(o.get("text", "")) for o in (j or {}).get("outputs", [])), 1000014,
           "--json --max-output: the outputs stay whole")
    r = d.ctl("exec", "default", code, "--stream", "--max-output", "4K", timeout=60)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    tap.eq((r.returncode, lines[-1].get("truncated") if lines else None), (0, {"kept": 4096, "dropped": 995918}),
           "--stream --max-output: the result line carries truncated")
    rc, j = d.ctl_json("exec", "default", "print('small')", "--max-output", "4K", timeout=60)
    tap.ok(rc == 0 and "truncated" in (j or {}) and j["truncated"] is None,
           "--json --max-output of a cell within it: truncated null", repr(j))
    r = d.ctl("exec", "default", "print('small')", "--stream", timeout=60)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    tap.ok(lines and "truncated" in lines[-1] and lines[-1]["truncated"] is None,
           "--stream without --max-output: the result line has truncated null", repr(lines[-1:]))
    r = d.ctl("exec", "default", "print('a' + '\u20ac' * 1000)", "--max-output", "1K", errors="surrogateescape")
    want = "a" + "\u20ac" * 170 + "\n[... 1980 bytes, 0 lines dropped ...]\n" + "\u20ac" * 170 + "\n"
    tap.eq(body(r.stdout), want, "--max-output 1K over three-byte characters: cut at whole characters")
    r = d.ctl("exec", "default", "for i in range(3000): print(i)", "--max-output", "1K")
    m = re.search(r"\[\.\.\. (\d+) bytes, (\d+) lines dropped \.\.\.\]\n", r.stdout)
    text = "".join(f"{i}\n" for i in range(3000))
    tap.ok(m and body(r.stdout).startswith(text[:512]) and body(r.stdout).endswith(text[-512:]) and
           int(m.group(1)) == len(text) - 1024 and int(m.group(2)) == text[512:-512].count("\n"),
           "3,000 lines under 1K: the marker's counts are the dropped bytes and lines", repr(r.stdout[-300:]))
    r = d.ctl("exec", "default", "print('small')", "--max-output", "1K")
    tap.eq(body(r.stdout), "small\n", "within the budget: the text whole, no marker")


def test_options(tap, d):
    for value, why in (("10", "must be from 1K to 1G"), ("x", "expected a size such as 512K or 10M"),
                       ("2G", "must be from 1K to 1G"), ("1" + "0" * 40, "expected a size")):
        r = d.ctl("exec", "default", "1", "--max-output", value)
        tap.ok(r.returncode == 2 and f"invalid --max-output '{value}': {why}" in r.stderr,
               f"--max-output {value[:12]}: usage error saying why", r.stderr)
    r = d.ctl("status", "--max-output", "4K")
    tap.ok(r.returncode == 2 and "--max-output is an option of exec" in r.stderr, "--max-output on status: usage",
           r.stderr)


def test_timeout(tap, d):
    r = d.ctl("exec", "default", "import time\nprint('started', flush=True)\ntime.sleep(120)", "--timeout", "2",
              timeout=60)
    tap.eq(r.returncode, 6, "a timeout: exit 6", r.stderr)
    tap.ok(re.search(r"^kernelctl: the cell ran longer than its timeout of 2s and was interrupted\.$", r.stderr, re.M),
           "a timeout: one line in words on stderr", repr(r.stderr))
    tap.ok(re.search(r"\[timeout #\d+\]\n\Z", r.stdout) and r.stdout.startswith("started\n"),
           "a timeout: the output so far and [timeout #N]", repr(r.stdout))


def test(tap):
    d = harness.Daemon(tap, contexts="[context:default]\n")
    d.start()
    d.wait_state("default", "ready")
    for name, fn in (("streams", test_streams), ("rich", test_rich), ("save images", test_save_images),
                     ("errors", test_errors),
                     ("budget", test_budget), ("options", test_options), ("timeout", test_timeout)):
        with tap.guard(name):
            fn(tap, d)
    d.stop()


harness.main(test)
