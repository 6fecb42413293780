"""Optuna (Bayesian) hyperparameter sweeps over the run-config schema.

A sweep is a base run config, a search space of schema fields and an objective: a metric the trainer logs,
reduced to one number per run. A detached driver (`python -m backend.sweeps drive ID`, its own session like a
run's supervisor) asks Optuna's TPE sampler for each trial's settings, submits the trial as an ordinary run
(`jobs.submit_run`, so it trains, queues and plots like any other), waits for it, reports the metric as it is
logged (so a median pruner can stop a poor trial early) and tells Optuna the result.

Two records, each with one job: the Optuna study (an SQLite file of its own under workspace/sweeps/ID) is the
sampler's memory, so a restarted driver resumes where the last one stopped; the store's `sweeps` and
`sweep_trials` tables are what the UI and the CLI read (status, each trial's run, settings and objective).
"""
from __future__ import annotations

import copy
import difflib
import json
import math
import os
import secrets
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend import jobs
from backend.config import (ConfigError, RunConfig, apply_overrides, build_config, choices, field_paths,
                            read_yaml_mapping, set_path)
from backend.core.procs import REPO_ROOT, Heartbeat, is_dead, spawn_detached
from backend.modes.registry import mode_spec
from backend.store import RunStore

KINDS = ("float", "log_float", "int", "categorical")
REDUCTIONS = ("last", "mean_last", "best")
SWEEP_STATUSES = ("queued", "running", "completed", "stopped", "failed")
ACTIVE = ("queued", "running")
TRIAL_FINAL = ("completed", "pruned", "failed", "stopped")
POLL_S = 1.0
FAILURES_IN_A_ROW = 3  # then the sweep ends `failed` instead of spending every trial on the same error
# Settings a sweep does not search, and why.
NOT_SEARCHED = {
    "name": "trial runs are named after the sweep (`<sweep> #3`)",
    "mode": "a sweep compares runs of one mode; start one sweep per mode",
    "reward_sources": "reward sources are a list; set them in the base config",
    "logging_steps": "it sets how often metrics are logged (what the objective reads), not how the model trains",
    "save_steps": "checkpoints do not change what a run learns",
    "auto_find_batch_size": "it is a memory fallback, not a hyperparameter; search per_device_train_batch_size",
    **{path: "where a run trains is not a hyperparameter; set it in the base config" for path, _ in field_paths()
       if path == "num_processes" or path.startswith("distributed.")},
    **{path: "evaluation settings decide what an eval_* objective measures, so every trial needs the same; set "
             "them in the base config" for path, _ in field_paths() if path.startswith("eval.")},
}
COMMON_METRICS = ("loss", "grad_norm", "learning_rate", "train_loss")  # every trainer; each mode's own: registry
_HIGHER_IS_BETTER = ("reward", "accuracy", "accuracies", "margin", "margins", "score", "scores")


# ---- the sweep spec ----

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
    spec = mode_spec(config.mode)
    names = [*COMMON_METRICS, *spec.metrics]
    if config.eval.enabled:  # the trainer logs its own metrics on the evaluation set with an eval_ prefix
        names += [f"eval_{n}" for n in ("loss", *spec.metrics)]
    if spec.online_rl and config.reward_sources:
        from backend.rewards.spec import source_names

        for n in source_names(config.reward_sources):
            names += [f"rewards/{n}/mean", f"rewards/{n}/std"]
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


# ---- sweeps and trials in the store ----

@dataclass
class Sweep:
    id: str
    name: str
    spec: SweepSpec
    status: str
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    pid: int | None = None
    heartbeat_at: float | None = None
    stop_requested: bool = False
    error: str | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


@dataclass
class Trial:
    sweep_id: str
    number: int  # Optuna's trial number, 0-based; people see number + 1
    run_id: str | None
    status: str  # running | completed | pruned | failed | stopped
    params: dict
    value: float | None = None
    error: str | None = None
    created_at: float = 0.0
    finished_at: float | None = None

    @property
    def label(self) -> str:
        return f"#{self.number + 1}"


def sweep_dir(store: RunStore, sweep_id: str) -> Path:
    return store.workspace / "sweeps" / sweep_id


def driver_log(store: RunStore, sweep_id: str) -> Path:
    return sweep_dir(store, sweep_id) / "driver.log"


def _row_to_sweep(row) -> Sweep:
    d = dict(row)
    d["spec"] = SweepSpec.model_validate_json(d["spec"])
    d["stop_requested"] = bool(d["stop_requested"])
    return Sweep(**d)


def create_sweep(store: RunStore, spec: SweepSpec) -> Sweep:
    sweep_id = "sw-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    spec = spec.model_copy(update={"name": spec.name or f"sweep-{sweep_id[12:18]}"})
    with store.connect() as db:
        db.execute("INSERT INTO sweeps (id, name, spec, status, created_at) VALUES (?,?,?,?,?)",
                   (sweep_id, spec.name, spec.model_dump_json(), "queued", time.time()))
    sweep_dir(store, sweep_id).mkdir(parents=True, exist_ok=True)
    (sweep_dir(store, sweep_id) / "spec.yaml").write_text(spec_yaml(spec))
    return get_sweep(store, sweep_id)


def get_sweep(store: RunStore, sweep_id: str) -> Sweep:
    with store.connect() as db:
        row = db.execute("SELECT * FROM sweeps WHERE id=?", (sweep_id,)).fetchone()
    if row is None:
        raise KeyError(f"no sweep with id '{sweep_id}'")
    return _row_to_sweep(row)


def list_sweeps(store: RunStore, statuses: tuple[str, ...] | None = None) -> list[Sweep]:
    sql, args = "SELECT * FROM sweeps", ()
    if statuses:
        sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
        args = statuses
    with store.connect() as db:
        rows = db.execute(sql + " ORDER BY created_at DESC", args).fetchall()
    return [_row_to_sweep(r) for r in rows]


def update_sweep(store: RunStore, sweep_id: str, **fields) -> None:
    cols = ", ".join(f"{k}=?" for k in fields)
    with store.connect() as db:
        db.execute(f"UPDATE sweeps SET {cols} WHERE id=?", (*fields.values(), sweep_id))


def finish_sweep(store: RunStore, sweep_id: str, status: str, error: str | None = None) -> bool:
    """Move an active sweep to a final status; False when it had already ended (first writer wins)."""
    assert status in ("completed", "stopped", "failed")
    with store.connect() as db:
        return db.execute("UPDATE sweeps SET status=?, finished_at=?, error=COALESCE(?, error) "
                          "WHERE id=? AND status IN ('queued','running')",
                          (status, time.time(), error, sweep_id)).rowcount > 0


def list_trials(store: RunStore, sweep_id: str) -> list[Trial]:
    with store.connect() as db:
        rows = db.execute("SELECT * FROM sweep_trials WHERE sweep_id=? ORDER BY number", (sweep_id,)).fetchall()
    return [Trial(**{**dict(r), "params": json.loads(r["params"])}) for r in rows]


def sweep_of_run(store: RunStore, run_id: str) -> tuple[str, int] | None:
    """The sweep and trial number a run was trained for, if any."""
    with store.connect() as db:
        row = db.execute("SELECT sweep_id, number FROM sweep_trials WHERE run_id=?", (run_id,)).fetchone()
    return (row[0], row[1]) if row else None


def _save_trial(store: RunStore, t: Trial) -> None:
    with store.connect() as db:
        db.execute("INSERT OR REPLACE INTO sweep_trials (sweep_id, number, run_id, status, params, value, error, "
                   "created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?)",
                   (t.sweep_id, t.number, t.run_id, t.status, json.dumps(t.params), t.value, t.error,
                    t.created_at or time.time(), t.finished_at))


def counted(trials: list[Trial]) -> list[Trial]:
    """Trials that count towards n_trials: ended, and not stopped (a stopped trial is run again)."""
    return [t for t in trials if t.status in ("completed", "pruned", "failed")]


def best_trial(spec: SweepSpec, trials: list[Trial]) -> Trial | None:
    done = [t for t in trials if t.status == "completed" and t.value is not None]
    if not done:
        return None
    sign = 1 if spec.objective.direction == "minimize" else -1
    return min(done, key=lambda t: (sign * t.value, t.number))


def trial_name(spec: SweepSpec, number: int) -> str:
    return f"{spec.name} #{number + 1}"


def trial_config(spec: SweepSpec, params: dict, number: int | None = None, name: str | None = None) -> RunConfig:
    data = copy.deepcopy(spec.base)
    for path, value in params.items():
        set_path(data, path, value)
    data["name"] = name or trial_name(spec, number or 0)
    return build_config(data)


def best_config(store: RunStore, sweep_id: str) -> RunConfig | None:
    """The base config with the best trial's settings, named `<sweep> best`; None before any trial completes."""
    sweep = get_sweep(store, sweep_id)
    best = best_trial(sweep.spec, list_trials(store, sweep_id))
    return trial_config(sweep.spec, best.params, name=f"{sweep.name} best") if best else None


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


def format_value(v, digits: int = 4) -> str:
    """A setting's or objective's value for tables: floats to `digits` significant digits."""
    if v is None:
        return "-"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def trial_columns(spec: SweepSpec) -> list[str]:
    return ["trial", "status", *[p.field for p in spec.space], spec.objective.metric, "best", "run"]


def trial_rows(store: RunStore, sweep: Sweep, trials: list[Trial]) -> list[list[str]]:
    """One row per trial for tables (UI and CLI): a running trial shows its run's progress; ★ marks the best."""
    best = best_trial(sweep.spec, trials)
    rows = []
    for t in trials:
        status = t.status
        if status == "running" and t.run_id:
            try:
                run = store.get_run(t.run_id)
                status = f"{run.status} {run.step}/{run.total_steps}" if run.total_steps else run.status
            except KeyError:
                pass
        rows.append([t.label, status, *[format_value(t.params.get(p.field)) for p in sweep.spec.space],
                     format_value(t.value, 6), "★" if best and t.number == best.number else "", t.run_id or "-"])
    return rows


def sweep_summary(sweep: Sweep, trials: list[Trial]) -> dict:
    best = best_trial(sweep.spec, trials)
    return {"id": sweep.id, "name": sweep.name, "status": sweep.status, "trials_done": len(counted(trials)),
            "n_trials": sweep.spec.n_trials, "metric": sweep.spec.objective.metric,
            "direction": sweep.spec.objective.direction, "best_value": best.value if best else None,
            "best_trial": best.number + 1 if best else None, "best_params": best.params if best else None,
            "created_at": sweep.created_at, "started_at": sweep.started_at, "finished_at": sweep.finished_at,
            "error": sweep.error}


def param_importances(store: RunStore, sweep: Sweep) -> dict[str, float]:
    """How much each searched setting mattered to the objective (Optuna's fANOVA, shares adding up to 1),
    from the study file; {} before three trials completed or with a single setting."""
    done = [t for t in list_trials(store, sweep.id) if t.status == "completed"]
    path = sweep_dir(store, sweep.id) / "optuna.db"
    if len(done) < 3 or len(sweep.spec.space) < 2 or not path.exists():
        return {}
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=sweep.id, storage=f"sqlite:///{path}")
        return dict(optuna.importance.get_param_importances(study))
    except Exception:  # noqa: BLE001 - e.g. every trial scored the same: nothing to attribute
        return {}


# ---- starting, stopping, resuming, reconciling ----

def _spawn_driver(store: RunStore, sweep_id: str) -> None:
    proc = spawn_detached(["-m", "backend.sweeps", "drive", sweep_id, "--workspace", str(store.workspace)],
                          driver_log(store, sweep_id))
    update_sweep(store, sweep_id, pid=proc.pid, heartbeat_at=time.time())


def start_sweep(store: RunStore, spec: SweepSpec, check: bool = True) -> Sweep:
    """Record the sweep and start its detached driver. The base config is checked once here (model
    reachable, dataset trainable), so a bad base fails now rather than in every trial."""
    if check:
        jobs.preflight(spec.base_config(), store.workspace)
    sweep = create_sweep(store, spec)
    _spawn_driver(store, sweep.id)
    return get_sweep(store, sweep.id)


def resume_sweep(store: RunStore, sweep_id: str, n_trials: int | None = None) -> Sweep:
    """Start a new driver for an ended sweep: finished trials are kept, a trial whose run is still going is
    waited for, and the sweep goes on to n_trials (raised to `n_trials` when given)."""
    reconcile_sweeps(store)
    sweep = get_sweep(store, sweep_id)
    if sweep.active:
        raise ConfigError([f"sweep {sweep_id} is {sweep.status}; stop it first or let it run"])
    spec = sweep.spec
    if n_trials is not None:
        if n_trials < 1:
            raise ConfigError(["n_trials: at least 1"])
        spec = spec.model_copy(update={"n_trials": n_trials})
    if len(counted(list_trials(store, sweep_id))) >= spec.n_trials:
        raise ConfigError([f"sweep {sweep_id} already ran its {spec.n_trials} trials; resume it with more "
                           "(`sweep resume ID --trials N`, or trials to add in the Sweeps tab)"])
    update_sweep(store, sweep_id, status="queued", spec=spec.model_dump_json(), stop_requested=0, error=None,
                 finished_at=None, pid=None, heartbeat_at=time.time())
    _spawn_driver(store, sweep_id)
    return get_sweep(store, sweep_id)


def stop_sweep(store: RunStore, sweep_id: str) -> str:
    """Ask a sweep to stop: its driver stops the current trial's run (which saves its adapter) and ends
    `stopped`. A sweep whose driver is gone has its trial runs stopped here."""
    reconcile_sweeps(store)
    sweep = get_sweep(store, sweep_id)
    if sweep.active:
        update_sweep(store, sweep_id, stop_requested=1)
        return "stopping"
    for t in list_trials(store, sweep_id):
        if t.run_id and store.get_run(t.run_id).active:
            jobs.stop_run(store, t.run_id)
    return sweep.status


def reconcile_sweeps(store: RunStore) -> list[str]:
    """Mark active sweeps whose driver is gone as failed (their trials are kept; resume goes on)."""
    now, changed = time.time(), []
    for s in list_sweeps(store, ACTIVE):
        why = "the sweep driver never started" if s.pid is None else f"the sweep driver (pid {s.pid}) is gone"
        if is_dead(s.pid, s.heartbeat_at, s.started_at or s.created_at, now=now) and finish_sweep(store, s.id, "failed", error=f"{why}; its finished trials are kept, and "
                                 f"`launch.py sweep resume {s.id}` goes on from there"):
            changed.append(s.id)
    return changed


# ---- the driver ----

class SweepDriver:
    """Runs one sweep's trials one after another. `submit`, `stop`, `dispatch` and `sleep` default to the real
    job plumbing; tests pass fakes to drive a sweep in-process."""

    def __init__(self, store: RunStore, sweep_id: str, submit=None, stop=None, dispatch=None, sleep=time.sleep,
                 poll_s: float = POLL_S, out=print):
        self.store, self.sweep_id = store, sweep_id
        self.submit = submit or (lambda store, config: jobs.submit_run(store, config, check=False))
        self.stop = stop or jobs.stop_run
        self.dispatch = dispatch or jobs.dispatch
        self.sleep, self.poll_s, self.out = sleep, poll_s, out
        self.spec = get_sweep(store, sweep_id).spec

    # ---- Optuna ----

    def study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        path = sweep_dir(self.store, self.sweep_id) / "optuna.db"
        storage = f"sqlite:///{path}"
        # A fresh seed per resume: a restarted sampler must not replay the random start-up suggestions.
        try:
            started = len(optuna.load_study(study_name=self.sweep_id, storage=storage).trials)
        except KeyError:
            started = 0
        n = self.spec.n_trials
        sampler = optuna.samplers.TPESampler(seed=self.spec.seed + started,
                                             n_startup_trials=max(2, min(10, n // 3)))
        p = self.spec.pruning
        pruner = optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_steps) \
            if p.enabled else optuna.pruners.NopPruner()
        return optuna.create_study(storage=storage, study_name=self.sweep_id, sampler=sampler, pruner=pruner,
                                   direction=self.spec.objective.direction, load_if_exists=True)

    @staticmethod
    def suggest(trial, p: SearchParam):
        if p.kind == "categorical":
            return trial.suggest_categorical(p.field, p.choices)
        if p.kind == "int":
            return trial.suggest_int(p.field, int(p.low), int(p.high))
        return trial.suggest_float(p.field, p.low, p.high, log=p.kind == "log_float")

    # ---- the loop ----

    def stop_requested(self) -> bool:
        return get_sweep(self.store, self.sweep_id).stop_requested

    def run(self) -> int:
        store, sweep_id = self.store, self.sweep_id
        now = time.time()
        with store.connect() as db:
            claimed = db.execute("UPDATE sweeps SET status='running', pid=?, heartbeat_at=?, "
                                 "started_at=COALESCE(started_at, ?) WHERE id=? AND status IN ('queued','running')",
                                 (os.getpid(), now, now, sweep_id)).rowcount
        if not claimed:
            self.out(f"sweep {sweep_id} has already ended; resume it to go on", flush=True)
            return 1
        beat = Heartbeat(lambda: update_sweep(store, sweep_id, heartbeat_at=time.time())).start()
        try:
            study = self.study()
            self.finish_interrupted(study)
            error = None
            while not self.stop_requested() and len(counted(list_trials(store, sweep_id))) < self.spec.n_trials:
                trial = study.ask()
                params = {p.field: self.suggest(trial, p) for p in self.spec.space}
                self.execute(study, trial.number, params, trial)
                if error := self.failing(list_trials(store, sweep_id)):
                    break
            status = "failed" if error else "stopped" if self.stop_requested() else "completed"
            finish_sweep(store, sweep_id, status, error=error)
            best = best_trial(self.spec, list_trials(store, sweep_id))
            self.out(f"sweep {sweep_id} {status}" + (f"; best trial {best.label}: {self.spec.objective.metric} "
                                                     f"{best.value:.6g} {best.params}" if best else ""), flush=True)
            return 0
        except BaseException as e:  # noqa: BLE001 - every failure must reach the store
            traceback.print_exc()
            finish_sweep(store, sweep_id, "failed", error=f"{type(e).__name__}: {e}")
            return 1
        finally:
            beat.stop()

    @staticmethod
    def failing(trials: list[Trial]) -> str | None:
        """Why to give up: the last FAILURES_IN_A_ROW trials failed (a broken base fails every trial alike)."""
        ended = counted(trials)
        last = ended[-FAILURES_IN_A_ROW:]
        if len(last) == FAILURES_IN_A_ROW and all(t.status == "failed" for t in last):
            return (f"{FAILURES_IN_A_ROW} trials in a row failed, the last with: {last[-1].error}\nFix the base "
                    "config or the search space, then resume the sweep")
        return None

    def finish_interrupted(self, study) -> None:
        """Trials a previous driver asked for but did not finish: wait for (or start) their runs and tell."""
        from optuna.trial import TrialState

        rows = {t.number: t for t in list_trials(self.store, self.sweep_id)}
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            row = rows.get(frozen.number)
            if row and row.status in TRIAL_FINAL:  # recorded, but the driver died before telling Optuna
                self.tell(study, row, row.value)
            elif row and row.run_id:
                self.out(f"trial {row.label}: waiting again for run {row.run_id}", flush=True)
                self.tell(study, *self.watch(row, None))
            else:
                self.execute(study, frozen.number, dict(frozen.params), None)

    def execute(self, study, number: int, params: dict, trial) -> None:
        row = Trial(self.sweep_id, number, None, "running", params, created_at=time.time())
        shown = ", ".join(f"{k}={format_value(v)}" for k, v in params.items())
        try:
            config = trial_config(self.spec, params, number)
            run = self.submit(self.store, config)
        except ConfigError as e:
            row.status, row.error, row.finished_at = "failed", "; ".join(e.errors), time.time()
            _save_trial(self.store, row)
            self.out(f"trial {row.label} ({shown}): refused: {row.error}", flush=True)
            self.tell(study, row, None)
            return
        row.run_id = run.id
        _save_trial(self.store, row)
        self.out(f"trial {row.label} ({shown}): run {run.id}", flush=True)
        self.tell(study, *self.watch(row, trial))

    def watch(self, row: Trial, trial) -> tuple[Trial, float | None]:
        """Wait for the trial's run to end, reporting its metric to Optuna as it is logged (for pruning)."""
        spec, store = self.spec, self.store
        metric, prune = spec.objective.metric, trial is not None and spec.pruning.enabled
        values, reported, last_id, logged = [], set(), 0, set()
        pruned = stop_sent = False
        while True:
            run = store.get_run(row.run_id)  # the status first: once it is final, every metric row is in
            for m in store.metrics_since(row.run_id, last_id):
                last_id = m["id"]
                logged.add(m["name"])
                if m["name"] != metric:
                    continue
                values.append(m["value"])
                if prune and m["value"] is not None and math.isfinite(m["value"]) and m["step"] not in reported:
                    trial.report(m["value"], m["step"])
                    reported.add(m["step"])
            if not run.active:
                break
            if prune and not pruned and run.status == "running" and reported and trial.should_prune():
                pruned = True
                self.out(f"trial {row.label}: pruned at step {max(reported)} ({metric} worse than the median "
                         "of earlier trials there)", flush=True)
                self.stop(store, row.run_id)
            if not stop_sent and self.stop_requested():
                stop_sent = True
                self.stop(store, row.run_id)
            self.sleep(self.poll_s)
            self.dispatch(store)  # reconciles a dead worker and moves the run queue, even with no UI open
        row.finished_at = time.time()
        value = reduce_series(values, spec.objective)
        if run.status == "completed":
            if value is None:
                row.status = "failed"
                row.error = (f"the run never logged a finite '{metric}'; it logged: "
                             f"{', '.join(sorted(logged)) or 'nothing'}")
            else:
                row.status, row.value = "completed", value
        elif run.status == "stopped" and pruned:
            finite = [v for v in values if v is not None and math.isfinite(v)]
            row.status, row.value = "pruned", finite[-1] if finite else None
        elif run.status == "stopped":
            row.status, row.error = "stopped", "stopped before it finished; the sweep runs another trial instead"
        else:
            row.status, row.error = "failed", (run.error or "the run failed")[-2000:]
        _save_trial(store, row)
        outcome = f"{metric} {value:.6g}" if row.status == "completed" else row.status
        self.out(f"trial {row.label}: {outcome}" + (f" ({row.error.splitlines()[0]})" if row.error else ""),
                 flush=True)
        return row, row.value

    def tell(self, study, row: Trial, value: float | None) -> None:
        from optuna.trial import TrialState

        if row.status == "completed":
            study.tell(row.number, value, skip_if_finished=True)
        elif row.status == "pruned":
            study.tell(row.number, state=TrialState.PRUNED, skip_if_finished=True)
        else:
            study.tell(row.number, state=TrialState.FAIL, skip_if_finished=True)


def drive(sweep_id: str, workspace: str) -> int:
    store = RunStore(workspace)
    signal.signal(signal.SIGTERM, lambda *_: update_sweep(store, sweep_id, stop_requested=1))
    return SweepDriver(store, sweep_id).run()


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Workbench sweep driver (used internally).")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("drive")
    d.add_argument("sweep_id")
    d.add_argument("--workspace", required=True)
    a = p.parse_args(argv)
    return drive(a.sweep_id, a.workspace)


if __name__ == "__main__":
    sys.exit(main())
