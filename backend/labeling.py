"""Preference labeling: sessions of prompts with generated answers, labels committed one by one, and exports
that the DPO, reward-model and KTO trainers load as they are.

A session holds its prompts as items. A background generator (backend/label_generator.py) fills each item's
answers ahead of the labelers; a labeler claims the next ready item, labels it, and the label is committed
in that same call. Every read-then-write runs in one IMMEDIATE transaction, so labelers in several browsers
(or processes) never claim the same item and never write a label twice:

- a *client* is one browser (or API caller) and labels as an *annotator* name;
- `claim_next` gives a client its own open assignment first (so a reload resumes on the same item), else
  the first ready item that still needs labels (`labels_per_item`, default 1) and has none from this
  client or annotator, counting other clients' fresh assignments as taken; an assignment older than
  STALE_ASSIGNMENT_S can be given to someone else;
- `commit_label` is idempotent per (item, client): a second key press for an item already labeled from
  that browser changes nothing (a partial unique index on labels enforces it as well);
- `undo_last` marks the client's last label undone and assigns its item back to that client.

Answers are stored as shown: `answer_a` is the left answer (A). `swapped` says the second candidate (model
B, or the second sample) is shown as A; `source_a` / `source_b` record which model, adapter, temperature
and seed made each, so the summary can say how often each model won. No torch here.
"""
from __future__ import annotations

import json
import random
import secrets
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from backend.data import DatasetError, load_dataset_spec, register_source
from backend.modes.registry import mode_spec
from backend.store import RunStore

MODES = ("pair", "single")
PAIR_CHOICES = ("a", "b", "tie", "both_bad")
SINGLE_CHOICES = ("up", "down")
CHOICE_NAMES = {"a": "A better", "b": "B better", "tie": "tie", "both_bad": "both bad", "up": "thumbs up",
                "down": "thumbs down"}
EXPORT_FORMATS = ("dpo", "kto", "sft")
STALE_ASSIGNMENT_S = 600.0  # an item claimed this long ago without a label may be given to someone else
LABELS_PREFIX = "labels:"  # a dataset spec, labels:<session id>: a session exported for the run's mode
MAX_PROMPTS = 10_000
MAX_NOTE = 2000
PROMPT_FILE_TYPES = (".txt", ".jsonl", ".json", ".csv", ".parquet")


class LabelError(ValueError):
    """A labeling request that cannot be done; the message says what to change."""


# ---- records ----

@dataclass
class GenerationSettings:
    max_new_tokens: int = 64  # short on purpose: a CPU writes ~8 tokens/s; raise it on a GPU
    temperature_a: float = 0.8
    temperature_b: float = 0.8
    top_p: float = 0.95
    seed: int = 0
    labels_per_item: int = 1  # >1: several annotators label each item (agreement in the summary)
    lookahead: int = 8  # items generated ahead of the labelers; 0 generates every item at once

    LIMITS: ClassVar[dict] = {"max_new_tokens": (1, 4096), "temperature_a": (0.0, 5.0), "temperature_b": (0.0, 5.0),
              "top_p": (0.01, 1.0), "seed": (0, 2**31 - 1), "labels_per_item": (1, 20), "lookahead": (0, 100_000)}

    @classmethod
    def build(cls, **values) -> "GenerationSettings":
        """Settings from loose values (None: the default); LabelError names every value out of range."""
        out, errors = {}, []
        for name, (lo, hi) in cls.LIMITS.items():
            value = values.get(name)
            if value is None or value == "":
                continue
            kind = float if isinstance(lo, float) else int
            try:
                number = float(value)
                value = number if kind is float else int(number) if number.is_integer() else None
            except (TypeError, ValueError):
                value = None
            if value is None or not lo <= value <= hi:
                errors.append(f"{name}: {values.get(name)!r} is not {'a number' if kind is float else 'a whole number'}"
                              f" from {lo} to {hi}")
                continue
            out[name] = value
        if errors:
            raise LabelError("; ".join(errors))
        return cls(**out)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class LabelSession:
    id: str
    name: str
    mode: str
    model_a: str
    model_b: str | None
    prompt_source: str
    settings: GenerationSettings
    created_at: float
    status: str
    gen_pid: int | None = None
    gen_started_at: float | None = None
    gen_heartbeat_at: float | None = None
    gen_message: str | None = None
    error: str | None = None

    @property
    def choices(self) -> tuple[str, ...]:
        return PAIR_CHOICES if self.mode == "pair" else SINGLE_CHOICES


@dataclass
class LabelItem:
    id: int
    session_id: str
    idx: int
    prompt: object  # a string or a list of messages
    answer_a: str | None
    answer_b: str | None
    source_a: dict
    source_b: dict
    swapped: bool
    status: str
    assigned_to: str | None = None
    assigned_at: float | None = None
    generated_at: float | None = None


@dataclass
class Label:
    id: int
    item_id: int
    session_id: str
    annotator: str
    client: str
    choice: str
    edited_text: str | None
    note: str | None
    created_at: float
    undone: bool


@dataclass
class SessionProgress:
    total: int  # items (prompts)
    generated: int  # items with answers
    labels: int  # active labels
    labeled_items: int  # items with all the labels they need
    remaining: int  # labels still to give (labels_per_item per item, minus those given)
    ready_ahead: int  # generated items that still need a label
    by_choice: dict[str, int] = field(default_factory=dict)
    annotators: dict[str, int] = field(default_factory=dict)
    seconds_per_item: float | None = None  # recent generation speed


@dataclass
class ExportSummary:
    fmt: str
    conversational: bool
    rows: int = 0
    items: int = 0  # labeled items considered
    decisions: dict[str, int] = field(default_factory=dict)  # one per item (the majority choice)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> items (or answers) left out
    kept: dict[str, int] = field(default_factory=dict)  # ties / both bad exported, as the user chose
    edited: int = 0  # rows that use a labeler's edited answer
    path: str | None = None

    def text(self) -> str:
        kind = "conversational" if self.conversational else "plain text"
        parts = [f"{self.rows} {self.fmt.upper()} rows ({kind}) from {self.items} labeled prompts"]
        if self.kept:
            parts.append("kept: " + ", ".join(_counted(n, k) for k, n in self.kept.items()))
        dropped = {k: n for k, n in self.dropped.items() if n}
        parts.append("dropped: " + (", ".join(_counted(n, k) for k, n in dropped.items()) if dropped else "none"))
        if self.edited:
            parts.append(f"{self.edited} edited {'answer' if self.edited == 1 else 'answers'} used")
        return "; ".join(parts)


# ---- helpers ----

def _counted(n: int, what: str) -> str:
    """Like "1 tie", "2 ties" or "1 both bad"."""
    singular = {"ties": "tie", "disagreements": "disagreement", "empty answers": "empty answer"}
    return f"{n} {singular.get(what, what) if n == 1 else what}"


def new_session_id() -> str:
    return "lab-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _loads(text, default=None):
    if text is None:
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


def session_from_row(row) -> LabelSession:
    d = dict(row)
    d["settings"] = GenerationSettings(**{k: v for k, v in _loads(d["settings"], {}).items()
                                          if k in GenerationSettings.__dataclass_fields__})
    return LabelSession(**d)


def _item(row) -> LabelItem:
    d = dict(row)
    d["prompt"] = _loads(d["prompt"], d["prompt"])
    d["source_a"] = _loads(d["source_a"], {}) or {}
    d["source_b"] = _loads(d["source_b"], {}) or {}
    d["swapped"] = bool(d["swapped"])
    return LabelItem(**d)


def _label(row) -> Label:
    d = dict(row)
    d["undone"] = bool(d["undone"])
    return Label(**d)


def prompt_text(prompt) -> str:
    if isinstance(prompt, list):
        return "\n\n".join(str(m.get("content") or "") for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def _clean_text(text, limit: int | None = None) -> str | None:
    text = (text or "").strip()
    if not text:
        return None
    return text[:limit] if limit else text


# ---- prompts ----

def split_typed_prompts(text: str) -> list[str]:
    """Typed prompts: one per line, or blocks separated by a line of `---` when a prompt spans lines."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    if any(line.strip() == "---" for line in lines):
        blocks, current = [], []
        for line in lines + ["---"]:
            if line.strip() == "---":
                if "\n".join(current).strip():
                    blocks.append("\n".join(current).strip())
                current = []
            else:
                current.append(line)
        return blocks
    return [line.strip() for line in lines if line.strip()]


def load_prompts(*, dataset: str | None = None, column: str = "prompt", file: str | Path | None = None,
                 text: str | None = None, limit: int | None = None, workspace: Path | None = None) -> list:
    """Prompts from typed text, an uploaded file (.txt: one per line; .jsonl/.json/.csv/.parquet: a column)
    or a dataset spec's column; at most `limit` (the first ones). Strings or message lists."""
    column = (column or "prompt").strip()
    if text is not None:
        prompts, where = split_typed_prompts(text), "the typed prompts"
    elif file is not None:
        path = Path(file)
        where = path.name
        if path.suffix.lower() not in PROMPT_FILE_TYPES:
            raise LabelError(f"{path.name}: unsupported file type; upload one of {', '.join(PROMPT_FILE_TYPES)}")
        if path.suffix.lower() == ".txt":
            prompts = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        else:
            prompts = _column(load_dataset_spec(str(path), workspace), column, where)
    elif dataset:
        where = dataset
        try:
            ds = load_dataset_spec(dataset, workspace)
        except DatasetError as e:
            raise LabelError(str(e)) from None
        prompts = _column(ds, column, where)
    else:
        raise LabelError("no prompts: choose a dataset, upload a file or type some prompts")
    prompts = [p for p in prompts if (prompt_text(p).strip() if p is not None else "")]
    if not prompts:
        raise LabelError(f"{where}: no prompts found (empty)")
    if limit is not None and int(limit) > 0:
        prompts = prompts[:int(limit)]
    if len(prompts) > MAX_PROMPTS:
        raise LabelError(f"{where}: {len(prompts)} prompts; a session holds at most {MAX_PROMPTS} (set a limit)")
    return prompts


def _column(ds, column: str, where: str) -> list:
    if column not in ds.column_names:
        raise LabelError(f"{where} has no column `{column}` (columns: {', '.join(ds.column_names)}); "
                         "choose the column that holds the prompts")
    values = list(ds[column])
    bad = next((i for i, v in enumerate(values, 1)
                if not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(m, dict) for m in v))
                        or v is None)), None)
    if bad is not None:
        raise LabelError(f"{where} row {bad}: column `{column}` is not text or a list of messages")
    return values


# ---- models: a plain spec, or run:<id> for a run's adapter ----

def describe_model(store: RunStore, spec: str) -> str:
    """A short name: a run's adapter by the run's name, a local folder by its own name."""
    if spec and spec.startswith("run:"):
        try:
            run = store.get_run(spec[4:])
            return f"{run.name} (adapter on {describe_model(store, run.config.model)})"
        except KeyError:
            return spec
    if spec and spec.startswith(("/", ".", "~")) and Path(spec).expanduser().is_dir():
        return Path(spec).name
    return spec


def resolve_candidate(store: RunStore, spec: str) -> tuple[str, str | None]:
    """(base model spec, adapter folder or None). `run:<id>` is that run's base model + its adapter."""
    spec = (spec or "").strip()
    if not spec.startswith("run:"):
        return spec, None
    run_id = spec[4:]
    try:
        run = store.get_run(run_id)
    except KeyError:
        raise LabelError(f"model {spec}: no run with id '{run_id}'") from None
    if not mode_spec(run.mode).writes_answers:
        raise LabelError(f"model {spec}: run {run.name} trained a reward model, which scores answers but does not "
                         "write them; choose a DPO, KTO, SFT or RL run")
    if not run.adapter_path or not Path(run.adapter_path).is_dir():
        raise LabelError(f"model {spec}: run {run.name} has no saved adapter ({run.status}); choose a finished run")
    if not (Path(run.adapter_path) / "adapter_config.json").is_file():  # full fine-tuning saved a whole model
        return run.adapter_path, None
    return run.config.model, run.adapter_path


def adapter_choices(store: RunStore) -> list[tuple[str, str]]:
    """(label, run:<id>) for every run with a saved adapter that writes answers."""
    out = []
    for run in store.list_runs(("completed", "stopped")):
        if run.adapter_path and mode_spec(run.mode).writes_answers and Path(run.adapter_path).is_dir():
            out.append((f"{run.name}: {run.mode} adapter on {run.config.model}", f"run:{run.id}"))
    return out


def check_candidate(store: RunStore, spec: str) -> None:
    from backend.models import ModelError, check_model

    base, _ = resolve_candidate(store, spec)
    try:
        check_model(base)
    except ModelError as e:
        raise LabelError(f"model {spec}: {e}") from None


# ---- sessions ----

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
    return _item(row)


def items(store: RunStore, session_id: str) -> list[LabelItem]:
    with store.connect() as db:
        rows = db.execute("SELECT * FROM label_items WHERE session_id=? ORDER BY idx", (session_id,)).fetchall()
    return [_item(r) for r in rows]


def labels(store: RunStore, session_id: str, include_undone: bool = False) -> list[Label]:
    sql = "SELECT * FROM labels WHERE session_id=?" + ("" if include_undone else " AND undone=0")
    with store.connect() as db:
        rows = db.execute(sql + " ORDER BY id", (session_id,)).fetchall()
    return [_label(r) for r in rows]


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


# ---- claiming and labeling ----

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
    return int(_loads(row["settings"], {}).get("labels_per_item", 1)), row["mode"]


def claim_next(store: RunStore, session_id: str, annotator: str, client: str | None = None) -> LabelItem | None:
    """The item this client should label now: its open assignment, else a newly claimed ready item;
    None when nothing is ready for it (generation behind, every item labeled, or the rest held by others)."""
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
            return _item(db.execute("SELECT * FROM label_items WHERE id=?", (item_id,)).fetchone())
        row = db.execute(
            "SELECT i.* FROM label_items i WHERE i.session_id=? AND i.status != 'new' "
            "AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.item_id=i.id AND l.undone=0 "
            "                AND (l.client=? OR l.annotator=?)) "
            "AND (SELECT COUNT(*) FROM labels l WHERE l.item_id=i.id AND l.undone=0) "
            "  + (SELECT COUNT(*) FROM label_assignments a WHERE a.item_id=i.id AND a.assigned_at>=? "
            "     AND a.client != ?) < ? "
            "ORDER BY i.idx LIMIT 1",
            (session_id, client, annotator, now - STALE_ASSIGNMENT_S, client, k)).fetchone()
        if row is None:
            return None
        db.execute("INSERT OR REPLACE INTO label_assignments (item_id, session_id, client, annotator, assigned_at) "
                   "VALUES (?,?,?,?,?)", (row["id"], session_id, client, annotator, now))
        _refresh_item(db, row["id"], k, now)
        return _item(db.execute("SELECT * FROM label_items WHERE id=?", (row["id"],)).fetchone())


@dataclass
class CommitResult:
    label: Label
    created: bool  # False: this client had already labeled the item (a repeated key press); nothing changed


def commit_label(store: RunStore, session_id: str, item_id: int, choice: str, annotator: str,
                 client: str | None = None, edited_text: str | None = None, note: str | None = None) -> CommitResult:
    """Record one label, committed before this returns. Idempotent per (item, client)."""
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
        if existing is not None:
            return CommitResult(_label(existing), created=False)
        edited = _clean_text(edited_text)
        if edited is not None and edited in {(item["answer_a"] or "").strip(), (item["answer_b"] or "").strip()} \
                and choice in ("a", "b", "up"):
            edited = None  # unchanged
        cur = db.execute("INSERT INTO labels (item_id, session_id, annotator, client, choice, edited_text, note, "
                         "created_at) VALUES (?,?,?,?,?,?,?,?)",
                         (item["id"], session_id, annotator, client, choice, edited,
                          _clean_text(note, MAX_NOTE), now))
        db.execute("DELETE FROM label_assignments WHERE item_id=? AND client=?", (item["id"], client))
        _refresh_item(db, item["id"], k, now)
        row = db.execute("SELECT * FROM labels WHERE id=?", (cur.lastrowid,)).fetchone()
    return CommitResult(_label(row), created=True)


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
    return _label(row)


def client_label_count(store: RunStore, session_id: str, client: str) -> int:
    with store.connect() as db:
        return db.execute("SELECT COUNT(*) FROM labels WHERE session_id=? AND client=? AND undone=0",
                          (session_id, client)).fetchone()[0]


# ---- generation bookkeeping (the generator process writes through these) ----

def next_to_generate(store: RunStore, session_id: str) -> LabelItem | None:
    """The first item without answers, when the generator may run ahead that far (lookahead)."""
    session = get_session(store, session_id)
    with store.connect() as db:
        row = db.execute("SELECT * FROM label_items WHERE session_id=? AND status='new' ORDER BY idx LIMIT 1",
                         (session_id,)).fetchone()
    if row is None:
        return None
    if session.settings.lookahead and progress(store, session_id).ready_ahead >= session.settings.lookahead:
        return None
    return _item(row)


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


# ---- export ----

@dataclass
class _Decision:
    item: LabelItem
    choice: str | None  # None: annotators disagree without a majority
    edited: str | None
    labels: list[Label]


def _decisions(store: RunStore, session_id: str) -> list[_Decision]:
    by_item: dict[int, list[Label]] = defaultdict(list)
    for lab in labels(store, session_id):
        by_item[lab.item_id].append(lab)
    out = []
    for item in items(store, session_id):
        labs = by_item.get(item.id)
        if not labs:
            continue
        ranked = Counter(lab.choice for lab in labs).most_common()
        choice = ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else None
        edits = [lab.edited_text for lab in labs if lab.choice == choice and lab.edited_text]
        out.append(_Decision(item, choice, edits[-1] if edits else None, labs))
    return out


def _as_prompt(prompt, conversational: bool):
    if conversational:
        return prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    return prompt_text(prompt)


def _as_answer(text: str, conversational: bool):
    return [{"role": "assistant", "content": text}] if conversational else text


def export_rows(store: RunStore, session_id: str, fmt: str = "dpo", conversational: bool = True,
                ties: str = "drop", both_bad: str = "drop") -> tuple[list[dict], ExportSummary]:
    """Rows in a TRL format, one decision per item (the majority of its labels; no majority: dropped).

    dpo (also the reward model): prompt, chosen, rejected; a labeler's edit replaces the chosen answer;
        both bad with an edit, when kept, gives edit > A and edit > B; ties cannot be pairs and are dropped.
    kto: prompt, completion, label; a pair gives the better answer true and the other false; kept ties give
        both true, kept both-bad both false (and an edit true). Single answers: up true, down false (+ edit).
    sft: prompt, completion of the answers people preferred (A/B winners, thumbs up, edits).
    Rows with an empty answer are left out and counted.
    """
    if fmt not in EXPORT_FORMATS:
        raise LabelError(f"format {fmt!r}: use dpo (also for reward models), kto or sft")
    for name, value in (("ties", ties), ("both_bad", both_bad)):
        if value not in ("drop", "keep"):
            raise LabelError(f"{name} {value!r}: use drop or keep")
    session = get_session(store, session_id)
    if fmt == "dpo" and session.mode == "single":
        raise LabelError(f"session {session.name} rates single answers (thumbs up / down), which give no pairs; "
                         "export it as kto")
    summary = ExportSummary(fmt=fmt, conversational=conversational)
    rows: list[dict] = []
    dropped: Counter = Counter()

    def add(prompt, **answers):
        texts = [v for k, v in answers.items() if k != "label"]
        if any(not (t or "").strip() for t in texts):
            dropped["empty answers"] += 1
            return
        row = {"prompt": _as_prompt(prompt, conversational)}
        for k, v in answers.items():
            row[k] = v if k == "label" else _as_answer(v.strip(), conversational)
        rows.append(row)

    for d in _decisions(store, session_id):
        summary.items += 1
        if d.choice is None:
            dropped["disagreements"] += 1
            continue
        summary.decisions[d.choice] = summary.decisions.get(d.choice, 0) + 1
        p, a, b, edit = d.item.prompt, d.item.answer_a, d.item.answer_b, d.edited
        before = len(rows)
        if d.choice in ("a", "b"):
            good, bad = (a, b) if d.choice == "a" else (b, a)
            if fmt == "dpo":
                add(p, chosen=edit or good, rejected=bad)
            elif fmt == "kto":
                add(p, completion=edit or good, label=True)
                add(p, completion=bad, label=False)
            else:
                add(p, completion=edit or good)
        elif d.choice == "tie":
            if ties == "drop" or fmt == "dpo":
                dropped["ties"] += 1
                continue
            summary.kept["ties"] = summary.kept.get("ties", 0) + 1
            for answer in (a, b):
                add(p, completion=answer, **({"label": True} if fmt == "kto" else {}))
        elif d.choice == "both_bad":
            if both_bad == "drop" or (fmt in ("dpo", "sft") and not edit):
                dropped["both bad"] += 1
                continue
            summary.kept["both bad"] = summary.kept.get("both bad", 0) + 1
            if fmt == "dpo":
                add(p, chosen=edit, rejected=a)
                add(p, chosen=edit, rejected=b)
            elif fmt == "kto":
                add(p, completion=a, label=False)
                add(p, completion=b, label=False)
                if edit:
                    add(p, completion=edit, label=True)
            else:
                add(p, completion=edit)
        elif d.choice == "up":
            if fmt == "kto":
                add(p, completion=edit or a, label=True)
            else:
                add(p, completion=edit or a)
        elif d.choice == "down":
            if fmt == "kto":
                add(p, completion=a, label=False)
                if edit:
                    add(p, completion=edit, label=True)
            elif edit:
                add(p, completion=edit)
            else:
                dropped["thumbs down"] += 1
        if edit and len(rows) > before:
            summary.edited += 1
    summary.rows = len(rows)
    summary.dropped = dict(dropped)
    return rows, summary


def write_export(store: RunStore, session_id: str, path: str | Path, fmt: str = "dpo", conversational: bool = True,
                 ties: str = "drop", both_bad: str = "drop") -> ExportSummary:
    """Export to a .jsonl or .parquet file (by its suffix)."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".parquet"):
        raise LabelError(f"{path.name}: export to a .jsonl or .parquet file")
    rows, summary = export_rows(store, session_id, fmt, conversational, ties, both_bad)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(3)}")
    if path.suffix.lower() == ".jsonl":
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    summary.path = str(path)
    return summary


def export_format_for_mode(session: LabelSession, mode: str | None) -> str:
    """What a training mode reads from a session: KTO rows, SFT rows, or preference pairs (DPO, reward
    model, and the prompt column for RL); a single-answer session gives KTO rows unless SFT asks."""
    fmt = mode_spec(mode).label_format if mode else "dpo"
    return "kto" if session.mode == "single" and fmt == "dpo" else fmt


def labels_dataset(spec: str, workspace: Path | None, mode: str | None = None):
    """A `labels:<session id>` dataset spec as a datasets.Dataset for `mode` (conversational; ties and
    both-bad dropped). Raises LabelError when the session is unknown or has nothing to train on yet."""
    import datasets

    from backend.store import default_workspace

    session_id = spec[len(LABELS_PREFIX):].strip()
    store = RunStore(workspace or default_workspace())
    session = get_session(store, session_id)
    fmt = export_format_for_mode(session, mode)
    rows, summary = export_rows(store, session_id, fmt)
    if not rows:
        raise LabelError(f"labeling session {session.name} ({session_id}) has no {fmt.upper()} rows yet: "
                         f"{summary.text()}; label some pairs first")
    return datasets.Dataset.from_list(rows)


def _labels_source(spec: str, workspace: Path | None, mode: str | None):
    try:
        return labels_dataset(spec, workspace, mode)
    except LabelError as e:
        raise DatasetError(str(e)) from None


register_source(LABELS_PREFIX, _labels_source)


def dataset_choices(store: RunStore) -> list[tuple[str, str]]:
    """(label, labels:<id>) for every session that has labels, for the Train tab's dataset list."""
    out = []
    for s in list_sessions(store):
        with store.connect() as db:
            n = db.execute("SELECT COUNT(*) FROM labels WHERE session_id=? AND undone=0", (s.id,)).fetchone()[0]
        if n:
            out.append((f"{s.name} (labeling session, {n} labels)", LABELS_PREFIX + s.id))
    return out


# ---- summary ----

@dataclass
class LabelSummary:
    labels: int
    by_choice: dict[str, int]
    annotators: dict[str, int]
    items_labeled: int
    multi_annotated: int  # items labeled by two or more annotators
    agreement: float | None  # share of annotator pairs on the same item who chose the same
    annotator_pairs: int
    sides: dict[str, int]  # pair: wins of the answer shown as A / as B
    models: list[dict]  # per model (source): wins, losses, ties, both_bad | up, down


def _source_name(source: dict) -> str:
    return (source or {}).get("label") or (source or {}).get("model") or "unknown"


def summarize(store: RunStore, session_id: str) -> LabelSummary:
    session = get_session(store, session_id)
    labs = labels(store, session_id)
    item_map = {it.id: it for it in items(store, session_id)}
    per_item: dict[int, dict[str, str]] = defaultdict(dict)
    for lab in labs:
        per_item[lab.item_id][lab.annotator] = lab.choice  # latest per annotator
    agree = pairs = multi = 0
    for choices in per_item.values():
        values = list(choices.values())
        if len(values) > 1:
            multi += 1
            for i in range(len(values)):
                for j in range(i + 1, len(values)):
                    pairs += 1
                    agree += values[i] == values[j]
    sides = {"A": 0, "B": 0}
    models: dict[str, Counter] = defaultdict(Counter)
    for lab in labs:
        item = item_map.get(lab.item_id)
        if item is None:
            continue
        a, b = _source_name(item.source_a), _source_name(item.source_b)
        if session.mode == "single":
            models[a][lab.choice] += 1
            continue
        if lab.choice == "a":
            sides["A"] += 1
            models[a]["wins"] += 1
            models[b]["losses"] += 1
        elif lab.choice == "b":
            sides["B"] += 1
            models[b]["wins"] += 1
            models[a]["losses"] += 1
        else:
            key = "ties" if lab.choice == "tie" else "both_bad"
            models[a][key] += 1
            models[b][key] += 1
    keys = ("up", "down") if session.mode == "single" else ("wins", "losses", "ties", "both_bad")
    return LabelSummary(labels=len(labs), by_choice=dict(Counter(lab.choice for lab in labs)),
                        annotators=dict(Counter(lab.annotator for lab in labs)), items_labeled=len(per_item),
                        multi_annotated=multi, agreement=(agree / pairs) if pairs else None, annotator_pairs=pairs,
                        sides=sides if session.mode == "pair" else {},
                        models=[{"model": name, **{k: c.get(k, 0) for k in keys}}
                                for name, c in sorted(models.items())])


def session_counts(store: RunStore, session: LabelSession) -> dict:
    """A session with its label counts, for `launch.py labels list --json`."""
    p = progress(store, session.id)
    return {"id": session.id, "name": session.name, "mode": session.mode, "status": session.status,
            "model_a": session.model_a, "model_b": session.model_b, "prompt_source": session.prompt_source,
            "created_at": session.created_at, "items": p.total, "generated": p.generated, "labels": p.labels,
            "labeled_items": p.labeled_items, "remaining": p.remaining,
            "by_choice": {c: p.by_choice.get(c, 0) for c in session.choices}, "annotators": p.annotators,
            "settings": asdict(session.settings), "error": session.error}


def rate(numerator: int, denominator: int) -> str:
    return "–" if not denominator else f"{100 * numerator / denominator:.0f}%"

