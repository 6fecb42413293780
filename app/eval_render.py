"""What the Evaluate tab shows, as plain functions (unit-tested without a browser): the progress bar, the results
and examples tables, the win-rate chart, the scorer lines, and the settings an "Evaluate" from a run starts with."""
from __future__ import annotations

import html
import json

import pandas as pd
import plotly.graph_objects as go

from app import i18n
from app.formatting import _STATUS_COLORS, status_text
from backend import evals
from backend.runs.store import RUN_PREFIX, Run, RunStore

EXAMPLE_COLUMNS = ["row", "verdict", "prompt", "reference", "A", "B", "scores A", "scores B"]


def example_columns(lang: str = i18n.DEFAULT) -> list[str]:
    """The examples table's headers in `lang` (the rows are keyed by EXAMPLE_COLUMNS)."""
    return [i18n.text(f"eval.col.{c.replace(' ', '_')}", lang) if c not in ("A", "B") else c for c in EXAMPLE_COLUMNS]


def verdict_text(verdict: str, lang: str = i18n.DEFAULT) -> str:
    """A verdict (one of evals.CATEGORIES, or "—") in `lang`."""
    key = f"eval.category.{verdict.replace(' ', '_')}"
    return i18n.text(key, lang) if key in i18n.UI else verdict


def parse_scorer_lines(text: str) -> list[dict]:
    """Scorer configs from the textbox; ValueError naming the line."""
    out = []
    for n, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(evals.parse_scorer(line).model_dump())
        except ValueError as e:
            raise ValueError(f"scorers, line {n} ({line[:40]}): {str(e).splitlines()[0]}") from None
    return out


def scorer_lines(run: Run) -> str:
    """A run's reward sources as scorer lines (JSON, every setting kept); a reference metric for the rest."""
    lines = []
    for s in run.config.reward_sources or []:
        d = s.model_dump(exclude={"role", "budget"})
        if getattr(s, "is_cost", False):  # scored and shown, but not part of the judge's sum
            d["weight"] = 0.0
        lines.append(json.dumps(d))
    return "\n".join(lines) or "rouge_l"


def dataset_for(run: Run) -> str:
    """What a run is best judged on: the rows it held out, its evaluation set, else its training set."""
    if run.config.eval.split > 0:
        return f"heldout:{run.id}"
    return run.config.eval.dataset or run.config.dataset


def prefill(store: RunStore, run_id: str) -> dict:
    """The Evaluate form for "Evaluate" on a finished run: its base against it, on its held-out rows."""
    run = store.get_run(run_id)
    return {"models": [evals.BASE, RUN_PREFIX + run.id], "dataset": dataset_for(run), "scorers": scorer_lines(run),
            "max_new_tokens": min(256, max(16, int(getattr(run.config.rl, "max_completion_length", 64) or 64)))}


def eval_choices(store: RunStore) -> list[tuple[str, str]]:
    return [(f"{e.name} · {e.id}", e.id) for e in evals.list_evals(store)]


def progress_html(e: evals.Evaluation | None, lang: str = i18n.DEFAULT) -> str:
    """The bar and status line; the evaluation's own message (the backend's) stays English."""
    if e is None:
        return f'<div class="wb-progress wb-empty">{i18n.text("eval.none", lang)}</div>'
    color = _STATUS_COLORS.get(e.status, "#6b7280")
    pct = 100 * (1.0 if e.status == "completed" else (e.done / e.total if e.total else 0.0))
    text = f"{status_text(e.status, lang)} — {e.message or ''}" + (
        i18n.text("eval.answers", lang, done=e.done, total=e.total) if e.total else "")
    busy = " wb-busy" if e.status == "running" and not e.done else ""
    return (f'<div class="wb-progress" data-status="{e.status}" id="eval-progress-bar">'
            f'<div class="wb-progress-head"><b>{html.escape(e.name)}</b>'
            f'<span class="wb-status" style="color:{color}">{html.escape(text)}</span></div>'
            f'<div class="wb-bar{busy}"><div style="width:{pct:.1f}%;background:{color}"></div></div></div>')


def results_frame(summary: evals.Summary, lang: str = i18n.DEFAULT) -> pd.DataFrame:
    """One row per model; headers and the baseline's win cell in `lang` (scorer names and pass@k as they are)."""
    header, rows = evals.table_rows(summary)
    if lang != i18n.DEFAULT:
        header = [i18n.text("eval.col.model", lang), i18n.text("eval.col.rows", lang), *header[2:]]
        if summary.judge and summary.models:
            header[-1] = i18n.text("eval.col.wins", lang, base=summary.models[0].label)
            rows = [[*r[:-1], i18n.text("eval.baseline", lang) if r[-1] == "baseline" else r[-1]] for r in rows]
    return pd.DataFrame(rows, columns=header)


def results_widths(frame: pd.DataFrame) -> list[str]:
    """The model column wide, the row count narrow, the scores sharing the rest."""
    rest = max(1, len(frame.columns) - 2)
    return ["28%", "56px"] + [f"{(100 - 34) / rest:.0f}%"] * rest


def examples_frame(answers: list, summary: evals.Summary, category: str, other: int,
                   lang: str = i18n.DEFAULT) -> pd.DataFrame:
    labels = [m.label for m in summary.models]
    rows = evals.examples(answers, labels, summary.judge, summary.judge in summary.binary, other=other,
                          category=category)
    return pd.DataFrame([[verdict_text(r[c], lang) if c == "verdict" else r[c] for c in EXAMPLE_COLUMNS]
                         for r in rows], columns=example_columns(lang))


def win_figure(summary: evals.Summary, lang: str = i18n.DEFAULT) -> go.Figure:
    """Win / tie / loss of each model against the first, as stacked shares."""
    fig = go.Figure()
    others = [m for m in summary.models[1:] if m.wins + m.ties + m.losses]
    for name, attr, color in (("win", "wins", "#16a34a"), ("tie", "ties", "#9ca3af"), ("loss", "losses", "#dc2626")):
        fig.add_bar(name=i18n.text(f"eval.{name}", lang), orientation="h", y=[m.label for m in others],
                    marker_color=color,
                    x=[getattr(m, attr) / (m.wins + m.ties + m.losses) for m in others],
                    text=[getattr(m, attr) for m in others], textposition="inside")
    base = summary.models[0].label if summary.models else ""
    fig.update_layout(barmode="stack", height=120 + 40 * len(others), margin=dict(l=10, r=10, t=40, b=30),
                      title=(i18n.text("eval.against", lang, base=base, judge=summary.judge) if others
                             else i18n.text("eval.no_comparison", lang)),
                      xaxis=dict(range=[0, 1], tickformat=".0%"), legend=dict(orientation="h", y=-0.3))
    return fig


def model_b_choices(e: evals.Evaluation | None) -> list[tuple[str, int]]:
    labels = (e.info.get("models") or e.spec.models) if e else []
    return [(label, i) for i, label in enumerate(labels) if i > 0]


def run_evaluations_markdown(store: RunStore, run_id: str, lang: str = i18n.DEFAULT) -> str:
    """The Runs tab's summary of a run's evaluations: each scorer's mean for the run and for the baseline, and its
    win / tie / loss against the baseline."""
    found = evals.evaluations_of(store, run_id)
    if not found:
        return ""
    lines = [i18n.text("evals.run_heading", lang), ""]
    for e, summary, idx in found[:5]:
        me, base = summary.models[idx], summary.models[0]
        scores = ", ".join(f"{c} {_fmt(me.cells[c].mean)}" + ("" if idx == 0 else i18n.text(
            "evals.run_baseline", lang, score=_fmt(base.cells[c].mean))) for c in summary.columns)
        vs = "" if idx == 0 or not summary.judge else i18n.text(
            "evals.run_vs", lang, label=base.label, wins=me.wins, ties=me.ties, losses=me.losses)
        lines.append(i18n.text("evals.run_line", lang, id=e.id, dataset=e.spec.dataset, rows=me.answered,
                               scores=scores or i18n.text("evals.run_no_scorers", lang), vs=vs))
    return "\n".join(lines)


def _fmt(x) -> str:
    return "—" if x is None else f"{x:.3f}"
