"""Sweeps and their trials in the run store's database: the `sweeps` and `sweep_trials` tables (what the UI and
the CLI read), created here and registered with the store, so it refuses to delete a run a trial still scores
and unlinks a deleted trial run while the trial keeps its settings and score."""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from backend.config import RunConfig
from backend.runs.store import RunReferences, RunStore, register_references
from backend.sweeps.spec import SweepSpec, spec_yaml, trial_config

SWEEP_STATUSES = ("queued", "running", "completed", "stopped", "failed")
ACTIVE = ("queued", "running")
TRIAL_FINAL = ("completed", "pruned", "failed", "stopped")

TABLES = """
-- a detached driver runs each trial as an ordinary run, linked here. New tables only (IF NOT EXISTS), so a
-- workspace made before sweeps existed opens unchanged.
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,                 -- json: the validated spec; its base is a full run config
    status TEXT NOT NULL,               -- queued | running | completed | stopped | failed
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    pid INTEGER,                        -- the driver process
    heartbeat_at REAL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS sweep_trials (
    sweep_id TEXT NOT NULL REFERENCES sweeps(id),
    number INTEGER NOT NULL,            -- Optuna's trial number (0-based; shown as #1, #2, ...)
    run_id TEXT REFERENCES runs(id),    -- NULL when the trial's settings were refused before a run started
    status TEXT NOT NULL,               -- running | completed | pruned | failed | stopped
    params TEXT NOT NULL,               -- json: setting path -> value
    value REAL,                         -- the objective (pruned: the last value reported)
    error TEXT,
    created_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (sweep_id, number)
);
CREATE INDEX IF NOT EXISTS sweep_trials_run ON sweep_trials(run_id);
"""


def _scoring(db, run_id: str) -> str | None:
    trial = db.execute("SELECT sweep_id, number FROM sweep_trials WHERE run_id=? AND status='running'",
                       (run_id,)).fetchone()
    if trial is not None:  # its driver still reads the run to score the trial
        return (f"run {run_id} is trial #{trial['number'] + 1} of sweep {trial['sweep_id']}, which has not "
                "recorded its result yet: wait for the sweep (or stop it), then delete")
    return None


def _unlink(db, run_ids: list[str]) -> None:
    db.execute(f"UPDATE sweep_trials SET run_id=NULL WHERE run_id IN ({','.join('?' * len(run_ids))})", run_ids)


register_references(RunReferences(tables=TABLES, refuse=_scoring, forget=_unlink))


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
    row = store.job_row("sweeps", sweep_id)
    if row is None:
        raise KeyError(f"no sweep with id '{sweep_id}'")
    return _row_to_sweep(row)


def list_sweeps(store: RunStore, statuses: tuple[str, ...] | None = None) -> list[Sweep]:
    return [_row_to_sweep(r) for r in store.job_rows("sweeps", statuses)]


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


def save_trial(store: RunStore, t: Trial) -> None:
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


def best_config(store: RunStore, sweep_id: str) -> RunConfig | None:
    """The base config with the best trial's settings, named `<sweep> best`; None before any trial completes."""
    sweep = get_sweep(store, sweep_id)
    best = best_trial(sweep.spec, list_trials(store, sweep_id))
    return trial_config(sweep.spec, best.params, name=f"{sweep.name} best") if best else None
