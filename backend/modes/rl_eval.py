"""Evaluation during an online RL run (grpo, rloo, ppo): every `eval.steps` steps and at the end, the policy
answers the held-out prompts greedily and the run's reward sources score the answers, logged as `eval_reward`
(the weighted sum, as in training) and `eval_rewards/<source>/mean`, next to the training reward.

Greedy answers on prompts the run never trains on say whether the policy improved, where the training reward
only says that its samples scored higher. The main process generates (with the adapter, unmerged: training
goes on) while the other ranks wait at their next step's all-reduce.
"""
from __future__ import annotations

import time

from transformers import TrainerCallback

from backend.modes.training import TrainContext


class GenerationEval(TrainerCallback):
    def __init__(self, ctx: TrainContext, tokenizer, policy=lambda model: getattr(model, "module", model)):
        from backend.evals.spec import Generation

        e, rl = ctx.config.eval, ctx.config.rl
        rows = ctx.eval_dataset.select(range(min(e.limit, len(ctx.eval_dataset)))) if e.limit else ctx.eval_dataset
        self.ctx, self.tokenizer, self.policy = ctx, tokenizer, policy  # policy(model): what generates
        self.prompts = list(rows["prompt"])
        self.columns = {c: list(rows[c]) for c in rows.column_names if c != "prompt"}
        self.settings = Generation(max_new_tokens=rl.max_completion_length,
                                   batch_size=max(1, min(64, e.batch_size or 4 * ctx.config.per_device_train_batch_size)))
        self.every = e.steps
        self.last_step = -1

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every and state.global_step % self.every == 0:
            self.evaluate(model, state.global_step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        stopped = self.ctx.store.get_run(self.ctx.run_id).stop_requested
        if not stopped and state.global_step != self.last_step:
            self.evaluate(model, state.global_step)

    def evaluate(self, model, step: int) -> None:
        if not self.ctx.is_main or model is None:
            return
        import torch

        from backend.evals.generate import generate_answers
        from backend.models.load import LoadedModel
        from backend.rewards import score_completions

        self.last_step = step
        started = time.perf_counter()
        policy = self.policy(model)
        was_training = policy.training
        policy.eval()
        answers = [""] * len(self.prompts)
        try:
            with torch.no_grad():
                loaded = LoadedModel(None, policy, self.tokenizer, str(policy.device))
                for idx, outs in generate_answers(loaded, self.prompts, self.settings, chat_template=False):
                    for i, k in zip(idx, outs):
                        answers[i] = k[0]
        finally:
            policy.train(was_training)
        scored = score_completions(self.ctx.config.reward_sources, self.prompts, answers, self.ctx.store.workspace,
                                   **self.columns)
        values = {"eval_reward": _mean(scored["total"])}
        for name, scores in scored["sources"].items():
            values[f"eval_rewards/{name}/mean"] = _mean(scores)
        for name, costs in (scored.get("costs") or {}).items():
            values[f"eval_cost/{name}/mean"] = _mean(costs)
        values["eval_completions/mean_length"] = _mean([len(self.tokenizer(a)["input_ids"]) for a in answers])
        self.ctx.store.add_metrics(self.ctx.run_id, step, values)
        print(f"step {step}: eval_reward {values['eval_reward']:.4f} on {len(self.prompts)} held-out prompts "
              f"({time.perf_counter() - started:.1f} s)", flush=True)


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def add_generation_eval(trainer, ctx: TrainContext) -> None:
    """The callback on `trainer`; the policy is the trainer's own (PPO's trainer trains policy and value model as
    one module), unwrapped from DDP."""
    if ctx.eval_dataset is None:
        return

    def policy(model):
        own = getattr(trainer, "policy", None)
        return trainer.accelerator.unwrap_model(own if own is not None else model)
    trainer.add_callback(GenerationEval(ctx, trainer.processing_class, policy))
