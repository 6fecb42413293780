"""When a run's worker counts as stalled, and when a stop it was asked for is forced: rules judged by its
supervisor (which lives beside it) on every beat.

Progress, not a heartbeat thread, is what counts: a worker stuck in a reward function still beats from its
heartbeat thread, so no step for STALL_STEPS × its own measured step time (at least STALL_FLOOR_S) stalls it; a
frozen process (SIGSTOP, swapped out) stops even its heartbeat, which is seen after WORKER_STALE_S (a step as
recent overrules it). Before the first step the beat is all there is: a loading worker that beats is alive.

A requested stop is not judged by liveness: it is a deadline on the request itself, forced stop_grace_s after it
whatever its steps or beat show: a stop always stops.
"""
from __future__ import annotations

import os

from backend.doctor.checks import THRESHOLDS

# the doctor's thresholds (documented with the others in docs/doctor.md)
STALL_STEPS = THRESHOLDS["stall_steps"]
STALL_FLOOR_S = THRESHOLDS["stall_floor_s"]
FIRST_STEP_FLOOR_S = THRESHOLDS["first_step_floor_s"]
# tests shorten it (read by each supervisor process as it starts)
WORKER_STALE_S = float(os.environ.get("WORKBENCH_WORKER_STALE_S", THRESHOLDS["worker_stale_s"]))


def step_seconds(run) -> float | None:
    """Seconds per completed step of this attempt, up to its last step."""
    done = run.step - run.resumed_step
    if not run.train_started_at or not run.step_at or done <= 0:
        return None
    return max(0.0, run.step_at - run.train_started_at) / done


def stall_reason(run, now: float) -> str | None:
    """Why a running run's worker is stalled now, with the numbers; None while it progresses."""
    if run.status != "running" or not run.worker_pid:
        return None
    # the beat speaks only where progress cannot: a step that recent proves the process is not frozen
    if run.worker_beat_at and now - run.worker_beat_at > WORKER_STALE_S and not (
            run.step_at and now - run.step_at <= WORKER_STALE_S):
        return (f"no heartbeat from the worker (pid {run.worker_pid}) for {now - run.worker_beat_at:.0f} s: the "
                "process is frozen (stopped, or starved of memory)")
    if not run.train_started_at:
        return None  # loading: its heartbeat alone says it lives
    per = step_seconds(run)
    bound = max(STALL_FLOOR_S, STALL_STEPS * per) if per is not None else FIRST_STEP_FLOOR_S
    since = now - (run.step_at or run.train_started_at)
    if since <= bound:
        return None
    pace = f"its steps take {per:.1f} s" if per is not None else "no step has finished yet"
    return f"no training step for {since:.0f} s after step {run.step} ({pace}; the bound is {bound:.0f} s)"


def overdue_stop(run, now: float) -> str | None:
    """Why a run asked to stop more than config.stop_grace_s ago is forced to now (the run's error, saying where
    it was), or None. Its supervisor judges it on every beat, as it judges stalls."""
    if run.status != "running" or not run.stop_requested_at:
        return None
    waited = now - run.stop_requested_at
    if waited <= run.config.stop_grace_s:
        return None
    at = f"after step {run.step}" if run.train_started_at else "while loading"
    return (f"it did not stop within {run.config.stop_grace_s} s of the stop request ({at}: stuck in a long step "
            "or in user code); its processes were killed, so this attempt's adapter was not saved; its "
            "checkpoints are kept (stop_grace_s)")


def forcing_in(run, now: float) -> float | None:
    """Seconds until a requested stop is forced (0 when due), or None when no stop waits."""
    if run.status != "running" or not run.stop_requested_at:
        return None
    return max(0.0, run.stop_requested_at + run.config.stop_grace_s - now)
