"""The run doctor's checks: each reads a run's metric series (and its settings) and returns a diagnosis with its
evidence and the fix, or None. Plain Python over lists: the worker runs them live on every logged step.

Every threshold is in `THRESHOLDS` (the reward probe's and the stall rule's too), documented in docs/doctor.md;
which checks a mode runs is its registry entry's `checks`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

Series = dict[str, list[tuple[int, float | None]]]  # metric -> [(step, value)], value None: NaN or infinite

THRESHOLDS = {
    "min_points": 3,            # logged steps before a check of the whole run speaks
    "trend_points": 6,          # logged steps before a trend (flat, falling, rising) is judged
    "zero_std_warn": 0.75,      # mean share of groups with no reward spread (recent third) that warns
    "zero_std_none": 0.999,     # ... at every logged step: the run gets no signal at all
    "clipped_warn": 0.5,        # mean share of completions cut at max_completion_length (recent third)
    "clipped_error": 0.9,       # ... that makes truncation an error
    "flat_reward": 0.02,        # |last third − first third| below this share of the reward's range (or 1e-3): flat
    "falling_reward": 0.1,      # last third below first third by this share of the range: falling
    "length_explodes": 2.0,     # completion length grown this many times while reward rises: hacking
    "held_out_drop": 0.1,       # held-out reward this share of its first value below its best while reward rises
    "kl_runaway": 1.0,          # KL (nats; per token or, PPO and Online DPO, per completion) above this ...
    "kl_growth": 2.0,           # ... and its last third this many times its first: still rising
    "entropy_collapse": 0.1,    # entropy fallen below this share of its first third
    "loss_spike": 10.0,         # a loss above this many times the median of the steps before it
    "spike_span": 200,          # steps a spike is looked for in, each against the median of this many before it
    "loss_rises": 2.0,          # the training loss's last third this many times its first third: diverging
    "grad_explosion": 50.0,     # a gradient norm above this many times the first third's median
    "overfit_rise": 0.1,        # eval loss this share above its best while the train loss still falls
    "slowdown": 3.0,            # recent steps this many times slower than the first ones
    "tools_unused": 0.05,       # tool calls per episode (recent third) below this, with tools: never calls them
    "tool_failures": 0.5,       # share of tool calls answered with an error (recent third) that warns
    # the reward probe (probe.py)
    "probe_clipped": 0.5,       # share of probe completions cut at the limit: probe_truncation
    "probe_some_zero": 0.5,     # share of probe groups without reward spread: probe_some_zero_variance
    "probe_dominant": 0.8,      # share of the fused reward's variance one source holds: probe_dominant
    "probe_seconds": 20.0,      # generation time of a probe before Start (Check rewards, --dry-run): probe_slow
    # the stall rule (backend/runs/stall.py)
    "stall_steps": 10,          # no step for this many times the attempt's measured step time: stalled ...
    "stall_floor_s": 120.0,     # ... and never less than this (evaluation and checkpoints take time between steps)
    "first_step_floor_s": 300.0,  # the bound before the first step (it compiles, allocates, generates first)
    "worker_stale_s": 30.0,     # the worker's own heartbeat older than this: frozen (WORKBENCH_WORKER_STALE_S)
}
_T = THRESHOLDS


@dataclass
class Diagnosis:
    check: str  # the check's name (registry `checks`, docs/doctor.md)
    severity: str  # "error": the run cannot learn as set; "warning": it learns badly or is at risk
    params: dict  # the numbers the texts are made of (texts.py formats them in the page's language)
    evidence: dict  # {metric, steps: [first, last], values: [...]} what the diagnosis was read from
    fix: dict = field(default_factory=dict)  # setting path -> suggested value ("Fix and restart" applies them)
    no_signal: bool = False  # the run learned nothing: a completed run is marked so

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Diagnosis:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _values(series: Series, name: str) -> list[tuple[int, float | None]]:
    return series.get(name) or []


def _finite(points) -> list[tuple[int, float]]:
    return [(s, v) for s, v in points if v is not None and math.isfinite(v)]


def _thirds(values: list[float]) -> tuple[float, float]:
    k = max(1, len(values) // 3)
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def _evidence(metric: str, points, keep: int = 8) -> dict:
    shown = points if len(points) <= keep else points[:keep // 2] + points[-keep // 2:]
    return {"metric": metric, "steps": [points[0][0], points[-1][0]] if points else [],
            "values": [[s, None if v is None else round(v, 6)] for s, v in shown], "points": len(points)}


def _first(series: Series, *names: str) -> tuple[str, list]:
    for name in names:
        if points := _values(series, name):
            return name, points
    return names[0], []


def _round_up(value: float, to: int = 32) -> int:
    return int(math.ceil(value / to) * to)


def longer_completions(current: int, reference_max: int | None = None) -> int:
    """A max_completion_length that stops cutting answers: 3× the current, and at least twice the longest
    reference answer, in multiples of 32."""
    want = 3 * current
    if reference_max:
        want = max(want, 2 * reference_max)
    return _round_up(want)


def more_generations(config) -> dict:
    """More completions per prompt (up to 16), with a batch that still holds whole groups."""
    n = min(16, max(4, 2 * config.rl.num_generations))
    fix = {"rl.num_generations": n}
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps * config.world_size
    if per_step % n:
        fix["per_device_train_batch_size"] = n
    return fix


# ---- the checks: (series, config, ended, hints) -> Diagnosis | None; hints: what the reward probe measured ----

def truncation(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    name, points = _first(series, "completions/clipped_ratio", "val/contain_eos_token")
    points = _finite(points)
    if len(points) < _T["min_points"] and not (ended and points):
        return None
    # Online DPO logs the share of completions that ended (with EOS): the rest were cut
    cut = [v for _, v in points] if name == "completions/clipped_ratio" else [1 - v for _, v in points]
    share = statistics.fmean(cut[-max(1, len(cut) // 3):])
    if share < _T["clipped_warn"]:
        return None
    current = config.rl.max_completion_length
    suggested = longer_completions(current, hints.get("reference_max"))
    return Diagnosis("truncation", "error" if share >= _T["clipped_error"] else "warning",
                     {"share": share, "current": current, "suggested": suggested},
                     _evidence(name, points), {"rl.max_completion_length": suggested})


def zero_variance(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    name, points = _first(series, "frac_reward_zero_std")
    points = _finite(points)
    if len(points) < _T["min_points"] and not (ended and points):
        return None
    values = [v for _, v in points]
    recent = statistics.fmean(values[-max(1, len(values) // 3):])
    if recent < _T["zero_std_warn"]:
        return None
    every = min(values) >= _T["zero_std_none"]
    clipped = _finite(_values(series, "completions/clipped_ratio"))
    cut = bool(clipped) and statistics.fmean(v for _, v in clipped) >= _T["clipped_warn"]
    fix = {"rl.max_completion_length": longer_completions(config.rl.max_completion_length,
                                                          hints.get("reference_max"))} if cut \
        else more_generations(config)
    return Diagnosis("zero_variance", "error" if every else "warning",
                     {"share": recent, "num_generations": config.rl.num_generations, "truncated": cut,
                      **({"suggested": fix["rl.max_completion_length"]} if cut else
                         {"suggested": fix["rl.num_generations"]})},
                     _evidence(name, points), fix, no_signal=every)


def _reward_points(series: Series) -> tuple[str, list[tuple[int, float]]]:
    name, points = _first(series, "reward", "objective/scores")
    return name, _finite(points)


def reward_trend(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    """Reward flat or falling over the run (not when groups have no spread: zero_variance says why)."""
    name, points = _reward_points(series)
    if len(points) < _T["trend_points"]:
        return None
    zero = _finite(_values(series, "frac_reward_zero_std"))
    if zero and statistics.fmean(v for _, v in zero[-max(1, len(zero) // 3):]) >= _T["zero_std_warn"]:
        return None
    values = [v for _, v in points]
    first, last = _thirds(values)
    spread = max(max(values) - min(values), 1e-9)
    scale = max(abs(first), abs(last), spread)
    if last < first - _T["falling_reward"] * spread and first - last > 1e-3:
        lr = config.learning_rate
        return Diagnosis("reward_falling", "warning", {"first": first, "last": last, "lr": lr,
                                                       "suggested": lower_learning_rate(config, 1 / 3)},
                         _evidence(name, points), {"learning_rate": lower_learning_rate(config, 1 / 3)})
    if abs(last - first) < max(_T["flat_reward"] * scale, 1e-3) and ended:
        lr = config.learning_rate
        return Diagnosis("reward_flat", "warning", {"first": first, "last": last, "lr": lr, "suggested": lr * 3},
                         _evidence(name, points), {"learning_rate": _nice(lr * 3)})
    return None


def reward_hacking(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    """Reward rising while the held-out reward falls, or while the completions' length explodes."""
    name, points = _reward_points(series)
    if len(points) < _T["trend_points"]:
        return None
    first, last = _thirds([v for _, v in points])
    if last <= first + 1e-3:
        return None
    setting, beta = _kl_coefficient(config)
    fix = {setting: max(0.04, 2 * beta)}
    held = _finite(_values(series, "eval_reward"))
    if len(held) >= _T["min_points"]:
        (_, held_first), (_, held_last) = held[0], held[-1]
        best = max(v for _, v in held[:-1])
        # below its best by a share of where it started, and below where it started
        if held_last < min(held_first, best - _T["held_out_drop"] * max(abs(held_first), 1e-3)):
            return Diagnosis("reward_hacking", "warning",
                             {"first": first, "last": last, "held_first": held_first, "held_last": held_last,
                              "setting": setting, "beta": beta, "suggested": fix[setting], "why": "held_out"},
                             _evidence("eval_reward", held), fix)
    lengths = _finite(_values(series, "completions/mean_length"))
    if len(lengths) >= _T["trend_points"]:
        l0, l1 = _thirds([v for _, v in lengths])
        if l0 > 0 and l1 >= _T["length_explodes"] * l0:
            return Diagnosis("reward_hacking", "warning",
                             {"first": first, "last": last, "length_first": l0, "length_last": l1,
                              "setting": setting, "beta": beta, "suggested": fix[setting], "why": "length"},
                             _evidence("completions/mean_length", lengths), fix)
    return None


def _trend(series: Series, *names: str) -> tuple[str, list, float, float] | None:
    """(metric, its finite points, mean of the first third, of the last) of the first of `names` logged, once it
    has enough points for a trend."""
    name, points = _first(series, *names)
    points = _finite(points)
    if len(points) < _T["trend_points"]:
        return None
    return (name, points, *_thirds([v for _, v in points]))


def _kl_coefficient(config) -> tuple[str, float]:
    """The setting that weighs the KL to the reference, and its value: PPO's kl_coef, Online DPO's beta, else
    rl.beta."""
    if "ppo" in config.spec.sections:
        return "ppo.kl_coef", config.ppo.kl_coef
    if "online_dpo" in config.spec.sections:
        return "online_dpo.beta", config.online_dpo.beta
    return "rl.beta", config.rl.beta


def kl_runaway(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    if (trend := _trend(series, "kl", "objective/kl")) is None:
        return None
    name, points, first, last = trend
    if last <= _T["kl_runaway"] or last <= _T["kl_growth"] * first:
        return None
    field_name, current = _kl_coefficient(config)
    suggested = max(0.04, 2 * current)
    return Diagnosis("kl_runaway", "warning", {"first": first, "last": last, "setting": field_name,
                                               "current": current, "suggested": suggested},
                     _evidence(name, points), {field_name: suggested, "learning_rate": _nice(config.learning_rate / 2)})


def entropy_collapse(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    if (trend := _trend(series, "entropy", "policy/entropy", "objective/entropy")) is None:
        return None
    name, points, first, last = trend
    if first <= 0 or last >= _T["entropy_collapse"] * first:
        return None
    fix = {"rl.temperature": min(10.0, round(config.rl.temperature * 1.2, 2)),
           "learning_rate": _nice(config.learning_rate / 2)}
    setting, _ = _kl_coefficient(config)
    return Diagnosis("entropy_collapse", "warning", {"first": first, "last": last, "setting": setting,
                                                     "temperature": config.rl.temperature,
                                                     "suggested": fix["rl.temperature"]},
                     _evidence(name, points), fix)


def loss_nan(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    for name in ("loss", "grad_norm"):
        points = _values(series, name)
        bad = [(s, v) for s, v in points if v is None or not math.isfinite(v)]
        if bad:
            every = len(bad) == len(points)
            lr = config.learning_rate
            return Diagnosis("loss_nan", "error", {"metric": name, "step": bad[0][0], "count": len(bad),
                                                   "points": len(points), "lr": lr, "suggested": lower_learning_rate(config, 0.1)},
                             _evidence(name, points), {"learning_rate": lower_learning_rate(config, 0.1),
                                                       **({"max_grad_norm": 1.0} if not config.max_grad_norm else {})},
                             no_signal=every)
    return None


def loss_spike(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    points = _finite(_values(series, "loss"))
    # the newest spike_span steps, each against the median of the spike_span before it: the check runs on every
    # logged step of long runs, so its cost must not grow with them
    span = _T["spike_span"]
    for i in range(max(_T["min_points"], len(points) - span), len(points)):
        before = statistics.median(abs(v) for _, v in points[max(0, i - span):i])
        step, value = points[i]
        if before > 1e-6 and abs(value) > _T["loss_spike"] * before:
            lr = config.learning_rate
            return Diagnosis("loss_spike", "warning", {"step": step, "value": value, "median": before, "lr": lr,
                                                       "suggested": lower_learning_rate(config, 1 / 3)},
                             _evidence("loss", points), {"learning_rate": lower_learning_rate(config, 1 / 3)})
    if len(points) >= _T["trend_points"]:
        first, last = _thirds([v for _, v in points])
        if first > 0 and last > _T["loss_rises"] * first:
            lr = config.learning_rate
            return Diagnosis("loss_rising", "warning", {"first": first, "last": last, "lr": lr,
                                                        "suggested": lower_learning_rate(config, 0.1)},
                             _evidence("loss", points), {"learning_rate": lower_learning_rate(config, 0.1)})
    return None


def grad_explosion(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    points = _finite(_values(series, "grad_norm"))
    if len(points) < _T["trend_points"]:
        values = [v for _, v in points]
        if len(values) >= _T["min_points"] and max(values) == 0.0 and ended:
            return Diagnosis("grad_zero", "error", {"points": len(values)}, _evidence("grad_norm", points),
                             no_signal=True)
        return None
    values = [v for _, v in points]
    if max(values) == 0.0:
        return Diagnosis("grad_zero", "error" if ended else "warning", {"points": len(values)},
                         _evidence("grad_norm", points), no_signal=ended)
    k = max(1, len(values) // 3)
    early = statistics.median(values[:k])
    peak_step, peak = max(points[k:], key=lambda p: p[1])
    if early > 0 and peak > _T["grad_explosion"] * early:
        lr = config.learning_rate
        fix = {"learning_rate": lower_learning_rate(config, 1 / 3),
               **({"max_grad_norm": 1.0} if not config.max_grad_norm else {})}
        return Diagnosis("grad_explosion", "warning", {"step": peak_step, "value": peak, "early": early, "lr": lr,
                                                       "suggested": fix["learning_rate"]},
                         _evidence("grad_norm", points), fix)
    return None


def warmup(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    points = _finite(_values(series, "learning_rate"))
    total = config.max_steps if config.max_steps > 0 else None
    if not config.warmup_steps or (total is None and not points):
        return None
    last_step = points[-1][0] if points else 0
    if total is not None and config.warmup_steps >= total or \
            ended and points and config.warmup_steps >= last_step and len(points) >= _T["min_points"]:
        steps = total or last_step
        suggested = max(1, steps // 10)
        return Diagnosis("warmup_never_ends", "warning", {"warmup": config.warmup_steps, "steps": steps,
                                                          "suggested": suggested},
                         _evidence("learning_rate", points), {"warmup_steps": suggested})
    return None


def overfitting(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    held = _finite(_values(series, "eval_loss"))
    train = _finite(_values(series, "loss"))
    if len(held) < _T["min_points"] or len(train) < _T["min_points"]:
        return None
    best_step, best = min(held, key=lambda p: p[1])
    last_step, last = held[-1]
    t0, t1 = _thirds([v for _, v in train])
    if best > 0 and last > (1 + _T["overfit_rise"]) * best and t1 < t0 and last_step > best_step:
        return Diagnosis("overfitting", "warning", {"best": best, "best_step": best_step, "last": last,
                                                    "last_step": last_step, "suggested": best_step},
                         _evidence("eval_loss", held), {"max_steps": best_step})
    return None


def slowdown(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    points = _finite(_values(series, "step_time"))
    if len(points) < _T["trend_points"]:
        return None
    values = [v for _, v in points]
    k = max(2, len(values) // 3)
    early, recent = statistics.median(values[1:k + 1]), statistics.median(values[-k:])  # the first step compiles
    if early > 0 and recent > _T["slowdown"] * early:
        return Diagnosis("slowdown", "warning", {"early": early, "recent": recent, "factor": recent / early},
                         _evidence("step_time", points))
    return None


def _recent(points) -> float:
    return statistics.fmean(v for _, v in points[-max(1, len(points) // 3):])


def tools_unused(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    """A run with tools (or an environment) whose policy does not call them: it never learned the call's format."""
    points = _finite(_values(series, "tools/call_frequency"))  # TRL logs it at every step of a run with tools
    if len(points) < _T["trend_points"] and not (ended and len(points) >= _T["min_points"]):
        return None
    recent = _recent(points)
    if recent >= _T["tools_unused"]:
        return None
    return Diagnosis("tools_unused", "warning", {"calls": recent, "never": max(v for _, v in points) == 0},
                     _evidence("tools/call_frequency", points))


def tool_failures(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    """Most tool calls answered with an error: bad arguments, an unknown tool, a tool that fails or times out."""
    points = _finite(_values(series, "tools/failure_frequency"))
    if len(points) < _T["min_points"]:
        return None
    calls = _finite(_values(series, "tools/call_frequency"))
    if calls and _recent(calls) < _T["tools_unused"]:  # too few calls to judge; tools_unused says why
        return None
    share = _recent(points)
    if share < _T["tool_failures"]:
        return None
    return Diagnosis("tool_failures", "warning", {"share": share}, _evidence("tools/failure_frequency", points))


def constraint_unmet(series: Series, config, ended: bool, hints: dict) -> Diagnosis | None:
    from backend.rewards.spec import cost_budgets

    budgets = cost_budgets(getattr(config, "reward_sources", None) or [])
    for name, budget in budgets.items():
        points = _finite(_values(series, f"cost/{name}/mean"))
        if len(points) < _T["trend_points"]:
            continue
        recent = _recent(points)
        if recent > budget:
            lam = _finite(_values(series, f"lambda/{name}"))
            cap = config.constraint.lambda_max
            at_cap = bool(lam) and lam[-1][1] >= 0.999 * cap
            fix = {"constraint.lambda_max": cap * 2} if at_cap else \
                {"constraint.lambda_lr": config.constraint.lambda_lr * 2}
            return Diagnosis("constraint_unmet", "warning", {"source": name, "cost": recent, "budget": budget,
                                                             "at_cap": at_cap, "cap": cap},
                             _evidence(f"cost/{name}/mean", points), fix)
    return None


def lower_learning_rate(config, factor: float) -> float:
    """The learning rate × factor, and at most the top of the usual range (LoRA 5e-4, full 5e-5)."""
    top = 5e-4 if config.finetuning == "lora" else 5e-5
    return _nice(min(config.learning_rate * factor, top))


def _nice(value: float) -> float:
    """A learning rate rounded to two significant digits."""
    return float(f"{value:.2g}")


CHECKS = {
    "loss_nan": loss_nan,
    "zero_variance": zero_variance,
    "truncation": truncation,
    "grad_explosion": grad_explosion,
    "loss_spike": loss_spike,
    "kl_runaway": kl_runaway,
    "reward_hacking": reward_hacking,
    "reward_trend": reward_trend,
    "entropy_collapse": entropy_collapse,
    "overfitting": overfitting,
    "warmup": warmup,
    "constraint_unmet": constraint_unmet,
    "slowdown": slowdown,
    "tools_unused": tools_unused,
    "tool_failures": tool_failures,
}
