"""What an evaluation's answers say: a mean per model and scorer with its 95% bootstrap interval over prompts,
pass@k where answers are right or wrong, win / tie / loss against the first model, and the examples that
changed. Computed from the stored rows, so a running or stopped evaluation shows what it has so far."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from backend.evals.store import Answer

JUDGE = "reward"  # the fused score of the reward sources, when there are any
BOOTSTRAP = 1000


@dataclass
class Cell:
    mean: float | None
    low: float | None = None
    high: float | None = None
    scored: int = 0  # rows with a score
    pass_at_k: float | None = None


@dataclass
class ModelResult:
    index: int
    label: str
    answered: int
    cells: dict[str, Cell]
    wins: int = 0
    ties: int = 0
    losses: int = 0

    @property
    def win_rate(self) -> float | None:
        n = self.wins + self.ties + self.losses
        return (self.wins + 0.5 * self.ties) / n if n else None


@dataclass
class Summary:
    columns: list[str]  # scorer names (and JUDGE when fused)
    judge: str | None  # the column win rates compare
    binary: list[str]  # columns scored 0/1
    samples: int
    models: list[ModelResult]
    scorer_errors: dict[str, int] = field(default_factory=dict)  # scorer -> rows it could not score


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def bootstrap_interval(values: list[float], seed: int = 0, rounds: int = BOOTSTRAP) -> tuple[float, float] | None:
    """The 95% percentile interval of the mean, resampling prompts with replacement."""
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def _per_row(answers: list[Answer], column: str) -> dict[int, list[float]]:
    rows: dict[int, list[float]] = {}
    for a in answers:
        v = a.scores.get(column)
        if v is not None:
            rows.setdefault(a.row_idx, []).append(float(v))
    return rows


def summarize(answers: list[Answer], labels: list[str], columns: list[str], binary: list[str], judge: str | None,
              samples: int = 1) -> Summary:
    by_model: dict[int, list[Answer]] = {}
    for a in answers:
        by_model.setdefault(a.model_idx, []).append(a)
    models = []
    for m, label in enumerate(labels):
        mine = by_model.get(m, [])
        cells = {}
        for c in columns:
            rows = _per_row(mine, c)
            means = [sum(v) / len(v) for v in rows.values()]
            ci = bootstrap_interval(means)
            cell = Cell(_mean(means), *(ci or (None, None)), scored=len(rows))
            if c in binary and samples > 1:
                cell.pass_at_k = _mean([float(max(v) > 0) for v in rows.values()])
            cells[c] = cell
        models.append(ModelResult(m, label, len({a.row_idx for a in mine}), cells))
    if judge and models:
        base = {r: sum(v) / len(v) for r, v in _per_row(by_model.get(0, []), judge).items()}
        for result in models[1:]:
            mine = {r: sum(v) / len(v) for r, v in _per_row(by_model.get(result.index, []), judge).items()}
            for r in base.keys() & mine.keys():
                if abs(mine[r] - base[r]) < 1e-9:
                    result.ties += 1
                elif mine[r] > base[r]:
                    result.wins += 1
                else:
                    result.losses += 1
    errors: dict[str, int] = {}
    for a in answers:
        for name in a.errors:
            errors[name] = errors.get(name, 0) + 1
    return Summary(columns, judge, binary, samples, models, errors)


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def table_rows(summary: Summary) -> tuple[list[str], list[list]]:
    """One row per model: answered rows, each column as `mean [low, high]`, pass@k, the win rate."""
    header = ["model", "rows"]
    for c in summary.columns:
        header.append(c)
        if c in summary.binary and summary.samples > 1:
            header.append(f"{c} pass@{summary.samples}")
    if summary.judge:
        header.append(f"win / tie / loss vs {summary.models[0].label}" if summary.models else "win rate")
    out = []
    for result in summary.models:
        row = [result.label, result.answered]
        for c in summary.columns:
            row.append(cell_text(result.cells[c]))
            if c in summary.binary and summary.samples > 1:
                row.append(_num(result.cells[c].pass_at_k))
        if summary.judge:
            row.append(win_text(result))
        out.append(row)
    return header, out


def cell_text(cell: Cell) -> str:
    """`mean [low, high]` (the 95% interval, where there are two prompts or more)."""
    return _num(cell.mean) + (f" [{_num(cell.low)}, {_num(cell.high)}]" if cell.low is not None else "")


def win_text(result: ModelResult) -> str:
    return "baseline" if result.index == 0 else \
        f"{_num(result.win_rate, 2)} ({result.wins} / {result.ties} / {result.losses})"


# ---- runs side by side ----

@dataclass
class RunEvaluation:
    """A run's place in one evaluation: the evaluation, its summary, and the run's model among its models."""
    evaluation: object  # store.Evaluation
    summary: Summary
    index: int

    @property
    def result(self) -> ModelResult:
        return self.summary.models[self.index]


def comparison_rows(found: list[RunEvaluation | None]) -> list[tuple[str, list[str]]]:
    """(row, a value per run) for runs compared side by side, each by its latest evaluation: which one, on what,
    as which model, each scorer's mean with its 95% interval, and the win rate against that evaluation's
    baseline. Scorers a run's evaluation lacks show "—"."""
    if not any(found):
        return []
    columns = list(dict.fromkeys(c for f in found if f for c in f.summary.columns))

    def each(value) -> list[str]:
        return [value(f) if f else "—" for f in found]
    rows = [("evaluation", each(lambda f: f"{f.evaluation.name} · {f.evaluation.id}")),
            ("evaluation set", each(lambda f: f.evaluation.spec.dataset)),
            ("evaluated model", each(lambda f: f.result.label)),
            ("rows answered", each(lambda f: str(f.result.answered)))]
    rows += [(c, each(lambda f, c=c: cell_text(f.result.cells[c]) if c in f.result.cells else "—")) for c in columns]
    rows.append(("win rate (win / tie / loss)", each(
        lambda f: "—" if not f.summary.judge else
        win_text(f.result) + ("" if f.index == 0 else f" vs {f.summary.models[0].label}, by {f.summary.judge}"))))
    return rows


def comparison_record(f: RunEvaluation | None) -> dict | None:
    """One run's latest evaluation as plain data (`launch.py compare --json`)."""
    if f is None:
        return None
    r, base = f.result, f.summary.models[0]
    return {"id": f.evaluation.id, "name": f.evaluation.name, "dataset": f.evaluation.spec.dataset,
            "model": r.label, "baseline": base.label, "rows": r.answered, "judge": f.summary.judge,
            "scores": {c: {"mean": cell.mean, "low": cell.low, "high": cell.high, "scored": cell.scored}
                       for c, cell in r.cells.items()},
            **({"win_rate": r.win_rate, "wins": r.wins, "ties": r.ties, "losses": r.losses}
               if f.summary.judge and f.index > 0 else {})}


def format_table(summary: Summary) -> str:
    header, rows = table_rows(summary)
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if summary.scorer_errors:
        lines.append("rows a scorer could not score: " +
                     ", ".join(f"{k} {v}" for k, v in sorted(summary.scorer_errors.items())))
    return "\n".join(lines)


# ---- examples ----

CATEGORIES = ("all", "B better", "A better", "same", "both wrong")


def examples(answers: list[Answer], labels: list[str], judge: str | None, binary: bool, other: int = 1,
             category: str = "all", limit: int = 200) -> list[dict]:
    """Rows side by side: the prompt, the reference, model A's (the first) and model `other`'s first answer and
    every score; `category` filters by the judge (both wrong: a right-or-wrong judge scored both 0)."""
    from backend.rewards.base import prompt_text

    first = {(a.model_idx, a.row_idx): a for a in answers if a.sample_idx == 0}
    out = []
    for (m, r), a in sorted(first.items(), key=lambda kv: kv[0][1]):
        if m != 0:
            continue
        b = first.get((other, r))
        va = a.scores.get(judge) if judge else None
        vb = b.scores.get(judge) if (b and judge) else None
        kind = "—"
        if va is not None and vb is not None:
            kind = ("both wrong" if binary and va <= 0 and vb <= 0 else "B better" if vb > va + 1e-9
                    else "A better" if va > vb + 1e-9 else "same")
        if category != "all" and kind != category:
            continue
        out.append({"row": r + 1, "prompt": prompt_text(a.prompt), "reference": a.reference or "",
                    "A": a.answer, "B": b.answer if b else "", "verdict": kind,
                    "scores A": _scores(a), "scores B": _scores(b) if b else ""})
        if len(out) >= limit:
            break
    return out


def _scores(a: Answer) -> str:
    parts = [f"{k}={_num(v, 2)}" for k, v in a.scores.items()]
    parts += [f"{k}: {why}" for k, why in a.errors.items()]
    return ", ".join(parts)


# ---- predictions ----

def prediction_records(answers: list[Answer], labels: list[str]) -> list[dict]:
    """One record per prompt and sample: prompt, reference, each model's answer and scores."""
    records: dict[tuple[int, int], dict] = {}
    for a in answers:
        rec = records.setdefault((a.row_idx, a.sample_idx), {"row": a.row_idx, "sample": a.sample_idx,
                                                             "prompt": a.prompt, "reference": a.reference})
        label = labels[a.model_idx] if a.model_idx < len(labels) else str(a.model_idx)
        rec[f"answer[{label}]"] = a.answer
        rec[f"scores[{label}]"] = a.scores
    return [records[k] for k in sorted(records)]


def write_predictions(answers: list[Answer], labels: list[str], out: Path) -> Path:
    """`out` as .jsonl, or .parquet (scores and prompts as JSON text there)."""
    records = prediction_records(answers, labels)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        import pandas as pd

        flat = [{k: (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v) for k, v in r.items()}
                for r in records]
        pd.DataFrame(flat).to_parquet(out, index=False)
    else:
        with open(out, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return out
