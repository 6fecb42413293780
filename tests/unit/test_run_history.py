"""Managing run history: deleting ended runs (rows, then folder, never outside workspace/runs), notes on runs
(with the column added to workspaces made before notes existed), and the `delete`, `note` and `runs --status`
commands."""
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.runs import jobs
from backend.config import build_config
from backend.runs.store import DeleteRefused, RunStore

REPO = Path(__file__).resolve().parents[2]


def _ended(store, name, status="completed"):
    run = store.create_run(build_config({"name": name}))
    store.add_metrics(run.id, 1, {"loss": 2.0})
    store.add_samples(run.id, 1, [{"prompt": "p", "completion": "c", "reward": 1.0}])
    (store.run_dir(run.id) / "adapter").mkdir()
    (store.run_dir(run.id) / "adapter" / "adapter_config.json").write_text("{}")
    (store.run_dir(run.id) / "train.log").write_text("done\n")
    store.finish_run(run.id, status)
    return run


def _count(store, table, run_id):
    with sqlite3.connect(store.path) as db:
        return db.execute(f"SELECT COUNT(*) FROM {table} WHERE {'id' if table == 'runs' else 'run_id'}=?",
                          (run_id,)).fetchone()[0]


def test_deleting_a_run_removes_its_rows_and_folder_and_nothing_else(tmp_path):
    store = RunStore(tmp_path)
    gone, kept = _ended(store, "gone"), _ended(store, "kept", "failed")
    export = tmp_path / "exports" / f"{gone.id}-adapter"
    export.mkdir(parents=True)
    assert jobs.delete_runs(store, [gone.id]) == []
    assert [_count(store, t, gone.id) for t in ("runs", "metrics", "samples")] == [0, 0, 0]
    assert not store.run_dir(gone.id).exists()
    with pytest.raises(KeyError):
        store.get_run(gone.id)
    assert [_count(store, t, kept.id) for t in ("runs", "metrics", "samples")] == [1, 1, 1]
    assert (store.run_dir(kept.id) / "adapter" / "adapter_config.json").is_file()
    assert export.is_dir()  # the user's exported results stay


def test_active_and_unknown_runs_are_refused_and_nothing_is_deleted(tmp_path):
    store = RunStore(tmp_path)
    done = _ended(store, "done")
    queued = store.create_run(build_config({"name": "waiting"}))
    running = store.create_run(build_config({"name": "training"}))
    store.update_run(running.id, status="running", heartbeat_at=time.time(), pid=None, started_at=time.time())
    with pytest.raises(DeleteRefused) as refused:
        store.delete_runs([done.id, queued.id, running.id, "20990101-000000-beef"])
    errors = refused.value.errors
    assert len(errors) == 3
    assert "waiting) is queued: stop it first" in errors[0] and "training) is running: stop it first" in errors[1]
    assert "no run with id '20990101-000000-beef'" in errors[2]
    assert store.get_run(done.id) and store.run_dir(done.id).is_dir()  # all or none
    assert store.run_dir(queued.id).is_dir()


def test_a_run_whose_worker_died_can_be_deleted(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    stale = time.time() - 3600
    store.update_run(run.id, status="running", started_at=stale, heartbeat_at=stale, pid=None)
    jobs.delete_runs(store, [run.id])  # reconciled to interrupted first
    assert not store.list_runs()


def test_run_ids_never_reach_outside_the_runs_folder(tmp_path):
    workspace, outside = tmp_path / "ws", tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    store = RunStore(workspace)
    with store.connect() as db:  # a row no workbench writes, as a tampered or foreign store might hold
        db.execute("INSERT INTO runs (id, name, mode, status, config, created_at) VALUES (?,?,?,?,?,?)",
                   ("../../precious", "evil", "sft", "completed", build_config({}).model_dump_json(), time.time()))
    with pytest.raises(DeleteRefused, match="does not name a folder inside"):
        store.delete_runs(["../../precious"])
    assert (outside / "keep.txt").read_text() == "mine"
    # a run folder that is a link to elsewhere: the link goes, what it points to stays
    run = _ended(store, "linked")
    store.run_dir(run.id).rename(tmp_path / "moved")
    store.run_dir(run.id).symlink_to(outside, target_is_directory=True)
    store.delete_runs([run.id])
    assert not store.run_dir(run.id).exists() and (outside / "keep.txt").is_file()


def test_a_sweep_trial_run_goes_but_the_sweep_keeps_the_trial_score(tmp_path):
    store = RunStore(tmp_path)
    done, pending = _ended(store, "sweep #1"), _ended(store, "sweep #2")
    with store.connect() as db:
        db.execute("INSERT INTO sweeps (id, name, spec, status, created_at) VALUES ('sw', 'sweep', '{}', 'running', 0)")
        db.execute("INSERT INTO sweep_trials (sweep_id, number, run_id, status, params, value, created_at) "
                   "VALUES ('sw', 0, ?, 'completed', '{\"learning_rate\": 0.001}', 1.5, 0)", (done.id,))
        db.execute("INSERT INTO sweep_trials (sweep_id, number, run_id, status, params, created_at) "
                   "VALUES ('sw', 1, ?, 'running', '{}', 0)", (pending.id,))
    store.delete_runs([done.id])
    with store.connect() as db:
        row = db.execute("SELECT run_id, status, value FROM sweep_trials WHERE number=0").fetchone()
    assert tuple(row) == (None, "completed", 1.5)
    # the driver has not scored trial #2 yet: it still reads that run
    with pytest.raises(DeleteRefused, match="trial #2 of sweep sw, which has not recorded its result yet"):
        store.delete_runs([pending.id])


def test_a_run_an_active_run_uses_as_its_reward_model_is_refused(tmp_path):
    store = RunStore(tmp_path)
    rm = _ended(store, "rm")
    store.create_run(build_config({"name": "ppo-user", "mode": "ppo", "dataset": "demo-math",
                                   "reward_sources": [{"type": "length", "params": {"target": 50}}],
                                   "ppo": {"value_model": "separate", "value_init_run": rm.id}}))
    with pytest.raises(DeleteRefused, match=r"used by the ppo-user \(queued\) run"):
        store.delete_runs([rm.id])


def test_runs_referenced_are_read_from_the_config_not_searched_for_in_its_text(tmp_path):
    store = RunStore(tmp_path)
    rm, other = _ended(store, "rm"), _ended(store, "rm")
    folder = str(store.run_dir(rm.id) / "adapter")
    store.create_run(build_config({"name": "grpo-user", "mode": "grpo", "dataset": "demo-math",
                                   "reward_sources": [{"type": "reward_model", "params": {"model": folder}}]}))
    assert store.create_run(build_config({"name": f"named after {other.id}"})).config.referenced_runs() == set()
    with pytest.raises(DeleteRefused, match=r"used by the grpo-user \(queued\) run"):
        store.delete_runs([rm.id])
    store.delete_runs([other.id])  # only named in another run's name: not used by it


def test_notes_are_saved_trimmed_and_cleared(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    assert store.get_run(run.id).note == ""
    assert store.set_note(run.id, "  lr too high, diverged at step 40\n") == "lr too high, diverged at step 40"
    assert RunStore(tmp_path).get_run(run.id).note == "lr too high, diverged at step 40"
    assert store.get_run(run.id).to_dict()["note"] == "lr too high, diverged at step 40"
    store.set_note(run.id, "")
    assert store.get_run(run.id).note == ""
    with pytest.raises(KeyError):
        store.set_note("20990101-000000-beef", "x")


OLD_RUNS_TABLE = """CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, mode TEXT NOT NULL, status TEXT NOT NULL,
    config TEXT NOT NULL, created_at REAL NOT NULL, started_at REAL, train_started_at REAL, finished_at REAL,
    pid INTEGER, worker_pid INTEGER, heartbeat_at REAL, stop_requested INTEGER NOT NULL DEFAULT 0,
    step INTEGER NOT NULL DEFAULT 0, total_steps INTEGER, error TEXT, adapter_path TEXT)"""


def test_a_workspace_made_before_notes_opens_with_its_runs_as_they_were(tmp_path):
    with sqlite3.connect(tmp_path / "workbench.db") as db:
        db.execute(OLD_RUNS_TABLE)
        db.execute("INSERT INTO runs (id, name, mode, status, config, created_at, step) VALUES (?,?,?,?,?,?,?)",
                   ("20250101-000000-abcd", "old", "sft", "completed", build_config({}).model_dump_json(), 1.0, 7))
    store = RunStore(tmp_path)
    old = store.get_run("20250101-000000-abcd")
    assert (old.name, old.status, old.step, old.note) == ("old", "completed", 7, "")
    store.set_note(old.id, "from before notes")
    assert RunStore(tmp_path).get_run(old.id).note == "from before notes"  # opening again adds nothing twice


def _cli(workspace, *args, stdin=subprocess.DEVNULL):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args, "--workspace", str(workspace)],
                          capture_output=True, text=True, cwd=REPO, timeout=120, stdin=stdin)


def test_cli_note_delete_and_status_filter(tmp_path):
    store = RunStore(tmp_path)
    good, bad = _ended(store, "good"), _ended(store, "bad", "failed")
    queued = store.create_run(build_config({"name": "waiting"}))
    store.finish_run(queued.id, "stopped")  # `show` and `runs` dispatch: nothing may start training here

    out = _cli(tmp_path, "note", bad.id, "lr too high, diverged at step 40")
    assert out.returncode == 0 and "note saved" in out.stdout, out.stderr
    assert "note: lr too high, diverged at step 40" in _cli(tmp_path, "show", bad.id).stdout
    listed = json.loads(_cli(tmp_path, "runs", "--status", "failed", "--json").stdout)
    assert [(r["id"], r["note"]) for r in listed] == [(bad.id, "lr too high, diverged at step 40")]
    assert _cli(tmp_path, "note", "20990101-000000-beef", "x").returncode == 2

    unknown = _cli(tmp_path, "delete", good.id, "20990101-000000-beef", "--yes")
    assert unknown.returncode == 2 and "no run with id '20990101-000000-beef'" in unknown.stderr
    assert "Traceback" not in unknown.stderr and store.get_run(good.id)
    unasked = _cli(tmp_path, "delete", good.id)  # no terminal to ask on, no --yes: nothing happens
    assert unasked.returncode == 2 and "--yes" in unasked.stderr and store.get_run(good.id)

    done = _cli(tmp_path, "delete", good.id, bad.id, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"deleted run {good.id} (good)" in done.stdout and "exports under" in done.stdout
    assert [r.id for r in store.list_runs()] == [queued.id]


def test_cli_delete_refuses_an_active_run_with_what_to_do(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({"name": "waiting"}))
    out = _cli(tmp_path, "delete", run.id, "--yes")
    assert out.returncode == 2 and "is queued: stop it first" in out.stderr and "Traceback" not in out.stderr
    assert store.get_run(run.id).status == "queued"


def test_the_runs_tab_shows_the_note_and_offers_delete_only_for_an_ended_run(tmp_path):
    import gradio as gr

    from app import runs_tab
    from app.runs_tab import RunView
    from app.tab_polls import TabPolls

    store = RunStore(tmp_path)
    done, waiting = _ended(store, "done"), store.create_run(build_config({"name": "waiting"}))
    store.set_note(done.id, "keep this one")
    with gr.Blocks():
        tab = runs_tab.build(store, TabPolls(1.5, ("runs",)), gr.State(RunView()))
    names = ("note", "delete", "confirm")
    at = [tab.outputs.index(c) for c in tab.outputs if c.elem_id in ("run-note", "runs-delete",
                                                                      "runs-delete-confirm")]

    def manage(view):
        out = tab.render(view)
        return {name: out.get(tab.outputs[i], gr.skip()) for name, i in zip(names, at)}  # left out: unchanged

    view = RunView(run_id=done.id)
    shown = manage(view)
    assert shown["note"]["value"] == "keep this one" and shown["delete"]["interactive"] is True
    view.confirm_delete = True  # Delete clicked once
    assert manage(view)["confirm"] == gr.update(visible=True, value="Confirm: delete done")
    assert manage(view)["note"] == gr.skip()  # unchanged: what the user may be typing is left alone

    active = manage(RunView(run_id=waiting.id, confirm_delete=True))
    assert active["delete"]["interactive"] is False and active["confirm"]["visible"] is False
