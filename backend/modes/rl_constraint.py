"""The cost constraint in the RL trainers (GRPO, RLOO, PPO): reward − Σ λ_i · cost_i, with each λ moved once per
optimizer step by backend/rewards/constraint.py.

Each cost source reaches the trainer wrapped in a cost term: it runs the source, turns its scores into costs
and returns −λ · cost, with weight 1. So the reward the trainer sums from its reward functions, the one GRPO and
RLOO turn into group advantages and PPO puts on the last token, is already reward − Σ λ · cost; nothing in the
trainers changes. The term also reports through the trainer's own `log_metric` (so the keys land in the same log
lines as `rewards/<name>/mean`, and from there in the store and the Runs tab):

  cost/<name>/mean            the batch's mean cost
  lambda/<name>               the λ that batch was scored with
  constraint/violation_rate   share of the batch's completions with a positive cost from any cost source

ConstraintCallback then updates every λ at each optimizer step's end from the costs measured in that step (on
all processes alike), warns or stops when a cost stays over budget, and keeps λ in the checkpoints
(`constraint.json` next to trainer_state.json) so a resumed run continues with the λ it had.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import TrainerCallback

from backend.config.sections import ConstraintSettings
from backend.rewards.constraint import Multipliers, violation_rate
from backend.rewards.spec import RewardSourceConfig, cost_budgets, source_names

STATE_FILE = "constraint.json"


def _no_metric(name: str, value: float) -> None:
    """Stands in for `log_metric` when a trainer gives none."""


def _sum_over_ranks(values: list[float]) -> list[float]:
    """Element-wise sums over every training process (the values themselves with one process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return values
    device = f"cuda:{torch.cuda.current_device()}" if torch.distributed.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return t.tolist()


class ConstraintCallback(TrainerCallback):
    """Holds the multipliers, wraps the cost sources, and updates, logs, checks and saves λ."""

    def __init__(self, sources: list[RewardSourceConfig], settings: ConstraintSettings, request_stop=None,
                 is_main: bool = True):
        budgets = cost_budgets(sources)
        self.sources = {name: s for s, name in zip(sources, source_names(sources)) if name in budgets}
        self.multipliers = Multipliers(budgets, init=settings.lambda_init, lr=settings.lambda_lr,
                                       cap=settings.lambda_max)
        self.patience, self.stop = settings.patience, settings.stop
        self.request_stop, self.is_main = request_stop, is_main
        self._step_sums = {name: [0.0, 0] for name in self.sources}  # cost sum and count since the last update
        self._batch: int | None = None  # id() of the completions being scored
        self._batch_costs: dict[str, list] = {}
        self._warned: set[str] = set()

    # ---- scoring ----

    def wrap_all(self, funcs: list) -> list:
        """The reward functions with each cost source replaced by its cost term."""
        return [self.term(f) if getattr(f, "__name__", None) in self.sources else f for f in funcs]

    def term(self, func):
        name = func.__name__
        source = self.sources[name]

        def cost_term(prompts, completions, **kwargs):
            costs = [source.as_cost(s) for s in func(prompts=prompts, completions=completions, **kwargs)]
            lam = self.multipliers.value(name)
            self._record(name, costs, completions, kwargs.get("log_metric") or _no_metric, lam)
            return [None if c is None else 0.0 - lam * c for c in costs]

        cost_term.__name__ = cost_term.__qualname__ = name
        return cost_term

    def _record(self, name: str, costs: list, completions, log_metric, lam: float) -> None:
        given = [c for c in costs if c is not None]
        sums = self._step_sums[name]
        sums[0] += sum(given)
        sums[1] += len(given)
        if given:
            log_metric(f"cost/{name}/mean", sum(given) / len(given))
        log_metric(f"lambda/{name}", lam)
        if id(completions) != self._batch:
            self._batch, self._batch_costs = id(completions), {}
        self._batch_costs[name] = costs
        if len(self._batch_costs) == len(self.sources):  # every cost of this batch is in
            log_metric("constraint/violation_rate", violation_rate(list(self._batch_costs.values())))
            self._batch, self._batch_costs = None, {}

    # ---- the trainer's events ----

    def on_step_end(self, args, state, control, **kwargs):
        names = list(self._step_sums)
        totals = _sum_over_ranks([v for name in names for v in self._step_sums[name]])
        means = {name: totals[2 * i] / totals[2 * i + 1] for i, name in enumerate(names) if totals[2 * i + 1]}
        self._step_sums = {name: [0.0, 0] for name in names}
        self.multipliers.update(means)
        self._check_budget(state.global_step)

    def _check_budget(self, step: int) -> None:
        over = self.multipliers.over_budget(self.patience)
        self._warned &= set(over)  # a cost back under budget warns again the next time
        for name in (n for n in over if n not in self._warned):
            self._warned.add(name)
            c = self.multipliers.constraints[name]
            if self.is_main:
                print(f"warning: cost '{name}' has been over its budget {c.budget:g} for {c.steps_over} steps "
                      f"(λ = {c.lam:.4g})" + ("; stopping the run" if self.stop else ""), flush=True)
            if self.stop and self.is_main and self.request_stop is not None:
                self.request_stop()  # the store callback turns it into a clean stop on every process

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                (folder / STATE_FILE).write_text(json.dumps(self.multipliers.state_dict()))

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.global_step:  # a fresh start, not a resume
            return
        saved = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        if saved.is_file():
            self.multipliers.load_state_dict(json.loads(saved.read_text()))
        elif self.is_main:
            print(f"warning: {saved} is missing; the cost multipliers restart at λ = {self.multipliers.init:g}",
                  flush=True)
