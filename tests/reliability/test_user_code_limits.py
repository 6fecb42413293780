"""User code that never returns: a reward function past its time limit fails the run saying which source and
step, its checkpoint kept; a run stuck in user code that is asked to stop is killed after its grace period,
leaving no process behind."""
import time

from backend.config import build_config
from backend.core.procs import processes_of
from backend.runs.checkpoints import last_checkpoint
from backend.runs.jobs import stop_run, submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

# scores the first step, then hangs: step 1's checkpoint is written before the hang
HANGS = ("import time\n"
         "def reward(completions, trainer_state=None, **kw):\n"
         "    if trainer_state.global_step >= 1:\n"
         "        time.sleep(3600)\n"
         "    return [float(len(c) % 3) for c in completions]\n")


def _config(model, workspace, **params):
    (workspace / "hangs.py").write_text(HANGS)
    return build_config({
        "mode": "grpo", "model": str(model), "dataset": "demo-math", "max_steps": 3, "save_steps": 1,
        "per_device_train_batch_size": 2, "lora": {"r": 4}, "stop_grace_s": 5,
        "rl": {"num_generations": 2, "max_completion_length": 8, "probe": "off"},
        "reward_sources": [{"type": "python", "name": "hangs", "params": {"file": "hangs.py", **params}}]})


def _stuck(store, run_id):
    """The run once its first step is done and it is inside the hanging call."""
    return wait_for(lambda: (r := store.get_run(run_id)).step >= 1 or r.status not in ("queued", "running"),
                    timeout=240, what=f"run {run_id}'s first step")


def test_a_reward_past_its_limit_fails_the_run_naming_source_and_step_and_keeps_the_checkpoint(tiny_model,
                                                                                              workspace):
    store = RunStore(workspace)
    run = submit_run(store, _config(tiny_model, workspace, timeout_s=3))
    _stuck(store, run.id)
    t0 = time.monotonic()
    ended = wait_for(lambda: (r := store.get_run(run.id)).status not in ("queued", "running") and r, timeout=60,
                     what="the run to fail")
    assert time.monotonic() - t0 < 3 + 10
    assert ended.status == "failed"
    assert "reward source 'hangs' (hangs.py:reward) took longer than 3 s on step 2; the run was stopped" in ended.error
    assert last_checkpoint(store, run.id)[1] == 1
    assert processes_of("backend.core.usercode", str(workspace / "hangs.py")) == []


def test_a_stop_of_a_run_stuck_in_user_code_is_forced_after_its_grace_period(tiny_model, workspace):
    store = RunStore(workspace)
    run = submit_run(store, _config(tiny_model, workspace, timeout_s=3600))
    _stuck(store, run.id)
    time.sleep(1)  # inside the call
    assert stop_run(store, run.id) == "stopping"
    t0 = time.monotonic()
    ended = wait_for(lambda: (r := store.get_run(run.id)).status not in ("queued", "running") and r, timeout=60,
                     what="the stop to be forced")
    assert time.monotonic() - t0 < 5 + 10
    assert ended.status == "stopped" and "did not stop within 5 s of the stop request" in ended.error, ended.error
    wait_for(lambda: not processes_of("backend.runs.worker", run.id) and not processes_of(
        "backend.core.usercode", str(workspace / "hangs.py")), timeout=10, what="no process of the run left")
    assert last_checkpoint(store, run.id)[1] == 1
