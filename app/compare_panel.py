"""The Runs tab's Compare accordion: several runs' metrics overlaid on shared charts, the settings that differ
between them, each run's final values, and each run's latest evaluation (scorer means with 95% intervals, the
win rate against that evaluation's baseline). Runs still training keep updating, read incrementally like the
single-run view (only metric rows newer than the last id seen per run); evaluations are read again only when
one ends.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import gradio as gr
import pandas as pd

from app import i18n
from app.choices import run_choices
from app.formatting import status_text
from app.plots import Series, add_rows, overlay_figure
from app.view_state import SentValues
from app.tab_polls import TabPolls
from backend import evals
from backend.doctor import status_words
from backend.runs.compare import MAX_COMPARED, config_differences, final_values, load_runs, run_label
from backend.runs.store import RunStore



@dataclass
class CompareView(SentValues):
    """Per browser session: the compared runs and their metrics fetched so far."""

    run_ids: list[str] = field(default_factory=list)
    last_ids: dict[str, int] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)


def _frame(first: str, labels: list[str], rows: list[tuple[str, list]]) -> pd.DataFrame:
    return pd.DataFrame([[name, *values] for name, values in rows], columns=[first, *labels])


def _number(v) -> str:
    return "" if v is None else f"{v:.6g}"


def build(store: RunStore, polls: TabPolls, words=None) -> None:
    """The accordion; `words` (an i18n.Translatable) is given its words."""
    w = i18n.given(words)
    with w.add(gr.Accordion(open=False, elem_id="compare"), "compare.title"):
        w.add(gr.Markdown(elem_classes=["wb-help"]), "compare.help", "value")
        pick = w.add(gr.Dropdown(choices=[], value=[], multiselect=True, max_choices=MAX_COMPARED,
                                 elem_id="compare-select"), "compare.pick", fmt={"n": MAX_COMPARED})
        plot = gr.Plot(elem_id="compare-plot", show_label=False)
        with gr.Row(equal_height=False):
            settings = w.add(gr.Dataframe(_frame(i18n.english("compare.setting"), [], []), interactive=False,
                                          wrap=True, max_height=360, elem_id="compare-settings", scale=3),
                             "compare.settings")
            finals = w.add(gr.Dataframe(_frame(i18n.english("compare.metric"), [], []), interactive=False,
                                        max_height=360, elem_id="compare-final", scale=2), "compare.finals")
        evaluated = w.add(gr.Dataframe(_frame("", [], []), interactive=False, wrap=True, visible=False,
                                       elem_id="compare-evals"), "compare.evals")
        view = gr.State(CompareView())

    outputs = [pick, plot, settings, finals, evaluated, view]

    def render(cv: CompareView, lang: str) -> dict:
        t = functools.partial(i18n.text, lang=lang)
        cv.shown["lang"] = lang  # what the tables' words were last sent in
        runs_all = store.list_runs()
        choices = run_choices(runs_all)
        out = {view: cv}
        if cv.changed("choices", choices):
            out[pick] = gr.update(choices=choices)
        known = {r.id for r in runs_all}
        kept = [rid for rid in cv.run_ids if rid in known]
        if kept != cv.run_ids:  # a run deleted meanwhile drops out, from the picker too (its value must be a choice)
            cv.run_ids = kept
            out[pick] = gr.update(choices=choices, value=kept)
        runs = load_runs(store, cv.run_ids)
        fresh = False
        for run in runs:
            new = store.metrics_since(run.id, cv.last_ids.get(run.id, 0))
            if new:
                add_rows(cv.series.setdefault(run.id, {}), new)
                cv.last_ids[run.id] = new[-1]["id"]
                fresh = True
        labels = [run_label(r) for r in runs]
        key = (tuple(cv.run_ids), tuple(cv.last_ids.get(r, 0) for r in cv.run_ids))
        if cv.changed("plot", key) or fresh:
            out[plot] = overlay_figure([(lab, cv.series.get(r.id, {})) for lab, r in zip(labels, runs)])
        diffs = config_differences([r.config for r in runs]) if len(runs) > 1 else []
        if len(runs) > 1 and not diffs:
            diffs = [(t("compare.none"), [t("compare.same")] * len(runs))]
        # "completed — no learning signal", in the page's language as the runs table says it
        statuses = (t("col.status"), [status_words(r, lang, status_text) for r in runs])
        setting_rows = [statuses, *diffs] if runs else []
        # with the language: a switch sends the tables again in it, their headers too when nothing is picked
        if cv.changed("settings", (lang, tuple(labels), repr(setting_rows))):
            out[settings] = _frame(t("compare.setting"), labels, setting_rows)
        final_rows = [(n, [_number(v) for v in vals]) for n, vals in final_values(store, runs)]
        if cv.changed("finals", (lang, tuple(labels), repr(final_rows))):
            out[finals] = _frame(t("compare.metric"), labels, final_rows)
        if cv.changed("evals_seen", (tuple(labels), evals.ended_stamp(store))):  # summaries only when one ends
            rows = evals.comparison_rows(evals.latest_evaluations(store, [r.id for r in runs])) if runs else []
            if cv.changed("evals", (tuple(labels), repr(rows))):
                out[evaluated] = gr.update(value=_frame("", labels, rows), visible=bool(rows))
        return out

    def on_pick(run_ids, cv: CompareView, request: gr.Request = None):
        run_ids = list(run_ids or [])[:MAX_COMPARED]
        cv.run_ids = run_ids
        for rid in list(cv.series):
            if rid not in run_ids:  # fetched again from the start if picked anew
                cv.series.pop(rid)
                cv.last_ids.pop(rid, None)
        return render(cv, i18n.lang_of(request))

    def on_tick(cv: CompareView, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not cv.run_ids and "choices" in cv.shown and cv.shown.get("lang") == lang:  # nothing to redraw
            choices = run_choices(store.list_runs())
            return {view: cv} | ({pick: gr.update(choices=choices)} if cv.changed("choices", choices) else {})
        return render(cv, lang)

    pick.change(on_pick, [pick, view], outputs, show_progress="hidden")
    polls.add("runs", on_tick, view, outputs, show_progress="hidden")
