"""The queue of runs: submitting, starting, resuming, stopping and deleting them.

A run's processes: a detached supervisor (backend/runs/supervisor.py), which runs the worker and records how
it ended. The UI and the CLI only talk to the store; `dispatch` starts the oldest queued run when no run is
running, and is called on submit, by a supervisor when its run ends and, in the UI server, by one background
thread (`start_dispatcher`), so the queue moves without a UI and no browser's poll writes to the store. What
refuses a run before it is queued is backend/runs/preflight.py; its checkpoints, backend/runs/checkpoints.py.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from backend.config import RunConfig
from backend.core.procs import Heartbeat, is_dead, kill_groups, pid_alive, processes_of, spawn_detached
from backend.runs import gpus
from backend.runs.checkpoints import last_checkpoint
from backend.runs.logs import log_path, log_tail
from backend.runs.preflight import memory_lines, preflight
from backend.runs.store import Run, RunStore, other_dispatchers, slot_holders


MAX_CONCURRENT = int(os.environ.get("WORKBENCH_MAX_CONCURRENT", "1"))


# On a GPU machine the free GPUs bound the runs side by side; the count above binds them there only when it is
# set, or while an evaluation holds the slot.
_COUNT_SET = "WORKBENCH_MAX_CONCURRENT" in os.environ
log = logging.getLogger(__name__)


def submit_run(store: RunStore, config: RunConfig, check: bool = True) -> Run:
    if check:
        preflight(config, store.workspace, keep_data=True)
    run = store.create_run(pin_paths(config, store.workspace))
    (store.run_dir(run.id) / "config.yaml").write_text(_config_yaml(run.config))
    # before the supervisor appends the worker's output
    log_path(store, run.id).write_text("".join(f"{line}\n" for line in memory_lines(run.config, store.workspace)))
    dispatch(store)
    return store.get_run(run.id)


def pin_paths(config: RunConfig, workspace: Path) -> RunConfig:
    """The config with dataset files given relative to the current directory made absolute, as preflight found
    them: the worker runs from the repository root."""
    from backend.data import pinned_spec

    dataset, eval_dataset = pinned_spec(config.dataset, workspace), pinned_spec(config.eval.dataset, workspace)
    if (dataset, eval_dataset) == (config.dataset, config.eval.dataset):
        return config
    return config.model_copy(update={"dataset": dataset,
                                     "eval": config.eval.model_copy(update={"dataset": eval_dataset})})


def _config_yaml(config: RunConfig) -> str:
    from backend.config import to_yaml

    return to_yaml(config)


def reconcile(store: RunStore) -> list[str]:
    """Mark running runs whose processes are all gone (the supervisor too, so nothing recorded how the worker
    ended: a machine restart, every process killed) as interrupted, with the step they can resume from.
    Returns the ids it changed."""
    now, changed = time.time(), []
    for run in store.list_runs(("running",)):
        if is_dead(run.pid, run.heartbeat_at, run.started_at or run.created_at, now=now):
            why = "the worker never started" if run.pid is None else \
                f"every process of the run is gone (supervisor pid {run.pid})"
            checkpoint = last_checkpoint(store, run.id)
            why += f"; resume from step {checkpoint[1]}" if checkpoint else "; no checkpoint to resume from"
            tail = log_tail(store, run.id)
            if store.finish_run(run.id, "interrupted",
                                error=why + (f"\n--- last log lines ---\n{tail}" if tail else "")):
                changed.append(run.id)
    return changed


def resume_run(store: RunStore, run_id: str, wait_s: float = 10.0) -> Run:
    """Queue a failed, stopped or interrupted run again from its last checkpoint, as its next attempt; the
    worker resumes the trainer (optimizer, scheduler, RNG, data order; PPO also its KL coefficient; the cost
    multipliers λ) from there. Raises ValueError, with why, when it cannot."""
    reconcile(store)
    run = store.get_run(run_id)
    if run.active:
        raise ValueError(f"run {run_id} is {run.status}: only an ended run can be resumed")
    if run.status == "completed":
        raise ValueError(f"run {run_id} has completed; there is nothing to resume")
    # the last attempt's supervisor may still be ending it, or a worker outlived its supervisor: never two
    def alive() -> list[str]:  # a pid with a fresh heartbeat: an old pid reused by another process is not it
        r = store.get_run(run_id)
        return [f"its {what}, pid {pid}," for what, pid, beat in (("supervisor", r.pid, r.heartbeat_at),
                                                                 ("worker", r.worker_pid, r.worker_beat_at))
                if pid and not is_dead(pid, beat, r.finished_at)]

    deadline = time.time() + wait_s
    while alive() and time.time() < deadline:
        time.sleep(0.2)
    if running := alive():
        raise ValueError(f"run {run_id} is still shutting down ({running[0]} is running); try again in a few "
                         "seconds")
    checkpoint = last_checkpoint(store, run_id)
    if checkpoint is None:
        every = run.config.save_steps
        why = "its checkpoint interval was 0" if every == 0 and not run.config.save_minutes else \
            "it ended before its first checkpoint"
        raise ValueError(f"run {run_id} has no checkpoint to resume from; {why}")
    run = store.requeue_for_resume(run_id, checkpoint[1])
    dispatch(store)
    return store.get_run(run_id)


def _claim_next(store: RunStore) -> str | None:
    gpu_ids = gpus.machine().gpu_ids
    with store.transaction() as db:
        others = slot_holders(db)
        running = db.execute("SELECT COUNT(*) FROM runs WHERE status='running'").fetchone()[0] + others
        if running >= MAX_CONCURRENT and (not gpu_ids or others or _COUNT_SET):
            return None
        if gpu_ids:
            return _claim_gpus(store, db, gpu_ids)
        row = db.execute("SELECT id FROM runs WHERE status='queued' ORDER BY created_at LIMIT 1").fetchone()
        if row is None:
            return None
        _mark_started(db, row[0], ())
        return row[0]


def _mark_started(db, run_id: str, held: tuple[str, ...]) -> None:
    now = time.time()
    db.execute("UPDATE runs SET status='running', started_at=?, heartbeat_at=?, gpus=?, waiting='' WHERE id=?",
               (now, now, ",".join(held), run_id))


def _claim_gpus(store: RunStore, db, gpu_ids: tuple[str, ...]) -> str | None:
    """The oldest queued run that can start, with the lowest free GPUs it needs. Runs start in order: while the
    oldest waits for GPUs the younger ones wait behind it (a stream of small runs cannot starve a large one),
    each with why. A run that needs more GPUs than the machine has fails at once, so it holds up no queue."""
    holders = {g: row["name"] for row in db.execute("SELECT name, gpus FROM runs WHERE status='running'")
               for g in row["gpus"].split(",") if g}
    queued = []
    for row in db.execute("SELECT * FROM runs WHERE status='queued' ORDER BY created_at").fetchall():
        run = RunStore._row_to_run(row)
        if (need := gpus.gpus_needed(run.config)) > len(gpu_ids):
            db.execute("UPDATE runs SET status='failed', finished_at=?, error=? WHERE id=?",
                       (time.time(), f"the run {gpus.waiting_reason(need, gpu_ids, holders)}", run.id))
        else:
            queued.append(run)
    for i, run in enumerate(queued):
        need = gpus.gpus_needed(run.config)
        got = gpus.allocate(need, gpu_ids, set(holders))
        if got is not None:
            _mark_started(db, run.id, got)
            return run.id
        why = gpus.waiting_reason(need, gpu_ids, holders)
        for waiting, text in [(run, why), *((r, f"queued behind {run.name}, which is {why}") for r in queued[i + 1:])]:
            db.execute("UPDATE runs SET waiting=? WHERE id=? AND waiting<>?", (text, waiting.id, text))
        return None
    return None


def dispatch(store: RunStore) -> list[str]:
    """Start queued runs while there is room; returns the ids started."""
    reconcile(store)
    started = []
    while (run_id := _claim_next(store)) is not None:
        _spawn_supervisor(store, run_id)
        started.append(run_id)
    for other in other_dispatchers():  # queued evaluations take the slot when no run wants it
        other(store)
    return started


def start_dispatcher(store: RunStore, every_s: float = 2.0,
                     also: Sequence[Callable[[RunStore], object]] = ()) -> Heartbeat:
    """One thread per server process, however many browsers are open, that calls `dispatch(store)` (and each of
    `also`) now and every `every_s` seconds; `.stop()` it at shutdown."""
    def once() -> None:
        for step in (dispatch, *also, _keep_warm):
            try:
                step(store)
            except Exception:  # a locked store or a bad row must not end the thread, nor skip the other steps
                log.exception("dispatching queued runs failed")

    return Heartbeat(once, every_s, name="workbench-dispatcher").start()


def _keep_warm(store: RunStore) -> None:
    """A warm supervisor waiting for the next run (backend/runs/warm.py), started while no run trains."""
    from backend.runs import warm

    with store.connect() as db:
        busy = db.execute("SELECT 1 FROM runs WHERE status='running' LIMIT 1").fetchone() is not None
    warm.ensure_warm(store.workspace, busy=busy)


def _spawn_supervisor(store: RunStore, run_id: str) -> None:
    from backend.runs import warm

    if pid := warm.claim(store.workspace, run_id):  # a supervisor started earlier, its imports done
        store.update_run(run_id, pid=pid)
        return
    proc = spawn_detached(["-m", "backend.runs.supervisor", "supervise", run_id, "--workspace", str(store.workspace)],
                          log_path(store, run_id))
    store.update_run(run_id, pid=proc.pid)


def stop_run(store: RunStore, run_id: str, force: bool = False) -> str:
    """Ask a run to stop. Queued: stopped at once. Running: it saves its adapter and exits (force: killed)."""
    run = store.get_run(run_id)
    if run.status == "queued":
        store.finish_run(run_id, "stopped")
        return "stopped"
    if run.status != "running":
        return run.status
    store.request_stop(run_id)
    if not force:
        return "stopping"
    left = kill_groups(run_processes(store, run))
    why = "killed on request before it could save"
    if left:
        why += f"; processes {', '.join(map(str, left))} did not end"
    store.finish_run(run_id, "stopped", error=why)
    return "stopped"


def run_processes(store: RunStore, run: Run) -> list[int]:
    """Every process of a run on this machine: the supervisor (its group holds accelerate's launcher) and each
    rank of the worker, which torchrun starts in sessions of their own."""
    ranks = processes_of("backend.runs.worker", run.id, str(store.workspace))
    return [p for p in [run.pid, run.worker_pid, *ranks] if p and pid_alive(p)]


def delete_runs(store: RunStore, run_ids: list[str]) -> list[str]:
    """Delete ended runs (rows, then folders); a queued or running run is refused (DeleteRefused): stop it
    first. Runs whose worker died are marked failed first, so they can go. Returns folders left behind."""
    reconcile(store)
    return store.delete_runs(run_ids)
