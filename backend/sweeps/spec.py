"""A sweep's spec: the base run config, the settings searched and how, and the objective, checked against the
run schema (one line per problem, naming its key) and read from YAML or the command line."""
from __future__ import annotations

import copy
import difflib
import json
import math
from pathlib import Path
from typing import Any, Literal, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend.config import (ConfigError, RunConfig, apply_overrides, build_config, choices, field_paths,
                            read_yaml_mapping, set_path)
from backend.core.procs import REPO_ROOT

KINDS = ("float", "log_float", "int", "categorical")
REDUCTIONS = ("last", "mean_last", "best")
# Settings a sweep does not search, and why.
NOT_SEARCHED = {
    "name": "trial runs are named after the sweep (`<sweep> #3`)",
    "mode": "a sweep compares runs of one mode; start one sweep per mode",
    "reward_sources": "reward sources are a list; set them in the base config",
    "logging_steps": "it sets how often metrics are logged (what the objective reads), not how the model trains",
    "save_steps": "checkpoints do not change what a run learns",
    "save_total_limit": "checkpoints do not change what a run learns",
    "save_minutes": "checkpoints do not change what a run learns",
    "auto_resume": "resuming after a crash does not change what a run learns",
    "auto_find_batch_size": "it is a memory fallback, not a hyperparameter; search per_device_train_batch_size",
    **{path: "where a run trains is not a hyperparameter; set it in the base config" for path, _ in field_paths()
       if path == "num_processes" or path.startswith("distributed.")},
    **{path: "evaluation settings decide what an eval_* objective measures, so every trial needs the same; set "
             "them in the base config" for path, _ in field_paths() if path.startswith("eval.")},
}
COMMON_METRICS = ("loss", "grad_norm", "learning_rate", "train_loss")  # every trainer; each mode's own: registry
_HIGHER_IS_BETTER = ("reward", "accuracy", "accuracies", "margin", "margins", "score", "scores", "rouge")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchParam(_Strict):
    field: str = Field(description="A dotted run-config path: learning_rate, lora.r, dpo.beta, rl.temperature ...")
    kind: Literal[KINDS] = Field(description="float | log_float (sampled on a log scale) | int | categorical")
    low: float | None = Field(None, description="Lowest value (float, log_float, int)")
    high: float | None = Field(None, description="Highest value (float, log_float, int)")
    choices: list[bool | int | float | str | None] | None = Field(None, description="The values (categorical)")


class Objective(_Strict):
    metric: str = Field("loss", min_length=1, description="A metric the trainer logs, e.g. loss or reward")
    direction: Literal["minimize", "maximize"] = "minimize"
    reduce: Literal[REDUCTIONS] = Field(
        "last", description="How a run's series becomes one number: last value, mean of the last k, or best")
    last_k: int = Field(5, ge=1, le=100_000, description="mean_last: how many of the last logged values")


class Pruning(_Strict):
    enabled: bool = Field(False, description="Stop a trial early when its metric is worse than the median of "
                                             "earlier trials at the same step")
    startup_trials: int = Field(2, ge=0, le=10_000, description="Trials that finish before any is pruned")
    warmup_steps: int = Field(1, ge=0, le=10_000_000, description="Steps of each trial before it may be pruned")


class SweepSpec(_Strict):
    name: str = Field("", max_length=60, description="Trial runs are named `<name> #N`; empty: generated")
    base: dict = Field(description="A full run config (the settings every trial starts from)")
    space: list[SearchParam] = Field(min_length=1, max_length=32)
    objective: Objective = Field(default_factory=Objective)
    n_trials: int = Field(8, ge=1, le=10_000)
    seed: int = Field(42, ge=0, le=2**32 - 1)
    pruning: Pruning = Field(default_factory=Pruning)

    def base_config(self) -> RunConfig:
        return build_config(self.base)


def _spec_keys() -> list[str]:
    """Every key a spec may have, dotted (space.kind, objective.metric ...), for did-you-mean."""
    keys = list(SweepSpec.model_fields)
    for section, model in (("space", SearchParam), ("objective", Objective), ("pruning", Pruning)):
        keys += [f"{section}.{k}" for k in model.model_fields]
    return keys


def _format_spec_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        parts = [str(p) for p in e["loc"]]
        loc = ".".join(parts)
        for i, p in enumerate(parts):  # space.0.field -> space[0].field
            if p.isdigit() and i:
                loc = ".".join(parts[:i - 1] + [f"{parts[i - 1]}[{p}]"] + parts[i + 1:])
                break
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            generic = ".".join(p for p in parts if not p.isdigit())
            close = difflib.get_close_matches(generic, _spec_keys(), n=1)
            msg = "unknown key" + (f"; did you mean '{close[0].rsplit('.', 1)[-1]}'?" if close else "")
        elif e["type"] in ("missing", "too_short") and loc == "space":
            msg = "list at least one setting to search"
        elif "input" in e and e["type"] != "missing" and not isinstance(e["input"], (dict, list)):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def _refusal(base: dict, path: str, value) -> str | None:
    """Why the schema refuses `value` for `path` on top of `base` (None: it accepts it)."""
    data = copy.deepcopy(base)
    set_path(data, path, value)
    try:
        build_config(data)
    except ConfigError as e:
        return "; ".join(line.removeprefix(f"{path}: ") for line in e.errors)
    return None


def _param_errors(i: int, p: SearchParam, base: dict, mode: str) -> list[str]:
    paths = dict(field_paths())
    if p.field not in paths:
        initials = {"".join(w[0] for w in path.replace(".", "_").split("_")): path for path in paths}
        close = difflib.get_close_matches(p.field, list(paths), n=1) or \
            ([initials[p.field]] if p.field in initials else [])
        return [f"space[{i}].field: unknown setting '{p.field}'" + (f"; did you mean '{close[0]}'?" if close else "")]
    where = f"space[{i}] ({p.field})"
    if p.field in NOT_SEARCHED:
        return [f"{where}: not searchable: {NOT_SEARCHED[p.field]}"]
    info = paths[p.field]
    modes = (info.json_schema_extra or {}).get("modes")
    if modes and mode not in modes:
        return [f"{where}: only used by {', '.join(modes)} runs, and the base config trains {mode}"]
    ann, errors = info.annotation, []
    if get_origin(ann) is list:
        return [f"{where}: a list setting is not searched; set it in the base config"]
    if p.kind == "categorical":
        if p.low is not None or p.high is not None:
            errors.append(f"{where}: categorical takes choices, not low/high")
        if not p.choices or len(p.choices) < 2:
            return errors + [f"{where}: list at least two choices"]
        if len({json.dumps(c) for c in p.choices}) < len(p.choices):
            errors.append(f"{where}: a choice is listed twice")
        allowed = choices(info)
        for c in p.choices:
            if allowed and c not in allowed:
                errors.append(f"{where}: choice {c!r} is not allowed; choose from {', '.join(map(str, allowed))}")
            elif why := _refusal(base, p.field, c):
                errors.append(f"{where}: choice {c!r} is not allowed: {why}")
        return errors
    if ann not in (int, float):
        kind = "an on/off" if ann is bool else "a named" if choices(info) else "a text"
        hint = f" (choices: {', '.join(map(str, choices(info)))})" if choices(info) else ""
        return [f"{where}: {kind} setting is searched with kind categorical{hint}"]
    if p.kind in ("float", "log_float") and ann is int:
        errors.append(f"{where}: a whole-number setting: use kind int (or categorical)")
    if p.choices:
        errors.append(f"{where}: {p.kind} takes low and high, not choices")
    if p.low is None or p.high is None:
        return errors + [f"{where}: {p.kind} needs low and high"]
    if p.low >= p.high:
        errors.append(f"{where}: low ({p.low:g}) must be below high ({p.high:g})")
    if p.kind == "log_float" and p.low <= 0:
        errors.append(f"{where}: log_float needs low > 0 (a log scale has no 0)")
    if p.kind == "int" and not (float(p.low).is_integer() and float(p.high).is_integer()):
        errors.append(f"{where}: int needs whole-number low and high")
    for which, v in (("low", p.low), ("high", p.high)):
        value = int(v) if ann is int and float(v).is_integer() else v
        if why := _refusal(base, p.field, value):
            errors.append(f"{where}: {which} {v:g} is outside the setting's range: {why}")
    return errors


def objective_metrics(config: RunConfig) -> list[str]:
    """Metric names a run of this config logs (those a sweep may optimise)."""
    spec = config.spec
    names = [*COMMON_METRICS, *spec.metrics]
    if config.eval.enabled and not spec.online_rl:  # the trainer's own metrics on the evaluation set
        names += [f"eval_{n}" for n in ("loss", *spec.metrics)]
    generates = config.eval.enabled and (spec.online_rl or config.eval.generate)  # greedy held-out answers
    if generates and spec.answer_column:
        names.append("eval_rouge_l")
    if config.reward_sources:
        from backend.rewards.spec import source_names

        names += ["eval_reward"] if generates else []
        for n in source_names(config.reward_sources):
            names += [f"rewards/{n}/mean", f"rewards/{n}/std"] if spec.online_rl else []
            names += [f"eval_rewards/{n}/mean"] if generates else []
    return names


def default_direction(metric: str) -> str:
    words = metric.replace("/", "_").split("_")
    return "maximize" if any(w in _HIGHER_IS_BETTER for w in words) else "minimize"


def build_sweep_spec(data: dict) -> SweepSpec:
    """Validate a sweep spec against the run schema; the returned spec's base is a full run config.

    Raises ConfigError with one line per problem, each naming its key (`space[1] (lora.r): ...`)."""
    if not isinstance(data, dict):
        raise ConfigError(["a sweep spec is a mapping (name, base, space, objective, n_trials, ...)"])
    base_errors = []
    try:
        base = build_config(data.get("base")) if isinstance(data.get("base"), dict) else None
    except ConfigError as e:
        base, base_errors = None, [f"base: {line}" for line in e.errors]
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise ConfigError(base_errors + _format_spec_errors(err)) from None
    if base is None:
        raise ConfigError(base_errors)
    base_dict = base.model_dump()
    errors = []
    seen = set()
    for i, p in enumerate(spec.space):
        if p.field in seen:
            errors.append(f"space[{i}] ({p.field}): searched twice; keep one entry per setting")
        seen.add(p.field)
        errors += _param_errors(i, p, base_dict, base.mode)
    known = objective_metrics(base)
    if spec.objective.metric.startswith("eval_") and not base.eval.enabled:
        errors.append(f"objective.metric: the base config's runs train without an evaluation split, so nothing "
                      f"logs '{spec.objective.metric}'; set eval.split (e.g. 0.1) or eval.dataset in the base, or "
                      f"optimise loss or train_loss (or a reward in RL modes)")
    elif spec.objective.metric not in known:
        close = difflib.get_close_matches(spec.objective.metric, known, n=1)
        errors.append(f"objective.metric: {base.mode} runs do not log '{spec.objective.metric}'"
                      + (f"; did you mean '{close[0]}'?" if close else "") + f" (they log: {', '.join(known)})")
    if errors:
        raise ConfigError(errors)
    return spec.model_copy(update={"base": base_dict})


def resolve_base(base: Any, relative_to: Path | None = None) -> dict:
    """A base given as a run-config YAML path (relative to the spec's folder, the current folder or the
    repository) or as a mapping of settings."""
    if isinstance(base, dict):
        return base
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(["base: give a run-config YAML path (e.g. presets/sft_demo.yaml) or a mapping of settings"])
    candidates = [Path(base)] if Path(base).is_absolute() else \
        [p / base for p in (relative_to, Path.cwd(), REPO_ROOT) if p is not None]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise ConfigError([f"base: run config {base} not found"])
    try:
        return read_yaml_mapping(path)
    except ConfigError as e:
        raise ConfigError([f"base: {line}" for line in e.errors]) from None


def spec_from_data(data: dict, relative_to: Path | None = None) -> SweepSpec:
    """A spec as written in YAML: `base` may be a path, and `set` a list of key=value overrides on it."""
    if not isinstance(data, dict):
        raise ConfigError(["a sweep spec is a mapping (name, base, space, objective, n_trials, ...)"])
    data = dict(data)
    if "base" not in data:
        raise ConfigError(["base: missing; give a run-config YAML path (e.g. presets/sft_demo.yaml) or a mapping"])
    base = resolve_base(data["base"], relative_to)
    overrides = data.pop("set", None) or []
    if isinstance(overrides, dict):
        overrides = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in overrides.items()]
    if not isinstance(overrides, list):
        raise ConfigError(["set: a list of key=value overrides, e.g. [max_steps=4]"])
    try:
        data["base"] = apply_overrides(base, [str(o) for o in overrides])
    except ConfigError as e:
        raise ConfigError([f"set: {line.removeprefix('--set ')}" for line in e.errors]) from None
    return build_sweep_spec(data)


def load_sweep_spec(path: str | Path) -> SweepSpec:
    data = read_yaml_mapping(path, "sweep spec")
    try:
        return spec_from_data(data, relative_to=Path(path).parent)
    except ConfigError as e:
        raise ConfigError([f"{path}: {line}" for line in e.errors]) from None


def parse_param(text: str) -> dict:
    """`learning_rate=log_float:1e-5:1e-3`, `lora.r=int:4:16` or `dpo.loss_type=categorical:sigmoid,ipo`."""
    usage = "expected FIELD=KIND:LOW:HIGH or FIELD=categorical:A,B,C (e.g. learning_rate=log_float:1e-5:1e-3)"
    if "=" not in text or ":" not in text:
        raise ConfigError([f"--param {text!r}: {usage}"])
    field, rest = (s.strip() for s in text.split("=", 1))
    kind, _, values = rest.partition(":")
    if kind == "categorical":
        return {"field": field, "kind": kind, "choices": [yaml.safe_load(v.strip()) for v in values.split(",")]}
    bounds = values.split(":")
    if len(bounds) != 2:
        raise ConfigError([f"--param {text!r}: {usage}"])
    try:
        low, high = (float(b) for b in bounds)
    except ValueError:
        raise ConfigError([f"--param {text!r}: low and high must be numbers"]) from None
    return {"field": field, "kind": kind, "low": low, "high": high}


def parse_objective(text: str) -> dict:
    """`loss:min`, `reward:max`, `loss:min:mean_last` or `loss:min:best`."""
    parts = text.split(":")
    directions = {"min": "minimize", "minimize": "minimize", "max": "maximize", "maximize": "maximize"}
    if len(parts) not in (1, 2, 3) or (len(parts) > 1 and parts[1] not in directions):
        raise ConfigError([f"--objective {text!r}: expected METRIC[:min|max[:last|mean_last|best]] (e.g. loss:min)"])
    out = {"metric": parts[0], "direction": directions[parts[1]] if len(parts) > 1 else default_direction(parts[0])}
    if len(parts) == 3:
        out["reduce"] = parts[2]
    return out


def spec_yaml(spec: SweepSpec) -> str:
    return yaml.safe_dump(spec.model_dump(), sort_keys=False)


def spec_from_cli(spec_path: str | None = None, preset: str | None = None, sets: list[str] = (),
                  params: list[str] = (), objective: str | None = None, trials: int | None = None,
                  seed: int | None = None, name: str | None = None, prune: bool = False) -> SweepSpec:
    """`launch.py sweep start`: a spec file, or a preset as the base with --param / --objective / --trials;
    flags given with a spec file replace its entries (a --param replaces the same field's entry)."""
    if not spec_path and not preset:
        raise ConfigError(["give a sweep spec YAML (e.g. presets/sweeps/sft_lr_rank.yaml) or --preset RUN.yaml "
                           "with --param FIELD=KIND:LOW:HIGH"])
    relative_to = None
    data: dict = {}
    if spec_path:
        data, relative_to = read_yaml_mapping(spec_path, "sweep spec"), Path(spec_path).parent
    if preset:
        data["base"], relative_to = preset, None
    space = list(data.get("space") or [])
    for item in params:
        new = parse_param(item)
        space = [p for p in space if not (isinstance(p, dict) and p.get("field") == new["field"])] + [new]
    data["space"] = space
    if sets:
        data["set"] = list(data.get("set") or []) + list(sets)
    if objective:
        data["objective"] = parse_objective(objective)
    for key, value in (("n_trials", trials), ("seed", seed), ("name", name)):
        if value is not None:
            data[key] = value
    if prune:
        data["pruning"] = {**(data.get("pruning") or {}), "enabled": True}
    return spec_from_data(data, relative_to)


def trial_name(spec: SweepSpec, number: int) -> str:
    return f"{spec.name} #{number + 1}"


def trial_config(spec: SweepSpec, params: dict, number: int | None = None, name: str | None = None) -> RunConfig:
    data = copy.deepcopy(spec.base)
    for path, value in params.items():
        set_path(data, path, value)
    data["name"] = name or trial_name(spec, number or 0)
    return build_config(data)


def reduce_series(values: list[float | None], objective: Objective) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    if objective.reduce == "last":
        return values[-1]
    if objective.reduce == "mean_last":
        tail = values[-objective.last_k:]
        return sum(tail) / len(tail)
    return min(values) if objective.direction == "minimize" else max(values)
