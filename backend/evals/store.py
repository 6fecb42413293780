"""Evaluations' tables in the run store: one row per evaluation, one per scored answer, committed as they are
scored so a stopped or crashed evaluation keeps what it did and a restarted one carries on."""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field

from backend.evals.spec import EvalSpec
from backend.runs.store import RUN_PREFIX, RunStore

TABLES = """
CREATE TABLE IF NOT EXISTS evals (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,               -- queued | running | completed | failed | stopped | interrupted
    spec TEXT NOT NULL,                 -- json: EvalSpec
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    pid INTEGER,
    heartbeat_at REAL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,    -- answers generated and scored
    total INTEGER,
    message TEXT,
    error TEXT,
    info TEXT                           -- json: resolved columns, model labels, scorer errors
);
CREATE TABLE IF NOT EXISTS eval_rows (
    eval_id TEXT NOT NULL REFERENCES evals(id),
    model_idx INTEGER NOT NULL,
    row_idx INTEGER NOT NULL,
    sample_idx INTEGER NOT NULL,
    prompt TEXT NOT NULL,               -- json: a string or a list of messages
    reference TEXT,
    answer TEXT NOT NULL,
    scores TEXT NOT NULL,               -- json: {scorer: value or null}
    errors TEXT,                        -- json: {scorer: why this row has no score}
    time REAL NOT NULL,
    PRIMARY KEY (eval_id, model_idx, row_idx, sample_idx)
);
"""
ACTIVE = ("queued", "running")
FINAL = ("completed", "failed", "stopped", "interrupted")


@dataclass
class Evaluation:
    id: str
    name: str
    status: str
    spec: EvalSpec
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    pid: int | None = None
    heartbeat_at: float | None = None
    stop_requested: bool = False
    done: int = 0
    total: int | None = None
    message: str | None = None
    error: str | None = None
    info: dict = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


@dataclass
class Answer:
    model_idx: int
    row_idx: int
    sample_idx: int
    prompt: object
    reference: str | None
    answer: str
    scores: dict
    errors: dict


def new_eval_id() -> str:
    return "eval-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _from_row(row) -> Evaluation:
    d = dict(row)
    d["spec"] = EvalSpec.model_validate_json(d["spec"])
    d["stop_requested"] = bool(d["stop_requested"])
    d["info"] = json.loads(d["info"] or "{}")
    return Evaluation(**d)


def create_eval(store: RunStore, spec: EvalSpec, info: dict, total: int) -> Evaluation:
    eval_id = new_eval_id()
    name = spec.name or f"eval-{eval_id[-11:-5]}"
    with store.connect() as db:
        db.execute("INSERT INTO evals (id, name, status, spec, created_at, total, info, message) "
                   "VALUES (?,?,?,?,?,?,?,?)", (eval_id, name, "queued", spec.model_dump_json(), time.time(), total,
                                                json.dumps(info), "Queued"))
    return get_eval(store, eval_id)


def get_eval(store: RunStore, eval_id: str) -> Evaluation:
    row = store.job_row("evals", eval_id)
    if row is None:
        raise KeyError(f"no evaluation with id '{eval_id}'")
    return _from_row(row)


def list_evals(store: RunStore, statuses: tuple[str, ...] | None = None) -> list[Evaluation]:
    return [_from_row(r) for r in store.job_rows("evals", statuses)]


def update_eval(store: RunStore, eval_id: str, **values) -> None:
    if "info" in values:
        values["info"] = json.dumps(values["info"])
    sets = ", ".join(f"{k}=?" for k in values)
    with store.connect() as db:
        db.execute(f"UPDATE evals SET {sets} WHERE id=?", (*values.values(), eval_id))


def finish_eval(store: RunStore, eval_id: str, status: str, error: str | None = None, message: str | None = None) -> bool:
    """Final status once: False when the evaluation had already ended."""
    with store.connect() as db:
        cur = db.execute("UPDATE evals SET status=?, error=?, message=COALESCE(?, message), finished_at=?, pid=NULL "
                         "WHERE id=? AND status IN ('queued', 'running')",
                         (status, error, message, time.time(), eval_id))
    return cur.rowcount > 0


def save_answers(store: RunStore, eval_id: str, answers: list[Answer]) -> None:
    now = time.time()
    with store.transaction() as db:
        db.executemany("INSERT OR REPLACE INTO eval_rows VALUES (?,?,?,?,?,?,?,?,?,?)",
                       [(eval_id, a.model_idx, a.row_idx, a.sample_idx, json.dumps(a.prompt), a.reference, a.answer,
                         json.dumps(a.scores), json.dumps(a.errors) if a.errors else None, now) for a in answers])
        done = db.execute("SELECT COUNT(*) FROM eval_rows WHERE eval_id=?", (eval_id,)).fetchone()[0]
        db.execute("UPDATE evals SET done=? WHERE id=?", (done, eval_id))


def answers(store: RunStore, eval_id: str) -> list[Answer]:
    with store.connect() as db:
        rows = db.execute("SELECT * FROM eval_rows WHERE eval_id=? ORDER BY model_idx, row_idx, sample_idx",
                          (eval_id,)).fetchall()
    return [Answer(r["model_idx"], r["row_idx"], r["sample_idx"], json.loads(r["prompt"]), r["reference"],
                   r["answer"], json.loads(r["scores"]), json.loads(r["errors"] or "{}")) for r in rows]


def answered(store: RunStore, eval_id: str, model_idx: int) -> set[int]:
    """Rows of this model whose answers are all stored: a restarted evaluation skips them."""
    with store.connect() as db:
        return {r[0] for r in db.execute("SELECT row_idx FROM eval_rows WHERE eval_id=? AND model_idx=?",
                                         (eval_id, model_idx)).fetchall()}


def delete_eval(store: RunStore, eval_id: str) -> None:
    evaluation = get_eval(store, eval_id)
    if evaluation.active:
        raise ValueError(f"evaluation {eval_id} is {evaluation.status}: stop it first")
    with store.transaction() as db:
        db.execute("DELETE FROM eval_rows WHERE eval_id=?", (eval_id,))
        db.execute("DELETE FROM evals WHERE id=?", (eval_id,))


def using_run(db, run_id: str) -> str | None:
    for row in db.execute("SELECT name, spec FROM evals WHERE status IN ('queued', 'running')").fetchall():
        spec = json.loads(row["spec"])
        named = [m for m in spec.get("models", []) if m == RUN_PREFIX + run_id or m.startswith(f"{RUN_PREFIX}{run_id}@")]
        if named or spec.get("dataset") == f"heldout:{run_id}":
            return f"evaluation {row['name']} uses run {run_id}: wait for it or stop it, then delete"
    return None


def ended_stamp(store: RunStore) -> tuple:
    """Changes whenever an evaluation ends (one cheap query: a UI poll asks it)."""
    marks = ",".join("?" * len(FINAL))
    with store.connect() as db:
        return tuple(db.execute(f"SELECT COUNT(*), MAX(finished_at) FROM evals WHERE status IN ({marks})",
                                FINAL).fetchone())


def holding_slot(db) -> int:
    return db.execute("SELECT COUNT(*) FROM evals WHERE status='running'").fetchone()[0]
