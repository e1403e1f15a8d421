"""Waiting in the integration tests (re-exported by harness.py): every wait polls a
condition with a deadline, and every timeout is multiplied by $KS_TIMEOUT_SCALE."""

import os
import queue
import threading
import time

SCALE = float(os.environ.get("KS_TIMEOUT_SCALE", "1"))


class HarnessError(Exception):
    """Something the test needed did not work (reported as a failed test point)."""


class WaitTimeout(HarnessError):
    pass


def scaled(seconds):
    return seconds * SCALE


def wait_until(pred, timeout, what, check=bool, interval=0.05):
    """Polls pred() until check(value) is true and returns that value. timeout is in
    unscaled seconds. On timeout raises WaitTimeout naming what and the last value
    observed (an exception raised by pred counts as the observed value)."""
    deadline = time.monotonic() + scaled(timeout)
    last = "<never evaluated>"
    while True:
        try:
            value = pred()
        except HarnessError as e:
            last = f"<{type(e).__name__}: {e}>"
        else:
            if check(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {scaled(timeout):g}s waiting for {what}; last observed: {last!r}")
        time.sleep(interval)


def poll_until(pred, timeout, what, check=bool, interval=0.05):
    """Like wait_until, but at the deadline returns a last observation of pred() instead of
    raising: for a test point that states the condition itself, so that a wait that ends
    without it fails under the point's own name."""
    try:
        return wait_until(pred, timeout, what, check=check, interval=interval)
    except WaitTimeout:
        return pred()


class LineReader:
    """The lines a child process writes on its stdout (a text pipe), read by a thread. A select() on the pipe
    would miss the second of two lines that came in one read: it waits in the file object's buffer."""

    def __init__(self, proc, what):
        self.proc, self.what = proc, what
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout):
        """The next line; raises WaitTimeout after timeout (scaled) seconds, HarnessError once the process ended."""
        try:
            line = self.lines.get(timeout=scaled(timeout))
        except queue.Empty:
            raise WaitTimeout(f"no line from {self.what}") from None
        if line is None:
            self.lines.put(None)
            raise HarnessError(f"{self.what} ended (exit {self.proc.wait()}): {self.proc.stderr.read()[-2000:]}")
        return line

    def pending(self):
        """The lines that came so far, without waiting."""
        out = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return out
            if line is None:
                self.lines.put(None)
                return out
            out.append(line)
