"""Runs: the store of runs, their metrics and samples (`store`); submitting, queueing, stopping and the detached
supervisor that launches the worker (`jobs`); the training process itself (`worker`); how it is launched on one
or many processes and machines (`distributed`); and comparing runs (`compare`).

A run's one path: UI / CLI → run config → `jobs.submit_run` → store (queued) → `jobs.dispatch` → supervisor
→ `accelerate launch -m backend.runs.worker` → the mode's trainer → metrics and samples in the store → UI.
"""
