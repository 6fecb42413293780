"""Optuna (Bayesian) hyperparameter sweeps over the run-config schema.

A sweep is a base run config, a search space of schema fields and an objective: a metric the trainer logs,
reduced to one number per run. A detached driver (`python -m backend.sweeps drive ID`, its own session like a
run's supervisor) asks Optuna's TPE sampler for each trial's settings, submits the trial as an ordinary run
(`jobs.submit_run`, so it trains, queues and plots like any other), waits for it, reports the metric as it is
logged (so a median pruner can stop a poor trial early) and tells Optuna the result.

Two records, each with one job: the Optuna study (an SQLite file of its own under workspace/sweeps/ID) is the
sampler's memory, so a restarted driver resumes where the last one stopped; the `sweeps` and `sweep_trials`
tables in the store's database are what the UI and the CLI read (status, each trial's run, settings and
objective).

Modules: `spec` (the spec and its checks), `store` (the tables), `views` (tables and summaries for people),
`driver` (the detached driver and starting, stopping, resuming it). Importing the package registers the tables
with the run store.
"""
from backend.sweeps.driver import (FAILURES_IN_A_ROW, POLL_S, SweepDriver, drive, main, reconcile_sweeps,
                                   resume_sweep, start_sweep, stop_sweep)
from backend.sweeps.spec import (COMMON_METRICS, KINDS, NOT_SEARCHED, REDUCTIONS, Objective, Pruning, SearchParam,
                                 SweepSpec, build_sweep_spec, default_direction, load_sweep_spec, objective_metrics,
                                 parse_objective, parse_param, reduce_series, resolve_base, spec_from_cli,
                                 spec_from_data, spec_yaml, trial_config, trial_name)
from backend.sweeps.store import (ACTIVE, SWEEP_STATUSES, TABLES, TRIAL_FINAL, Sweep, Trial, best_config, best_trial,
                                  counted, create_sweep, driver_log, finish_sweep, get_sweep, list_sweeps, list_trials,
                                  save_trial, sweep_dir, sweep_of_run, update_sweep)
from backend.sweeps.views import format_value, param_importances, sweep_summary, trial_columns, trial_rows

__all__ = [
    "FAILURES_IN_A_ROW", "POLL_S", "SweepDriver", "drive", "main", "reconcile_sweeps", "resume_sweep", "start_sweep",
    "stop_sweep",
    "COMMON_METRICS", "KINDS", "NOT_SEARCHED", "REDUCTIONS", "Objective", "Pruning", "SearchParam", "SweepSpec",
    "build_sweep_spec", "default_direction", "load_sweep_spec", "objective_metrics", "parse_objective",
    "parse_param", "reduce_series", "resolve_base", "spec_from_cli", "spec_from_data", "spec_yaml", "trial_config",
    "trial_name",
    "ACTIVE", "SWEEP_STATUSES", "TABLES", "TRIAL_FINAL", "Sweep", "Trial", "best_config", "best_trial", "counted",
    "create_sweep", "driver_log", "finish_sweep", "get_sweep", "list_sweeps", "list_trials", "save_trial",
    "sweep_dir", "sweep_of_run", "update_sweep",
    "format_value", "param_importances", "sweep_summary", "trial_columns", "trial_rows",
]
