"""A run end to end through the detached supervisor, `accelerate launch` and the worker, on the tiny model."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend.config import build_config
from backend.runs.jobs import dispatch, stop_run, submit_run
from backend.runs.store import RunStore
from tests.waiting import frozen_after_checkpoint, wait_for

REPO = Path(__file__).resolve().parents[2]


def cli(*args, workspace, timeout=300):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args, "--workspace", str(workspace)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_cli_train_records_metrics_and_saves_a_loadable_adapter(tiny_model, workspace):
    result = cli("train", str(REPO / "presets" / "sft_demo.yaml"), "--set", f"model={tiny_model}",
                 "--set", "max_steps=6", "--set", "lora.r=4", workspace=workspace)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "run id: " in result.stdout

    runs = json.loads(cli("runs", "--json", workspace=workspace).stdout)
    assert [r["status"] for r in runs] == ["completed"] and runs[0]["mode"] == "sft"
    shown = json.loads(cli("show", runs[0]["id"], "--json", workspace=workspace).stdout)
    assert shown["status"] == "completed"
    assert shown["config"]["lora"]["r"] == 4 and shown["config"]["max_steps"] == 6
    names = {m["name"] for m in shown["metrics"]}
    assert {"loss", "grad_norm", "learning_rate", "mean_token_accuracy"} <= names
    assert sorted({m["step"] for m in shown["metrics"] if m["name"] == "loss"}) == [1, 2, 3, 4, 5, 6]

    # the estimate the run's log began with came within 25% of the worker's measured peak
    from backend.models.memory import GiB, estimate_memory, read_shape

    log = (Path(workspace) / "runs" / shown["id"] / "train.log").read_text()
    assert log.startswith("memory: Estimated memory per process: "), log[:300]
    peak = max(m["value"] for m in shown["metrics"] if m["name"] == "memory/peak_rss_gb")
    estimate = estimate_memory(build_config(shown["config"]), read_shape(str(tiny_model))).total / GiB
    assert abs(estimate - peak) <= 0.25 * peak, (estimate, peak)

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = Path(shown["adapter"])
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter)
    assert model.peft_config["default"].r == 4
    assert (Path(workspace) / "runs" / shown["id"] / "config.yaml").exists()


def test_cli_refuses_bad_settings_before_starting(workspace):
    result = cli("train", "--set", "lora.r=0", "--set", "learning_rate=-1", workspace=workspace)
    assert result.returncode == 2
    assert "lora.r" in result.stderr and "learning_rate" in result.stderr
    result = cli("train", "--set", "lora.rank=8", workspace=workspace)
    assert result.returncode == 2 and "did you mean 'lora.r'" in result.stderr
    result = cli("train", "--set", "dataset=/nonexistent/data.jsonl", workspace=workspace)
    assert result.returncode == 2 and "dataset:" in result.stderr and "/nonexistent/data.jsonl" in result.stderr
    assert json.loads(cli("runs", "--json", workspace=workspace).stdout) == []


def test_stop_saves_adapter_queue_moves_on_and_killed_worker_fails(tiny_model, workspace):
    store = RunStore(workspace)
    long_run = build_config({"model": str(tiny_model), "max_steps": 5000, "max_length": 64, "lora": {"r": 2}})
    first = submit_run(store, long_run)
    second = submit_run(store, long_run)
    assert store.get_run(first.id).status == "running"
    assert store.get_run(second.id).status == "queued"  # one run at a time

    wait_for(lambda: len(store.metrics_since(first.id)) >= 3, what="first metrics")
    assert stop_run(store, first.id) == "stopping"
    run = wait_for(lambda: (r := store.get_run(first.id)).status != "running" and r, what="stop")
    assert run.status == "stopped"
    assert 0 < run.step < 5000
    assert (Path(run.adapter_path) / "adapter_model.safetensors").exists()

    # the queue moves on without any UI: the first run's supervisor starts the second
    run2 = wait_for(lambda: (r := store.get_run(second.id)).worker_pid and r, what="second worker")
    assert run2.status == "running"
    wait_for(lambda: store.metrics_since(second.id), what="second metrics")
    os.kill(run2.worker_pid, signal.SIGKILL)
    run2 = wait_for(lambda: (r := store.get_run(second.id)).status != "running" and r, timeout=30,
                    what="failed status")
    assert run2.status == "failed"
    assert "last log lines" in run2.error and "step " in run2.error


def test_a_run_whose_processes_all_vanished_is_interrupted_and_resumes_to_its_end(tiny_model, workspace):
    """kill -9 of everything (a machine restart): `interrupted` when the store is next looked at, then resumed."""
    from collections import Counter

    from backend.runs.checkpoints import last_checkpoint
    from backend.runs.jobs import resume_run

    store = RunStore(workspace)
    run = submit_run(store, build_config({"model": str(tiny_model), "max_steps": 60, "save_steps": 5,
                                          "max_length": 64, "logging_steps": 1}))
    pid = wait_for(lambda: store.get_run(run.id).worker_pid, what="worker start")
    frozen_after_checkpoint(store, run.id, lambda sig: os.kill(pid, sig))
    os.killpg(store.get_run(run.id).pid, signal.SIGKILL)  # the whole process group, supervisor included
    wait_for(lambda: dispatch(store) is not None and store.get_run(run.id).status == "interrupted", timeout=15,
             what="reconcile")
    assert "is gone" in store.get_run(run.id).error
    step = last_checkpoint(store, run.id)[1]
    assert resume_run(store, run.id).step == step
    done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=120, what="the resumed run")
    assert done.status == "completed" and done.attempt == 2, done.error
    assert Counter(m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss") == Counter(range(1, 61))


def test_two_processes_log_once_and_stop_together(tiny_model, workspace):
    """The multi-process path (gloo on CPU, NCCL on GPUs): only rank 0 writes; a stop reaches every rank."""
    store = RunStore(workspace)
    run = submit_run(store, build_config({"model": str(tiny_model), "max_steps": 5000, "max_length": 64,
                                          "num_processes": 2}))
    wait_for(lambda: len({m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss"}) >= 3,
             what="metrics from two ranks")
    stop_run(store, run.id)
    run = wait_for(lambda: (r := store.get_run(run.id)).status != "running" and r, what="stop")
    assert run.status == "stopped", run.error
    steps = [m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss"]
    assert steps == sorted(set(steps))  # one row per step: rank 1 writes nothing
    assert (Path(run.adapter_path) / "adapter_model.safetensors").exists()
    # every rank exits (a rank freeing gloo's process group at interpreter exit used to hang for good)
    from backend.core.procs import pid_alive

    wait_for(lambda: not pid_alive(run.pid), timeout=60, what="the supervisor, after all ranks exited")


def test_reward_sources_are_checked_before_a_run_starts(workspace):
    from backend.config import ConfigError
    from backend.runs.preflight import preflight

    config = build_config({"mode": "grpo", "dataset": "demo-math",
                           "reward_sources": [{"type": "exact_match", "params": {"column": "solution"}}]})
    with pytest.raises(ConfigError) as exc:
        preflight(config, workspace)
    assert any("solution" in line and "answer" in line for line in exc.value.errors)
