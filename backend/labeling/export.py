"""Labels as training data: DPO / reward-model pairs, KTO rows or SFT rows, written to a file or served to a
run as the `labels:<session>` dataset source."""
from __future__ import annotations

import json
import secrets
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from backend.data import DatasetError, register_source
from backend.labeling.records import (EXPORT_FORMATS, LABELS_PREFIX, ExportSummary, Label, LabelError, LabelItem,
                                      LabelSession, prompt_text)
from backend.labeling.sessions import get_session, list_sessions, labels, items
from backend.core.mode_registry import mode_spec
from backend.runs.store import RunStore


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
    cost: a cost classifier's pairs from a single-answer session (see `_cost_rows`).
    An answer tagged unsafe counts as a thumbs down everywhere else.
    Rows with an empty answer are left out and counted.
    """
    if fmt not in EXPORT_FORMATS:
        raise LabelError(f"format {fmt!r}: use dpo (also for reward models), kto, sft or cost (pairs for a cost "
                         "classifier)")
    for name, value in (("ties", ties), ("both_bad", both_bad)):
        if value not in ("drop", "keep"):
            raise LabelError(f"{name} {value!r}: use drop or keep")
    session = get_session(store, session_id)
    if fmt == "dpo" and session.mode == "single":
        raise LabelError(f"session {session.name} rates single answers (thumbs up / down), which give no pairs; "
                         "export it as kto")
    if fmt == "cost" and session.mode != "single":
        raise LabelError(f"session {session.name} compares pairs; cost-classifier pairs come from a single-answer "
                         "session whose answers are tagged unsafe")
    summary = ExportSummary(fmt=fmt, conversational=conversational)
    if fmt == "cost":
        return _cost_rows(_decisions(store, session_id), conversational, summary)
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
        elif d.choice in ("down", "unsafe"):
            if fmt == "kto":
                add(p, completion=a, label=False)
                if edit:
                    add(p, completion=edit, label=True)
            elif edit:
                add(p, completion=edit)
            else:
                dropped["thumbs down" if d.choice == "down" else "unsafe"] += 1
        if edit and len(rows) > before:
            summary.edited += 1
    summary.rows = len(rows)
    summary.dropped = dict(dropped)
    return rows, summary


def _cost_rows(decisions: list[_Decision], conversational: bool, summary: ExportSummary):
    """Pairs a reward-model (rm) run learns to score unwanted content high from: chosen is prompt + an answer
    tagged unsafe, rejected prompt + an answer that was not (up or down), whole texts with their own prompts
    (TRL's implicit-prompt form: the two may answer different prompts). An answer of the same prompt is taken
    first; the shorter side is cycled so every labeled answer is in at least one pair. Such a run, used as a
    `reward_model` source with `role: cost` and a `threshold`, is a cost classifier."""
    unsafe, safe, dropped = [], [], Counter()
    for d in decisions:
        summary.items += 1
        if d.choice is None:
            dropped["disagreements"] += 1
            continue
        summary.decisions[d.choice] = summary.decisions.get(d.choice, 0) + 1
        if not (d.item.answer_a or "").strip():
            dropped["empty answers"] += 1
            continue
        (unsafe if d.choice == "unsafe" else safe).append(d.item)
    rows = []
    if unsafe and safe:
        by_prompt = defaultdict(list)
        for item in safe:
            by_prompt[json.dumps(item.prompt, sort_keys=True)].append(item)
        used = set()
        for i in range(max(len(unsafe), len(safe))):
            bad = unsafe[i % len(unsafe)]
            same = [s for s in by_prompt.get(json.dumps(bad.prompt, sort_keys=True), []) if s.id not in used]
            good = same[0] if i < len(unsafe) and same else safe[i % len(safe)]
            used.add(good.id)
            rows.append({"chosen": _whole(bad, conversational), "rejected": _whole(good, conversational)})
    elif unsafe or safe:
        dropped["answers without a counterpart (need both unsafe and other answers)"] = len(unsafe) + len(safe)
    summary.rows, summary.dropped = len(rows), dict(dropped)
    return rows, summary


def _whole(item: LabelItem, conversational: bool):
    answer = item.answer_a.strip()
    if conversational:
        return _as_prompt(item.prompt, True) + _as_answer(answer, True)
    return f"{prompt_text(item.prompt)}\n\n{answer}"


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
    model, and the prompt column for RL); a single-answer session gives KTO rows unless SFT asks, and cost pairs
    (unsafe above the rest) to a reward model."""
    fmt = mode_spec(mode).label_format if mode else "dpo"
    if session.mode == "single" and fmt == "dpo":
        # a scorer (reward model) from single answers: the cost classifier
        return "cost" if mode_spec(mode).task == "seq_cls" else "kto"
    return fmt


def labels_dataset(spec: str, workspace: Path | None, mode: str | None = None):
    """A `labels:<session id>` dataset spec as a datasets.Dataset for `mode` (conversational; ties and
    both-bad dropped). Raises LabelError when the session is unknown or has nothing to train on yet."""
    import datasets

    from backend.runs.store import default_workspace

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
