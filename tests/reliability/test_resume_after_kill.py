"""A run killed with SIGKILL after a checkpoint resumes under its id and logs every step exactly once."""
import os
import signal
import time
from collections import Counter

from backend.config import build_config
from backend.runs.jobs import last_checkpoint, resume_run, stop_run, submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for


def _kill_after_checkpoint(store, run_id, step):
    """Let the worker run in short bursts, frozen (SIGSTOP) while we look, and SIGKILL it once the checkpoint of
    `step` is complete: it cannot finish the run between the look and the kill."""
    pid = wait_for(lambda: store.get_run(run_id).worker_pid, what="worker start")
    deadline = time.time() + 300
    while time.time() < deadline:
        os.kill(pid, signal.SIGSTOP)
        found = last_checkpoint(store, run_id)
        if found and found[1] >= step:
            os.kill(pid, signal.SIGKILL)
            return found[1]
        assert store.get_run(run_id).status == "running", store.get_run(run_id).error
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint of step {step} within 300 s")


def test_a_killed_run_resumes_from_its_checkpoint_and_logs_each_step_once(tiny_model, workspace):
    store = RunStore(workspace)
    config = build_config({"model": str(tiny_model), "max_steps": 6, "save_steps": 2, "max_length": 64,
                           "lora": {"r": 2}})
    run = submit_run(store, config)
    try:
        killed_at = _kill_after_checkpoint(store, run.id, 4)
        failed = wait_for(lambda: (r := store.get_run(run.id)).status != "running" and r, timeout=30,
                          what="failed status")
        assert failed.status == "failed"
        assert f"the worker (pid {failed.worker_pid}) was killed by SIGKILL" in failed.error

        resumed = resume_run(store, run.id)
        assert (resumed.id, resumed.attempt, resumed.step) == (run.id, 2, killed_at)
        done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=300, what="resumed run")
        assert done.status == "completed", done.error
        steps = Counter(m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss")
        assert steps == Counter(range(1, 7))  # each step 1..6 once
        assert (store.run_dir(run.id) / "adapter" / "adapter_model.safetensors").exists()
        kept = sorted(p.name for p in (store.run_dir(run.id) / "checkpoints").glob("checkpoint-*"))
        assert kept == ["checkpoint-4", "checkpoint-6"]  # save_total_limit 2
    finally:
        if store.get_run(run.id).active:
            stop_run(store, run.id, force=True)


def test_a_killed_ppo_run_resumes_its_policy_value_model_and_step(tiny_model, workspace):
    from tests.integration.test_ppo_runs import tiny

    store = RunStore(workspace)
    run = submit_run(store, tiny(tiny_model, "ppo", max_steps=4, save_steps=2))
    try:
        killed_at = _kill_after_checkpoint(store, run.id, 2)
        wait_for(lambda: store.get_run(run.id).status == "failed", timeout=30, what="failed status")
        assert resume_run(store, run.id).step == killed_at
        done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=300, what="resumed run")
        assert done.status == "completed", done.error
        steps = Counter(m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss")
        assert steps == Counter(range(1, 5))
        assert "resuming from" in (store.run_dir(run.id) / "train.log").read_text()
    finally:
        if store.get_run(run.id).active:
            stop_run(store, run.id, force=True)
