"""report_to through the real worker on the tiny model: an SFT run writes TensorBoard event files holding the loss
it logged into its own folder, trackio's database and MLflow's file store into the workspace; PPO (the project's own loop on the
Trainer's callbacks) reports the same way. Both runs go through the queue one after another.
"""
import json
import sqlite3

import pytest

from backend import reporting
from backend.config import build_config
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

TINY = {"max_steps": 2, "max_length": 64, "lora": {"r": 2}, "per_device_train_batch_size": 2}
PPO = {"mode": "ppo", "dataset": "demo-math", "rl": {"num_generations": 2, "max_completion_length": 8},
       "reward_sources": [{"type": "regex", "name": "format", "params": {"pattern": "<answer>.*?</answer>"}}]}


@pytest.fixture(scope="module")
def finished(tiny_model, tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("reporting"))
    sft = submit_run(store, build_config({**TINY, "model": str(tiny_model), "name": "sft-demo",
                                          "report_to": ["tensorboard", "trackio", "mlflow"]}))
    ppo = submit_run(store, build_config({**TINY, **PPO, "model": str(tiny_model), "report_to": "tensorboard"}))
    wait_for(lambda: not any(store.get_run(r.id).active for r in (sft, ppo)), timeout=300, every=1,
             what="the sft and ppo runs to end")
    return store, store.get_run(sft.id), store.get_run(ppo.id)


def tensorboard_scalars(run_dir) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(reporting.tensorboard_dir(run_dir)))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def logged(store, run, name) -> dict[int, float]:
    return {m["step"]: m["value"] for m in store.metrics_since(run.id) if m["name"] == name}


def test_an_sft_run_writes_its_loss_to_tensorboard_in_its_folder(finished):
    store, run, _ = finished
    assert run.status == "completed", run.error
    scalars = tensorboard_scalars(store.run_dir(run.id))
    loss = logged(store, run, "loss")
    assert sorted(loss) == [1, 2]
    assert scalars["train/loss"] == pytest.approx(loss, rel=1e-6)  # float32 in the event file
    assert {"train/learning_rate", "train/grad_norm"} <= set(scalars)


def test_an_sft_run_logs_to_trackio_in_the_workspace(finished):
    store, run, _ = finished
    db_path = reporting.trackio_dir(store.workspace) / f"{reporting.TRACKIO_PROJECT}.db"
    assert db_path.exists(), sorted(p.name for p in reporting.trackio_dir(store.workspace).iterdir())
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT metrics FROM metrics WHERE run_name=?",
                          (reporting.trackio_run_name(run.id, "sft-demo"),)).fetchall()
    logs = [json.loads(metrics) for (metrics,) in rows]
    losses = {m["train/global_step"]: m["train/loss"] for m in logs if "train/loss" in m}
    assert losses == pytest.approx(logged(store, run, "loss"))


def test_ppo_reports_to_tensorboard_too(finished):
    store, _, run = finished
    assert run.status == "completed", run.error
    scalars = tensorboard_scalars(store.run_dir(run.id))
    assert scalars["train/loss"] == pytest.approx(logged(store, run, "loss"), rel=1e-6)
    assert "train/objective/kl" in scalars and "train/rewards/format/mean" in scalars


def test_an_sft_run_logs_to_mlflow_in_the_workspace_read_back_by_its_client(finished, monkeypatch):
    import mlflow

    store, run, _ = finished
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.MlflowClient(tracking_uri=reporting.mlflow_uri(store.workspace))
    [experiment] = [e for e in client.search_experiments() if e.name == reporting.TRACKIO_PROJECT]
    [found] = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == reporting.trackio_run_name(run.id, "sft-demo")
    history = {m.step: m.value for m in client.get_metric_history(found.info.run_id, "loss")}
    assert history == pytest.approx(logged(store, run, "loss"), rel=1e-6)

