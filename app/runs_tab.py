"""The Runs tab: every run in the store, and for the selected one its progress, live metric plots, log,
error and adapter; for RL runs also live samples (prompt, completion, each reward source's score).

Live updates come from a gr.Timer. Each browser session keeps a RunView in gr.State: the metric series
and samples fetched so far and the last id of each, so a poll reads only newer rows (`store.metrics_since`,
`store.samples_since`), and what it last sent to each component, so unchanged components are skipped
instead of re-sent.
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass, field

import gradio as gr
import pandas as pd

from app import compare_panel, export_panel
from app.formatting import (ALL_STEPS, RUN_COLUMNS, SAMPLE_COLUMNS, progress_html, run_choices, run_table_rows,
                            sample_sources, sample_step_choices, sample_table_rows, score_table_widths)
from app.plots import Series, add_rows, figure_from_series
from app.view_state import SentValues
from backend import reporting
from backend.runs import jobs
from backend.config import to_yaml
from backend.modes.registry import RL_MODES
from backend.runs.store import DeleteRefused, Run, RunStore

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

    def select(self, run_id: str | None) -> RunView:
        return RunView(run_id=run_id, shown={k: v for k, v in self.shown.items() if k in _SHARED_KEYS})


@dataclass
class RunsTab:
    select: gr.Dropdown
    outputs: list
    render: object  # fn(view) -> values for outputs


def default_selection(runs: list[Run]) -> str | None:
    """The newest active run, else the newest run: what a fresh page should show."""
    pool = [r for r in runs if r.active] or runs
    return pool[0].id if pool else None


def log_html(text: str) -> str:
    # column-reverse keeps the box scrolled to its newest line without any script
    return f'<div class="wb-log"><pre>{html.escape(text) or "(no output yet)"}</pre></div>'


def _error_markdown(run: Run) -> str:
    return f"**Error**\n\n```text\n{run.error}\n```" if run.error else ""


def configured_sources(run: Run) -> list[str]:
    """The metric names of a run's reward sources (none for a config another schema version stored)."""
    from backend.rewards.spec import source_names

    try:
        return source_names(run.config.reward_sources or [])
    except (ValueError, AttributeError):
        return []


def samples_frame(rows: list[list], sources: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=[*SAMPLE_COLUMNS, *sources, "total"])


def build(store: RunStore, timer: gr.Timer, view: gr.State) -> RunsTab:
    table = gr.Dataframe(pd.DataFrame(columns=RUN_COLUMNS), headers=RUN_COLUMNS, interactive=False,
                         elem_id="runs-table", max_height=260, label="Runs (click a row to select it)")
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        select = gr.Dropdown(label="Selected run", choices=[], value=None, elem_id="runs-select", scale=4)
        stop = gr.Button("Stop run", variant="stop", elem_id="runs-stop", scale=1, min_width=120)
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        note = gr.Textbox(label="Note (saved when you press Enter or leave the box)", elem_id="run-note", scale=4,
                          placeholder="e.g. lr too high, diverged at step 40", interactive=False)
        delete = gr.Button("Delete run", elem_id="runs-delete", scale=1, min_width=120, interactive=False)
        confirm = gr.Button("Confirm delete", variant="stop", elem_id="runs-delete-confirm", scale=1,
                            min_width=120, visible=False)
    progress = gr.HTML(progress_html(None), elem_id="progress")
    error = gr.Markdown("", visible=False, elem_id="run-error")
    plot = gr.Plot(elem_id="metrics-plot", show_label=False)
    with gr.Column(visible=False, elem_id="samples") as samples_box:
        with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
            gr.Markdown("**Samples**: what the policy wrote at logging steps and how each reward source scored "
                        "it", elem_classes=["wb-section"], scale=4)
            samples_step = gr.Dropdown(label="Step", choices=[("all steps (newest first)", ALL_STEPS)],
                                       value=ALL_STEPS, elem_id="samples-step", scale=0, min_width=260)
        samples_table = gr.Dataframe(samples_frame([], []), interactive=False, wrap=True, max_height=420,
                                     elem_id="samples-table", show_label=False)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            gr.Markdown("**Log** (last lines)", elem_classes=["wb-section"])
            log_tail = gr.HTML(log_html(""), elem_id="log-tail")
        with gr.Column(scale=2):
            adapter = gr.Textbox(label="Adapter (PEFT folder)", interactive=False, elem_id="adapter-path",
                                 buttons=["copy"], placeholder="written when the run ends")
            with gr.Accordion("Run config", open=False):
                config = gr.Code(language="yaml", interactive=False, elem_id="run-config", show_label=False)
            export_panel.build(store, select)
    compare_panel.build(store, timer)

    outputs = [table, select, progress, plot, log_tail, error, adapter, config, samples_box, samples_step,
               samples_table, note, delete, confirm, view]

    def render_manage(v: RunView, run: Run | None) -> list:
        """Values for note, delete and confirm: an active run can't be deleted; the note follows the store."""
        deletable = run is not None and not run.active
        v.confirm_delete = v.confirm_delete and deletable
        note_key = (run.id, run.note) if run else None
        return [gr.update(value=run.note if run else "", interactive=run is not None)
                if v.changed("note", note_key) else gr.skip(),
                gr.update(interactive=deletable) if v.changed("delete", deletable) else gr.skip(),
                gr.update(visible=v.confirm_delete, value=f"Confirm: delete {run.name}" if run else "Confirm delete")
                if v.changed("confirm", (v.confirm_delete, run and run.name)) else gr.skip()]

    def render_samples(v: RunView, run: Run | None) -> list:
        """Values for samples_box, samples_step and samples_table (read only samples newer than the last)."""
        if run is None or run.mode not in RL_MODES:
            return [gr.update(visible=False) if v.changed("samples_box", False) else gr.skip(), gr.skip(),
                    gr.skip()]
        new = store.samples_since(run.id, v.last_sample_id)
        if new:
            v.samples = (v.samples + new)[-SAMPLES_KEPT:]
            v.last_sample_id = new[-1]["id"]
        box = gr.update(visible=True) if v.changed("samples_box", True) else gr.skip()
        steps = sample_step_choices(v.samples)
        if v.sample_step not in {value for _, value in steps}:
            v.sample_step = ALL_STEPS
        step_key = (tuple(steps), v.sample_step)
        step_out = gr.update(choices=steps, value=v.sample_step) if v.changed("sample_steps", step_key) else gr.skip()
        sources = sample_sources(v.samples, configured_sources(run))
        if not v.changed("samples_table", (v.last_sample_id, v.sample_step, tuple(sources))):
            return [box, step_out, gr.skip()]
        frame = samples_frame(sample_table_rows(v.samples, sources, v.sample_step), sources)
        return [box, step_out, gr.update(value=frame, column_widths=score_table_widths(len(sources), step_column=True))]

    def render(v: RunView):
        """Values for `outputs`, with gr.skip() wherever the page already shows the same thing."""
        now = time.time()
        runs = store.list_runs()
        rows = run_table_rows(runs, now)
        table_out = pd.DataFrame(rows, columns=RUN_COLUMNS) if v.changed("table", rows) else gr.skip()
        choices = run_choices(runs)
        select_out = gr.update(choices=choices) if v.changed("choices", choices) else gr.skip()
        run = next((r for r in runs if r.id == v.run_id), None)
        if run is None:
            v.run_id = None
            rest = [progress_html(None), figure_from_series({}), log_html(""), gr.update(value="", visible=False),
                    gr.update(value="", info=None), ""]
            rest = [value if v.changed(key, "none") else gr.skip() for key, value in
                    zip(("progress", "plot", "log", "error", "adapter", "config"), rest)]
            return [table_out, select_out, *rest, *render_samples(v, None), *render_manage(v, None), v]
        new = store.metrics_since(run.id, v.last_id)
        if new:
            add_rows(v.series, new)
            v.last_id = new[-1]["id"]
        plot_out = figure_from_series(v.series) if v.changed("plot", v.last_id) else gr.skip()
        html = progress_html(run, now)
        # an ended run's log is final once its supervisor has written the last lines (a few seconds)
        settled = not run.active and run.finished_at and now - run.finished_at > LOG_SETTLE_S
        tail = v.shown["log"] if settled and "log" in v.shown else jobs.log_tail(store, run.id, LOG_LINES)
        err = _error_markdown(run)
        cfg = to_yaml(run.config)
        logs_at = reporting.locations(run.config.report_to, store.run_dir(run.id), store.workspace)  # under adapter
        return [table_out, select_out,
                html if v.changed("progress", html) else gr.skip(),
                plot_out,
                log_html(tail) if v.changed("log", tail) else gr.skip(),
                gr.update(value=err, visible=bool(err)) if v.changed("error", err) else gr.skip(),
                gr.update(value=run.adapter_path or "", info=logs_at)
                if v.changed("adapter", (run.adapter_path, logs_at)) else gr.skip(),
                cfg if v.changed("config", cfg) else gr.skip(),
                *render_samples(v, run),
                *render_manage(v, run),
                v]

    def on_tick(v: RunView):
        jobs.dispatch(store)  # reconciles dead workers and starts queued runs, even with no CLI around
        return render(v)

    def on_select(run_id, v: RunView):
        return render(v.select(run_id or None))

    def on_sample_step(step, v: RunView):
        v.sample_step = step or ALL_STEPS
        return render(v)

    def on_table_select(evt: gr.SelectData):
        row = evt.row_value or []
        return row[-1] if row else gr.skip()

    def on_stop(v: RunView):
        if not v.run_id:
            gr.Info("Select a run first.")
            return render(v)
        outcome = jobs.stop_run(store, v.run_id)
        gr.Info("Stopping: the run saves its adapter and exits." if outcome == "stopping"
                else f"The run is {outcome}.")
        return render(v)

    def on_note(text, v: RunView):
        try:
            run = store.get_run(v.run_id) if v.run_id else None
        except KeyError:  # deleted meanwhile
            return
        if run is not None and (text or "").strip() != run.note:
            store.set_note(run.id, text)
            gr.Info(f"Note saved for {run.name}.")

    def on_delete(v: RunView):
        run = next((r for r in store.list_runs() if r.id == v.run_id), None)
        if run is None:
            gr.Info("Select a run first.")
        elif run.active:
            gr.Warning(f"{run.name} is {run.status}: stop it first, then delete it.")
        else:
            v.confirm_delete = not v.confirm_delete  # a second click on Delete cancels
        return render(v)

    def on_confirm_delete(v: RunView):
        ids = [r.id for r in store.list_runs()]
        if v.run_id not in ids:
            return render(v.select(None))
        name = store.get_run(v.run_id).name
        try:
            left = jobs.delete_runs(store, [v.run_id])
        except DeleteRefused as e:
            gr.Warning(e.errors[0])
            v.confirm_delete = False
            return render(v)
        gr.Info(f"Deleted {name}: its metrics, samples and folder (checkpoints, adapter, log). Exports under "
                "workspace/exports are kept.")
        for line in left:
            gr.Warning(f"Could not remove {line}")
        i = ids.index(v.run_id)
        rest = ids[:i] + ids[i + 1:]
        after = rest[min(i, len(rest) - 1)] if rest else None  # the next run in the table, else the one above
        out = render(v.select(after))
        out[outputs.index(select)] = gr.update(choices=run_choices(store.list_runs()), value=after)
        return out

    timer.tick(on_tick, view, outputs, show_progress="hidden")
    note.blur(on_note, [note, view], None, show_progress="hidden")
    note.submit(on_note, [note, view], None, show_progress="hidden")
    delete.click(on_delete, view, outputs, show_progress="hidden")
    confirm.click(on_confirm_delete, view, outputs)
    select.change(on_select, [select, view], outputs, show_progress="hidden")
    table.select(on_table_select, None, select)
    samples_step.input(on_sample_step, [samples_step, view], outputs, show_progress="hidden")
    stop.click(on_stop, view, outputs)
    return RunsTab(select=select, outputs=outputs, render=render)


def follow(store: RunStore, run_id: str | None):
    """After Start: select the new run in the Runs tab and open that tab (skip when nothing started)."""
    if not run_id:
        return gr.skip(), gr.skip()
    return gr.update(choices=run_choices(store.list_runs()), value=run_id), gr.Tabs(selected="runs")


def initial_selection(store: RunStore):
    runs = store.list_runs()
    return gr.update(choices=run_choices(runs), value=default_selection(runs))
