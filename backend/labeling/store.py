"""Labeling's tables in the run store, and what they say about deleting a run: a session still generating with
a run's adapter keeps that run."""
from __future__ import annotations

from backend.runs.store import RUN_PREFIX, RunReferences, register_references

TABLES = """
-- a session's prompts become items, a background generator fills
-- their answers, labelers claim items one at a time and each label is its own committed row.
CREATE TABLE IF NOT EXISTS label_sessions (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    mode TEXT NOT NULL,                 -- pair (A/B: DPO, reward model) | single (thumbs: KTO)
    model_a TEXT NOT NULL,              -- a model spec, or run:<id> for a base model + that run's adapter
    model_b TEXT,                       -- pair mode, two models side by side; NULL: two samples of model_a
    prompt_source TEXT NOT NULL,
    settings TEXT NOT NULL,             -- json: temperatures, max_new_tokens, seed, labels_per_item, lookahead
    created_at REAL NOT NULL,
    status TEXT NOT NULL,               -- generating | ready | failed
    gen_pid INTEGER,
    gen_started_at REAL,
    gen_heartbeat_at REAL,
    gen_message TEXT,
    error TEXT
);
CREATE TABLE IF NOT EXISTS label_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES label_sessions(id),
    idx INTEGER NOT NULL,
    prompt TEXT NOT NULL,               -- json: a string or a list of messages
    answer_a TEXT,                      -- as shown on the left (A); NULL until generated
    answer_b TEXT,                      -- as shown on the right (B); NULL in single mode
    source_a TEXT,                      -- json: which model / adapter / temperature / seed made it
    source_b TEXT,
    swapped INTEGER NOT NULL DEFAULT 0, -- 1: the second candidate is shown as A
    status TEXT NOT NULL DEFAULT 'new', -- new (not generated) | pending | assigned | labeled
    assigned_to TEXT,
    assigned_at REAL,
    generated_at REAL,
    UNIQUE (session_id, idx)
);
CREATE INDEX IF NOT EXISTS label_items_status ON label_items(session_id, status, idx);
CREATE TABLE IF NOT EXISTS label_assignments (
    item_id INTEGER NOT NULL REFERENCES label_items(id),
    session_id TEXT NOT NULL,
    client TEXT NOT NULL,               -- one browser (or API caller) labeling as `annotator`
    annotator TEXT NOT NULL,
    assigned_at REAL NOT NULL,
    PRIMARY KEY (item_id, client)
);
CREATE INDEX IF NOT EXISTS label_assignments_client ON label_assignments(session_id, client, assigned_at);
CREATE TABLE IF NOT EXISTS labels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id INTEGER NOT NULL REFERENCES label_items(id),
    session_id TEXT NOT NULL,
    annotator TEXT NOT NULL,
    client TEXT NOT NULL,
    choice TEXT NOT NULL,               -- a | b | tie | both_bad (pair); up | down | unsafe (single)
    edited_text TEXT,                   -- the labeler's corrected better answer
    note TEXT,
    created_at REAL NOT NULL,
    undone INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS labels_session ON labels(session_id, id);
CREATE UNIQUE INDEX IF NOT EXISTS labels_one_per_client ON labels(item_id, client) WHERE undone=0;
"""


def _generating_with(db, run_id: str) -> str | None:
    session = db.execute("SELECT name FROM label_sessions WHERE status='generating' AND (model_a=? OR model_b=?)",
                         (RUN_PREFIX + run_id,) * 2).fetchone()
    if session is not None:
        return (f"run {run_id}'s adapter is generating answers for labeling session {session['name']}: wait for "
                "it, then delete")
    return None


register_references(RunReferences(tables=TABLES, refuse=_generating_with, forget=lambda db, run_ids: None))
