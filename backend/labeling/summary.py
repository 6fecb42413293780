"""What a session's labels say: counts, agreement, and how often each model won."""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from backend.labeling.records import LabelSession
from backend.labeling.sessions import get_session, items, labels, progress
from backend.runs.store import RunStore


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
    models: list[dict]  # per model (source): wins, losses, ties, both_bad | up, down, unsafe


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
    keys = ("up", "down", "unsafe") if session.mode == "single" else ("wins", "losses", "ties", "both_bad")
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


def label_counts(store: RunStore) -> list[tuple[str, str, str, int]]:
    """(session id, name, mode, labels given) for every session, oldest first, in one query (a Prometheus
    scrape asks it every time)."""
    with store.connect() as db:
        rows = db.execute("SELECT s.id, s.name, s.mode, COUNT(l.id) FROM label_sessions s LEFT JOIN labels l "
                          "ON l.session_id = s.id AND l.undone = 0 GROUP BY s.id ORDER BY s.created_at").fetchall()
    return [tuple(r) for r in rows]
