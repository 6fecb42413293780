"""A full disk under the workspace: the store's own writes fail with a message naming the database, the record of how
a run ended still gets written (from the reserve), the last complete checkpoint is kept, and the run resumes once
space is freed. On a real filesystem that fills up: a small tmpfs (needs the right to mount, as root in CI)."""
import os
import signal
import subprocess
from collections import Counter

import pytest

from backend.runs.checkpoints import last_checkpoint
from backend.runs.jobs import resume_run, stop_run, submit_run
from backend.runs.logs import log_tail
from backend.runs.supervisor import EXIT_REPEATS
from backend.core.database import RESERVE_NAME, StoreFull
from backend.runs.store import RunStore
from tests.waiting import frozen_after_checkpoint, wait_for


@pytest.fixture
def small_disk(tmp_path):
    """A 96 MiB filesystem of its own."""
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder):
    """Take every free byte of the disk, as another program filling it would. Unbuffered: a buffered file keeps
    what the last write could not place and fails once more when it closes."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(2**16))
        except OSError:
            pass


def test_the_store_on_a_full_disk_names_it_and_still_records_how_a_run_ended(small_disk, tiny_model):
    from tests.integration.test_ppo_runs import tiny

    store = RunStore(small_disk / "ws")
    assert (small_disk / "ws" / RESERVE_NAME).stat().st_size > 0
    run = store.create_run(tiny(tiny_model, "sft"))
    _fill(small_disk)
    with pytest.raises(StoreFull) as raised:
        for step in range(1, 10_000):  # the WAL has some room left in its pages: write until it has none
            store.add_metrics(run.id, step, {"loss": 1.0, "padding": 2.0, "more": 3.0})
    assert str(raised.value).startswith(f"the disk holding the run store {store.path} is full (0 MiB free)")
    assert store.finish_run(run.id, "failed", error="the disk is full")  # from the reserve
    assert not (small_disk / "ws" / RESERVE_NAME).exists()
    assert RunStore(store.workspace).get_run(run.id).error == "the disk is full"
    (small_disk / "filler").unlink()
    RunStore(store.workspace)  # space again: the next store to open keeps a reserve again
    assert (small_disk / "ws" / RESERVE_NAME).exists()


def _seen(store, run_id) -> str:
    """What a failed check shows: the run's record and its log (the disk goes with the test)."""
    r = store.get_run(run_id)
    return f"{r.status}, exit code {r.exit_code}: {r.error}\n--- log ---\n{log_tail(store, run_id, 60)}"


def test_a_run_whose_disk_fills_fails_saying_so_keeps_its_checkpoint_and_resumes(small_disk, tiny_model):
    from tests.integration.test_ppo_runs import tiny

    store = RunStore(small_disk / "ws")
    run = submit_run(store, tiny(tiny_model, "sft", max_steps=40, save_steps=2, save_total_limit=1, logging_steps=1))
    try:
        pid = wait_for(lambda: (r := store.get_run(run.id)).worker_pid or (not r.active and pytest.fail(
            f"the run ended before its worker started: {_seen(store, run.id)}")), what="worker start")
        found = frozen_after_checkpoint(store, run.id, lambda sig: os.kill(pid, sig))
        _fill(small_disk)
        os.kill(pid, signal.SIGCONT)
        failed = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=60, what="the run to end")
        assert failed.status == "failed", _seen(store, run.id)
        assert f"the disk holding {store.run_dir(run.id)} is full" in failed.error, _seen(store, run.id)
        assert "is kept: free some space, then resume the run" in failed.error, _seen(store, run.id)
        assert failed.exit_code == EXIT_REPEATS, _seen(store, run.id)  # no auto-resume into the same full disk
        kept = last_checkpoint(store, run.id)
        assert kept and kept[1] >= found[1]
        (small_disk / "filler").unlink()
        assert resume_run(store, run.id).step == kept[1]
        done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=120, what="the resumed run")
        assert done.status == "completed", _seen(store, run.id)
        assert Counter(m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss") == Counter(range(1, 41))
    finally:
        (small_disk / "filler").unlink(missing_ok=True)  # room for the stop's own writes
        if store.get_run(run.id).active:
            stop_run(store, run.id, force=True)
