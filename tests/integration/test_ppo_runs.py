"""PPO through the real worker on the tiny model: the shipped preset from `launch.py train` (shared value head,
adaptive KL), a run whose value model starts from a finished reward-model run and is stopped mid-run, and the
checks that refuse a bad value_init_run before any process starts.

Three runs go through the queue one after another: rm (2 steps), the preset (2 steps), the stopped one.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.config import ConfigError, build_config
from backend.runs.jobs import stop_run, submit_run
from backend.runs.preflight import preflight
from backend.runs.store import RunStore
from tests.step_timing import assert_each_step_is_split
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    {"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
    {"type": "regex", "name": "format", "weight": 0.5, "params": {"pattern": "<answer>.*?</answer>"}},
]
PPO_KEYS = {"objective/kl", "objective/rlhf_reward", "objective/scores", "objective/kl_coef", "policy/approxkl",
            "policy/clipfrac", "policy/entropy", "loss/policy", "loss/value", "val/clipfrac",
            "completions/mean_length", "rewards/correct/mean", "rewards/correct/std", "rewards/format/mean",
            "rewards/format/std", "learning_rate"}


def tiny(model, mode, **settings):
    base = {"mode": mode, "model": str(model), "max_steps": 2, "max_length": 64, "lora": {"r": 2},
            "per_device_train_batch_size": 2,
            # the tiny model's answers all score alike: the reward probe would stop GRPO runs before they train
            "rl": {"num_generations": 2, "max_completion_length": 8, "probe": "warn"}}
    if mode == "ppo":
        base.update(dataset="demo-math", reward_sources=SOURCES)
    for key, value in settings.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return build_config(base)


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("ppo-runs")
    store = RunStore(workspace)
    rm = submit_run(store, tiny(tiny_model, "rm", dataset="demo-preference"))
    sets = [f"model={tiny_model}", "max_steps=2", "max_length=64", "lora.r=2", "rl.max_completion_length=8",
            "ppo.value_model=shared", "ppo.adaptive_kl=true", "ppo.horizon=100", "ppo.missing_eos_penalty=1"]
    cli = subprocess.run([sys.executable, str(REPO / "launch.py"), "train", str(REPO / "presets" / "ppo_demo.yaml"),
                          *[a for s in sets for a in ("--set", s)], "--workspace", str(workspace)],
                         cwd=REPO, capture_output=True, text=True, timeout=240)  # waits behind the rm run
    preset_run = next(r for r in store.list_runs() if r.mode == "ppo")
    assert store.get_run(rm.id).status == "completed", store.get_run(rm.id).error
    from_rm = submit_run(store, tiny(tiny_model, "ppo", max_steps=5000, ppo={"value_init_run": rm.id}))
    wait_for(lambda: any(m["name"] == "loss/value" for m in store.metrics_since(from_rm.id)), timeout=120,
             what="the first PPO step of the value-initialised run")
    assert stop_run(store, from_rm.id) == "stopping"
    wait_for(lambda: not store.get_run(from_rm.id).active, timeout=120, what="the stop")
    return {"store": store, "rm": store.get_run(rm.id), "cli": cli, "preset": store.get_run(preset_run.id),
            "from_rm": store.get_run(from_rm.id)}


def test_the_preset_trains_from_the_cli_logs_ppo_metrics_and_saves_policy_and_value(runs):
    cli, run, store = runs["cli"], runs["preset"], runs["store"]
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert run.status == "completed" and run.name == "ppo-demo", run.error
    metrics = store.metrics_since(run.id)
    names = {m["name"] for m in metrics}
    assert PPO_KEYS <= names, PPO_KEYS - names
    assert sorted({m["step"] for m in metrics if m["name"] == "loss/policy"}) == [1, 2]
    assert_each_step_is_split(metrics, [1, 2])
    adapter = Path(run.adapter_path)
    assert (adapter / "adapter_model.safetensors").exists() and (adapter / "tokenizer_config.json").exists()
    assert (adapter / "value" / "value_head.safetensors").exists()
    assert json.loads((adapter / "value" / "value_model.json").read_text())["kind"] == "shared"
    # PPO generates in eval mode, so its adapter folds in exactly (with LoRA dropout too: test_fast_generation)
    assert "generation: the adapter merged into the weights" in (store.run_dir(run.id) / "train.log").read_text()


def test_ppo_settings_reach_the_trainer_and_the_adaptive_kl_coefficient_moves(runs):
    import torch

    store, run = runs["store"], runs["preset"]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert (args.num_generations, args.max_completion_length, args.reward_weights) == (2, 8, [1.0, 0.5])
    assert (args.num_ppo_epochs, args.kl_coef, args.adaptive_kl, args.horizon, args.missing_eos_penalty) == \
        (2, 0.05, True, 100, 1.0)
    coef = {m["step"]: m["value"] for m in store.metrics_since(run.id) if m["name"] == "objective/kl_coef"}
    assert coef[1] == pytest.approx(0.05) and coef[2] != coef[1]  # KL 0 at step 1 is below the target: it drops


def test_ppo_runs_store_samples_with_each_sources_score(runs):
    store, run = runs["store"], runs["preset"]
    samples = store.samples_since(run.id)
    assert {s["step"] for s in samples} == {1, 2}
    for s in samples:
        assert "What is" in s["prompt"] and isinstance(s["completion"], str)
        assert s["total"] == pytest.approx(s["rewards"]["correct"] + 0.5 * s["rewards"]["format"])


def test_a_stop_mid_run_saves_the_policy_and_the_value_model_initialised_from_the_rm_run(runs):
    store, run, rm = runs["store"], runs["from_rm"], runs["rm"]
    assert run.status == "stopped", run.error
    assert 1 <= run.step < 5000
    adapter = Path(run.adapter_path)
    assert (adapter / "adapter_model.safetensors").exists()
    assert (adapter / "value" / "adapter_model.safetensors").exists()
    note = json.loads((adapter / "value" / "value_model.json").read_text())
    assert note["kind"] == "separate" and Path(note["init_from"]) == store.run_dir(rm.id) / "adapter"


def test_a_value_model_from_an_rm_run_starts_as_that_reward_model(runs, tiny_model):
    """Before any PPO update the value at the last token of a text is the reward model's score for it."""
    import torch

    from backend.models import load_tokenizer
    from backend.models import load_reward_model
    from backend.ppo.value import build_value_model
    from backend.modes.training import lora_config

    store, rm = runs["store"], runs["rm"]
    tokenizer = load_tokenizer(tiny_model)
    config = tiny(tiny_model, "ppo")
    value = build_value_model("separate", str(tiny_model), tokenizer, lora_config(config, task_type="SEQ_CLS"),
                              init_from=str(store.run_dir(rm.id) / "adapter"))
    reward_model, _ = load_reward_model(store.run_dir(rm.id))
    batch = tokenizer(["The capital of France is Paris."], return_tensors="pt")  # no pad (= eos) inside
    positions = torch.arange(batch["input_ids"].shape[1]).unsqueeze(0)
    with torch.no_grad():
        values = value(batch["input_ids"], batch["attention_mask"], positions)
        score = reward_model(**batch).logits[0, 0]
    assert values[0, -1].item() == pytest.approx(score.item(), abs=1e-4)


def test_a_value_init_run_that_is_not_a_finished_rm_run_is_refused_before_launch(runs, tiny_model):
    store = runs["store"]
    with pytest.raises(ConfigError) as err:
        preflight(tiny(tiny_model, "ppo", ppo={"value_init_run": runs["preset"].id}), store.workspace)
    (line,) = err.value.errors
    assert line.startswith("ppo.value_init_run:") and "is a ppo run, not a reward-model (rm) run" in line


def test_ppo_trains_in_two_processes_resumes_after_every_process_is_killed_and_logs_each_step_once(tiny_model,
                                                                                                      tmp_path):
    import contextlib
    import os
    import signal

    from backend.core.procs import processes_of
    from backend.runs.jobs import dispatch, resume_run
    from tests.waiting import frozen_after_checkpoint

    store = RunStore(tmp_path)
    run = submit_run(store, tiny(tiny_model, "ppo", num_processes=2, max_steps=12, save_steps=2))
    wait_for(lambda: store.get_run(run.id).worker_pid, timeout=120, what="the workers")
    # every process of the run: the supervisor's group, and the ranks, each in a session of its own (torchrun)
    group, ranks = store.get_run(run.id).pid, processes_of("backend.runs.worker", run.id)
    assert len(ranks) >= 2

    def signal_all(sig):
        os.killpg(group, sig)
        for pid in ranks:
            os.kill(pid, sig)

    try:
        found = frozen_after_checkpoint(store, run.id, signal_all)
    finally:  # nothing is left frozen, whatever happened
        for pid in [group, *ranks]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    assert found[1] < 12, "the run ended before it could be killed"
    wait_for(lambda: dispatch(store) is not None and store.get_run(run.id).status == "interrupted", timeout=15,
             what="interrupted")
    assert resume_run(store, run.id).step == found[1]
    wait_for(lambda: not store.get_run(run.id).active, timeout=180, every=1, what="the two-process PPO run")
    run = store.get_run(run.id)
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert run.status == "completed", log[-3000:]
    assert "processes: 2 (MULTI_CPU" in log and "resuming from" in log
    policy_losses = [m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss/policy"]
    assert policy_losses == list(range(1, 13))
    assert Path(run.adapter_path, "adapter_model.safetensors").exists()
