"""What the Sweeps tab and `launch.py sweep` show: trial tables, a sweep's summary, the settings' importances."""
from __future__ import annotations

from backend.runs.store import RunStore
from backend.sweeps.spec import SweepSpec
from backend.sweeps.store import Sweep, Trial, best_trial, counted, list_trials, sweep_dir


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
