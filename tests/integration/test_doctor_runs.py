"""The run doctor on real runs: each test provokes the failure it must name (tiny model unless a real one is
needed to diverge)."""
import json
import os
import signal

from backend.config import build_config
from backend.core.procs import pid_alive, processes_of
from backend.doctor import NO_SIGNAL_VERDICT, describe, diagnose_run, stored_diagnoses
from backend.runs.checkpoints import last_checkpoint
from backend.runs.jobs import stop_run, submit_run
from backend.runs.store import RunStore
from tests.dataset_shapes import GSM8K
from tests.waiting import wait_for


def gsm8k_file(folder, rows=8):
    """GSM8K-shaped rows (question, answer ending `#### N`), as a user's file."""
    path = folder / "gsm8k.jsonl"
    question, answer = GSM8K[0]["question"], GSM8K[0]["answer"]
    path.write_text("".join(json.dumps({"question": question.replace("48", str(40 + i)),
                                        "answer": answer}) + "\n" for i in range(rows)))
    return path


def grpo(model, dataset, **settings):
    rl = {"num_generations": 2, "max_completion_length": 8, **settings.pop("rl", {})}
    return build_config({"mode": "grpo", "model": str(model), "dataset": str(dataset), "max_steps": 3,
                         "per_device_train_batch_size": 2, "lora": {"r": 4}, "save_steps": 0, "rl": rl,
                         **settings})


def ended(store, run_id, timeout=240):
    return wait_for(lambda: (r := store.get_run(run_id)).status not in ("queued", "running") and r, timeout=timeout,
                    what=f"run {run_id} to end")


def test_the_probe_stops_a_run_whose_answers_are_cut_before_they_score(tiny_model, workspace):
    store = RunStore(workspace)
    config = grpo(tiny_model, gsm8k_file(workspace),
                  reward_sources=[{"type": "numeric_match", "params": {"column": "answer"}}])
    run = ended(store, submit_run(store, config).id)
    assert run.status == "failed" and run.verdict == NO_SIGNAL_VERDICT
    assert "zero reward variance" in run.error and "raise rl.max_completion_length to ≥ " in run.error, run.error
    assert "probe completions were cut at rl.max_completion_length=8" in run.error  # the tiny model never ends
    assert store.metrics_since(run.id) == [] and run.step == 0  # no training step was spent
    checks = [d.check for d in stored_diagnoses(run)]
    assert checks[0] == "probe_zero_variance" and "probe_truncation" in checks
    fix = stored_diagnoses(run)[0].fix["rl.max_completion_length"]
    assert fix >= 2 * 42  # at least twice the reference answer's tokens (the GSM8K row's is ~42)


def test_under_probe_warn_answers_cut_short_train_on_and_end_carrying_the_longer_limit(tiny_model, workspace):
    store = RunStore(workspace)
    # 2 logged points, below min_points: the probe's diagnoses stay stored for the whole training (~1 s), not 2 steps
    config = grpo(tiny_model, gsm8k_file(workspace), rl={"probe": "warn"}, max_steps=6, logging_steps=3,
                  reward_sources=[{"type": "numeric_match", "params": {"column": "answer"}}])
    run = submit_run(store, config)

    def probed():  # stored before the first step, replaced by the run's own once it ends
        r = store.get_run(run.id)
        return [d for d in stored_diagnoses(r) if d.check.startswith("probe_")] or (not r.active and [None])

    found = {d.check: d for d in wait_for(probed, every=0.05, what="the probe's diagnoses") if d}
    assert found, "the run ended before its probe's diagnoses were seen stored"
    assert found["probe_truncation"].severity == "warning", found
    assert found["probe_truncation"].fix["rl.max_completion_length"] >= 2 * 42  # twice the reference answer, at least
    assert found["probe_zero_variance"].fix["rl.max_completion_length"] >= 2 * 42
    run = ended(store, run.id)
    assert run.status == "completed" and run.step == 6, run.error  # warned, not stopped
    final = {d.check: d for d in stored_diagnoses(run)}
    assert final["truncation"].fix == found["probe_truncation"].fix  # sized by the reference the probe measured
    log = (workspace / "runs" / run.id / "train.log").read_text()
    assert "reward probe: warning: " in log and "raise rl.max_completion_length to ≥ " in log


def test_a_constant_reward_completes_marked_without_a_learning_signal(tiny_model, workspace):
    store = RunStore(workspace)
    config = grpo(tiny_model, "demo-math", rl={"probe": "warn"},
                  reward_sources=[{"type": "regex", "params": {"pattern": ".*"}}])  # every completion scores 1
    run = ended(store, submit_run(store, config).id)
    assert run.status == "completed" and run.verdict == NO_SIGNAL_VERDICT, run.error
    found = {d.check: d for d in stored_diagnoses(run)}
    assert found["zero_variance"].no_signal and found["zero_variance"].evidence["steps"] == [1, 3]
    assert found["truncation"].fix["rl.max_completion_length"] >= 24  # the finished run carries the cut answers
    assert diagnose_run(store, run) == stored_diagnoses(run)
    log = (workspace / "runs" / run.id / "train.log").read_text()
    # a first look at one step's prompt found no spread; a second at 4 others found none either
    assert "reward probe: warning: all 8 probe completions scored 1 on `regex`" in log
    assert "every one of the 5 probe groups has zero reward variance" in log
    assert "doctor: the run completed without a learning signal" in log


def test_sft_at_learning_rate_1_is_diagnosed_with_a_lower_rate(workspace):
    store = RunStore(workspace)
    config = build_config({"mode": "sft", "dataset": "demo-sft-instructions", "max_steps": 8, "learning_rate": 1.0,
                           "save_steps": 0})  # the embedded model: a random tiny one has nothing to diverge from
    run = ended(store, submit_run(store, config).id)
    assert run.status == "completed", run.error
    found = stored_diagnoses(run)
    checks = {d.check for d in found}
    assert checks & {"loss_nan", "loss_spike", "loss_rising", "grad_explosion"}, checks
    assert all(d.fix["learning_rate"] <= 5e-4 for d in found if "learning_rate" in d.fix)
    what, action = describe(found[0].check, found[0].params, "zh")
    assert "learning_rate" in action


def test_a_frozen_worker_is_marked_stalled_and_restarted_from_its_checkpoint(tiny_model, workspace, monkeypatch):
    monkeypatch.setenv("WORKBENCH_WORKER_STALE_S", "4")  # read by the supervisor this test starts
    store = RunStore(workspace)
    config = build_config({"mode": "sft", "model": str(tiny_model), "dataset": "demo-sft-instructions",
                           "max_steps": 2000, "save_steps": 2, "lora": {"r": 4}, "stall_action": "restart"})
    run = submit_run(store, config)
    wait_for(lambda: last_checkpoint(store, run.id), what="a checkpoint")
    worker = store.get_run(run.id).worker_pid
    os.kill(worker, signal.SIGSTOP)
    try:
        stalled = wait_for(lambda: store.get_run(run.id).attempt > 1 or
                           ("no heartbeat from the worker" in (store.get_run(run.id).error or "")) and
                           store.get_run(run.id), timeout=60, what="the stall to be seen")
        assert stalled
        resumed = wait_for(lambda: (r := store.get_run(run.id)).attempt == 2 and r.status == "running"
                           and r.worker_pid and r.worker_pid != worker and r.step > r.resumed_step and r,
                           timeout=120, what="the restarted attempt to train")
        assert resumed.resumed_step >= 2 and resumed.stalled == ""
        log = (workspace / "runs" / run.id / "train.log").read_text()
        assert "stalled: no heartbeat from the worker" in log and "stall_action: restart" in log
    finally:
        try:
            os.kill(worker, signal.SIGCONT)
        except ProcessLookupError:
            pass
        stop_run(store, run.id, force=True)


def test_a_frozen_worker_under_stall_action_stop_fails_the_run_and_is_ended(tiny_model, workspace, monkeypatch):
    monkeypatch.setenv("WORKBENCH_WORKER_STALE_S", "4")  # read by the supervisor this test starts
    store = RunStore(workspace)
    config = build_config({"mode": "sft", "model": str(tiny_model), "dataset": "demo-sft-instructions",
                           "max_steps": 2000, "save_steps": 0, "lora": {"r": 4}, "stall_action": "stop"})
    run = submit_run(store, config)
    worker = wait_for(lambda: (r := store.get_run(run.id)).step >= 1 and r.worker_pid, what="a first step")
    os.kill(worker, signal.SIGSTOP)
    try:
        stopped = ended(store, run.id, timeout=60)
        assert stopped.status == "failed" and stopped.error.startswith("stalled: no heartbeat from the worker"), \
            stopped.error
        assert "the worker was ended (stall_action: stop)" in stopped.error
        # ended, not frozen forever: no rank (nor the launcher's children) is left
        wait_for(lambda: not pid_alive(worker) and not processes_of("backend.runs.worker", run.id), timeout=30,
                 what="no worker process left")
        assert store.get_run(run.id).attempt == 1  # not restarted
    finally:
        try:
            os.kill(worker, signal.SIGCONT)
        except ProcessLookupError:
            pass
        stop_run(store, run.id, force=True)
