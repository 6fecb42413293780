"""PPO learns: on a toy task the tiny random model can move, in-process (no worker), seeded and deterministic.

The reward is the fraction of completion tokens from the lower half of the vocabulary (ids < 24576), so a
random policy starts near 0.5. The tiny model's logits are bounded tightly (final norm × 0.02-scale tied
embeddings), so adapters on q_proj / v_proj alone barely move its output distribution; an adapter on lm_head
can, which makes the task learnable in a few dozen steps.
"""
import math

import pytest

from backend.config import build_config
from backend.data import prepare_dataset
from backend.modes import mode_module
from backend.runs.store import RunStore
from backend.modes.training import StoreCallback, TrainContext

HALF_VOCAB = """
def reward(prompts, completions, completion_ids, **kwargs):
    return [sum(t < 24576 for t in ids) / max(len(ids), 1) for ids in completion_ids]
"""


def toy_trainer(model, workspace, **settings):
    (workspace / "toy_reward.py").write_text(HALF_VOCAB)
    config = {"mode": "ppo", "model": str(model), "dataset": "demo-math", "max_steps": 20, "seed": 42,
              "learning_rate": 0.03, "lr_scheduler_type": "constant", "per_device_train_batch_size": 8,
              "lora": {"r": 8, "dropout": 0.05, "target_modules": ["q_proj", "v_proj", "lm_head"]},
              "rl": {"num_generations": 2, "max_completion_length": 6},
              "reward_sources": [{"type": "python", "name": "low_half", "params": {"file": "toy_reward.py"}}],
              "ppo": {"kl_coef": 0.003}}
    for key, value in settings.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and key in config else value
    config = build_config(config)
    store = RunStore(workspace)
    run = store.create_run(config)
    dataset, _ = prepare_dataset(config.dataset, "ppo", workspace=workspace)
    ctx = TrainContext(config=config, run_id=run.id, run_dir=store.run_dir(run.id), store=store,
                       model_path=str(model), dataset=dataset)
    trainer = mode_module("ppo").build_trainer(ctx)
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StoreCallback(store, run.id, is_main=True))
    return trainer, store, run.id


def step_logs(trainer):
    return [row for row in trainer.state.log_history if "objective/kl" in row]


@pytest.fixture(scope="module")
def learned(tiny_model, tmp_path_factory):
    trainer, store, run_id = toy_trainer(tiny_model, tmp_path_factory.mktemp("toy"))
    trainer.train()
    return trainer, store, run_id


def test_ppo_raises_the_reward_on_a_toy_task_and_the_kl_stays_finite(learned):
    trainer, _, _ = learned
    logs = step_logs(trainer)
    assert len(logs) == 20
    rewards = [row["objective/scores"] for row in logs]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.2, rewards
    assert all(math.isfinite(row["objective/kl"]) and math.isfinite(row["loss/value"]) for row in logs)
    assert logs[0]["objective/kl"] == pytest.approx(0.0, abs=1e-5)  # the adapter starts as a no-op
    assert all(0 <= row["policy/clipfrac"] <= 1 and 0 <= row["val/clipfrac"] <= 1 for row in logs)


def test_metrics_and_samples_reach_the_store_each_step(learned):
    _, store, run_id = learned
    metrics = store.metrics_since(run_id)
    names = {m["name"] for m in metrics}
    assert {"objective/kl", "objective/rlhf_reward", "objective/scores", "policy/approxkl", "policy/clipfrac",
            "loss/policy", "loss/value", "val/clipfrac", "policy/entropy", "completions/mean_length",
            "rewards/low_half/mean", "rewards/low_half/std", "objective/kl_coef", "learning_rate"} <= names
    assert sorted({m["step"] for m in metrics if m["name"] == "loss/policy"}) == list(range(1, 21))
    samples = store.samples_since(run_id)
    assert {s["step"] for s in samples} == set(range(1, 21))
    assert all(set(s["rewards"]) == {"low_half"} for s in samples)


def test_a_strong_kl_penalty_keeps_the_policy_near_the_reference(learned, tiny_model, tmp_path_factory):
    trainer, _, _ = learned
    held, _, _ = toy_trainer(tiny_model, tmp_path_factory.mktemp("held"), max_steps=10, ppo={"kl_coef": 0.3})
    held.train()
    free_kl = sum(row["objective/kl"] for row in step_logs(trainer)[5:10]) / 5
    held_kl = sum(row["objective/kl"] for row in step_logs(held)[5:10]) / 5
    assert held_kl < free_kl / 5, (held_kl, free_kl)


def test_dropout_is_off_so_the_first_ratio_of_each_rollout_is_one(learned):
    import torch

    trainer, _, _ = learned
    dropouts = [m for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.p == 0 for m in dropouts)


def test_training_is_deterministic_for_a_seed(learned, tiny_model, tmp_path_factory):
    trainer, _, _ = learned
    again, _, _ = toy_trainer(tiny_model, tmp_path_factory.mktemp("again"), max_steps=3)
    again.train()
    keys = ("objective/scores", "objective/kl", "loss/policy", "loss/value", "policy/approxkl")
    first = [[row[k] for k in keys] for row in step_logs(trainer)[:3]]
    repeat = [[row[k] for k in keys] for row in step_logs(again)]
    assert len(repeat) == 3
    for a, b in zip(first, repeat):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7)


def test_full_fine_tuning_with_minibatches_and_accumulation_makes_one_optimizer_step_per_minibatch(
        tiny_model, tmp_path_factory):
    """finetuning: full keeps a frozen copy as the reference; 2 minibatches × 2 PPO epochs = 4 optimizer steps
    per rollout, each summing 2 micro-batches of 1 completion."""
    import torch
    from transformers import TrainerCallback

    class CountSteps(TrainerCallback):
        optimizer_steps = 0

        def on_optimizer_step(self, args, state, control, **kwargs):
            CountSteps.optimizer_steps += 1

    trainer, _, _ = toy_trainer(tiny_model, tmp_path_factory.mktemp("full"), finetuning="full", max_steps=2,
                                learning_rate=1e-4, per_device_train_batch_size=1, gradient_accumulation_steps=2,
                                ppo={"num_mini_batches": 2, "num_ppo_epochs": 2, "whiten_rewards": True})
    reference = {k: v.clone() for k, v in trainer.ref_model.state_dict().items()}
    trainer.add_callback(CountSteps())
    trainer.train()
    assert CountSteps.optimizer_steps == 2 * 2 * 2
    logs = step_logs(trainer)
    assert len(logs) == 2 and all(math.isfinite(row["objective/kl"]) for row in logs)
    assert all(torch.equal(v, reference[k]) for k, v in trainer.ref_model.state_dict().items())
    policy = trainer.policy.state_dict()
    assert any(not torch.equal(policy[k], reference[k]) for k in reference)
