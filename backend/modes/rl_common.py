"""What the online RL modes (grpo, rloo, ppo) share: their generation settings, the run's reward sources as
TRL reward functions (costs included, through rl_constraint.py), and live samples of what the policy writes and
how each source scored it.

TRL calls every reward function in turn on the same batch of prompts and completions. Each function is
wrapped so its scores are also handed to a SampleRecorder; once every source has scored the batch, the
recorder writes a few rows (prompt, completion, score per source, weighted total) at logging steps, and, for a
run whose completions call tools, logs the batch's tool use (tools/* metrics) through TRL's `log_metric`.
"""
from __future__ import annotations

import math
import traceback

from trl.trainer.utils import is_async_callable

from backend.modes.training import RunSink, TrainContext, trainer_args
from backend.rewards.trajectory import has_tool_traffic, tool_metrics, trajectory_text

SAMPLES_PER_LOG = 8
_PROMPT_CHARS = 2000


def rl_args(ctx: TrainContext, reward_weights: list[float]):
    """The trainer arguments of a TRL online RL mode: its reward weights and generation backend besides the
    schema's settings (the `rl` section's among them)."""
    from backend.runs.gpus import vllm_trainer_args

    return trainer_args(ctx, reward_weights=reward_weights, log_completions=False, **vllm_trainer_args(ctx.config))


def reward_functions(ctx: TrainContext) -> tuple[list, list[float], list]:
    """The run's reward sources as TRL reward functions (wrapped to record samples; cost sources as −λ · cost,
    see rl_constraint.py), their weights, and the callbacks the trainer needs for them (the constraint's)."""
    from backend.rewards import build_reward_funcs, reward_weights

    sources = ctx.config.reward_sources
    funcs = build_reward_funcs(sources, ctx.store.workspace)
    weights = list(reward_weights(sources))
    callbacks = []
    if any(s.is_cost for s in sources):
        from backend.modes.rl_constraint import ConstraintCallback

        constraint = ConstraintCallback(sources, ctx.config.constraint,
                                        request_stop=lambda: ctx.store.request_stop(ctx.run_id), is_main=ctx.is_main)
        funcs = constraint.wrap_all(funcs)
        callbacks.append(constraint)
    recorder = SampleRecorder(ctx.store, ctx.run_id, ctx.config.logging_steps, ctx.is_main)
    return recorder.wrap_all(funcs, weights), weights, callbacks


def _text(value) -> str:
    """A prompt or completion as display text: plain strings as they are, message lists as their contents (turn by
    turn when tools were called)."""
    if isinstance(value, list):
        if has_tool_traffic(value):
            return trajectory_text(value)
        if len(value) == 1 and isinstance(value[0], dict):
            return str(value[0].get("content") or "")
        return "\n".join(f"{m.get('role')}: {m.get('content') or ''}" if isinstance(m, dict) else str(m)
                         for m in value)
    return "" if value is None else str(value)


def _score(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class SampleRecorder:
    """Gathers each source's scores for the batch being scored; writes up to SAMPLES_PER_LOG rows per
    logging step from the main process only."""

    def __init__(self, store: RunSink, run_id: str, logging_steps: int, is_main: bool,
                 per_log: int = SAMPLES_PER_LOG):
        self.store, self.run_id, self.every, self.is_main, self.per_log = store, run_id, logging_steps, is_main, per_log
        self.names: list[str] = []
        self.weights: dict[str, float] = {}
        self._batch: int | None = None  # id() of the completions list being scored
        self._scores: dict[str, list] = {}
        self._last_written: int | None = None
        self._tools: set[str] | None = None  # tools called so far; None until a batch has tool traffic

    def wrap_all(self, funcs: list, weights: list[float]) -> list:
        """Each callable wrapped to report its scores. A model given as a reward function (an nn.Module) is
        passed through: TRL runs it itself, so it does not show in the samples."""
        import torch

        wrapped = []
        for func, weight in zip(funcs, weights, strict=True):
            if isinstance(func, torch.nn.Module):
                wrapped.append(func)
                continue
            name = getattr(func, "__name__", type(func).__name__)
            self.names.append(name)
            self.weights[name] = float(weight)
            wrapped.append(self._wrap(func, name))
        return wrapped

    def _wrap(self, func, name: str):
        if is_async_callable(func):
            async def scored(prompts, completions, **kwargs):
                scores = await func(prompts=prompts, completions=completions, **kwargs)
                self.record(name, prompts, completions, scores, kwargs.get("trainer_state"), kwargs.get("log_metric"))
                return scores
        else:
            def scored(prompts, completions, **kwargs):
                scores = func(prompts=prompts, completions=completions, **kwargs)
                self.record(name, prompts, completions, scores, kwargs.get("trainer_state"), kwargs.get("log_metric"))
                return scores
        scored.__name__ = scored.__qualname__ = name  # TRL names the rewards/<name>/mean metric after it
        return scored

    def record(self, name: str, prompts, completions, scores, trainer_state, log_metric=None) -> None:
        if id(completions) != self._batch:
            self._batch, self._scores = id(completions), {}
        self._scores[name] = list(scores)
        if len(self._scores) < len(self.names):
            return
        scored, self._batch, self._scores = self._scores, None, {}
        if log_metric is not None:  # every process: TRL averages the metrics over them
            self._log_tools(completions, log_metric)
        if not self.is_main:
            return
        # TRL calls the reward functions before the optimizer step that logs: that step is global_step + 1
        step = (trainer_state.global_step if trainer_state is not None else 0) + 1
        if self._last_written is not None and step // self.every <= self._last_written // self.every:
            return
        self._last_written = step
        try:
            self.store.add_samples(self.run_id, step, self._rows(prompts, completions, scored))
        except Exception:  # samples are a view of training, never a reason to stop it
            traceback.print_exc()

    def _log_tools(self, completions, log_metric) -> None:
        """The batch's tool use as tools/* metrics, once a batch has called a tool (plain runs log none); later
        batches log too, so a policy that stops calling tools shows 0 rather than nothing."""
        if self._tools is None:
            if not any(has_tool_traffic(c) for c in completions):
                return
            self._tools = set()
        try:
            for metric, value in tool_metrics(completions, self._tools).items():
                log_metric(metric, value)
        except Exception:  # metrics are a view of training, never a reason to stop it
            traceback.print_exc()

    def _rows(self, prompts, completions, scored: dict[str, list]) -> list[dict]:
        rows = []
        for i in range(min(self.per_log, len(completions))):
            rewards = {name: _score(scored[name][i]) for name in self.names}
            given = [(self.weights[n], r) for n, r in rewards.items() if r is not None]
            rows.append({
                "prompt": _text(prompts[i])[:_PROMPT_CHARS],
                "completion": _text(completions[i]),
                "rewards": rewards,
                # TRL sums the weighted scores and skips a source that returned None for the completion
                "total": sum(w * r for w, r in given) if given else None,
            })
        return rows
