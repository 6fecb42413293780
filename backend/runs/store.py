"""The run store: the workspace's database (backend.core.database) with its runs, metrics and samples tables,
and the tables other packages register through RunReferences.

Every write is its own short transaction, so what was committed survives a crash of any process.
Readers poll incrementally: metrics carry an autoincrement id and `metrics_since` returns only newer rows.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from backend.config import ConfigError, RunConfig, build_config
from backend.core.database import WorkspaceDatabase

STATUSES = ("queued", "running", "completed", "failed", "stopped", "interrupted")
ACTIVE = ("queued", "running")
ENDED = ("completed", "failed", "stopped", "interrupted")
# interrupted: every process of the run vanished at once (a machine restart), not a failure of the training
RESUMABLE = ("failed", "stopped", "interrupted")
_SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a run folder's name: never a path


class DeleteRefused(ValueError):
    """Runs that cannot be deleted, each with why; nothing was deleted."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    mode TEXT NOT NULL,
    status TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    train_started_at REAL,
    finished_at REAL,
    pid INTEGER,
    worker_pid INTEGER,
    heartbeat_at REAL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    step INTEGER NOT NULL DEFAULT 0,
    total_steps INTEGER,
    error TEXT,
    adapter_path TEXT,
    note TEXT NOT NULL DEFAULT '',      -- the user's free text (added by _migrate to older workspaces)
    attempt INTEGER NOT NULL DEFAULT 1, -- 1, then one more per resume (added by _migrate too)
    resumed_step INTEGER NOT NULL DEFAULT 0,  -- the checkpoint's step this attempt started from (pace, ETA)
    gpus TEXT NOT NULL DEFAULT '',      -- the GPUs the run holds (held while running), comma-separated
    waiting TEXT NOT NULL DEFAULT '',   -- why a queued run has not started (GPUs busy)
    step_at REAL,                       -- when `step` was last completed (the pace leaves out a step under way)
    exit_code INTEGER,                  -- the worker's, when it recorded its own failure (2: a resume repeats it)
    worker_beat_at REAL,                -- the worker's own heartbeat (the supervisor's is heartbeat_at)
    stalled TEXT NOT NULL DEFAULT '',   -- why the supervisor judges the worker stalled now ('' while it progresses)
    diagnoses TEXT NOT NULL DEFAULT '', -- the run doctor's latest findings (JSON list, backend/doctor)
    verdict TEXT NOT NULL DEFAULT '',   -- what an ended run's training amounted to ('no_signal': it learned nothing)
    stop_requested_at REAL              -- when a stop was first asked for (forced after config.stop_grace_s)
);
CREATE TABLE IF NOT EXISTS run_outcomes (  -- runs ended per status, ever: kept when runs are deleted (Prometheus)
    status TEXT PRIMARY KEY,
    count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    value REAL,
    time REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_run ON metrics(run_id, id);
CREATE INDEX IF NOT EXISTS metrics_run_name ON metrics(run_id, name, id);  -- last_metrics: seeks, not scans
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    data TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run_id, id);
"""


@dataclass(frozen=True)
class RunReferences:
    """Another package's tables that point at runs (backend.sweeps' trials), kept out of this module: the store
    makes the tables, asks before deleting a run and lets the package unlink the runs it deletes."""
    tables: str  # CREATE ... IF NOT EXISTS statements, run when a store opens (an older workspace gains them)
    refuse: Callable[[sqlite3.Connection, str], str | None]  # why this run cannot be deleted now, or None
    forget: Callable[[sqlite3.Connection, list[str]], None]  # within the transaction that deletes these runs
    # jobs of the package that share the training slot (evaluations): how many run now; counted by the queue
    holding_slot: Callable[[sqlite3.Connection], int] | None = None
    # starts the package's queued jobs when the slot frees; called after the runs' own dispatch
    dispatch: Callable[[RunStore], object] | None = None


_REFERENCES: list[RunReferences] = []
# Registered by the packages above (labeling, sweeps, evaluations) when imported; this module never names them.
# A process's entry point imports them all (backend.workspace.load_providers), which then says so here: a store,
# a deletion or a dispatch in a process that did not would miss their tables, checks and queues.
_loaded = False
NOT_LOADED = ("the workspace's packages were not loaded in this process: call backend.workspace.load_providers() "
              "at its start")


def references_loaded() -> None:
    """Called once every package that registers references has been imported."""
    global _loaded
    _loaded = True


def registered_references() -> list[RunReferences]:
    if not _loaded:
        raise RuntimeError(NOT_LOADED)
    return list(_REFERENCES)


def slot_holders(db: sqlite3.Connection) -> int:
    """Jobs other than runs that hold the training slot now (evaluations)."""
    return sum(refs.holding_slot(db) for refs in registered_references() if refs.holding_slot is not None)


def other_dispatchers() -> list[Callable[[RunStore], object]]:
    return [refs.dispatch for refs in registered_references() if refs.dispatch is not None]


def register_references(refs: RunReferences) -> None:
    """Called by a package when it is imported; its deletion checks hold from then on, in every store."""
    if refs not in _REFERENCES:
        _REFERENCES.append(refs)


@dataclass
class Run:
    id: str
    name: str
    mode: str
    status: str
    config: RunConfig
    created_at: float
    started_at: float | None = None
    train_started_at: float | None = None
    finished_at: float | None = None
    pid: int | None = None
    worker_pid: int | None = None
    heartbeat_at: float | None = None
    stop_requested: bool = False
    step: int = 0
    total_steps: int | None = None
    error: str | None = None
    adapter_path: str | None = None
    note: str = ""
    attempt: int = 1
    resumed_step: int = 0
    gpus: str = ""
    waiting: str = ""
    step_at: float | None = None
    exit_code: int | None = None
    worker_beat_at: float | None = None
    stalled: str = ""
    diagnoses: str = ""
    verdict: str = ""
    stop_requested_at: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        return tuple(g for g in self.gpus.split(",") if g)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("config", "extra")}
        d["config"] = self.config.model_dump()
        return d


RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")  # what new_run_id makes: date-time-4 hex digits
RUN_PREFIX = "run:"  # a run named as a model: run:<id>


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def is_run_id(text: str) -> bool:
    return bool(RUN_ID.match(text or ""))


def dataset_label(spec: str) -> str:
    """A dataset's short name for a run's default name: a built-in set without its `demo-`, a file's or folder's
    stem, a Hub id's last part, `mix` for several."""
    spec = (spec or "").strip()
    if "," in spec:
        return "mix"
    if spec.startswith("labels:"):  # a labeling session's export
        return "labels"
    last = spec.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    last = re.sub(r"\.(jsonl|json|csv|parquet|tsv|txt)$", "", last, flags=re.I).removeprefix("demo-")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", last).strip("-.")[:24] or "data"


@functools.lru_cache(maxsize=1024)
def _stored_config(text: str) -> RunConfig:
    """A run's config as stored (validated when it was written): validated once per process, not at every read
    of the run list (a Runs-tab poll reads every run). Shared between reads: a run's config is never changed in
    place (model_copy(update=...) makes a new one)."""
    data = json.loads(text)
    try:
        return build_config(data)
    except ConfigError:  # stored by another version of the schema: show it as it was
        return RunConfig.model_construct(**data)


class RunStore(WorkspaceDatabase):
    """The workspace's database (opened as WorkspaceDatabase says) with its runs, and the registered tables."""
    SCHEMA = _SCHEMA
    NAME = "the run store"
    NOTHING_YET = "no runs in {workspace} yet (`launch.py train` starts one)"
    READABLE = "SELECT id FROM runs LIMIT 1"
    READ_ONLY_USE = "its runs can be listed and shown, not started, changed or deleted"

    def _migrate(self, db: sqlite3.Connection) -> None:
        _migrate(db)

    def _registered_tables(self) -> list[str]:
        return [refs.tables for refs in registered_references()]

    def run_dir(self, run_id: str) -> Path:
        return self.workspace / "runs" / run_id

    # ---- other packages' job tables (sweeps, evaluations): an id, a status and created_at ----

    def job_row(self, table: str, job_id: str) -> sqlite3.Row | None:
        with self._connect() as db:
            return db.execute(f"SELECT * FROM {table} WHERE id=?", (job_id,)).fetchone()

    def job_rows(self, table: str, statuses: tuple[str, ...] | None = None) -> list[sqlite3.Row]:
        """Newest first; only those in `statuses` when given."""
        sql, args = f"SELECT * FROM {table}", ()
        if statuses:
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            args = tuple(statuses)
        with self._connect() as db:
            return db.execute(sql + " ORDER BY created_at DESC", args).fetchall()

    # ---- runs ----

    def create_run(self, config: RunConfig) -> Run:
        now = time.time()
        for attempt in range(20):  # ids made in the same second share 65536 suffixes: draw again on a clash
            run_id = new_run_id()
            name = config.name or f"{config.mode}-{dataset_label(config.dataset)}-{run_id[9:15]}"
            try:
                with self._connect() as db:
                    db.execute("INSERT INTO runs (id, name, mode, status, config, created_at) VALUES (?,?,?,?,?,?)",
                               (run_id, name, config.mode, "queued", config.model_dump_json(), now))
                break
            except sqlite3.IntegrityError:
                if attempt == 19:
                    raise
        self.run_dir(run_id).mkdir(parents=True, exist_ok=True)
        return self.get_run(run_id)

    @staticmethod
    def _row_to_run(row: sqlite3.Row) -> Run:
        d = dict(row)
        d["config"] = _stored_config(d["config"])
        d["stop_requested"] = bool(d["stop_requested"])
        d["note"] = d.get("note") or ""
        d["attempt"] = d.get("attempt") or 1
        d["resumed_step"] = d.get("resumed_step") or 0
        for text in ("gpus", "waiting", "stalled", "diagnoses", "verdict"):
            d[text] = d.get(text) or ""
        return Run(**d)

    def get_run(self, run_id: str) -> Run:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run with id '{run_id}'")
        return self._row_to_run(row)

    def list_runs(self, statuses: tuple[str, ...] | None = None) -> list[Run]:
        sql, args = "SELECT * FROM runs", ()
        if statuses:
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            args = statuses
        with self._connect() as db:
            rows = db.execute(sql + " ORDER BY created_at DESC", args).fetchall()
        return [self._row_to_run(r) for r in rows]

    def update_run(self, run_id: str, **fields) -> None:
        if not fields:
            return
        cols = ", ".join(f"{k}=?" for k in fields)
        with self._connect() as db:
            db.execute(f"UPDATE runs SET {cols} WHERE id=?", (*fields.values(), run_id))

    def finish_run(self, run_id: str, status: str, error: str | None = None, only_if_active: bool = True,
                   exit_code: int | None = None) -> bool:
        """Move a run to a final status; returns False when it had already ended (first writer wins)."""
        assert status in ENDED
        sql = "UPDATE runs SET status=?, finished_at=?, error=COALESCE(?, error), exit_code=? WHERE id=?"
        if only_if_active:
            sql += " AND status IN ('queued','running')"

        def write() -> bool:
            with self.transaction() as db:
                before = db.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
                if not db.execute(sql, (status, time.time(), error, exit_code, run_id)).rowcount:
                    return False
                if before is not None and before[0] in ACTIVE:  # an ended run corrected: counted once
                    db.execute("INSERT INTO run_outcomes (status, count) VALUES (?, 1) "
                               "ON CONFLICT(status) DO UPDATE SET count=count+1", (status,))
                return True

        return self.with_reserve(write)

    def requeue_for_resume(self, run_id: str, from_step: int, in_place: bool = False) -> Run:
        """Queue an ended run again as its next attempt, from a checkpoint at `from_step`: the dead attempt's
        metrics and samples after that step are deleted (the resumed attempt logs those steps again), so
        every step stays logged once. Raises ValueError when the run is active. in_place: running again at
        once under the same supervisor, which keeps its slot and GPUs (auto_resume)."""
        with self.transaction() as db:
            row = db.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"no run with id '{run_id}'")
            if row["status"] not in RESUMABLE:
                raise ValueError(f"run {run_id} is {row['status']}; only a failed, stopped or interrupted run "
                                 "can be resumed")
            for table in ("metrics", "samples"):
                db.execute(f"DELETE FROM {table} WHERE run_id=? AND step>?", (run_id, from_step))
            slot = "status='running'" if in_place else "status='queued', started_at=NULL, pid=NULL, gpus=''"
            db.execute(f"UPDATE runs SET {slot}, heartbeat_at=?, attempt=attempt+1, step=?, resumed_step=?, "
                       "error=NULL, finished_at=NULL, train_started_at=NULL, worker_pid=NULL, exit_code=NULL, "
                       "stop_requested=0, stop_requested_at=NULL, adapter_path=NULL, waiting='', step_at=NULL, "
                       "worker_beat_at=NULL, stalled='', diagnoses='', verdict='' WHERE id=?",
                       (time.time() if in_place else None, from_step, from_step, run_id))
        return self.get_run(run_id)

    def set_note(self, run_id: str, note: str) -> str:
        """The user's free-text note on a run (\"\" clears it); returns it as stored."""
        note = (note or "").strip()
        with self._connect() as db:
            if db.execute("UPDATE runs SET note=? WHERE id=?", (note, run_id)).rowcount == 0:
                raise KeyError(f"no run with id '{run_id}'")
        return note

    def deletion_problems(self, run_ids: list[str], db=None) -> list[str]:
        """Why each of these runs cannot be deleted now ([] when all can)."""
        if db is None:
            self._make_registered_tables()
            with self._connect() as conn:
                return self.deletion_problems(run_ids, conn)
        problems = []
        active = db.execute("SELECT id, name, status, config FROM runs WHERE status IN ('queued','running')").fetchall()
        for run_id in dict.fromkeys(run_ids):
            row = db.execute("SELECT name, status FROM runs WHERE id=?", (run_id,)).fetchone()
            if row is None:
                problems.append(f"no run with id '{run_id}'")
                continue
            if row["status"] in ACTIVE:
                problems.append(f"run {run_id} ({row['name']}) is {row['status']}: stop it first, then delete it")
                continue
            if not _SAFE_RUN_ID.match(run_id):
                problems.append(f"run {run_id}: its id does not name a folder inside {self.workspace / 'runs'}; "
                                "not deleted")
                continue
            if refused := next((why for refs in registered_references() if (why := refs.refuse(db, run_id))), None):
                problems.append(refused)
                continue
            users = [f"{r['name']} ({r['status']})" for r in active if _references(r["config"], run_id)]
            if users:  # e.g. its reward model or PPO value model: the active run loads it when it starts
                problems.append(f"run {run_id} is used by the {users[0]} run (as its model, a reward model or "
                                "its value model): stop that run first")
                continue
        return problems

    def delete_runs(self, run_ids: list[str]) -> list[str]:
        """Delete ended runs: their rows (one transaction, all or none) and then their folders under
        workspace/runs. Registered references are unlinked (a sweep keeps a deleted trial's settings and
        score, without the run). Exports (under workspace/exports) are left alone. Raises DeleteRefused,
        deleting nothing, when any run cannot go. Returns the folders that could not be removed (with why)."""
        run_ids = list(dict.fromkeys(run_ids))
        self._make_registered_tables()
        with self.transaction() as db:
            if problems := self.deletion_problems(run_ids, db):
                raise DeleteRefused(problems)
            marks = ",".join("?" * len(run_ids))
            for table in ("metrics", "samples"):
                db.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", run_ids)
            for refs in registered_references():
                refs.forget(db, run_ids)
            db.execute(f"DELETE FROM runs WHERE id IN ({marks})", run_ids)
        left = []
        for run_id in run_ids:
            try:
                self._remove_run_dir(run_id)
            except OSError as e:
                left.append(f"{self.run_dir(run_id)}: {e.strerror or e}")
        return left

    def _remove_run_dir(self, run_id: str) -> None:
        """Remove workspace/runs/<id>, never anything outside it: a link there is unlinked, not followed."""
        root = (self.workspace / "runs").resolve()
        folder = root / run_id
        if not _SAFE_RUN_ID.match(run_id) or folder.parent != root:
            raise OSError(f"{folder} is not a run folder inside {root}")
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.is_dir():
            shutil.rmtree(folder)

    def heartbeat(self, run_id: str) -> None:
        self.update_run(run_id, heartbeat_at=time.time())

    def worker_heartbeat(self, run_id: str) -> None:
        self.update_run(run_id, worker_beat_at=time.time())

    def outcome_counts(self) -> dict[str, int]:
        """Runs that ever ended, per status (deleting runs does not lower these)."""
        with self._connect() as db:
            return dict(db.execute("SELECT status, count FROM run_outcomes").fetchall())

    def request_stop(self, run_id: str) -> None:
        """Ask the run to stop; the first request's time stays (the stop is forced stop_grace_s after it)."""
        with self._connect() as db:
            db.execute("UPDATE runs SET stop_requested=1, stop_requested_at=COALESCE(stop_requested_at, ?) "
                       "WHERE id=?", (time.time(), run_id))

    def stop_requested(self, run_id: str) -> bool:
        with self._connect() as db:
            row = db.execute("SELECT stop_requested FROM runs WHERE id=?", (run_id,)).fetchone()
        return bool(row and row[0])

    # ---- metrics ----

    def add_metrics(self, run_id: str, step: int, values: dict) -> int:
        now = time.time()
        rows = [(run_id, int(step), str(k), _finite(v), now) for k, v in values.items() if _numeric(v)]
        if rows:
            with self._connect() as db:
                db.executemany("INSERT INTO metrics (run_id, step, name, value, time) VALUES (?,?,?,?,?)", rows)
        return len(rows)

    def metrics_since(self, run_id: str, after_id: int = 0) -> list[dict]:
        """Rows newer than `after_id`, oldest first: {id, step, name, value, time}."""
        with self._connect() as db:
            rows = db.execute("SELECT id, step, name, value, time FROM metrics WHERE run_id=? AND id>? ORDER BY id",
                              (run_id, after_id)).fetchall()
        return [dict(r) for r in rows]

    def last_metrics(self, run_id: str) -> dict[str, float | None]:
        """The newest value of each metric, by name: a few index seeks per name however long the run, so every
        Prometheus scrape can ask it of every live run."""
        with self._connect() as db:
            rows = db.execute(
                "WITH RECURSIVE names(name) AS (SELECT MIN(name) FROM metrics WHERE run_id=:run UNION ALL "
                "SELECT (SELECT MIN(name) FROM metrics WHERE run_id=:run AND name>names.name) FROM names "
                "WHERE names.name IS NOT NULL) "
                "SELECT name, (SELECT value FROM metrics WHERE run_id=:run AND name=names.name ORDER BY id DESC "
                "LIMIT 1) AS value FROM names WHERE name IS NOT NULL ORDER BY name", {"run": run_id}).fetchall()
        return {r["name"]: r["value"] for r in rows}

    # ---- samples (prompts / completions / reward breakdowns during RL) ----

    def add_samples(self, run_id: str, step: int, items: list[dict]) -> None:
        now = time.time()
        with self._connect() as db:
            db.executemany("INSERT INTO samples (run_id, step, data, time) VALUES (?,?,?,?)",
                           [(run_id, int(step), json.dumps(it, allow_nan=False, default=str), now) for it in items])

    def samples_since(self, run_id: str, after_id: int = 0) -> list[dict]:
        with self._connect() as db:
            rows = db.execute("SELECT id, step, data, time FROM samples WHERE run_id=? AND id>? ORDER BY id",
                              (run_id, after_id)).fetchall()
        return [{"id": r["id"], "step": r["step"], "time": r["time"], **json.loads(r["data"])} for r in rows]


def _migrate(db: sqlite3.Connection) -> None:
    """Columns added after a workspace was made: added when missing, so older workspaces open as they are."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    added = {"note": "TEXT NOT NULL DEFAULT ''", "attempt": "INTEGER NOT NULL DEFAULT 1",
             "resumed_step": "INTEGER NOT NULL DEFAULT 0", "gpus": "TEXT NOT NULL DEFAULT ''",
             "waiting": "TEXT NOT NULL DEFAULT ''", "step_at": "REAL", "exit_code": "INTEGER",
             "worker_beat_at": "REAL", "stalled": "TEXT NOT NULL DEFAULT ''", "diagnoses": "TEXT NOT NULL DEFAULT ''",
             "verdict": "TEXT NOT NULL DEFAULT ''", "stop_requested_at": "REAL"}
    for name, kind in added.items():
        if name in columns:
            continue
        try:
            db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
        except sqlite3.OperationalError as e:  # another process added it first
            if "duplicate column" not in str(e):
                raise


def _references(config_json: str, run_id: str) -> bool:
    try:
        return run_id in build_config(json.loads(config_json)).referenced_runs()
    except ConfigError:  # stored by another version of the schema: the id anywhere in it counts
        return run_id in config_json


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) or hasattr(v, "item")


def _finite(v) -> float | None:
    v = float(v.item() if hasattr(v, "item") else v)
    return v if math.isfinite(v) else None


def default_workspace() -> Path:
    return Path(os.environ.get("WORKBENCH_WORKSPACE") or "workspace").resolve()  # set but empty: not the cwd
