"""The SQLite run store: runs, statuses, incremental metric reads, persistence across connections."""
import math
import sqlite3
import threading

from backend.config import build_config
from backend.runs.store import RunStore


def test_runs_are_created_queued_and_listed_newest_first(tmp_path):
    store = RunStore(tmp_path)
    a = store.create_run(build_config({"name": "first"}))
    b = store.create_run(build_config({}))
    assert a.status == "queued" and a.name == "first" and b.name.startswith("sft-")
    assert [r.id for r in store.list_runs()] == [b.id, a.id]
    assert store.run_dir(a.id).is_dir()
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
