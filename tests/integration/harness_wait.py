"""Waiting in the integration tests (re-exported by harness.py): every wait polls a
condition with a deadline, and every timeout is multiplied by $KS_TIMEOUT_SCALE."""

import os
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
