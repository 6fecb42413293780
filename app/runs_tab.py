"""The Runs tab: every run in the store, and for the selected one its progress, live metric plots, log,
error and adapter; for RL runs also live samples (prompt, completion, each reward source's score).

Live updates come from a gr.Timer whose poll only reads the store (the server's dispatcher thread moves the
queue). Each browser session keeps a RunView in gr.State: the metric series and samples fetched so far and the
last id of each, so a poll reads only newer rows (`store.metrics_since`, `store.samples_since`), and what it
last sent to each component, so unchanged components are left out of the update instead of re-sent.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr
import pandas as pd

from app import doctor_render, i18n
from app.choices import run_choices, run_selection
from app.eval_render import run_evaluations_markdown
from app.events import bind
from app.formatting import (ALL_STEPS, RUN_COLUMNS, columns, progress_html, run_table_rows, sample_sources,
                            sample_step_choices, sample_table_rows, score_table_widths, status_text)
from app.plots import Series, add_rows, chart_layout, figure_from_series, flat_text
from app.runs_layout import RunsUI, layout, log_html, samples_frame
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


def _error_markdown(run: Run, lang: str = i18n.DEFAULT) -> str:
    return f"**{i18n.text('runs.error', lang)}**\n\n```text\n{run.error}\n```" if run.error else ""


def configured_sources(run: Run) -> list[str]:
    """The metric names of a run's reward sources (none for a config another schema version stored)."""
    from backend.rewards.spec import source_names

    try:
        return source_names(run.config.reward_sources or [])
    except (ValueError, AttributeError):
        return []


def render_charts(ui: RunsUI, v: RunView, run: Run | None, lang: str) -> dict:
    """The lead chart, the flat metrics' line and each group's slot (its figure only while unfolded)."""
    if not v.changed("charts", (run and run.id, v.last_id, tuple(sorted(v.open_groups)), lang)):
        return {}
    budgets = cost_budgets(run.config.reward_sources) if run else {}
    charts = chart_layout(v.series, run.config.spec.charts if run else ())
    out = {ui.plot: figure_from_series(v.series, budgets=budgets, names=charts.lead, lang=lang)}
    text = i18n.text("runs.flat", lang, text=flat_text(v.series, charts.flat)) if charts.flat else ""
    if v.changed("flat", text):
        out[ui.flat] = gr.update(value=text, visible=bool(text))
    for i, (box, figure) in enumerate(zip(ui.group_boxes, ui.group_plots)):
        title, names = charts.groups[i] if i < len(charts.groups) else ("", [])
        title = i18n.text(f"runs.group.{title}", lang) if title in ("other", "more") else title
        label = (i18n.text("runs.chart", lang, title=title) if len(names) == 1
                 else i18n.text("runs.charts", lang, title=title, n=len(names))) if names else ""
        if v.changed(f"group-{i}", label):
            out[box] = gr.update(label=label, visible=bool(names))
        if names and i in v.open_groups:
            out[figure] = figure_from_series(v.series, budgets=budgets, names=names, lang=lang)
    return out


def render_manage(ui: RunsUI, v: RunView, run: Run | None, lang: str) -> dict:
    """Stop, note, delete, confirm and resume: an active run can be stopped, not deleted; the note follows the
    store."""
    deletable = run is not None and not run.active
    v.confirm_delete = v.confirm_delete and deletable
    out = {}
    stoppable = run is not None and run.active  # an ended run has nothing to stop
    if v.changed("stop", stoppable):
        out[ui.stop] = gr.update(interactive=stoppable)
    resumable = run is not None and run.status in RESUMABLE
    if v.changed("resume", resumable):
        out[ui.resume] = gr.update(interactive=resumable)
    evaluable = run is not None and run.status == "completed" and bool(run.adapter_path)
    if v.changed("evaluate", evaluable):
        out[ui.evaluate] = gr.update(interactive=evaluable)
    if v.changed("note", (run.id, run.note) if run else None):
        out[ui.note] = gr.update(value=run.note if run else "", interactive=run is not None)
    if v.changed("delete", deletable):
        out[ui.delete] = gr.update(interactive=deletable)
    if v.changed("confirm", (v.confirm_delete, run and run.name, lang)):
        out[ui.confirm] = gr.update(visible=v.confirm_delete,
                                    value=i18n.text("runs.confirm_run", lang, name=run.name) if run
                                    else i18n.text("runs.confirm_delete", lang))
    return out


def render_samples(ui: RunsUI, v: RunView, run: Run | None, lang: str) -> dict:
    """The samples box, its step filter and table (reads only samples newer than the last)."""
    if run is None or run.mode not in RL_MODES:
        return {ui.samples_box: gr.update(visible=False)} if v.changed("samples_box", False) else {}
    new = ui.store.samples_since(run.id, v.last_sample_id)
    if new:
        v.samples = (v.samples + new)[-SAMPLES_KEPT:]
        v.last_sample_id = new[-1]["id"]
    out = {ui.samples_box: gr.update(visible=True)} if v.changed("samples_box", True) else {}
    steps = sample_step_choices(v.samples, lang)
    if v.sample_step not in {value for _, value in steps}:
        v.sample_step = ALL_STEPS
    if v.changed("sample_steps", (tuple(steps), v.sample_step)):
        out[ui.samples_step] = gr.update(choices=steps, value=v.sample_step)
    sources = sample_sources(v.samples, configured_sources(run))
    if v.changed("samples_table", (v.last_sample_id, v.sample_step, tuple(sources), lang)):
        frame = samples_frame(sample_table_rows(v.samples, sources, v.sample_step), sources, lang)
        widths = score_table_widths(len(sources), step_column=True)
        out[ui.samples_table] = gr.update(value=frame, column_widths=widths)
    return out


def render(ui: RunsUI, v: RunView, lang: str = i18n.DEFAULT) -> dict:
    """Updates for `outputs` in `lang`, leaving out whatever the page already shows."""
    now = time.time()
    runs = ui.store.list_runs()
    rows = run_table_rows(runs, now, lang)
    out = {ui.view: v}
    if v.changed("table", (rows, lang)):  # the headers too: the timer re-sends them in the session's language
        out[ui.table] = pd.DataFrame(rows, columns=columns(RUN_COLUMNS, lang))
    choices = run_choices(runs)
    if v.changed("choices", choices):
        out[ui.select] = gr.update(choices=choices)
    run = next((r for r in runs if r.id == v.run_id), None)
    if run is None:
        v.run_id = None
        empty = {ui.progress: progress_html(None, lang=lang), ui.log_tail: log_html("", lang),
                 ui.error: gr.update(value="", visible=False), ui.adapter: gr.update(value="", info=None),
                 ui.config: ""}
        keys = ("progress", "log", "error", "adapter", "config")
        out |= {c: value for key, (c, value) in zip(keys, empty.items()) if v.changed(key, ("none", lang))}
        if v.changed("evaluations", ""):
            out[ui.evaluations] = gr.update(value="", visible=False)
        if v.changed("diagnosis", ""):
            out[ui.diagnosis] = gr.update(value="", visible=False)
        if v.changed("fix", False):
            out[ui.fix] = gr.update(visible=False)
        return (out | render_charts(ui, v, None, lang) | render_samples(ui, v, None, lang)
                | render_manage(ui, v, None, lang))
    new = ui.store.metrics_since(run.id, v.last_id)
    if new:
        add_rows(v.series, new)
        v.last_id = new[-1]["id"]
    html = progress_html(run, now, lang=lang)
    if v.changed("progress", html):
        out[ui.progress] = html
    # an ended run's log is final once its supervisor has written the last lines (a few seconds)
    settled = not run.active and run.finished_at and now - run.finished_at > LOG_SETTLE_S
    tail = v.shown["log"] if settled and "log" in v.shown else read_log_tail(ui.store, run.id, LOG_LINES)
    if v.changed("log_lang", (tail, lang)):  # "log" keeps the tail itself (read back once settled)
        v.changed("log", tail)
        out[ui.log_tail] = log_html(tail, lang)
    found = doctor_render.run_diagnoses(run)
    banner = doctor_render.banner_markdown(found, lang)
    if v.changed("diagnosis", banner):
        out[ui.diagnosis] = gr.update(value=banner, visible=bool(banner))
    fixable = doctor_render.fixed_config(run.config, doctor_render.fixes(found)) is not None
    if v.changed("fix", fixable):
        out[ui.fix] = gr.update(visible=fixable)
    err = _error_markdown(run, lang)
    if v.changed("error", err):
        out[ui.error] = gr.update(value=err, visible=bool(err))
    logs_at = reporting.locations(run.config.report_to, ui.store.run_dir(run.id), ui.store.workspace)  # under adapter
    if v.changed("adapter", (run.adapter_path, logs_at)):
        out[ui.adapter] = gr.update(value=run.adapter_path or "", info=logs_at)
    cfg = to_yaml(run.config)
    if v.changed("config", cfg):
        out[ui.config] = cfg
    # a run's evaluations are re-read only when one ends
    if v.changed("evaluations_seen", (run.id, run.active, evals.ended_stamp(ui.store), lang)):
        text = "" if run.active else run_evaluations_markdown(ui.store, run.id, lang)
        if v.changed("evaluations", text):
            out[ui.evaluations] = gr.update(value=text, visible=bool(text))
    return out | render_charts(ui, v, run, lang) | render_samples(ui, v, run, lang) | render_manage(ui, v, run, lang)


def on_group(ui: RunsUI, i: int, unfolded: bool):
    def handler(v: RunView, request: gr.Request = None):
        (v.open_groups.add if unfolded else v.open_groups.discard)(i)
        return render(ui, v, i18n.lang_of(request))
    return handler


def on_poll(ui: RunsUI, v: RunView, request: gr.Request = None):
    return render(ui, v, i18n.lang_of(request))


def on_select(ui: RunsUI, run_id, v: RunView, request: gr.Request = None):
    return render(ui, v.select(run_id or None), i18n.lang_of(request))


def on_sample_step(ui: RunsUI, step, v: RunView, request: gr.Request = None):
    v.sample_step = step or ALL_STEPS
    return render(ui, v, i18n.lang_of(request))


def on_table_select(evt: gr.SelectData):
    row = evt.row_value or []
    return row[-1] if row else gr.skip()


def on_stop(ui: RunsUI, v: RunView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not v.run_id:
        gr.Info(i18n.text("msg.select_run", lang))
        return render(ui, v, lang)
    outcome = jobs.stop_run(ui.store, v.run_id)
    gr.Info(i18n.text("runs.stopping", lang) if outcome == "stopping"
            else i18n.text("runs.outcome", lang, outcome=status_text(outcome, lang)))
    return render(ui, v, lang)


def on_resume(ui: RunsUI, v: RunView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not v.run_id:
        gr.Info(i18n.text("msg.select_run", lang))
        return render(ui, v, lang)
    try:
        run = jobs.resume_run(ui.store, v.run_id)
    except (KeyError, ValueError) as e:
        gr.Warning(i18n.text("runs.cannot_resume", lang, why=e.args[0]))  # the store's reason, in English
        return render(ui, v, lang)
    gr.Info(i18n.text("runs.resuming", lang, name=run.name, attempt=run.attempt, step=run.step,
                      status=status_text(run.status, lang)))
    return render(ui, v, lang)


def on_note(ui: RunsUI, text, v: RunView, request: gr.Request = None):
    try:
        run = ui.store.get_run(v.run_id) if v.run_id else None
    except KeyError:  # deleted meanwhile
        return
    if run is not None and (text or "").strip() != run.note:
        ui.store.set_note(run.id, text)
        gr.Info(i18n.text("runs.note_saved", i18n.lang_of(request), name=run.name))


def on_delete(ui: RunsUI, v: RunView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    run = next((r for r in ui.store.list_runs() if r.id == v.run_id), None)
    if run is None:
        gr.Info(i18n.text("msg.select_run", lang))
    elif run.active:
        gr.Warning(i18n.text("runs.stop_first", lang, name=run.name, status=status_text(run.status, lang)))
    else:
        v.confirm_delete = not v.confirm_delete  # a second click on Delete cancels
    return render(ui, v, lang)


def on_confirm_delete(ui: RunsUI, v: RunView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    ids = [r.id for r in ui.store.list_runs()]
    if v.run_id not in ids:
        return render(ui, v.select(None), lang)
    name = ui.store.get_run(v.run_id).name
    try:
        left = jobs.delete_runs(ui.store, [v.run_id])
    except DeleteRefused as e:
        gr.Warning(i18n.text("runs.cannot_delete", lang, why=e.errors[0]))  # the store's reason, in English
        v.confirm_delete = False
        return render(ui, v, lang)
    gr.Info(i18n.text("runs.deleted", lang, name=name))
    for line in left:
        gr.Warning(i18n.text("runs.not_removed", lang, what=line))
    i = ids.index(v.run_id)
    rest = ids[:i] + ids[i + 1:]
    after = rest[min(i, len(rest) - 1)] if rest else None  # the next run in the table, else the one above
    return render(ui, v.select(after), lang) | {ui.select: run_selection(ui.store, after)}


def wire(ui: RunsUI, polls: TabPolls) -> RunsTab:
    outputs, view = ui.outputs, ui.view
    # one at a time, each reading the view the last one left: a poll from opening the tab that ended after the
    # page's first selection would otherwise put back a view with no run selected
    serial = dict(concurrency_id="runs-view", concurrency_limit=1)
    # the poll only reads the store: the server's dispatcher thread (backend.runs.jobs.start_dispatcher) moves the queue
    polls.add("runs", bind(on_poll, ui), view, outputs, show_progress="hidden", **serial)
    gr.on([ui.note.blur, ui.note.submit], bind(on_note, ui), [ui.note, view], None, show_progress="hidden")
    ui.delete.click(bind(on_delete, ui), view, outputs, show_progress="hidden", **serial)
    ui.confirm.click(bind(on_confirm_delete, ui), view, outputs, show_progress_on=ui.progress, **serial)
    ui.select.change(bind(on_select, ui), [ui.select, view], outputs, show_progress="hidden", **serial)
    ui.table.select(on_table_select, None, ui.select)
    ui.samples_step.input(bind(on_sample_step, ui), [ui.samples_step, view], outputs, show_progress="hidden",
                          **serial)
    ui.stop.click(bind(on_stop, ui), view, outputs, show_progress_on=ui.progress, **serial)
    for i, box in enumerate(ui.group_boxes):
        box.expand(on_group(ui, i, True), view, outputs, show_progress="hidden", **serial)
        box.collapse(on_group(ui, i, False), view, outputs, show_progress="hidden", **serial)
    ui.resume.click(bind(on_resume, ui), view, outputs, show_progress_on=ui.progress, **serial)
    return RunsTab(select=ui.select, outputs=outputs, render=bind(render, ui), evaluate=ui.evaluate, fix=ui.fix)


def build(store: RunStore, polls: TabPolls, view: gr.State, words=None,
          ui_password: str | None = None) -> RunsTab:
    """`words` (an i18n.Translatable) is given this tab's words to translate."""
    return wire(layout(store, polls, view, words, ui_password), polls)


def initial_selection(store: RunStore):
    return run_selection(store, default_selection(store.list_runs()))
