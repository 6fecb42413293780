"""Evaluation by generation during a run: online RL runs (grpo, rloo, ppo) always, sft / dpo / kto runs with
`eval.generate`. The policy answers the first `eval.limit` held-out prompts greedily and the answers are scored:
by the run's reward sources, logged as `eval_reward` (the weighted sum, as in training) and
`eval_rewards/<source>/mean`; and, where the set gives the answer it asks for (SFT's completion, DPO's chosen,
KTO's good completions), by ROUGE-L against it, logged as `eval_rouge_l`.

Greedy answers on prompts the run never trains on say whether the policy improved, where the training reward
(or loss) only says that it fits its own data better. RL runs evaluate every `eval.steps` steps and at the end;
the others whenever the trainer evaluates (next to eval_loss). The main process generates (with the adapter,
unmerged: training goes on) while the other ranks wait at their next collective.
"""
from __future__ import annotations

import time

from transformers import TrainerCallback

from backend.modes.training import TrainContext

ROUGE_KEY = "eval_rouge_l"


class GenerationEval(TrainerCallback):
    def __init__(self, ctx: TrainContext, tokenizer, policy=lambda model: getattr(model, "module", model)):
        from backend.data import generation_rows
        from backend.evals.spec import Generation

        c = ctx.config
        e, self.online = c.eval, c.spec.online_rl
        rows = ctx.eval_dataset.select(range(min(e.limit, len(ctx.eval_dataset)))) if e.limit else ctx.eval_dataset
        self.ctx, self.tokenizer, self.policy = ctx, tokenizer, policy  # policy(model): what generates
        found = generation_rows(rows, c.mode)
        self.prompts, self.columns, self.references = found.prompts, found.columns, found.references
        self.rouge = _rouge(ctx) if self.references and any(r is not None for r in self.references) else None
        self.settings = Generation(max_new_tokens=c.rl.max_completion_length if self.online else e.max_new_tokens,
                                   batch_size=max(1, min(64, e.batch_size or 4 * c.per_device_train_batch_size)))
        self.every = e.steps
        self.last_step = -1

    # RL trainers have no evaluation loop: the interval is counted here
    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.online and self.every and state.global_step % self.every == 0:
            self.evaluate(model, state.global_step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        stopped = self.ctx.store.stop_requested(self.ctx.run_id)
        if self.online and not stopped and state.global_step != self.last_step:
            self.evaluate(model, state.global_step)

    # the others: whenever the trainer evaluates its loss (the interval, and the end unless stopped)
    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if not self.online and state.global_step != self.last_step:
            self.evaluate(model, state.global_step)

    def evaluate(self, model, step: int) -> None:
        if not self.ctx.is_main or model is None:
            return
        self.last_step = step
        started = time.perf_counter()
        answers = self.answer(self.policy(model))
        values = self.scores(answers)
        values["eval_completions/mean_length"] = _mean([len(self.tokenizer(a)["input_ids"]) for a in answers])
        self.ctx.store.add_metrics(self.ctx.run_id, step, values)
        shown = ", ".join(f"{k} {values[k]:.4f}" for k in ("eval_reward", ROUGE_KEY) if values.get(k) is not None)
        print(f"step {step}: {shown or 'answered'} on {len(self.prompts)} held-out prompts "
              f"({time.perf_counter() - started:.1f} s)", flush=True)

    def answer(self, policy) -> list[str]:
        import torch

        from backend.evals.generate import generate_answers
        from backend.models.load import LoadedModel

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
        return answers

    def scores(self, answers: list[str]) -> dict[str, float | None]:
        from backend.rewards import score_completions

        values = {}
        sources = self.ctx.config.reward_sources
        if sources:
            scored = score_completions(sources, self.prompts, answers, self.ctx.store.workspace, **self.columns)
            values["eval_reward"] = _mean(scored["total"])
            for name, scores in scored["sources"].items():
                values[f"eval_rewards/{name}/mean"] = _mean(scores)
            for name, costs in (scored.get("costs") or {}).items():
                values[f"eval_cost/{name}/mean"] = _mean(costs)
        if self.rouge is not None:
            kept = [i for i, r in enumerate(self.references) if r is not None]
            values[ROUGE_KEY] = _mean(self.rouge([self.prompts[i] for i in kept], [answers[i] for i in kept],
                                                 {"reference": [self.references[i] for i in kept]}))
        return values


def _rouge(ctx: TrainContext):
    """The evaluator's ROUGE-L scorer, reading the references handed to it as `reference`."""
    from backend.evals.scorers import build_scorers
    from backend.evals.spec import ScorerConfig

    return build_scorers([ScorerConfig(type="rouge_l")], "reference", ctx.store.workspace)[0]


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def add_generation_eval(trainer, ctx: TrainContext) -> None:
    """The callback on `trainer` when the run generates at evaluation; the policy is the trainer's own (PPO's
    trainer trains policy and value model as one module), unwrapped from DDP."""
    if ctx.eval_dataset is None or not (ctx.config.spec.online_rl or ctx.config.eval.generate):
        return

    def policy(model):
        own = getattr(trainer, "policy", None)
        return trainer.accelerator.unwrap_model(own if own is not None else model)
    trainer.add_callback(GenerationEval(ctx, trainer.processing_class, policy))
