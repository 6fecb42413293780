"""A run killed with SIGKILL after a checkpoint resumes under its id, by hand or by itself (auto_resume), logs
every step exactly once, and ends with the adapter of a run that never crashed."""
import os
import signal
from collections import Counter

import torch
from safetensors.torch import load_file

from backend.models.memory import run_disk_need
from backend.runs.jobs import resume_run, stop_run, submit_run
from backend.runs.store import RunStore
from tests.waiting import frozen_after_checkpoint, wait_for


def _kill_after_checkpoint(store, run_id, step):
    """SIGKILL the worker once the checkpoint of `step` is complete; returns the checkpoint's step."""
    pid = wait_for(lambda: store.get_run(run_id).worker_pid, what="worker start")
    found = frozen_after_checkpoint(store, run_id, lambda sig: os.kill(pid, sig), step)
    os.kill(pid, signal.SIGKILL)
    return found[1]


def test_a_killed_ppo_run_resumes_its_policy_value_model_and_step(tiny_model, workspace):
    from tests.integration.test_ppo_runs import tiny

    store = RunStore(workspace)
    steady = submit_run(store, tiny(tiny_model, "ppo", max_steps=4, save_steps=2))
    run = submit_run(store, tiny(tiny_model, "ppo", max_steps=4, save_steps=2))  # queued behind it
    try:
        killed_at = _kill_after_checkpoint(store, run.id, 2)
        wait_for(lambda: store.get_run(run.id).status == "failed", timeout=30, what="failed status")
        assert resume_run(store, run.id).step == killed_at
        done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=300, what="resumed run")
        assert done.status == "completed", done.error
        steps = Counter(m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss")
        assert steps == Counter(range(1, 5))
        assert "resuming from" in (store.run_dir(run.id) / "train.log").read_text()
        assert store.get_run(steady.id).status == "completed"
        assert _same_adapter(store, steady.id, run.id)
        # the disk check's estimate holds what a PPO run writes: value model and resume files included
        folder = store.run_dir(steady.id)
        written = sum(f.stat().st_size for part in ("checkpoints", "adapter") for f in (folder / part).rglob("*"))
        need = run_disk_need(store.get_run(steady.id).config, workspace)
        assert 0.8 * need <= written <= need, (written, need)
    finally:
        _end(store, steady, run)


def _steps_once(store, run_id, steps):
    logged = Counter(m["step"] for m in store.metrics_since(run_id) if m["name"] == "loss")
    return logged == Counter(range(1, steps + 1))


def _same_adapter(store, run_a, run_b):
    a, b = (load_file(store.run_dir(r) / "adapter" / "adapter_model.safetensors") for r in (run_a, run_b))
    assert a.keys() == b.keys()
    return all(torch.allclose(a[k], b[k], atol=1e-5, rtol=0) for k in a)


def _end(store, *runs):
    for run in runs:
        if store.get_run(run.id).active:
            stop_run(store, run.id, force=True)


def test_a_dpo_run_whose_worker_is_killed_resumes_by_itself_to_the_adapter_of_a_run_never_killed(tiny_model,
                                                                                                    workspace):
    from tests.integration.test_ppo_runs import tiny

    store = RunStore(workspace)
    settings = {"dataset": "demo-preference", "max_steps": 6, "save_steps": 2}
    steady = submit_run(store, tiny(tiny_model, "dpo", **settings))
    killed = submit_run(store, tiny(tiny_model, "dpo", auto_resume=1, **settings))  # queued behind it
    try:
        at = _kill_after_checkpoint(store, killed.id, 2)
        done = wait_for(lambda: not (r := store.get_run(killed.id)).active and r, timeout=300, what="the resumed run")
        assert done.status == "completed" and done.attempt == 2, done.error
        assert f"auto-resume 1/1 from step {at}" in (store.run_dir(killed.id) / "train.log").read_text()
        assert store.get_run(steady.id).status == "completed"
        assert _steps_once(store, killed.id, 6)
        assert _same_adapter(store, steady.id, killed.id)
        kept = sorted(p.name for p in (store.run_dir(killed.id) / "checkpoints").glob("checkpoint-*"))
        assert kept == ["checkpoint-4", "checkpoint-6"]  # save_total_limit 2
    finally:
        _end(store, steady, killed)


def test_a_grpo_run_saving_by_wall_time_resumes_after_a_kill_to_the_adapter_of_a_run_never_killed(tiny_model,
                                                                                                     workspace):
    from tests.integration.test_ppo_runs import SOURCES, tiny

    store = RunStore(workspace)
    settings = {"dataset": "demo-math", "reward_sources": SOURCES, "max_steps": 40}
    steady = submit_run(store, tiny(tiny_model, "grpo", **settings))
    # checkpoints by wall time only (every 0.6 s); 40 steps of ~0.1 s: with the update reading each prompt once, 4
    # ended before a second checkpoint
    killed = submit_run(store, tiny(tiny_model, "grpo", save_steps=0, save_minutes=0.01, **settings))
    try:
        at = _kill_after_checkpoint(store, killed.id, 2)
        failed = wait_for(lambda: (r := store.get_run(killed.id)).status != "running" and r, timeout=30,
                          what="failed status")
        assert f"the worker (pid {failed.worker_pid}) was killed by SIGKILL" in failed.error
        assert "out of memory" not in failed.error  # said only with evidence
        assert failed.worker_pid != failed.pid  # the worker's pid, not its supervisor's
        assert "auto-resume" not in (store.run_dir(killed.id) / "train.log").read_text()  # auto_resume 0: off
        resumed = resume_run(store, killed.id)
        assert (resumed.attempt, resumed.step) == (2, at)
        done = wait_for(lambda: not (r := store.get_run(killed.id)).active and r, timeout=300, what="the resumed run")
        assert done.status == "completed", done.error
        assert _steps_once(store, killed.id, 40)
        assert _same_adapter(store, steady.id, killed.id)
    finally:
        _end(store, steady, killed)


def test_a_run_killed_after_its_last_checkpoint_resumes_without_training_past_max_steps(tiny_model, workspace):
    # transformers' loop, resumed from a checkpoint of the last step, would train one step more
    from tests.integration.test_ppo_runs import tiny

    store = RunStore(workspace)
    run = submit_run(store, tiny(tiny_model, "sft", max_steps=3, save_steps=3))
    try:
        done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=120, what="the run")
        assert done.status == "completed", done.error
        adapter = store.run_dir(run.id) / "adapter" / "adapter_model.safetensors"
        trained = load_file(adapter)
        adapter.unlink()  # killed after the checkpoint, before the adapter was written
        store.update_run(run.id, status="running")
        store.finish_run(run.id, "failed", error="the worker was killed by SIGKILL")
        assert resume_run(store, run.id).step == 3
        done = wait_for(lambda: not (r := store.get_run(run.id)).active and r, timeout=120, what="the resumed run")
        assert done.status == "completed", done.error
        assert _steps_once(store, run.id, 3)
        assert "nothing left to train" in (store.run_dir(run.id) / "train.log").read_text()
        again = load_file(adapter)
        assert all(torch.equal(trained[k], again[k]) for k in trained)
    finally:
        _end(store, run)
