"""The Lagrangian constraint on cost sources (as in PPO-Lagrangian and Safe RLHF), as plain arithmetic.

The trainer maximises reward − Σ λ_i · cost_i. After every optimizer step each multiplier moves by the
step's measured mean cost minus that cost's budget:

    λ ← min(cap, max(0, λ + lr · (mean_cost − budget)))

so λ grows while the run spends more than its budget, shrinks back (to 0) once it spends less, and the cap
keeps one bad stretch from drowning the reward for the rest of the run. No torch: the trainers' glue
(backend/modes/rl_constraint.py) feeds it numbers and logs what it holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def update_multiplier(lam: float, mean_cost: float, budget: float, lr: float, cap: float) -> float:
    """One projected gradient-ascent step of λ on (mean_cost − budget), kept in [0, cap]."""
    return min(cap, max(0.0, lam + lr * (mean_cost - budget)))


def violation_rate(costs: list[list[float | None]]) -> float:
    """Share of completions with a positive cost from any cost source; `costs` holds one list per source,
    one value per completion (None: not scored). With 0/1 costs (a blocklist counting `any`) this is the
    share of completions that broke a rule, the number to read against a budget."""
    if not costs or not costs[0]:
        return 0.0
    violated = [any(c is not None and c > 0 for c in per_completion) for per_completion in zip(*costs)]
    return sum(violated) / len(violated)


@dataclass
class Constraint:
    """One cost's multiplier and how long its mean cost has stayed over budget."""

    budget: float
    lam: float = 0.0
    steps_over: int = 0  # consecutive updates with mean cost > budget


@dataclass
class Multipliers:
    """The multipliers of a run's cost sources, by source name, and their update."""

    budgets: dict[str, float]
    init: float = 0.0
    lr: float = 0.1
    cap: float = 10.0
    constraints: dict[str, Constraint] = field(init=False)

    def __post_init__(self):
        self.constraints = {name: Constraint(budget, self.init) for name, budget in self.budgets.items()}

    def value(self, name: str) -> float:
        return self.constraints[name].lam

    def update(self, mean_costs: dict[str, float]) -> None:
        """One step: every cost measured this step moves its λ; an unmeasured one keeps it."""
        for name, mean in mean_costs.items():
            c = self.constraints[name]
            c.lam = update_multiplier(c.lam, mean, c.budget, self.lr, self.cap)
            c.steps_over = c.steps_over + 1 if mean > c.budget else 0

    def over_budget(self, patience: int) -> list[str]:
        """Costs that have been over their budget for at least `patience` consecutive steps."""
        return [name for name, c in self.constraints.items() if patience and c.steps_over >= patience]

    def state_dict(self) -> dict:
        return {name: {"lam": c.lam, "steps_over": c.steps_over} for name, c in self.constraints.items()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what a checkpoint saved; a cost it does not know (added since) keeps its initial λ."""
        for name, saved in state.items():
            if name in self.constraints:
                self.constraints[name].lam = float(saved["lam"])
                self.constraints[name].steps_over = int(saved.get("steps_over", 0))
