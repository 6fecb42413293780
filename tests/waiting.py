"""Polling helper shared by the tests that watch background processes."""
import time


def wait_for(predicate, timeout=180, every=0.5, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        if value := predicate():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def frozen_after_checkpoint(store, run_id, signal_all, step=1, timeout=300):
    """Let a run's processes go in short bursts, frozen (`signal_all(SIGSTOP)`) while we look, until a complete
    checkpoint of `step` or later exists; returns (folder, its step) with the processes left frozen, so that the
    run cannot go on or end between the look and what the caller does next (kill them, fill the disk, ...)."""
    import signal

    from backend.runs.checkpoints import last_checkpoint

    end = time.time() + timeout
    while time.time() < end:
        signal_all(signal.SIGSTOP)
        found = last_checkpoint(store, run_id)
        if found and found[1] >= step:
            return found
        assert store.get_run(run_id).status == "running", store.get_run(run_id).error
        signal_all(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"no checkpoint of step {step} within {timeout} s")
