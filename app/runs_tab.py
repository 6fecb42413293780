"""The Runs tab: every run in the store, and for the selected one its progress, live metric plots, log,
error and adapter; for RL runs also live samples (prompt, completion, each reward source's score).

Live updates come from a gr.Timer whose poll only reads the store (the server's dispatcher thread moves the
queue). Each browser session keeps a RunView in gr.State: the metric series and samples fetched so far and the
last id of each, so a poll reads only newer rows (`store.metrics_since`, `store.samples_since`), and what it
last sent to each component, so unchanged components are left out of the update instead of re-sent.
"""
from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr
import pandas as pd

from app import compare_panel, doctor_render, export_panel, i18n, log_panel, serve_panel
from app.choices import run_choices, run_selection
from app.eval_render import run_evaluations_markdown
from app.formatting import (ALL_STEPS, RUN_COLUMNS, SAMPLE_COLUMNS, columns, progress_html, run_table_rows,
                            sample_sources, sample_step_choices, sample_table_rows, score_table_widths, status_text)
from app.plots import GROUP_SLOTS, Series, add_rows, chart_layout, figure_from_series, flat_text
from app.view_state import SentValues
from app.tab_polls import TabPolls
from backend import evals, reporting
from backend.runs import jobs
from backend.runs.logs import log_tail as read_log_tail
from backend.config import to_yaml
from backend.core.mode_registry import RL_MODES
from backend.rewards import cost_budgets
from backend.runs.store import RESUMABLE, DeleteRefused, Run, RunStore

LOG_LINES = 40
LOG_SETTLE_S = 10.0
SAMPLES_KEPT = 2000  # per session and run: the newest samples, enough for the table and its step filter
_SHARED_KEYS = ("table", "choices")  # not tied to the selected run: kept when the selection changes


@dataclass
class RunView(SentValues):
    """Per browser session: the selected run, its metrics fetched so far, and what the page shows."""

    run_id: str | None = None
    last_id: int = 0
    series: Series = field(default_factory=dict)
    last_sample_id: int = 0
    samples: list[dict] = field(default_factory=list)
    sample_step: str = ALL_STEPS  # the samples table's step filter
    confirm_delete: bool = False  # Delete was clicked once: "Confirm delete" is showing
    open_groups: set[int] = field(default_factory=set)  # chart-group slots unfolded on the page (drawn when open)

    def select(self, run_id: str | None) -> RunView:
        return RunView(run_id=run_id, shown={k: v for k, v in self.shown.items() if k in _SHARED_KEYS},
                       open_groups=set(self.open_groups))  # the page keeps its accordions as they were


@dataclass
class RunsTab:
    select: gr.Dropdown
    outputs: list
    render: Callable[[RunView], dict]  # view -> {component: update} for outputs, the unchanged left out
    evaluate: gr.Button  # main.py wires it to the Evaluate tab, so this tab never imports that one
    fix: gr.Button  # "Fix and restart": main.py opens the Train tab with the doctor's suggestions


def default_selection(runs: list[Run]) -> str | None:
    """The newest active run, else the newest run: what a fresh page should show."""
    pool = [r for r in runs if r.active] or runs
    return pool[0].id if pool else None


def log_html(text: str, lang: str = i18n.DEFAULT) -> str:
    # column-reverse keeps the box scrolled to its newest line without any script
    return f'<div class="wb-log"><pre>{html.escape(text) or i18n.text("runs.no_output", lang)}</pre></div>'


def _error_markdown(run: Run, lang: str = i18n.DEFAULT) -> str:
    return f"**{i18n.text('runs.error', lang)}**\n\n```text\n{run.error}\n```" if run.error else ""


def configured_sources(run: Run) -> list[str]:
    """The metric names of a run's reward sources (none for a config another schema version stored)."""
    from backend.rewards.spec import source_names

    try:
        return source_names(run.config.reward_sources or [])
    except (ValueError, AttributeError):
        return []


def samples_frame(rows: list[list], sources: list[str], lang: str = i18n.DEFAULT) -> pd.DataFrame:
    """The samples table; the reward sources' columns keep their names."""
    return pd.DataFrame(rows, columns=[*columns(SAMPLE_COLUMNS, lang), *sources, i18n.text("col.total", lang)])


def build(store: RunStore, polls: TabPolls, view: gr.State, words=None,
          ui_password: str | None = None) -> RunsTab:
    """`words` (an i18n.Translatable) is given this tab's words to translate."""
    w = i18n.given(words)
    table = w.add(gr.Dataframe(pd.DataFrame(columns=RUN_COLUMNS), headers=RUN_COLUMNS, interactive=False,
                               elem_id="runs-table", max_height=260), "runs.table")
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        select = w.add(gr.Dropdown(choices=[], value=None, elem_id="runs-select", scale=4), "runs.select")
        stop = w.add(gr.Button(variant="stop", elem_id="runs-stop", scale=1, min_width=120, interactive=False),
                     "runs.stop", "value")
        resume = w.add(gr.Button(elem_id="runs-resume", scale=1, min_width=120, interactive=False), "runs.resume",
                       "value")
        evaluate = w.add(gr.Button(elem_id="runs-evaluate", scale=1, min_width=120, interactive=False),
                         "runs.evaluate", "value")
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        note = w.add(gr.Textbox(elem_id="run-note", scale=4, interactive=False), "runs.note",
                     placeholder="runs.note_placeholder")
        delete = w.add(gr.Button(elem_id="runs-delete", scale=1, min_width=120, interactive=False), "runs.delete",
                       "value")
        confirm = w.add(gr.Button(variant="stop", elem_id="runs-delete-confirm", scale=1, min_width=120,
                                  visible=False), "runs.confirm_delete", "value")
    progress = gr.HTML(progress_html(None), elem_id="progress")
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        diagnosis = gr.Markdown("", visible=False, elem_id="run-diagnosis")
        fix = w.add(gr.Button(elem_id="runs-fix", scale=0, min_width=160, visible=False), "runs.fix", "value")
    error = gr.Markdown("", visible=False, elem_id="run-error")
    evaluations = gr.Markdown("", visible=False, elem_id="run-evaluations")
    plot = gr.Plot(elem_id="metrics-plot", show_label=False)
    flat = gr.Markdown("", visible=False, elem_id="metrics-flat")
    group_boxes, group_plots = [], []
    for i in range(GROUP_SLOTS):  # the other charts, folded by name prefix; drawn only while unfolded
        with gr.Accordion("", open=False, visible=False, elem_id=f"metrics-group-{i}") as box:
            group_plots.append(gr.Plot(elem_id=f"metrics-group-plot-{i}", show_label=False))
        group_boxes.append(box)
    with gr.Column(visible=False, elem_id="samples") as samples_box:
        with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
            w.add(gr.Markdown(elem_classes=["wb-section"]), "runs.samples", "value")
            samples_step = w.add(gr.Dropdown(choices=sample_step_choices([]), value=ALL_STEPS,
                                             elem_id="samples-step", scale=0, min_width=260), "runs.step")
        samples_table = gr.Dataframe(samples_frame([], []), interactive=False, wrap=True, max_height=420,
                                     elem_id="samples-table", show_label=False)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            w.add(gr.Markdown(elem_classes=["wb-section"]), "runs.log", "value")
            log_tail = gr.HTML(log_html(""), elem_id="log-tail")
        with gr.Column(scale=2):
            adapter = w.add(gr.Textbox(interactive=False, elem_id="adapter-path", buttons=["copy"]), "runs.adapter",
                            placeholder="runs.adapter_placeholder")
            with w.add(gr.Accordion(open=False), "runs.config"):
                config = gr.Code(language="yaml", interactive=False, elem_id="run-config", show_label=False)
            export_panel.build(store, select, w)
            serve_panel.build(store, select, w, ui_password)
    log_panel.build(store, polls, select, w)
    compare_panel.build(store, polls, w)

    outputs = [table, select, progress, plot, log_tail, error, adapter, config, samples_box, samples_step,
               samples_table, note, delete, confirm, view, resume, evaluate, evaluations, stop, flat, diagnosis, fix,
               *group_boxes,
               *group_plots]

    def render_charts(v: RunView, run: Run | None, lang: str) -> dict:
        """The lead chart, the flat metrics' line and each group's slot (its figure only while unfolded)."""
        if not v.changed("charts", (run and run.id, v.last_id, tuple(sorted(v.open_groups)), lang)):
            return {}
        budgets = cost_budgets(run.config.reward_sources) if run else {}
        layout = chart_layout(v.series, run.config.spec.charts if run else ())
        out = {plot: figure_from_series(v.series, budgets=budgets, names=layout.lead, lang=lang)}
        text = i18n.text("runs.flat", lang, text=flat_text(v.series, layout.flat)) if layout.flat else ""
        if v.changed("flat", text):
            out[flat] = gr.update(value=text, visible=bool(text))
        for i, (box, figure) in enumerate(zip(group_boxes, group_plots)):
            title, names = layout.groups[i] if i < len(layout.groups) else ("", [])
            title = i18n.text(f"runs.group.{title}", lang) if title in ("other", "more") else title
            label = (i18n.text("runs.chart", lang, title=title) if len(names) == 1
                     else i18n.text("runs.charts", lang, title=title, n=len(names))) if names else ""
            if v.changed(f"group-{i}", label):
                out[box] = gr.update(label=label, visible=bool(names))
            if names and i in v.open_groups:
                out[figure] = figure_from_series(v.series, budgets=budgets, names=names, lang=lang)
        return out

    def render_manage(v: RunView, run: Run | None, lang: str) -> dict:
        """Stop, note, delete, confirm and resume: an active run can be stopped, not deleted; the note follows the
        store."""
        deletable = run is not None and not run.active
        v.confirm_delete = v.confirm_delete and deletable
        out = {}
        stoppable = run is not None and run.active  # an ended run has nothing to stop
        if v.changed("stop", stoppable):
            out[stop] = gr.update(interactive=stoppable)
        resumable = run is not None and run.status in RESUMABLE
        if v.changed("resume", resumable):
            out[resume] = gr.update(interactive=resumable)
        evaluable = run is not None and run.status == "completed" and bool(run.adapter_path)
        if v.changed("evaluate", evaluable):
            out[evaluate] = gr.update(interactive=evaluable)
        if v.changed("note", (run.id, run.note) if run else None):
            out[note] = gr.update(value=run.note if run else "", interactive=run is not None)
        if v.changed("delete", deletable):
            out[delete] = gr.update(interactive=deletable)
        if v.changed("confirm", (v.confirm_delete, run and run.name, lang)):
            out[confirm] = gr.update(visible=v.confirm_delete,
                                     value=i18n.text("runs.confirm_run", lang, name=run.name) if run
                                     else i18n.text("runs.confirm_delete", lang))
        return out

    def render_samples(v: RunView, run: Run | None, lang: str) -> dict:
        """The samples box, its step filter and table (reads only samples newer than the last)."""
        if run is None or run.mode not in RL_MODES:
            return {samples_box: gr.update(visible=False)} if v.changed("samples_box", False) else {}
        new = store.samples_since(run.id, v.last_sample_id)
        if new:
            v.samples = (v.samples + new)[-SAMPLES_KEPT:]
            v.last_sample_id = new[-1]["id"]
        out = {samples_box: gr.update(visible=True)} if v.changed("samples_box", True) else {}
        steps = sample_step_choices(v.samples, lang)
        if v.sample_step not in {value for _, value in steps}:
            v.sample_step = ALL_STEPS
        if v.changed("sample_steps", (tuple(steps), v.sample_step)):
            out[samples_step] = gr.update(choices=steps, value=v.sample_step)
        sources = sample_sources(v.samples, configured_sources(run))
        if v.changed("samples_table", (v.last_sample_id, v.sample_step, tuple(sources), lang)):
            frame = samples_frame(sample_table_rows(v.samples, sources, v.sample_step), sources, lang)
            out[samples_table] = gr.update(value=frame, column_widths=score_table_widths(len(sources),
                                                                                       step_column=True))
        return out

    def render(v: RunView, lang: str = i18n.DEFAULT) -> dict:
        """Updates for `outputs` in `lang`, leaving out whatever the page already shows."""
        now = time.time()
        runs = store.list_runs()
        rows = run_table_rows(runs, now, lang)
        out = {view: v}
        if v.changed("table", (rows, lang)):  # the headers too: the timer re-sends them in the session's language
            out[table] = pd.DataFrame(rows, columns=columns(RUN_COLUMNS, lang))
        choices = run_choices(runs)
        if v.changed("choices", choices):
            out[select] = gr.update(choices=choices)
        run = next((r for r in runs if r.id == v.run_id), None)
        if run is None:
            v.run_id = None
            empty = {progress: progress_html(None, lang=lang), log_tail: log_html("", lang),
                     error: gr.update(value="", visible=False), adapter: gr.update(value="", info=None), config: ""}
            keys = ("progress", "log", "error", "adapter", "config")
            out |= {c: value for key, (c, value) in zip(keys, empty.items()) if v.changed(key, ("none", lang))}
            if v.changed("evaluations", ""):
                out[evaluations] = gr.update(value="", visible=False)
            if v.changed("diagnosis", ""):
                out[diagnosis] = gr.update(value="", visible=False)
            if v.changed("fix", False):
                out[fix] = gr.update(visible=False)
            return out | render_charts(v, None, lang) | render_samples(v, None, lang) | render_manage(v, None, lang)
        new = store.metrics_since(run.id, v.last_id)
        if new:
            add_rows(v.series, new)
            v.last_id = new[-1]["id"]
        html = progress_html(run, now, lang=lang)
        if v.changed("progress", html):
            out[progress] = html
        # an ended run's log is final once its supervisor has written the last lines (a few seconds)
        settled = not run.active and run.finished_at and now - run.finished_at > LOG_SETTLE_S
        tail = v.shown["log"] if settled and "log" in v.shown else read_log_tail(store, run.id, LOG_LINES)
        if v.changed("log_lang", (tail, lang)):  # "log" keeps the tail itself (read back once settled)
            v.changed("log", tail)
            out[log_tail] = log_html(tail, lang)
        found = doctor_render.run_diagnoses(run)
        banner = doctor_render.banner_markdown(found, lang)
        if v.changed("diagnosis", banner):
            out[diagnosis] = gr.update(value=banner, visible=bool(banner))
        fixable = doctor_render.fixed_config(run.config, doctor_render.fixes(found)) is not None
        if v.changed("fix", fixable):
            out[fix] = gr.update(visible=fixable)
        err = _error_markdown(run, lang)
        if v.changed("error", err):
            out[error] = gr.update(value=err, visible=bool(err))
        logs_at = reporting.locations(run.config.report_to, store.run_dir(run.id), store.workspace)  # under adapter
        if v.changed("adapter", (run.adapter_path, logs_at)):
            out[adapter] = gr.update(value=run.adapter_path or "", info=logs_at)
        cfg = to_yaml(run.config)
        if v.changed("config", cfg):
            out[config] = cfg
        # a run's evaluations are re-read only when one ends
        if v.changed("evaluations_seen", (run.id, run.active, evals.ended_stamp(store), lang)):
            text = "" if run.active else run_evaluations_markdown(store, run.id, lang)
            if v.changed("evaluations", text):
                out[evaluations] = gr.update(value=text, visible=bool(text))
        return out | render_charts(v, run, lang) | render_samples(v, run, lang) | render_manage(v, run, lang)

    def on_group(i: int, unfolded: bool):
        def handler(v: RunView, request: gr.Request = None):
            (v.open_groups.add if unfolded else v.open_groups.discard)(i)
            return render(v, i18n.lang_of(request))
        return handler

    def on_poll(v: RunView, request: gr.Request = None):
        return render(v, i18n.lang_of(request))

    def on_select(run_id, v: RunView, request: gr.Request = None):
        return render(v.select(run_id or None), i18n.lang_of(request))

    def on_sample_step(step, v: RunView, request: gr.Request = None):
        v.sample_step = step or ALL_STEPS
        return render(v, i18n.lang_of(request))

    def on_table_select(evt: gr.SelectData):
        row = evt.row_value or []
        return row[-1] if row else gr.skip()

    def on_stop(v: RunView, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not v.run_id:
            gr.Info(i18n.text("msg.select_run", lang))
            return render(v, lang)
        outcome = jobs.stop_run(store, v.run_id)
        gr.Info(i18n.text("runs.stopping", lang) if outcome == "stopping"
                else i18n.text("runs.outcome", lang, outcome=status_text(outcome, lang)))
        return render(v, lang)

    def on_resume(v: RunView, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not v.run_id:
            gr.Info(i18n.text("msg.select_run", lang))
            return render(v, lang)
        try:
            run = jobs.resume_run(store, v.run_id)
        except (KeyError, ValueError) as e:
            gr.Warning(i18n.text("runs.cannot_resume", lang, why=e.args[0]))  # the store's reason, in English
            return render(v, lang)
        gr.Info(i18n.text("runs.resuming", lang, name=run.name, attempt=run.attempt, step=run.step,
                          status=status_text(run.status, lang)))
        return render(v, lang)

    def on_note(text, v: RunView, request: gr.Request = None):
        try:
            run = store.get_run(v.run_id) if v.run_id else None
        except KeyError:  # deleted meanwhile
            return
        if run is not None and (text or "").strip() != run.note:
            store.set_note(run.id, text)
            gr.Info(i18n.text("runs.note_saved", i18n.lang_of(request), name=run.name))

    def on_delete(v: RunView, request: gr.Request = None):
        lang = i18n.lang_of(request)
        run = next((r for r in store.list_runs() if r.id == v.run_id), None)
        if run is None:
            gr.Info(i18n.text("msg.select_run", lang))
        elif run.active:
            gr.Warning(i18n.text("runs.stop_first", lang, name=run.name, status=status_text(run.status, lang)))
        else:
            v.confirm_delete = not v.confirm_delete  # a second click on Delete cancels
        return render(v, lang)

    def on_confirm_delete(v: RunView, request: gr.Request = None):
        lang = i18n.lang_of(request)
        ids = [r.id for r in store.list_runs()]
        if v.run_id not in ids:
            return render(v.select(None), lang)
        name = store.get_run(v.run_id).name
        try:
            left = jobs.delete_runs(store, [v.run_id])
        except DeleteRefused as e:
            gr.Warning(i18n.text("runs.cannot_delete", lang, why=e.errors[0]))  # the store's reason, in English
            v.confirm_delete = False
            return render(v, lang)
        gr.Info(i18n.text("runs.deleted", lang, name=name))
        for line in left:
            gr.Warning(i18n.text("runs.not_removed", lang, what=line))
        i = ids.index(v.run_id)
        rest = ids[:i] + ids[i + 1:]
        after = rest[min(i, len(rest) - 1)] if rest else None  # the next run in the table, else the one above
        return render(v.select(after), lang) | {select: run_selection(store, after)}

    # one at a time, each reading the view the last one left: a poll from opening the tab that ended after the
    # page's first selection would otherwise put back a view with no run selected
    serial = dict(concurrency_id="runs-view", concurrency_limit=1)
    # the poll only reads the store: the server's dispatcher thread (backend.runs.jobs.start_dispatcher) moves the queue
    polls.add("runs", on_poll, view, outputs, show_progress="hidden", **serial)
    gr.on([note.blur, note.submit], on_note, [note, view], None, show_progress="hidden")
    delete.click(on_delete, view, outputs, show_progress="hidden", **serial)
    confirm.click(on_confirm_delete, view, outputs, show_progress_on=progress, **serial)
    select.change(on_select, [select, view], outputs, show_progress="hidden", **serial)
    table.select(on_table_select, None, select)
    samples_step.input(on_sample_step, [samples_step, view], outputs, show_progress="hidden", **serial)
    stop.click(on_stop, view, outputs, show_progress_on=progress, **serial)
    for i, box in enumerate(group_boxes):
        box.expand(on_group(i, True), view, outputs, show_progress="hidden", **serial)
        box.collapse(on_group(i, False), view, outputs, show_progress="hidden", **serial)
    resume.click(on_resume, view, outputs, show_progress_on=progress, **serial)
    return RunsTab(select=select, outputs=outputs, render=render, evaluate=evaluate, fix=fix)


def initial_selection(store: RunStore):
    return run_selection(store, default_selection(store.list_runs()))
