"""Several runs side by side: which settings differ between them, and where each one ended.

The settings come from the run-config schema's own list of fields (`field_paths`), so a new setting shows up
here without being named. The run name is left out: it already heads each column.
"""
from __future__ import annotations

import json

from backend.config import RunConfig, field_paths, get_path
from backend.runs.store import Run, RunStore

MAX_COMPARED = 8
# Shown first in the final-values table when a run logged them; the rest follow in name order.
KEY_METRICS = ("loss", "reward", "accuracy", "mean_token_accuracy", "rewards/accuracies", "rewards/margins",
               "kl", "eval_loss", "train_loss", "train_runtime")
_SKIPPED = {"name"}


def _shown(value) -> str:
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(", ", ": "), default=str)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def config_differences(configs: list[RunConfig]) -> list[tuple[str, list[str]]]:
    """(setting, value in each config) for every setting whose values are not all the same, in schema order.

    A section that only some modes read (dpo.*, rl.*, ...) is compared like any other setting: a difference
    there between, say, an SFT and a DPO run is real but idle, and the mode row above it says why."""
    data = [c.model_dump() for c in configs]
    rows = []
    for path, _ in field_paths():
        if path in _SKIPPED:
            continue
        values = [get_path(d, path) for d in data]
        if any(v != values[0] for v in values[1:]):
            rows.append((path, [_shown(v) for v in values]))
    return rows


def final_values(store: RunStore, runs: list[Run]) -> list[tuple[str, list[float | None]]]:
    """(metric, last logged value per run) for every metric any of the runs logged: key metrics first."""
    last = [store.last_metrics(r.id) for r in runs]
    names = set().union(*last) if last else set()
    ordered = [n for n in KEY_METRICS if n in names] + sorted(names - set(KEY_METRICS))
    return [(n, [m.get(n) for m in last]) for n in ordered]


def load_runs(store: RunStore, run_ids: list[str]) -> list[Run]:
    """The runs to compare, in the order given; KeyError names the first unknown id. Duplicates are dropped."""
    seen, runs = set(), []
    for rid in run_ids:
        if rid not in seen:
            seen.add(rid)
            runs.append(store.get_run(rid))
    if len(runs) > MAX_COMPARED:
        raise ValueError(f"{len(runs)} runs given; compare at most {MAX_COMPARED} at a time")
    return runs


def run_label(run: Run) -> str:
    return f"{run.name} · {run.id}"
