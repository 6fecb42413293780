"""The SQLite run store: runs, statuses, incremental metric reads, persistence across connections."""
import math
import os
import sqlite3
import subprocess
import threading

import pytest

from backend.config import build_config
from backend.core.database import WorkspaceError
from backend.runs.store import RunStore


def test_runs_are_created_queued_and_listed_newest_first(tmp_path):
    store = RunStore(tmp_path)
    a = store.create_run(build_config({"name": "first"}))
    b = store.create_run(build_config({}))
    assert a.status == "queued" and a.name == "first" and b.name.startswith("sft-sft-instructions-")
    assert [r.id for r in store.list_runs()] == [b.id, a.id]
    assert store.run_dir(a.id).is_dir()
    c = store.create_run(build_config({"mode": "dpo", "dataset": "/data/My prefs.jsonl"}))
    assert c.name.startswith("dpo-My-prefs-")  # the dataset in the default name
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_finish_is_first_writer_wins(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    assert store.finish_run(run.id, "stopped")
    assert not store.finish_run(run.id, "failed", error="late")
    run = store.get_run(run.id)
    assert run.status == "stopped" and run.error is None and run.finished_at


def test_metrics_are_read_incrementally_and_sanitized(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    assert store.add_metrics(run.id, 1, {"loss": 2.5, "grad_norm": float("nan"), "note": "text", "flag": True}) == 2
    first = store.metrics_since(run.id)
    assert [(m["step"], m["name"], m["value"]) for m in first] == [(1, "loss", 2.5), (1, "grad_norm", None)]
    store.add_metrics(run.id, 2, {"loss": 2.0})
    newer = store.metrics_since(run.id, first[-1]["id"])
    assert [(m["step"], m["value"]) for m in newer] == [(2, 2.0)]
    assert store.last_metrics(run.id) == {"grad_norm": None, "loss": 2.0}


def test_a_new_store_on_the_same_workspace_sees_everything(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({"lora": {"r": 4}}))
    store.add_metrics(run.id, 3, {"loss": 1.0})
    store.request_stop(run.id)
    again = RunStore(tmp_path)
    got = again.get_run(run.id)
    assert got.config.lora.r == 4 and got.stop_requested and len(again.metrics_since(run.id)) == 1


def test_concurrent_writers_lose_nothing(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))

    def write(k):
        other = RunStore(tmp_path)
        for step in range(50):
            other.add_metrics(run.id, step, {f"m{k}": float(step)})

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = store.metrics_since(run.id)
    assert len(rows) == 200 and all(not math.isnan(r["value"]) for r in rows)


def test_samples_round_trip(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    store.add_samples(run.id, 5, [{"prompt": "p", "completion": "c", "rewards": {"len": 0.5}}])
    (s,) = store.samples_since(run.id)
    assert s["step"] == 5 and s["rewards"] == {"len": 0.5}


def test_run_ids_made_in_the_same_second_never_clash(tmp_path, monkeypatch):
    import backend.runs.store as store_module

    drawn = iter(["20260101-000000-aaaa", "20260101-000000-aaaa", "20260101-000000-bbbb"])
    monkeypatch.setattr(store_module, "new_run_id", lambda: next(drawn))
    store = RunStore(tmp_path)
    first, second = store.create_run(build_config({})), store.create_run(build_config({}))
    assert (first.id, second.id) == ("20260101-000000-aaaa", "20260101-000000-bbbb")


@pytest.fixture
def read_only(tmp_path):
    """A function making a folder read-only for this process: its mode for a user, a read-only bind mount for
    root (whom modes do not stop); the test is skipped where neither can be made."""
    mounted = []

    def make(folder):
        if os.geteuid() != 0:
            for path in [folder, *folder.rglob("*")]:
                path.chmod(path.stat().st_mode & ~0o222)
            return folder
        view = tmp_path / "read-only-view"
        view.mkdir()
        for args in (["mount", "--bind", str(folder), str(view)], ["mount", "-o", "remount,ro,bind", str(view)]):
            if subprocess.run(args, capture_output=True).returncode:
                pytest.skip("no read-only mount can be made here")
            mounted[:] = [view]
        return view

    yield make
    for view in mounted:
        subprocess.run(["umount", "--lazy", str(view)], capture_output=True)  # a store may still hold it open


def test_a_read_only_workspace_is_listed_and_refuses_writes_saying_why(tmp_path, read_only):
    store = RunStore(tmp_path / "ws")
    run = store.create_run(build_config({"name": "kept"}))
    store.add_metrics(run.id, 1, {"loss": 1.5})
    ro = RunStore(read_only(tmp_path / "ws"))
    assert ro.read_only and [r.name for r in ro.list_runs()] == ["kept"]
    assert ro.last_metrics(run.id) == {"loss": 1.5}
    with pytest.raises(WorkspaceError) as err:
        ro.set_note(run.id, "x")
    assert str(err.value).startswith(f"workspace {ro.workspace} ") and "runs can be listed and shown, not " \
        "started, changed or deleted; make it writable" in str(err.value)
    with pytest.raises(WorkspaceError, match="cannot be used: .*choose a folder this user can write"):
        RunStore(ro.workspace / "new")  # nothing there to read


def test_each_metric_is_stored_once_per_step(tmp_path):
    """The trainer logs its last step again with the run's totals (and an evaluation's), repeating epoch."""
    from types import SimpleNamespace

    from backend.modes.training import StoreCallback

    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    callback = StoreCallback(store, run.id, is_main=True)
    for step, logs in [(1, {"loss": 2.0, "epoch": 0.5}), (2, {"loss": 1.0, "epoch": 1.0}),
                       (2, {"train_runtime": 3.0, "epoch": 1.0}), (2, {"eval_loss": 1.2, "epoch": 1.0})]:
        callback.on_log(None, SimpleNamespace(global_step=step, max_steps=2), None, logs=logs)
    pairs = [(m["step"], m["name"]) for m in store.metrics_since(run.id)]
    assert len(pairs) == len(set(pairs))
    assert {name for step, name in pairs if step == 2} == {"loss", "epoch", "train_runtime", "eval_loss",
                                                           "memory/peak_rss_gb"}


def test_a_trainer_that_logs_no_step_time_gets_the_steps_own_time(tmp_path, monkeypatch):
    """The mean of the steps since the last log, without what happens between steps (evaluation, saving); a
    trainer's own step_time (TRL's online ones) is kept as it logged it."""
    from types import SimpleNamespace

    from backend.modes import training

    clock = iter([0.0, 2.0, 10.0, 14.0, 20.0, 21.0])
    monkeypatch.setattr(training.time, "perf_counter", lambda: next(clock))
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    callback = training.StoreCallback(store, run.id, is_main=True)
    state = SimpleNamespace(global_step=2, max_steps=3)
    for _ in range(2):  # steps of 2 s and 4 s, with 6 s between them
        callback.on_step_begin(None, state, None)
        callback.on_step_end(None, state, SimpleNamespace(should_training_stop=False))
    callback.on_log(None, state, None, logs={"loss": 1.0})
    callback.on_step_begin(None, SimpleNamespace(global_step=3, max_steps=3), None)
    callback.on_step_end(None, SimpleNamespace(global_step=3, max_steps=3), SimpleNamespace(should_training_stop=False))
    callback.on_log(None, SimpleNamespace(global_step=3, max_steps=3), None, logs={"loss": 1.0, "step_time": 9.0})
    times = {m["step"]: m["value"] for m in store.metrics_since(run.id) if m["name"] == "step_time"}
    assert times == {2: 3.0, 3: 9.0}


def test_the_change_counter_moves_on_what_a_page_shows_and_not_on_each_heartbeat(tmp_path, monkeypatch):
    from backend.core import database
    from backend.runs import store as store_module

    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    with store.connect() as db:
        count = lambda: database.changes(db)  # noqa: E731
        start = count()
        clock = [1000.0]
        monkeypatch.setattr(store_module.time, "time", lambda: clock[0])
        for _ in range(5):  # within one BEAT_EVERY_S: the first beat counts (none before), the rest do not
            store.heartbeat(run.id)
            store.worker_heartbeat(run.id)
            clock[0] += 1
        assert count() == start + 2
        clock[0] += database.BEAT_EVERY_S
        store.heartbeat(run.id)
        assert count() == start + 3
        store.update_run(run.id, status="running")
        assert count() == start + 4
        store.add_metrics(run.id, 1, {"loss": 1.0})
        assert count() > start + 4
    # the labeling and evaluation tables count too (registered by other packages)
    with store.connect() as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    assert any(n.startswith("changes_evals_") for n in names) and any(n.startswith("changes_label") for n in names)


def test_a_process_that_never_loaded_the_workspace_packages_cannot_open_a_store(tmp_path):
    """Labeling, sweeps and evaluations register their tables, deletion checks and queues when imported: a
    process's entry point loads them, and one that forgot is told at once rather than missing them."""
    import subprocess
    import sys

    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    opened = "from backend.runs.store import RunStore; RunStore({!r})"
    forgot = subprocess.run([sys.executable, "-c", opened.format(str(tmp_path / "a"))], capture_output=True,
                            text=True, cwd=repo)
    assert forgot.returncode != 0
    assert "call backend.workspace.load_providers() at its start" in forgot.stderr
    assert not (tmp_path / "a" / "workbench.db").exists()  # refused before it wrote anything
    loaded = "from backend.workspace import load_providers; load_providers(); " + opened.format(str(tmp_path / "b"))
    assert subprocess.run([sys.executable, "-c", loaded], capture_output=True, text=True, cwd=repo).returncode == 0
