"""Polling helper shared by the tests that watch background processes."""
import time


def wait_for(predicate, timeout=180, every=0.5, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        if value := predicate():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
