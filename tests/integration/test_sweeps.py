"""Sweeps end to end: the CLI, the detached driver, Optuna's study file and real trial runs on the tiny model."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend import sweeps
from backend.config import build_config
from backend.runs.store import RunStore
from tests.processes import leave_nothing_running
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_driver_left_behind(workspace):
    yield
    leave_nothing_running(workspace)


def cli(*args, workspace, timeout=120):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args, "--workspace", str(workspace)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def tiny_base(model, **extra):
    return {"mode": "sft", "model": str(model), "max_steps": 2, "max_length": 64, "logging_steps": 1,
            "lora": {"r": 2}, **extra}


def test_trials_run_as_runs_and_a_resumed_driver_does_not_redo_them(tiny_model, workspace):
    spec = workspace / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "tiny-lr", "base": tiny_base(tiny_model), "n_trials": 3, "seed": 7,
        "space": [{"field": "learning_rate", "kind": "log_float", "low": 1e-5, "high": 1e-1},
                  {"field": "lora.r", "kind": "categorical", "choices": [2, 4]}],
        "objective": {"metric": "loss", "direction": "minimize", "reduce": "last"}}))
    started = cli("sweep", "start", str(spec), "--detach", workspace=workspace)
    assert started.returncode == 0, started.stdout + started.stderr
    sweep_id = started.stdout.split("sweep id: ")[1].split()[0]
    store = RunStore(workspace)

    # Kill the driver (only it: its trial's run lives in its own session) while trial #2 trains.
    second = wait_for(lambda: next((t for t in sweeps.list_trials(store, sweep_id) if t.number == 1 and t.run_id),
                                   None), timeout=240, what="trial #2's run")
    os.kill(sweeps.get_sweep(store, sweep_id).pid, signal.SIGKILL)
    wait_for(lambda: sweeps.reconcile_sweeps(store) is not None and
             sweeps.get_sweep(store, sweep_id).status == "failed", timeout=30, what="the dead driver noticed")
    assert "sweep resume" in sweeps.get_sweep(store, sweep_id).error

    resumed = cli("sweep", "resume", sweep_id, "--detach", workspace=workspace)
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: not sweeps.get_sweep(store, sweep_id).active, timeout=300, what="the sweep's end")
    sweep = sweeps.get_sweep(store, sweep_id)
    assert sweep.status == "completed", sweep.error
    trials = sweeps.list_trials(store, sweep_id)
    assert [t.status for t in trials] == ["completed"] * 3, [t.error for t in trials]
    assert trials[1].run_id == second.run_id  # the interrupted trial's run was waited for, not started again
    runs = store.list_runs()
    assert sorted(r.id for r in runs) == sorted(t.run_id for t in trials)  # no trial ran twice
    for t in trials:
        run = store.get_run(t.run_id)
        assert run.status == "completed" and run.name == f"tiny-lr #{t.number + 1}"
        assert run.config.learning_rate == t.params["learning_rate"] and run.config.lora.r == t.params["lora.r"]
        losses = [m["value"] for m in store.metrics_since(run.id) if m["name"] == "loss"]
        assert len(losses) == 2 and t.value == losses[-1]

    shown = json.loads(cli("sweep", "show", sweep_id, "--json", workspace=workspace).stdout)
    best = min(trials, key=lambda t: t.value)
    assert shown["best_trial"] == best.number + 1 and shown["best_value"] == best.value
    assert [t["status"] for t in shown["trials"]] == ["completed"] * 3
    table = cli("sweep", "show", sweep_id, workspace=workspace).stdout
    assert "★" in table and "learning_rate" in table
    best_yaml = cli("sweep", "show", sweep_id, "--best-config", workspace=workspace).stdout
    config = build_config(yaml.safe_load(best_yaml))
    assert config.learning_rate == best.params["learning_rate"] and config.name == "tiny-lr best"
    assert sweep_id in cli("sweep", "list", workspace=workspace).stdout
    import optuna  # the study alone (optuna-dashboard) names the run of each trial it started

    study = optuna.load_study(study_name=sweep_id,
                              storage=f"sqlite:///{sweeps.sweep_dir(store, sweep_id) / 'optuna.db'}")
    named = {t.number: t.user_attrs.get("run_id") for t in study.trials}
    assert named[0] == trials[0].run_id and named[2] == trials[2].run_id


def test_ctrl_c_on_a_followed_sweep_stops_it_and_its_trial_run(tiny_model, workspace):
    spec = workspace / "long.yaml"
    spec.write_text(yaml.safe_dump({"name": "long", "base": tiny_base(tiny_model, max_steps=5000), "n_trials": 4,
                                    "space": [{"field": "lora.r", "kind": "categorical", "choices": [2, 4]}]}))
    # as a terminal's foreground process gets Ctrl-C, even when the suite itself runs as a background job (whose
    # children start with SIGINT ignored, so Python never raises KeyboardInterrupt in them)
    follow = subprocess.Popen([sys.executable, str(REPO / "launch.py"), "sweep", "start", str(spec),
                               "--workspace", str(workspace)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    store = RunStore(workspace)
    wait_for(lambda: any(t.run_id and len(store.metrics_since(t.run_id)) >= 2
                         for s in sweeps.list_sweeps(store) for t in sweeps.list_trials(store, s.id)),
             timeout=240, what="the first trial's metrics")
    follow.send_signal(signal.SIGINT)
    out, _ = follow.communicate(timeout=240)  # a stop waits for the step in flight; a loaded CI is slow
    assert follow.returncode == 3, out  # like `train`: 3 = stopped
    assert "stopping the sweep" in out and "trial #1 stopped" in out
    (sweep,) = sweeps.list_sweeps(store)
    assert sweep.status == "stopped"
    (trial,) = sweeps.list_trials(store, sweep.id)
    run = store.get_run(trial.run_id)
    assert trial.status == "stopped" and run.status == "stopped" and run.step < 5000
    assert (Path(run.adapter_path) / "adapter_model.safetensors").exists()  # stopped cleanly, adapter saved
    assert len(store.list_runs()) == 1  # no further trial started
    assert "stopped" in cli("sweep", "stop", sweep.id, workspace=workspace).stdout


def test_cli_refuses_bad_sweeps_before_starting(workspace):
    result = cli("sweep", "start", "--preset", str(REPO / "presets" / "sft_demo.yaml"),
                 "--param", "lora.rank=int:2:8", "--param", "learning_rate=float:0:2", "--objective", "los:min",
                 workspace=workspace)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "did you mean 'lora.r'" in result.stderr and "space[1] (learning_rate): high 2" in result.stderr
    assert "did you mean 'loss'" in result.stderr
    assert cli("sweep", "start", workspace=workspace).returncode == 2
    assert cli("sweep", "show", "sw-nope", workspace=workspace).returncode == 2
    assert cli("sweep", "list", "--json", workspace=workspace).stdout.strip() == "[]"
