"""The Runs tab's poll: reads only new metric rows and re-sends only what changed."""
import time

import gradio as gr
import pytest

from app import runs_tab
from app.runs_tab import RunView
from app.tab_polls import TabPolls
from backend.config import build_config
from backend.runs.store import RunStore

SKIP = gr.skip()
NAMES = ["table", "select", "progress", "plot", "log", "error", "adapter", "config", "samples_box", "samples_step",
         "samples_table", "note", "delete", "confirm", "view", "resume"]


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path)


@pytest.fixture
def render(store):
    with gr.Blocks():
        tab = runs_tab.build(store, TabPolls(1.5, ("runs",)), gr.State(RunView()))

    def named(view):
        out = tab.render(view)
        return {name: out.get(c, SKIP) for name, c in zip(NAMES, tab.outputs)}  # left out: unchanged, as SKIP
    return named


def finished_run(store, **metrics):
    run = store.create_run(build_config({"name": "done"}))
    for step, value in enumerate(metrics.get("loss", []), 1):
        store.add_metrics(run.id, step, {"loss": value})
    store.update_run(run.id, status="completed", started_at=time.time() - 60, finished_at=time.time() - 30,
                     step=2, total_steps=2, adapter_path="/x/adapter")
    return store.get_run(run.id)


def test_selecting_a_run_shows_everything_about_it(store, render):
    run = finished_run(store, loss=[2.0, 1.0])
    out = render(RunView().select(run.id))
    assert "completed" in out["progress"] and "done" in out["progress"]
    assert list(out["plot"].data[0].y) == [2.0, 1.0]
    assert out["adapter"]["value"] == "/x/adapter"
    assert "name: done" in out["config"]
    assert out["view"].last_id > 0


def test_a_poll_with_nothing_new_sends_nothing(store, render):
    run = finished_run(store, loss=[2.0, 1.0])
    view = render(RunView().select(run.id))["view"]
    again = render(view)
    assert all(again[name] == SKIP for name in NAMES if name != "view")


def test_a_poll_reads_only_rows_newer_than_the_last_one(store, render, monkeypatch):
    run = finished_run(store, loss=[2.0, 1.0])
    view = render(RunView().select(run.id))["view"]
    seen = []
    real = store.metrics_since
    monkeypatch.setattr(store, "metrics_since", lambda rid, after=0: seen.append(after) or real(rid, after))
    store.add_metrics(run.id, 3, {"loss": 0.5})
    last_seen = view.last_id
    out = render(view)
    assert seen == [last_seen]  # one query, for rows after the last one already fetched
    assert list(out["plot"].data[0].y) == [2.0, 1.0, 0.5]
    assert out["table"] == SKIP


def test_a_failed_run_shows_its_error(store, render):
    run = store.create_run(build_config({}))
    store.update_run(run.id, status="running", started_at=time.time())
    store.finish_run(run.id, "failed", error="the worker exited with code 1")
    out = render(RunView().select(run.id))
    assert out["error"]["visible"] is True and "exited with code 1" in out["error"]["value"]
    assert out["resume"]["interactive"] is True  # a failed run can be resumed


def test_a_resumed_run_shows_its_attempt_and_an_active_one_offers_no_resume(store, render):
    run = store.create_run(build_config({}))
    store.update_run(run.id, attempt=2, status="running", started_at=time.time(), train_started_at=time.time(),
                     step=4, total_steps=6)
    out = render(RunView().select(run.id))
    assert "running · attempt 2 · step 4/6" in out["progress"] and out["resume"]["interactive"] is False


def test_a_poll_only_reads_the_store_and_leaves_the_queue_to_the_server(store, render, monkeypatch):
    from backend.runs import jobs

    monkeypatch.setattr(jobs, "dispatch", lambda store: pytest.fail("a browser's poll dispatched"))
    run = store.create_run(build_config({"name": "waiting"}))
    out = render(RunView().select(run.id))
    assert "queued" in out["progress"] and store.get_run(run.id).status == "queued"


def test_a_fresh_page_follows_the_active_run_else_the_newest(store):
    assert runs_tab.default_selection([]) is None
    old = store.create_run(build_config({"name": "old"}))
    store.update_run(old.id, status="running")
    store.create_run(build_config({"name": "new"}))
    store.finish_run(store.list_runs()[0].id, "stopped")
    assert runs_tab.default_selection(store.list_runs()) == old.id


def grpo_run(store):
    run = store.create_run(build_config({
        "name": "rl", "mode": "grpo", "dataset": "demo-math",
        "reward_sources": [{"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
                           {"type": "regex", "params": {"pattern": "<answer>"}}]}))
    store.update_run(run.id, status="running", started_at=time.time())
    return run


def sample(step, text, correct):
    return {"prompt": "2 + 2?", "completion": text, "rewards": {"correct": correct, "regex": 1.0},
            "total": correct + 1.0}


def test_an_rl_run_shows_its_samples_with_a_column_per_source(store, render):
    run = grpo_run(store)
    store.add_samples(run.id, 1, [sample(1, "<answer>4</answer>", 1.0), sample(1, "<answer>5</answer>", 0.0)])
    out = render(RunView().select(run.id))
    assert out["samples_box"]["visible"] is True
    table = out["samples_table"]["value"]
    assert list(table.columns) == ["step", "prompt", "completion", "correct", "regex", "total"]
    assert table.values.tolist()[0] == [1, "2 + 2?", "<answer>5</answer>", "0", "1", "1"]  # newest first


def test_a_poll_reads_only_samples_newer_than_the_last_one(store, render, monkeypatch):
    run = grpo_run(store)
    store.add_samples(run.id, 1, [sample(1, "a", 1.0)])
    view = render(RunView().select(run.id))["view"]
    seen = []
    real = store.samples_since
    monkeypatch.setattr(store, "samples_since", lambda rid, after=0: seen.append(after) or real(rid, after))
    last = view.last_sample_id
    assert render(view)["samples_table"] == SKIP  # nothing new: nothing sent
    store.add_samples(run.id, 2, [sample(2, "b", 0.0)])
    out = render(view)
    assert seen == [last, last]  # each poll asks only for samples after the last one fetched
    assert out["samples_table"]["value"]["completion"].tolist() == ["b", "a"]
    assert [value for _, value in out["samples_step"]["choices"]] == ["all", "2", "1"]


def test_the_step_filter_shows_one_step(store, render):
    run = grpo_run(store)
    store.add_samples(run.id, 1, [sample(1, "a", 1.0)])
    store.add_samples(run.id, 2, [sample(2, "b", 0.0)])
    view = render(RunView().select(run.id))["view"]
    view.sample_step = "1"
    assert render(view)["samples_table"]["value"]["completion"].tolist() == ["a"]


def test_runs_of_other_modes_hide_the_samples(store, render):
    run = finished_run(store, loss=[1.0])
    out = render(RunView().select(run.id))
    assert out["samples_box"]["visible"] is False
