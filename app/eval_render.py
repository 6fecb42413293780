"""What the Evaluate tab shows, as plain functions (unit-tested without a browser): the progress bar and status
line, the results table and its win-rate note, the examples (one card each, A and B side by side), the win-rate
chart, the scorer lines, the settings an "Evaluate" from a run starts with and the note on what its set is."""
from __future__ import annotations

import html
import json
import re

import pandas as pd
import plotly.graph_objects as go

from app import i18n
from app.formatting import _STATUS_COLORS, status_text
from backend import evals
from backend.evals.results import JUDGE
from backend.models.ref import run_part
from backend.models.specs import ModelError
from backend.runs.store import RUN_PREFIX, Run, RunStore

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


def _run_of(store: RunStore, model: str) -> Run | None:
    """The run a model choice names (run:ID or run:ID@STEP), None for anything else."""
    if not (model or "").startswith(RUN_PREFIX):
        return None
    try:
        return store.get_run(run_part(model)[0])
    except (KeyError, ModelError):  # no such run, or a step that is not a number
        return None


def dataset_note(store: RunStore, models: list[str] | None, dataset: str | None, lang: str = i18n.DEFAULT) -> str:
    """What the chosen evaluation set is to the chosen runs, said next to the field: a run's held-out rows or
    evaluation set (it never trained on them), or, plainly, the data a run trained on (its scores there show what
    it learned by heart, not how it does on new prompts)."""
    dataset = (dataset or "").strip()
    if not dataset:
        return ""
    if dataset.startswith("heldout:"):
        try:
            run = store.get_run(dataset.removeprefix("heldout:"))
        except KeyError:
            return ""
        if run.config.eval.dataset:
            text = i18n.text("eval.note.heldout_set", lang, name=run.name, dataset=run.config.eval.dataset)
        else:
            text = i18n.text("eval.note.heldout", lang, name=run.name, share=f"{run.config.eval.split:.0%}",
                             dataset=run.config.dataset)
        return f'<div class="wb-help wb-help-ok" id="eval-dataset-ok">{html.escape(text)}</div>'
    runs = [r for r in (_run_of(store, m) for m in models or []) if r is not None]
    trained = list(dict.fromkeys(r.name for r in runs if r.config.dataset == dataset))
    if trained:
        text = i18n.text("eval.note.training", lang, names=", ".join(trained))
        return f'<div class="wb-warning" id="eval-dataset-training" role="note">{html.escape(text)}</div>'
    held = list(dict.fromkeys(r.name for r in runs if r.config.eval.dataset == dataset))
    if held:
        text = i18n.text("eval.note.eval_set", lang, names=", ".join(held))
        return f'<div class="wb-help wb-help-ok" id="eval-dataset-ok">{html.escape(text)}</div>'
    return ""


def prefill(store: RunStore, run_id: str) -> dict:
    """The Evaluate form for "Evaluate" on a finished run: its base against it, on its held-out rows, with the
    tools, chat template, tool-calling turns and environment it trained with."""
    run = store.get_run(run_id)
    c = run.config
    return {"models": [evals.BASE, RUN_PREFIX + run.id], "dataset": dataset_for(run), "scorers": scorer_lines(run),
            "max_new_tokens": min(256, max(16, int(getattr(c.rl, "max_completion_length", 64) or 64))),
            "tools": [t.model_dump() for t in c.tools],
            "chat_template": c.data.chat_template, "tool_turns": c.rl.max_tool_calling_iterations,
            "environment": c.environment}


def eval_choices(store: RunStore) -> list[tuple[str, str]]:
    return [(f"{e.name} · {e.id}", e.id) for e in evals.list_evals(store)]


# the job's messages (backend/evals/job.py): "Loading LABEL" before a model loads (and until its first batch is
# scored), then "LABEL: DONE/TOTAL answers[, about ETA left]" after each batch
_LOADING = re.compile(r"^Loading (?P<label>.+)$")
_GENERATING = re.compile(r"^(?P<label>.+): \d+/\d+ answers(?:, about (?P<eta>.+) left)?$")


def activity_text(e: evals.Evaluation, lang: str = i18n.DEFAULT) -> str:
    """What the evaluation is doing now, in `lang`: waiting, loading a model and generating, generating (with the
    time left); a failed one's error; a stopped or interrupted one's own message (the backend's, English)."""
    message = e.message or ""
    if e.status == "queued":
        return i18n.text("eval.activity.queued", lang)
    if e.status == "running":
        if m := _LOADING.match(message):
            return i18n.text("eval.activity.loading", lang, label=m["label"])
        if m := _GENERATING.match(message):
            return i18n.text("eval.activity.generating", lang, label=m["label"]) + (
                i18n.text("eval.activity.eta", lang, eta=m["eta"]) if m["eta"] else "")
        return i18n.text("eval.activity.starting", lang)
    if e.status == "completed":
        return ""
    if e.status == "failed":
        return (e.error or message)[:400]
    return message


def progress_html(e: evals.Evaluation | None, lang: str = i18n.DEFAULT) -> str:
    """The bar and status line: the status, what it is doing, and the answers so far."""
    if e is None:
        return f'<div class="wb-progress wb-empty">{i18n.text("eval.none", lang)}</div>'
    color = _STATUS_COLORS.get(e.status, "#6b7280")
    pct = 100 * (1.0 if e.status == "completed" else (e.done / e.total if e.total else 0.0))
    activity = activity_text(e, lang)
    text = status_text(e.status, lang) + (f" — {activity}" if activity else "") + (
        i18n.text("eval.answers", lang, done=e.done, total=e.total) if e.total else "")
    busy = " wb-busy" if e.status == "running" and not e.done else ""
    return (f'<div class="wb-progress" data-status="{e.status}" id="eval-progress-bar">'
            f'<div class="wb-progress-head"><b>{html.escape(e.name)}</b>'
            f'<span class="wb-status" style="color:{color}">{html.escape(text)}</span></div>'
            f'<div class="wb-bar{busy}"><div style="width:{pct:.1f}%;background:{color}"></div></div></div>')


def status_message(e: evals.Evaluation, lang: str = i18n.DEFAULT) -> str:
    """The line under the Start button for the evaluation it started, following it to its end."""
    if e.status in evals.FINAL:
        error = f" {e.error}" if e.status == "failed" and e.error else ""
        return i18n.text("eval.ended", lang, name=e.name, id=e.id, status=status_text(e.status, lang)) + error
    return i18n.text("eval.started", lang, name=e.name, id=e.id, status=status_text(e.status, lang))


def results_frame(summary: evals.Summary, lang: str = i18n.DEFAULT) -> pd.DataFrame:
    """One row per model; headers and the baseline's win cell in `lang` (scorer names and pass@k as they are).
    The win column says what its number is; `win_note` says against whom and by what."""
    header, rows = evals.table_rows(summary)
    header = [i18n.text("eval.col.model", lang), i18n.text("eval.col.rows", lang), *header[2:]]
    if summary.judge and summary.models:
        header[-1] = i18n.text("eval.col.wins", lang)
        rows = [[*r[:-1], i18n.text("eval.baseline", lang) if r[-1] == "baseline" else r[-1]] for r in rows]
    return pd.DataFrame(rows, columns=header)


def win_note(summary: evals.Summary, lang: str = i18n.DEFAULT) -> str:
    """What the win rate is (backend/evals/results.py: wins plus half the ties over the rows both answered)."""
    if not (summary.judge and len(summary.models) > 1):
        return ""
    judge = i18n.text("eval.judge_sum", lang) if summary.judge == JUDGE else f"`{summary.judge}`"
    return i18n.text("eval.win_note", lang, base=summary.models[0].label, judge=judge)


def results_widths(frame: pd.DataFrame) -> list[str]:
    """The model column wide, the row count narrow, the scores sharing the rest."""
    rest = max(1, len(frame.columns) - 2)
    return ["28%", "56px"] + [f"{(100 - 34) / rest:.0f}%"] * rest


# the examples' cards: long prompts and answers wrap inside their card (never a horizontal scroll), A and B side
# by side; scoped to the examples' gr.HTML
EXAMPLES_CSS = """
.wb-examples { display: flex; flex-direction: column; gap: 10px; max-height: 720px; overflow-y: auto;
  overflow-x: hidden; }
.wb-ex-card { border: 1px solid var(--border-color-primary); border-radius: var(--radius-lg);
  background: var(--block-background-fill); padding: 8px 10px; min-width: 0; }
.wb-ex-head { display: flex; gap: 0.6em; align-items: baseline; margin-bottom: 4px; }
.wb-ex-verdict { font-weight: 600; }
.wb-ex-key { font-size: 12px; color: var(--body-text-color-subdued); margin-top: 4px; }
.wb-ex-text { white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-word; max-height: 16em;
  overflow-y: auto; font-size: 14px; }
.wb-ex-ab { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 10px; margin-top: 6px; }
.wb-ex-side { min-width: 0; padding: 6px 8px; border-radius: var(--radius-md);
  background: var(--background-fill-secondary); }
.wb-ex-scores { margin-top: 4px; font-size: 12px; font-family: var(--font-mono); overflow-wrap: anywhere; }
.wb-ex-empty { color: var(--body-text-color-subdued); }
"""
_VERDICT_COLORS = {"B better": "#16a34a", "A better": "#dc2626", "same": "#6b7280", "both wrong": "#d97706"}


def examples_html(answers: list, summary: evals.Summary, category: str, other: int,
                  lang: str = i18n.DEFAULT) -> str:
    """One card per example: its row, the verdict, the prompt and reference, then A's and B's answer and scores
    side by side."""
    labels = [m.label for m in summary.models]
    rows = evals.examples(answers, labels, summary.judge, summary.judge in summary.binary, other=other,
                          category=category)
    if not rows:
        return f'<div class="wb-examples"><div class="wb-ex-empty">{i18n.text("eval.no_examples", lang)}</div></div>'
    a_label = labels[0] if labels else ""
    b_label = labels[other] if 0 <= other < len(labels) else ""
    esc = html.escape

    def field(key: str, value: str, cls: str = "wb-ex-text") -> str:
        return (f'<div class="wb-ex-key">{esc(i18n.text(key, lang))}</div>'
                f'<div class="{cls}">{esc(value) if value else "—"}</div>')

    def side(name: str, label: str, answer: str, scores: str) -> str:
        return (f'<div class="wb-ex-side" data-side="{name}"><div class="wb-ex-key"><b>{name}</b> · {esc(label)}'
                f'</div><div class="wb-ex-text">{esc(answer) if answer else "—"}</div>'
                + field("eval.col.scores", scores, "wb-ex-scores") + "</div>")

    cards = []
    for r in rows:
        color = _VERDICT_COLORS.get(r["verdict"], "#6b7280")
        cards.append(
            f'<div class="wb-ex-card" data-row="{r["row"]}"><div class="wb-ex-head">'
            f'<b>{esc(i18n.text("eval.col.row", lang))} {r["row"]}</b>'
            f'<span class="wb-ex-verdict" style="color:{color}">{esc(verdict_text(r["verdict"], lang))}</span></div>'
            + field("eval.col.prompt", r["prompt"]) + (field("eval.col.reference", r["reference"])
                                                       if r["reference"] else "")
            + f'<div class="wb-ex-ab">{side("A", a_label, r["A"], r["scores A"])}'
              f'{side("B", b_label, r["B"], r["scores B"])}</div></div>')
    return f'<div class="wb-examples">{"".join(cards)}</div>'


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
