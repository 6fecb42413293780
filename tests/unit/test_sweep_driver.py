"""The sweep driver's bookkeeping, driven in-process with fake runs: a fake `submit` records a run in the
store, each fake `sleep` lets the running run log one more step (or end), a fake `stop` stops it. Real
trainings are in tests/integration/test_sweeps.py."""
import json
import sqlite3
import subprocess
import time

from backend import sweeps
from backend.config import build_config
from backend.runs.store import RunStore

SFT = {"mode": "sft", "max_steps": 3}


class FakeRuns:
    """Runs that log `loss(config)` for `steps` steps, one step per driver poll."""

    def __init__(self, store, loss, steps=3, fail=lambda config: None, log_name="loss"):
        self.store, self.loss, self.steps, self.fail, self.log_name = store, loss, steps, fail, log_name
        self.submitted, self.stopped = [], []

    def submit(self, store, config):
        run = store.create_run(config)
        store.update_run(run.id, status="running", started_at=time.time())
        self.submitted.append(run.id)
        return run

    def stop(self, store, run_id):
        self.stopped.append(run_id)
        store.finish_run(run_id, "stopped")

    def sleep(self, _seconds):
        for run in self.store.list_runs(("running",)):
            if (error := self.fail(run.config)) is not None:
                self.store.finish_run(run.id, "failed", error=error)
            elif run.step < self.steps:
                self.store.update_run(run.id, step=run.step + 1)
                self.store.add_metrics(run.id, run.step + 1, {self.log_name: self.loss(run.config, run.step + 1)})
            else:
                self.store.finish_run(run.id, "completed")

    def driver(self, sweep_id):
        return sweeps.SweepDriver(self.store, sweep_id, submit=self.submit, stop=self.stop, dispatch=lambda s: None,
                                  sleep=self.sleep, poll_s=0, out=lambda *a, **k: None)


def make_sweep(store, n_trials=4, **extra):
    spec = sweeps.build_sweep_spec({"name": "lr", "base": SFT, "n_trials": n_trials, "space": [
        {"field": "learning_rate", "kind": "log_float", "low": 1e-5, "high": 1e-2},
        {"field": "lora.r", "kind": "categorical", "choices": [2, 4, 8]}], **extra})
    return sweeps.create_sweep(store, spec)


def test_each_trial_is_a_run_and_the_best_is_the_lowest(tmp_path):
    store = RunStore(tmp_path)
    fake = FakeRuns(store, loss=lambda c, step: c.learning_rate * 1000 + 1 / step)
    sweep = make_sweep(store)
    assert fake.driver(sweep.id).run() == 0
    sweep = sweeps.get_sweep(store, sweep.id)
    trials = sweeps.list_trials(store, sweep.id)
    assert sweep.status == "completed" and sweep.finished_at
    assert [t.status for t in trials] == ["completed"] * 4
    assert [t.run_id for t in trials] == fake.submitted
    for t in trials:
        run = store.get_run(t.run_id)
        assert run.name == f"lr #{t.number + 1}"
        assert run.config.learning_rate == t.params["learning_rate"] and run.config.lora.r == t.params["lora.r"]
        assert t.value == store.last_metrics(run.id)["loss"]  # reduce: last
        assert sweeps.sweep_of_run(store, run.id) == (sweep.id, t.number)
    best = sweeps.best_trial(sweep.spec, trials)
    assert best.value == min(t.value for t in trials)
    assert sweeps.best_config(store, sweep.id).learning_rate == best.params["learning_rate"]
    assert (tmp_path / "sweeps" / sweep.id / "optuna.db").exists()
    importances = sweeps.param_importances(store, sweep)  # the loss depends on the learning rate only
    assert set(importances) == {"learning_rate", "lora.r"} and importances["learning_rate"] > 0.5


def test_a_resumed_driver_keeps_finished_trials_and_finishes_an_interrupted_one(tmp_path):
    store = RunStore(tmp_path)
    fake = FakeRuns(store, loss=lambda c, step: c.learning_rate)
    sweep = make_sweep(store, n_trials=2)
    fake.driver(sweep.id).run()
    first = sweeps.list_trials(store, sweep.id)

    # A driver that died mid-trial: Optuna asked for trial #3 and its run was submitted, nothing more.
    driver = fake.driver(sweep.id)
    study = driver.study()
    trial = study.ask()
    params = {p.field: driver.suggest(trial, p) for p in driver.spec.space}
    run = fake.submit(store, sweeps.trial_config(driver.spec, params, trial.number))
    sweeps.save_trial(store, sweeps.Trial(sweep.id, trial.number, run.id, "running", params, created_at=time.time()))

    spec = sweep.spec.model_copy(update={"n_trials": 4})
    sweeps.update_sweep(store, sweep.id, status="queued", spec=spec.model_dump_json())
    fake.driver(sweep.id).run()
    trials = sweeps.list_trials(store, sweep.id)
    assert [t.status for t in trials] == ["completed"] * 4
    assert [(t.run_id, t.value) for t in trials[:2]] == [(t.run_id, t.value) for t in first]  # not redone
    assert trials[2].run_id == run.id  # waited for, not started again
    assert len(store.list_runs()) == 4
    assert [t.state.name for t in fake.driver(sweep.id).study().trials] == ["COMPLETE"] * 4


def test_a_trial_that_resumes_itself_counts_each_step_once(tmp_path):
    # attempt 1 logs steps 1-3 (loss 5) and dies; auto-resumed from its checkpoint of step 1, attempt 2 logs
    # steps 2-4 (loss 1): the store keeps 5, 1, 1, 1, and so must the objective (mean of the last 6: 2)
    store = RunStore(tmp_path)

    class Resuming(FakeRuns):
        def sleep(self, _seconds):
            for run in self.store.list_runs(("running",)):
                if run.attempt == 1 and run.step == 3:
                    self.store.finish_run(run.id, "failed", error="killed")
                    self.store.requeue_for_resume(run.id, 1, in_place=True)
                    return
            super().sleep(_seconds)

    fake = Resuming(store, loss=lambda c, step: 5.0 if step <= 3 and not fake.resumed(c) else 1.0, steps=4)
    fake.resumed = lambda c: any(r.attempt > 1 for r in store.list_runs())
    sweep = make_sweep(store, n_trials=1, objective={"metric": "loss", "reduce": "mean_last", "last_k": 6})
    assert fake.driver(sweep.id).run() == 0
    (trial,) = sweeps.list_trials(store, sweep.id)
    assert [m["value"] for m in store.metrics_since(trial.run_id)] == [5.0, 1.0, 1.0, 1.0]
    assert trial.value == 2.0


def test_failed_and_silent_runs_are_recorded_and_the_sweep_goes_on(tmp_path):
    store = RunStore(tmp_path)
    fake = FakeRuns(store, loss=lambda c, step: 1.0,
                    fail=lambda c: "CUDA out of memory" if c.name.endswith(("#2", "#3")) else None)
    sweep = make_sweep(store, n_trials=5)
    fake.driver(sweep.id).run()
    trials = sweeps.list_trials(store, sweep.id)
    assert sweeps.get_sweep(store, sweep.id).status == "completed" and len(trials) == 5
    assert [t.status for t in trials] == ["completed", "failed", "failed", "completed", "completed"]
    assert trials[1].error == "CUDA out of memory" and trials[1].value is None

    silent = FakeRuns(store, loss=lambda c, step: 1.0, log_name="grad_norm")
    sweep = make_sweep(store, n_trials=1)
    silent.driver(sweep.id).run()
    (trial,) = sweeps.list_trials(store, sweep.id)
    assert trial.status == "failed" and trial.error == "the run never logged a finite 'loss'; it logged: grad_norm"


def test_a_sweep_whose_trials_keep_failing_gives_up(tmp_path):
    store = RunStore(tmp_path)
    fake = FakeRuns(store, loss=lambda c, step: 1.0, fail=lambda c: "dataset row 3: column `text` is empty")
    sweep = make_sweep(store, n_trials=8)
    fake.driver(sweep.id).run()
    sweep = sweeps.get_sweep(store, sweep.id)
    assert sweep.status == "failed" and len(store.list_runs()) == sweeps.FAILURES_IN_A_ROW
    assert sweep.error.startswith("3 trials in a row failed, the last with: dataset row 3: column `text` is empty")


def test_a_trial_worse_than_the_median_is_pruned(tmp_path):
    store = RunStore(tmp_path)
    # trial #1 logs 1.0 at every step; later trials log 5.0 and are stopped at their first step
    fake = FakeRuns(store, loss=lambda c, step: 1.0 if c.name.endswith("#1") else 5.0, steps=5)
    sweep = make_sweep(store, n_trials=3, pruning={"enabled": True, "startup_trials": 1, "warmup_steps": 0})
    fake.driver(sweep.id).run()
    trials = sweeps.list_trials(store, sweep.id)
    assert [t.status for t in trials] == ["completed", "pruned", "pruned"]
    assert fake.stopped == [trials[1].run_id, trials[2].run_id]
    assert all(store.get_run(t.run_id).step < 5 and t.value == 5.0 for t in trials[1:])
    assert sweeps.best_trial(sweeps.get_sweep(store, sweep.id).spec, trials).number == 0
    states = [t.state.name for t in fake.driver(sweep.id).study().trials]
    assert states == ["COMPLETE", "PRUNED", "PRUNED"]


def test_stopping_a_sweep_stops_its_trial_and_starts_no_other(tmp_path):
    store = RunStore(tmp_path)
    fake = FakeRuns(store, loss=lambda c, step: 1.0, steps=100)
    sweep = make_sweep(store, n_trials=3)
    polls = {"n": 0}
    sleep = fake.sleep

    def sleep_then_stop(seconds):
        polls["n"] += 1
        if polls["n"] == 3:
            assert sweeps.stop_sweep(store, sweep.id) == "stopping"
        sleep(seconds)

    fake.sleep = sleep_then_stop
    fake.driver(sweep.id).run()
    (trial,) = sweeps.list_trials(store, sweep.id)
    assert sweeps.get_sweep(store, sweep.id).status == "stopped"
    assert trial.status == "stopped" and store.get_run(trial.run_id).status == "stopped"
    assert len(store.list_runs()) == 1


def test_a_sweep_whose_driver_is_gone_is_failed_with_a_way_on(tmp_path):
    store = RunStore(tmp_path)
    sweep = make_sweep(store)
    dead = subprocess.Popen(["true"])
    dead.wait()
    sweeps.update_sweep(store, sweep.id, status="running", pid=dead.pid, heartbeat_at=time.time())
    assert sweeps.reconcile_sweeps(store) == [sweep.id]
    sweep = sweeps.get_sweep(store, sweep.id)
    assert sweep.status == "failed" and f"launch.py sweep resume {sweep.id}" in sweep.error


def test_a_workspace_from_before_sweeps_gains_the_tables(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({}))
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TABLE sweep_trials")
        db.execute("DROP TABLE sweeps")
    again = RunStore(tmp_path)
    assert again.get_run(run.id).status == "queued"
    sweep = make_sweep(again)
    assert json.loads(sweeps.get_sweep(again, sweep.id).spec.model_dump_json())["n_trials"] == 4
    assert sweeps.list_trials(again, sweep.id) == []
