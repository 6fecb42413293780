"""The Runs tab's layout: the runs table, the selected run's controls, charts, samples, log and panels, with the
elem_ids the tests rely on, gathered in a RunsUI so handlers name the components they read and update
(app/runs_tab.py renders into them and wires them)."""
from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from app import compare_panel, export_panel, i18n, log_panel, serve_panel
from app.formatting import ALL_STEPS, RUN_COLUMNS, SAMPLE_COLUMNS, columns, progress_html, sample_step_choices
from app.plots import GROUP_SLOTS
from app.tab_polls import TabPolls
from backend.runs.store import RunStore


def log_html(text: str, lang: str = i18n.DEFAULT) -> str:
    # column-reverse keeps the box scrolled to its newest line without any script
    return f'<div class="wb-log"><pre>{html.escape(text) or i18n.text("runs.no_output", lang)}</pre></div>'


def samples_frame(rows: list[list], sources: list[str], lang: str = i18n.DEFAULT) -> pd.DataFrame:
    """The samples table; the reward sources' columns keep their names."""
    return pd.DataFrame(rows, columns=[*columns(SAMPLE_COLUMNS, lang), *sources, i18n.text("col.total", lang)])


@dataclass
class RunsUI:
    """The tab's components, and what its handlers reach beyond them."""
    store: RunStore
    view: gr.State  # the session's RunView
    table: gr.Dataframe
    select: gr.Dropdown
    stop: gr.Button
    resume: gr.Button
    evaluate: gr.Button
    note: gr.Textbox
    delete: gr.Button
    confirm: gr.Button
    progress: gr.HTML
    diagnosis: gr.Markdown
    fix: gr.Button
    error: gr.Markdown
    evaluations: gr.Markdown
    plot: gr.Plot
    flat: gr.Markdown
    group_boxes: list  # the other charts' accordions, folded by name prefix
    group_plots: list  # their plots, drawn only while unfolded
    samples_box: gr.Column
    samples_step: gr.Dropdown
    samples_table: gr.Dataframe
    log_tail: gr.HTML
    adapter: gr.Textbox
    config: gr.Code

    @property
    def outputs(self) -> list:
        """What a render may update (each poll, selection and button of the tab)."""
        return [self.table, self.select, self.progress, self.plot, self.log_tail, self.error, self.adapter,
                self.config, self.samples_box, self.samples_step, self.samples_table, self.note, self.delete,
                self.confirm, self.view, self.resume, self.evaluate, self.evaluations, self.stop, self.flat,
                self.diagnosis, self.fix, *self.group_boxes, *self.group_plots]


def layout(store: RunStore, polls: TabPolls, view: gr.State, words=None, ui_password: str | None = None) -> RunsUI:
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

    return RunsUI(store=store, view=view, table=table, select=select, stop=stop, resume=resume, evaluate=evaluate,
                  note=note, delete=delete, confirm=confirm, progress=progress, diagnosis=diagnosis, fix=fix,
                  error=error, evaluations=evaluations, plot=plot, flat=flat, group_boxes=group_boxes,
                  group_plots=group_plots, samples_box=samples_box, samples_step=samples_step,
                  samples_table=samples_table, log_tail=log_tail, adapter=adapter, config=config)
