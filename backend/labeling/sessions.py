"""Sessions and their items: creating a session, claiming the next item, committing and undoing labels (each in
one IMMEDIATE transaction), and the bookkeeping the generator process writes answers through."""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

from backend.labeling.candidates import check_candidate, check_tool_play, describe_model
from backend.labeling.records import (MAX_NOTE, MODES, PAIR_CHOICES, SINGLE_CHOICES, STALE_ASSIGNMENT_S, clean_text,
                                      GenerationSettings, item_from_row, Label, label_from_row, LabelError,
                                      LabelItem, LabelSession, loads, new_session_id, session_from_row,
                                      SessionProgress)
from backend.runs.store import RunStore


def create_session(store: RunStore, prompts: list, *, model_a: str, model_b: str | None = None,
                   mode: str = "pair", name: str = "", prompt_source: str = "",
                   settings: GenerationSettings | None = None, check_models: bool = True) -> LabelSession:
    """A new session with one item per prompt (answers come from the generator)."""
    if mode not in MODES:
        raise LabelError(f"mode {mode!r}: use pair (compare two answers) or single (thumbs up / down)")
    model_a = (model_a or "").strip()
    model_b = (model_b or "").strip() or None
    if not model_a:
        raise LabelError("no model given")
    if mode == "single":
        model_b = None
    if not prompts:
        raise LabelError("no prompts")
    if check_models:
        for spec in filter(None, (model_a, model_b)):
            check_candidate(store, spec)
        check_tool_play(store, [model_a, model_b])
    settings = settings or GenerationSettings()
    session_id = new_session_id()
    now = time.time()
    name = (name or "").strip()[:80] or f"{prompt_source or 'prompts'} · {describe_model(store, model_a)}"[:80]
    with store.transaction() as db:
        db.execute("INSERT INTO label_sessions (id, name, mode, model_a, model_b, prompt_source, settings, "
                   "created_at, status, gen_message) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (session_id, name, mode, model_a, model_b, prompt_source or "", settings.to_json(), now,
                    "generating", "Waiting for the generator to start"))
        db.executemany("INSERT INTO label_items (session_id, idx, prompt, status) VALUES (?,?,?,'new')",
                       [(session_id, i, json.dumps(p, ensure_ascii=False)) for i, p in enumerate(prompts)])
    return get_session(store, session_id)


def get_session(store: RunStore, session_id: str) -> LabelSession:
    with store.connect() as db:
        row = db.execute("SELECT * FROM label_sessions WHERE id=?", (session_id,)).fetchone()
    if row is None:
        raise LabelError(f"no labeling session with id '{session_id}'")
    return session_from_row(row)


def list_sessions(store: RunStore) -> list[LabelSession]:
    with store.connect() as db:
        rows = db.execute("SELECT * FROM label_sessions ORDER BY created_at DESC").fetchall()
    return [session_from_row(r) for r in rows]


def update_session(store: RunStore, session_id: str, **fields) -> None:
    if fields:
        with store.connect() as db:
            db.execute(f"UPDATE label_sessions SET {', '.join(f'{k}=?' for k in fields)} WHERE id=?",
                       (*fields.values(), session_id))


def get_item(store: RunStore, item_id: int) -> LabelItem:
    with store.connect() as db:
        row = db.execute("SELECT * FROM label_items WHERE id=?", (int(item_id),)).fetchone()
    if row is None:
        raise LabelError(f"no labeling item {item_id}")
    return item_from_row(row)


def items(store: RunStore, session_id: str) -> list[LabelItem]:
    with store.connect() as db:
        rows = db.execute("SELECT * FROM label_items WHERE session_id=? ORDER BY idx", (session_id,)).fetchall()
    return [item_from_row(r) for r in rows]


def labels(store: RunStore, session_id: str, include_undone: bool = False) -> list[Label]:
    sql = "SELECT * FROM labels WHERE session_id=?" + ("" if include_undone else " AND undone=0")
    with store.connect() as db:
        rows = db.execute(sql + " ORDER BY id", (session_id,)).fetchall()
    return [label_from_row(r) for r in rows]


def progress(store: RunStore, session_id: str) -> SessionProgress:
    k = get_session(store, session_id).settings.labels_per_item
    with store.connect() as db:
        db.execute("BEGIN")  # one snapshot for every count
        try:
            per_item = db.execute(
                "SELECT i.status != 'new' AS generated, COALESCE(l.n, 0) AS n FROM label_items i LEFT JOIN "
                "(SELECT item_id, COUNT(*) AS n FROM labels WHERE session_id=? AND undone=0 GROUP BY item_id) l "
                "ON l.item_id = i.id WHERE i.session_id=?", (session_id, session_id)).fetchall()
            by_choice = dict(db.execute("SELECT choice, COUNT(*) FROM labels WHERE session_id=? AND undone=0 "
                                        "GROUP BY choice", (session_id,)).fetchall())
            annotators = dict(db.execute("SELECT annotator, COUNT(*) FROM labels WHERE session_id=? AND undone=0 "
                                         "GROUP BY annotator ORDER BY annotator", (session_id,)).fetchall())
            times = [r[0] for r in db.execute("SELECT generated_at FROM label_items WHERE session_id=? AND "
                                              "generated_at IS NOT NULL ORDER BY generated_at DESC LIMIT 11",
                                              (session_id,))]
        finally:
            db.execute("COMMIT")
    generated = sum(1 for r in per_item if r["generated"])
    given = sum(r["n"] for r in per_item)
    per_item_s = (times[0] - times[-1]) / (len(times) - 1) if len(times) > 1 else None
    return SessionProgress(total=len(per_item), generated=generated, labels=given,
                           labeled_items=sum(1 for r in per_item if r["n"] >= k),
                           remaining=sum(max(0, k - r["n"]) for r in per_item),
                           ready_ahead=sum(1 for r in per_item if r["generated"] and r["n"] < k),
                           by_choice=by_choice, annotators=annotators, seconds_per_item=per_item_s)


def _refresh_item(db, item_id: int, k: int, now: float) -> None:
    """Keep label_items.status / assigned_to in step with the labels and assignments (informational:
    claims read the assignments and labels themselves)."""
    n = db.execute("SELECT COUNT(*) FROM labels WHERE item_id=? AND undone=0", (item_id,)).fetchone()[0]
    open_ = db.execute("SELECT annotator, assigned_at FROM label_assignments WHERE item_id=? AND assigned_at>=? "
                       "ORDER BY assigned_at DESC LIMIT 1", (item_id, now - STALE_ASSIGNMENT_S)).fetchone()
    status = "labeled" if n >= k else "assigned" if open_ else "pending"
    db.execute("UPDATE label_items SET status=?, assigned_to=?, assigned_at=? WHERE id=? AND status != 'new'",
               (status, open_[0] if open_ else None, open_[1] if open_ else None, item_id))


def _k(db, session_id: str) -> tuple[int, str]:
    row = db.execute("SELECT settings, mode FROM label_sessions WHERE id=?", (session_id,)).fetchone()
    if row is None:
        raise LabelError(f"no labeling session with id '{session_id}'")
    return int(loads(row["settings"], {}).get("labels_per_item", 1)), row["mode"]


def claim_next(store: RunStore, session_id: str, annotator: str, client: str | None = None) -> LabelItem | None:
    """The item this client should label now: its open assignment, else a newly claimed ready item, else one the
    same annotator holds in another client (their older tab: taken over, so it is not held twice); None when
    nothing is ready for it (generation behind, every item labeled, or the rest held by others)."""
    annotator = (annotator or "").strip() or "anonymous"
    client = client or annotator
    now = time.time()
    with store.transaction() as db:
        k, _ = _k(db, session_id)
        own = db.execute(
            "SELECT a.item_id FROM label_assignments a WHERE a.session_id=? AND a.client=? "
            "ORDER BY a.assigned_at DESC", (session_id, client)).fetchall()
        for (item_id,) in own:
            done_by_me = db.execute("SELECT 1 FROM labels WHERE item_id=? AND client=? AND undone=0",
                                    (item_id, client)).fetchone()
            n = db.execute("SELECT COUNT(*) FROM labels WHERE item_id=? AND undone=0", (item_id,)).fetchone()[0]
            if done_by_me or n >= k:  # labeled meanwhile (a stale assignment someone else finished)
                db.execute("DELETE FROM label_assignments WHERE item_id=? AND client=?", (item_id, client))
                continue
            db.execute("UPDATE label_assignments SET assigned_at=?, annotator=? WHERE item_id=? AND client=?",
                       (now, annotator, item_id, client))
            _refresh_item(db, item_id, k, now)
            return item_from_row(db.execute("SELECT * FROM label_items WHERE id=?", (item_id,)).fetchone())
        row = db.execute(
            "SELECT i.* FROM label_items i WHERE i.session_id=? AND i.status != 'new' "
            "AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.item_id=i.id AND l.undone=0 "
            "                AND (l.client=? OR l.annotator=?)) "
            "AND (SELECT COUNT(*) FROM labels l WHERE l.item_id=i.id AND l.undone=0) "
            "  + (SELECT COUNT(*) FROM label_assignments a WHERE a.item_id=i.id AND a.assigned_at>=? "
            "     AND a.client != ?) < ? "
            "ORDER BY i.idx LIMIT 1",
            (session_id, client, annotator, now - STALE_ASSIGNMENT_S, client, k)).fetchone()
        if row is None and annotator != "anonymous":
            # nothing else left: an item this annotator holds in another tab or browser (an older tab left
            # open, a closed one not yet stale) is theirs to take here ("anonymous" names no one in particular)
            row = db.execute(
                "SELECT i.* FROM label_items i JOIN label_assignments a ON a.item_id=i.id "
                "WHERE i.session_id=? AND i.status != 'new' AND a.annotator=? AND a.client != ? "
                "AND a.assigned_at>=? "
                "AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.item_id=i.id AND l.undone=0 "
                "                AND (l.client=? OR l.annotator=?)) "
                "AND (SELECT COUNT(*) FROM labels l WHERE l.item_id=i.id AND l.undone=0) < ? "
                "ORDER BY i.idx LIMIT 1",
                (session_id, annotator, client, now - STALE_ASSIGNMENT_S, client, annotator, k)).fetchone()
            if row is not None:  # the other tab's claim moves here: the item is not held twice
                db.execute("DELETE FROM label_assignments WHERE item_id=? AND annotator=? AND client != ?",
                           (row["id"], annotator, client))
        if row is None:
            return None
        db.execute("INSERT OR REPLACE INTO label_assignments (item_id, session_id, client, annotator, assigned_at) "
                   "VALUES (?,?,?,?,?)", (row["id"], session_id, client, annotator, now))
        _refresh_item(db, row["id"], k, now)
        return item_from_row(db.execute("SELECT * FROM label_items WHERE id=?", (row["id"],)).fetchone())


@dataclass
class CommitResult:
    label: Label
    created: bool  # False: this client had already labeled the item (a repeated key press); nothing changed


def commit_label(store: RunStore, session_id: str, item_id: int, choice: str, annotator: str,
                 client: str | None = None, edited_text: str | None = None, note: str | None = None) -> CommitResult:
    """Record one label, committed before this returns. Idempotent per (item, client), and per (item, annotator)
    for a named labeler (an item their older tab still shows is not labeled twice)."""
    annotator = (annotator or "").strip() or "anonymous"
    client = client or annotator
    choice = (choice or "").strip().lower().replace(" ", "_")
    now = time.time()
    with store.transaction() as db:
        k, mode = _k(db, session_id)
        allowed = PAIR_CHOICES if mode == "pair" else SINGLE_CHOICES
        if choice not in allowed:
            raise LabelError(f"choice {choice!r}: a {mode} session takes {', '.join(allowed)}")
        item = db.execute("SELECT * FROM label_items WHERE id=? AND session_id=?",
                          (int(item_id), session_id)).fetchone()
        if item is None:
            raise LabelError(f"item {item_id} is not part of session {session_id}")
        if item["status"] == "new":
            raise LabelError(f"item {item_id} has no answers yet")
        existing = db.execute("SELECT * FROM labels WHERE item_id=? AND client=? AND undone=0",
                              (item["id"], client)).fetchone()
        if existing is None and annotator != "anonymous":  # the same labeler in another tab: one label each
            existing = db.execute("SELECT * FROM labels WHERE item_id=? AND annotator=? AND undone=0",
                                  (item["id"], annotator)).fetchone()
        if existing is not None:
            return CommitResult(label_from_row(existing), created=False)
        edited = clean_text(edited_text)
        if edited is not None and edited in {(item["answer_a"] or "").strip(), (item["answer_b"] or "").strip()} \
                and choice in ("a", "b", "up"):
            edited = None  # unchanged
        cur = db.execute("INSERT INTO labels (item_id, session_id, annotator, client, choice, edited_text, note, "
                         "created_at) VALUES (?,?,?,?,?,?,?,?)",
                         (item["id"], session_id, annotator, client, choice, edited,
                          clean_text(note, MAX_NOTE), now))
        db.execute("DELETE FROM label_assignments WHERE item_id=? AND client=?", (item["id"], client))
        _refresh_item(db, item["id"], k, now)
        row = db.execute("SELECT * FROM labels WHERE id=?", (cur.lastrowid,)).fetchone()
    return CommitResult(label_from_row(row), created=True)


def undo_last(store: RunStore, session_id: str, client: str) -> Label | None:
    """Mark this client's last label in the session undone and give its item back to the client (the next
    `claim_next` returns it). None when there is nothing to undo."""
    now = time.time()
    with store.transaction() as db:
        k, _ = _k(db, session_id)
        row = db.execute("SELECT * FROM labels WHERE session_id=? AND client=? AND undone=0 ORDER BY id DESC LIMIT 1",
                         (session_id, client)).fetchone()
        if row is None:
            return None
        db.execute("UPDATE labels SET undone=1 WHERE id=?", (row["id"],))
        db.execute("INSERT OR REPLACE INTO label_assignments (item_id, session_id, client, annotator, assigned_at) "
                   "VALUES (?,?,?,?,?)", (row["item_id"], session_id, client, row["annotator"], now))
        _refresh_item(db, row["item_id"], k, now)
    return label_from_row(row)


def client_label_count(store: RunStore, session_id: str, client: str) -> int:
    with store.connect() as db:
        return db.execute("SELECT COUNT(*) FROM labels WHERE session_id=? AND client=? AND undone=0",
                          (session_id, client)).fetchone()[0]


def next_to_generate(store: RunStore, session_id: str, limit: int = 1) -> list[LabelItem]:
    """The first items without answers, at most `limit`, as many as the generator may run ahead (lookahead)."""
    session = get_session(store, session_id)
    if session.settings.lookahead:
        limit = min(limit, session.settings.lookahead - progress(store, session_id).ready_ahead)
    if limit <= 0:
        return []
    with store.connect() as db:
        rows = db.execute("SELECT * FROM label_items WHERE session_id=? AND status='new' ORDER BY idx LIMIT ?",
                          (session_id, limit)).fetchall()
    return [item_from_row(r) for r in rows]


def has_ungenerated(store: RunStore, session_id: str) -> bool:
    with store.connect() as db:
        return db.execute("SELECT 1 FROM label_items WHERE session_id=? AND status='new' LIMIT 1",
                          (session_id,)).fetchone() is not None


def save_answers(store: RunStore, item_id: int, candidates: list[tuple[str, dict]], swapped: bool = False) -> None:
    """Store an item's generated answers: [(text, source)] in candidate order; swapped shows the second first."""
    shown = list(reversed(candidates)) if swapped and len(candidates) == 2 else list(candidates)
    (a, src_a), (b, src_b) = shown[0], (shown[1] if len(shown) > 1 else (None, None))
    with store.connect() as db:
        db.execute("UPDATE label_items SET answer_a=?, answer_b=?, source_a=?, source_b=?, swapped=?, "
                   "status='pending', generated_at=? WHERE id=? AND status='new'",
                   (a, b, json.dumps(src_a), json.dumps(src_b) if src_b is not None else None, int(bool(swapped)),
                    time.time(), item_id))


def swap_for(session_id: str, idx: int) -> bool:
    """Which side the second candidate is shown on: random per item, reproducible."""
    return random.Random(f"{session_id}:{idx}").random() < 0.5
