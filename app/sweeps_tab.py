"""The Sweeps tab: start an Optuna (Bayesian) hyperparameter sweep, follow its trials, train the best config.

A sweep is a base run config (a preset, edited as YAML), a few settings to search (rows; each field's kind
and range default from the schema and the base's value) and an objective. Its driver runs detached
(backend/sweeps/): closing the page never stops it. Each trial is an ordinary run, so clicking a trial opens
it in the Runs tab. Like the Runs tab, a gr.Timer re-renders the selected sweep, leaving out of the update
whatever the page already shows; the poll only reads the store.
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from app import i18n
from app.choices import preset_choices, run_selection
from app.events import Packed, bind
from app.sweep_render import (DEFAULT_BASE, MAX_PARAMS, SWEEP_COLUMNS, base_text_for, default_param, history_figure,
                              importances, param_from_row, parse_base, row_values, searchable_fields, spec_data,
                              status_html, sweep_columns, sweep_preset_choices, sweep_table_rows, SweepView,
                              trials_frame)
from app.forms import FIELDS
from app.formatting import status_text
from app.tab_polls import TabPolls
from backend import sweeps
from backend.config import ConfigError, build_config, to_yaml
from backend.runs import jobs
from backend.runs.store import RunStore


@dataclass
class SweepsUI:
    """The tab's components, and what its handlers reach beyond them."""
    store: RunStore
    polls: TabPolls
    runs_select: gr.Dropdown  # the Runs tab's picker: a trial opens there
    train_form: object  # the Train tab's SettingsForm, or None
    view: gr.State
    spec_preset: gr.Dropdown
    base_preset: gr.Dropdown
    from_train: gr.Button
    base_yaml: gr.Code
    metric: gr.Dropdown
    direction: gr.Radio
    reduce: gr.Dropdown
    last_k: gr.Number
    n_trials: gr.Number
    seed: gr.Number
    name: gr.Textbox
    prune: gr.Checkbox
    rows: list  # (the row's components, its remove button) per searchable setting
    row_boxes: list
    count: gr.State
    base_mode_shown: gr.State
    add: gr.Button
    start: gr.Button
    message: gr.Markdown
    sweeps_table: gr.Dataframe
    select: gr.Dropdown
    stop: gr.Button
    more: gr.Number
    resume: gr.Button
    status: gr.HTML
    trials_table: gr.Dataframe
    history: gr.Plot
    best_yaml: gr.Code
    best_to_form: gr.Button
    train_best: gr.Button

    @property
    def outputs(self) -> list:
        return [self.sweeps_table, self.select, self.status, self.trials_table, self.history, self.best_yaml, self.view]

    @property
    def row_inputs(self) -> list:
        return [c for comps, _ in self.rows for c in comps]


# ---- layout ----

def layout(store: RunStore, polls: TabPolls, runs_select: gr.Dropdown, train_form=None, words=None) -> SweepsUI:
    """Lay the tab out; `words` (an i18n.Translatable) is given its words."""
    t = i18n.given(words).add
    view = gr.State(SweepView())
    base_data = parse_base(base_text_for(str(DEFAULT_BASE)))
    base_mode = base_data.get("mode", "sft")
    t(gr.Markdown(elem_classes=["wb-intro"]), "sweeps.intro", "value")
    with t(gr.Accordion(open=True, elem_id="sweep-new"), "sweeps.new"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=1):
                with gr.Row(elem_classes=["wb-bottom"]):
                    spec_preset = t(gr.Dropdown(choices=sweep_preset_choices(), value=None, elem_id="sweep-preset",
                                                scale=3), "sweeps.spec_preset")
                    base_preset = t(gr.Dropdown(choices=preset_choices(store.workspace), value=str(DEFAULT_BASE),
                                                elem_id="sweep-base-preset", scale=3), "sweeps.base_preset")
                from_train = t(gr.Button(size="sm", elem_id="sweep-base-from-train", visible=train_form is not None),
                               "sweeps.from_train", "value")
                base_yaml = t(gr.Code(base_text_for(str(DEFAULT_BASE)), language="yaml", interactive=True,
                                      elem_id="sweep-base", max_lines=16), "sweeps.base")
            with gr.Column(scale=1):
                t(gr.Markdown(elem_classes=["wb-section"]), "sweeps.objective", "value")
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    metric = t(gr.Dropdown(choices=sweeps.objective_metrics(build_config(base_data)), value="loss",
                                           allow_custom_value=True, elem_id="sweep-metric", scale=3), "sweeps.metric")
                    direction = t(gr.Radio(["minimize", "maximize"], value="minimize", elem_id="sweep-direction",
                                           scale=2), "sweeps.direction",
                                  choices=[("sweeps.minimize", "minimize"), ("sweeps.maximize", "maximize")])
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    reduce = t(gr.Dropdown([("last value", "last"), ("mean of the last k", "mean_last"),
                                            ("best value", "best")], value="last", elem_id="sweep-reduce", scale=3),
                               "sweeps.reduce", choices=[("sweeps.reduce.last", "last"),
                                                         ("sweeps.reduce.mean_last", "mean_last"),
                                                         ("sweeps.reduce.best", "best")])
                    last_k = t(gr.Number(5, precision=0, minimum=1, elem_id="sweep-last-k", scale=2), "sweeps.last_k")
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    n_trials = t(gr.Number(8, precision=0, minimum=1, elem_id="sweep-n-trials", scale=1, min_width=90),
                                 "sweeps.trials")
                    seed = t(gr.Number(42, precision=0, minimum=0, elem_id="sweep-seed", scale=1, min_width=90),
                             "common.seed")
                    name = t(gr.Textbox(elem_id="sweep-name", scale=2), "sweeps.name",
                             placeholder="sweeps.name_placeholder")
                prune = t(gr.Checkbox(False, elem_id="sweep-prune"), "sweeps.prune")
        t(gr.Markdown(elem_classes=["wb-section"]), "sweeps.space", "value")
        rows, row_boxes = [], []
        field_choices = searchable_fields(base_mode)
        for i in range(MAX_PARAMS):
            first = default_param("learning_rate", base_data) if i == 0 else None
            values = row_values(first)
            with gr.Row(visible=i == 0, elem_id=f"sweep-param-{i}", equal_height=False,
                        elem_classes=["wb-bottom"]) as box:
                comps = [
                    t(gr.Dropdown(choices=field_choices, value=values[0], scale=4, allow_custom_value=True,
                                  elem_id=f"sweep-param-{i}-field"), "sweeps.setting"),
                    t(gr.Dropdown(choices=list(sweeps.KINDS), value=values[1], scale=2,
                                  elem_id=f"sweep-param-{i}-kind", min_width=130), "sweeps.kind"),
                    t(gr.Number(value=values[2], scale=2, elem_id=f"sweep-param-{i}-low", min_width=110), "sweeps.low"),
                    t(gr.Number(value=values[3], scale=2, elem_id=f"sweep-param-{i}-high", min_width=110),
                      "sweeps.high"),
                    t(gr.Textbox(value=values[4], scale=4, elem_id=f"sweep-param-{i}-choices", min_width=160),
                      "sweeps.choices"),
                ]
                remove = gr.Button("✕", scale=0, min_width=40, elem_id=f"sweep-param-{i}-remove")
            rows.append((comps, remove))
            row_boxes.append(box)
        count = gr.State(1)
        base_mode_shown = gr.State(base_mode)
        with gr.Row():
            add = t(gr.Button(size="sm", elem_id="sweep-add-param", scale=1), "sweeps.add", "value")
            start = t(gr.Button(variant="primary", elem_id="sweep-start", scale=2), "sweeps.start", "value")
        message = gr.Markdown("", elem_id="sweep-message")

    sweeps_table = t(gr.Dataframe(pd.DataFrame(columns=SWEEP_COLUMNS), headers=SWEEP_COLUMNS, interactive=False,
                                  elem_id="sweeps-table", max_height=220), "sweeps.table")
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        select = t(gr.Dropdown(choices=[], value=None, elem_id="sweeps-select", scale=4), "sweeps.select")
        stop = t(gr.Button(variant="stop", elem_id="sweep-stop", scale=1, min_width=120), "sweeps.stop", "value")
        more = t(gr.Number(0, precision=0, minimum=0, elem_id="sweep-more-trials", scale=1, min_width=120),
                 "sweeps.more")
        resume = t(gr.Button(elem_id="sweep-resume", scale=1, min_width=100), "sweeps.resume", "value")
    status = gr.HTML(status_html(None, []), elem_id="sweep-status")
    trials_table = t(gr.Dataframe(trials_frame(store, None, []), interactive=False, elem_id="sweep-trials",
                                  max_height=360), "sweeps.trials_table")
    history = gr.Plot(elem_id="sweep-history", show_label=False)
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        best_yaml = t(gr.Code(language="yaml", interactive=False, elem_id="sweep-best-config", max_lines=14, scale=4),
                      "sweeps.best")
        with gr.Column(scale=1, min_width=200):
            best_to_form = t(gr.Button(elem_id="sweep-best-to-train", visible=train_form is not None),
                             "sweeps.best_to_train", "value")
            train_best = t(gr.Button(variant="primary", elem_id="sweep-train-best"), "sweeps.train_best", "value")

    return SweepsUI(store, polls, runs_select, train_form, view=view, spec_preset=spec_preset, base_preset=base_preset,
                    from_train=from_train, base_yaml=base_yaml, metric=metric, direction=direction, reduce=reduce,
                    last_k=last_k, n_trials=n_trials, seed=seed, name=name, prune=prune, rows=rows, row_boxes=row_boxes,
                    count=count, base_mode_shown=base_mode_shown, add=add, start=start, message=message,
                    sweeps_table=sweeps_table, select=select, stop=stop, more=more, resume=resume, status=status,
                    trials_table=trials_table, history=history, best_yaml=best_yaml, best_to_form=best_to_form,
                    train_best=train_best)


# ---- rendering and handlers ----

def render(ui: SweepsUI, v: SweepView, lang: str = i18n.DEFAULT) -> dict:
    """What changed since the view was last sent (a change of language changes every text)."""
    now = time.time()
    all_sweeps = sweeps.list_sweeps(ui.store)
    if v.sweep_id not in {s.id for s in all_sweeps}:
        v.sweep_id = next((s.id for s in all_sweeps if s.active), all_sweeps[0].id if all_sweeps else None)
    out = {ui.view: v}
    table = sweep_table_rows(ui.store, all_sweeps, now, lang)
    if v.changed("table", (lang, table)):
        out[ui.sweeps_table] = pd.DataFrame(table, columns=sweep_columns(lang))
    select_choices = [(f"{s.name} · {s.id}", s.id) for s in all_sweeps]
    if v.changed("select", (select_choices, v.sweep_id)):
        out[ui.select] = gr.update(choices=select_choices, value=v.sweep_id)
    sweep = next((s for s in all_sweeps if s.id == v.sweep_id), None)
    trials = sweeps.list_trials(ui.store, sweep.id) if sweep else []
    rows_now = sweeps.trial_rows(ui.store, sweep, trials) if sweep else []
    if v.changed("trials", (lang, v.sweep_id, str(rows_now))):
        out[ui.trials_table] = trials_frame(ui.store, sweep, trials, lang)
    if v.changed("plot", (lang, v.sweep_id, [(t.number, t.status, t.value) for t in trials])):
        out[ui.history] = history_figure(sweep, trials, lang)
    done = tuple(t.number for t in trials if t.status == "completed")
    stat = status_html(sweep, trials, importances(ui.store, sweep, done) if sweep else None, lang)
    if v.changed("status", stat):
        out[ui.status] = stat
    best = sweeps.best_trial(sweep.spec, trials) if sweep else None
    best_text = to_yaml(sweeps.trial_config(sweep.spec, best.params, name=f"{sweep.name} best")) if best else ""
    if v.changed("best", best_text):
        out[ui.best_yaml] = best_text
    return out


def on_poll(ui: SweepsUI, v: SweepView, request: gr.Request = None):
    return render(ui, v, i18n.lang_of(request))


def on_select(ui: SweepsUI, sweep_id, v: SweepView, request: gr.Request = None):
    return render(ui, SweepView(sweep_id=sweep_id or None, shown={"table": v.shown.get("table")}),
                  i18n.lang_of(request))


def on_table_select(ui: SweepsUI, evt: gr.SelectData, v: SweepView, request: gr.Request = None):
    row = evt.row_value or []
    return on_select(ui, row[-1], v, request) if row else gr.skip()


def open_run(ui: SweepsUI, run_id: str | None) -> dict:
    """Select the run in the Runs tab and open that tab."""
    return {ui.runs_select: run_selection(ui.store, run_id), **ui.polls.open("runs")}


def on_trial_select(ui: SweepsUI, evt: gr.SelectData):
    row = evt.row_value or []
    run_id = row[-1] if row else None
    return open_run(ui, run_id) if run_id and run_id != "-" else gr.skip()


def on_base_change(ui: SweepsUI, text, current_metric, shown_mode):
    """The base's mode decides which settings and metrics are offered (re-offered only when it changes)."""
    try:
        config = build_config(parse_base(text))
    except ConfigError:
        return gr.skip()
    if config.mode == shown_mode:
        return gr.skip()
    metrics = sweeps.objective_metrics(config)
    return ({comps[0]: gr.update(choices=searchable_fields(config.mode)) for comps, _ in ui.rows}
            | {ui.metric: gr.update(choices=metrics, value=current_metric if current_metric in metrics else "loss"),
               ui.base_mode_shown: config.mode})


def field_defaults(ui: SweepsUI, comps: list):
    """A row's setting was picked: its kind and range default from the schema and the base's value."""
    def on_field(path, text):
        if not path or path not in FIELDS:
            return gr.skip()
        try:
            base = build_config(parse_base(text)).model_dump()
        except ConfigError:
            base = build_config({}).model_dump()
        return dict(zip(comps[1:], row_values(default_param(path, base))[1:]))
    return on_field


def shown_rows(ui: SweepsUI, params: list[dict | None]) -> dict:
    params = [p for p in params if p][:MAX_PARAMS]
    values = [x for i in range(MAX_PARAMS) for x in row_values(params[i] if i < len(params) else None)]
    n = max(1, len(params))
    return (dict(zip(ui.row_inputs, values)) | {box: gr.update(visible=i < n) for i, box in enumerate(ui.row_boxes)}
            | {ui.count: n})


def current_rows(ui: SweepsUI, values: dict) -> list[dict | None]:
    return [param_from_row(*(values[c] for c in comps)) for comps, _ in ui.rows]


def on_add(ui: SweepsUI, n, request: gr.Request = None):
    if n >= MAX_PARAMS:
        gr.Warning(i18n.text("sweeps.at_most", i18n.lang_of(request), n=MAX_PARAMS))
        return gr.skip()
    return {box: gr.update(visible=i <= n) for i, box in enumerate(ui.row_boxes)} | {ui.count: n + 1}


def remover(ui: SweepsUI, index: int):
    def on_remove(values: dict):
        params = current_rows(ui, values)[:values[ui.count]]
        return shown_rows(ui, params[:index] + params[index + 1:])
    return on_remove


def on_spec_preset(ui: SweepsUI, path, request: gr.Request = None):
    if not path:
        return gr.skip()
    try:
        spec = sweeps.load_sweep_spec(path)
    except ConfigError as e:
        gr.Warning(i18n.text("sweeps.cannot_load", i18n.lang_of(request), why="; ".join(e.errors)))
        return gr.skip()
    o = spec.objective
    return shown_rows(ui, [p.model_dump(exclude_none=True) for p in spec.space]) | {
        ui.base_yaml: to_yaml(build_config(spec.base), only_changed=True), ui.base_preset: gr.update(value=None),
        ui.metric: o.metric, ui.direction: o.direction, ui.reduce: o.reduce, ui.last_k: o.last_k,
        ui.n_trials: spec.n_trials, ui.seed: spec.seed, ui.prune: spec.pruning.enabled, ui.name: spec.name}


def on_start(ui: SweepsUI, values: dict, request: gr.Request = None):
    lang = i18n.lang_of(request)
    v = values[ui.view]
    try:
        data = spec_data(values[ui.base_yaml], current_rows(ui, values)[:values[ui.count]], values[ui.metric],
                         values[ui.direction], values[ui.reduce], values[ui.last_k], values[ui.n_trials],
                         values[ui.seed], values[ui.prune], values[ui.name])
        spec = sweeps.build_sweep_spec(data)
        sweep = sweeps.start_sweep(ui.store, spec)
    except ConfigError as e:
        lines = "\n".join(f"- {html.escape(line)}" for line in e.errors)
        heading = i18n.text("sweeps.cannot_start", lang)
        return render(ui, v, lang) | {ui.message: f'<div class="wb-help-error">{heading}</div>\n\n{lines}'}
    gr.Info(i18n.text("sweeps.started_info", lang, name=sweep.name, n=spec.n_trials))
    return render(ui, SweepView(sweep_id=sweep.id), lang) | {
        ui.message: i18n.text("sweeps.started", lang, name=html.escape(sweep.name), id=sweep.id, n=spec.n_trials)}


def on_stop(ui: SweepsUI, v: SweepView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not v.sweep_id:
        gr.Info(i18n.text("sweeps.select_first", lang))
        return render(ui, v, lang)
    outcome = sweeps.stop_sweep(ui.store, v.sweep_id)
    gr.Info(i18n.text("sweeps.stopping", lang) if outcome == "stopping"
            else i18n.text("sweeps.outcome", lang, outcome=status_text(outcome, lang)))
    return render(ui, v, lang)


def on_resume(ui: SweepsUI, v: SweepView, extra, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not v.sweep_id:
        gr.Info(i18n.text("sweeps.select_first", lang))
        return render(ui, v, lang)
    try:
        n = sweeps.get_sweep(ui.store, v.sweep_id).spec.n_trials + int(extra or 0)
        sweeps.resume_sweep(ui.store, v.sweep_id, n)
        gr.Info(i18n.text("sweeps.resumed", lang, n=n))
    except ConfigError as e:
        gr.Warning(i18n.text("sweeps.cannot_resume", lang, why="; ".join(e.errors)))
    return render(ui, v, lang)


def best_config(ui: SweepsUI, v: SweepView, lang: str):
    """The selected sweep's best trial's config, or None (said in a warning)."""
    config = sweeps.best_config(ui.store, v.sweep_id) if v.sweep_id else None
    if config is None:
        gr.Warning(i18n.text("sweeps.no_trial", lang))
    return config


def on_train_best(ui: SweepsUI, v: SweepView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if (config := best_config(ui, v, lang)) is None:
        return gr.skip()
    try:
        run = jobs.submit_run(ui.store, config)
    except ConfigError as e:
        gr.Warning(i18n.text("sweeps.cannot_train_best", lang, why="; ".join(e.errors)))
        return gr.skip()
    gr.Info(i18n.text("sweeps.started_run", lang, name=run.name))
    return open_run(ui, run.id)


def on_from_train(ui: SweepsUI, values: dict, request: gr.Request = None):
    try:
        config = ui.train_form.config_from(values)
    except ConfigError as e:
        gr.Warning(i18n.text("sweeps.train_invalid", i18n.lang_of(request), errors="; ".join(e.errors)))
        return gr.skip()
    return to_yaml(config, only_changed=True)


def on_best_to_form(ui: SweepsUI, v: SweepView, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if (config := best_config(ui, v, lang)) is None:
        return gr.skip()
    gr.Info(i18n.text("sweeps.best_in_train", lang))
    return ui.train_form.updates_from(config) | ui.polls.open("train")


# ---- wiring ----

def wire(ui: SweepsUI) -> None:
    outputs, row_inputs, rows, polls = ui.outputs, ui.row_inputs, ui.rows, ui.polls
    if ui.train_form is not None:
        Packed(set(ui.train_form.inputs)).on(ui.from_train.click, bind(on_from_train, ui), ui.base_yaml)
        ui.best_to_form.click(bind(on_best_to_form, ui), ui.view, [*ui.train_form.outputs, *polls.outputs],
                              show_progress_on=ui.best_to_form)

    # the poll only reads the store: the server's dispatcher thread marks sweeps whose driver died
    polls.add("sweeps", bind(on_poll, ui), ui.view, outputs, show_progress="hidden")
    ui.select.input(bind(on_select, ui), [ui.select, ui.view], outputs, show_progress="hidden")
    ui.sweeps_table.select(bind(on_table_select, ui), ui.view, outputs, show_progress="hidden")
    ui.trials_table.select(bind(on_trial_select, ui), None, [ui.runs_select, *polls.outputs])
    ui.base_preset.input(base_text_for, ui.base_preset, ui.base_yaml)
    ui.base_yaml.change(bind(on_base_change, ui), [ui.base_yaml, ui.metric, ui.base_mode_shown],
                        [comps[0] for comps, _ in rows] + [ui.metric, ui.base_mode_shown], show_progress="hidden")
    for comps, _ in rows:
        comps[0].input(field_defaults(ui, comps), [comps[0], ui.base_yaml], comps[1:], show_progress="hidden")
    space = Packed({ui.count, *row_inputs})  # the search space's rows go packed (app/events.Packed)
    for i, (_, remove) in enumerate(rows):
        space.on(remove.click, remover(ui, i), [*row_inputs, *ui.row_boxes, ui.count], show_progress="hidden")
    ui.add.click(bind(on_add, ui), ui.count, [*ui.row_boxes, ui.count], show_progress="hidden")
    ui.metric.input(lambda m: sweeps.default_direction(m or ""), ui.metric, ui.direction, show_progress="hidden")
    ui.spec_preset.input(bind(on_spec_preset, ui), ui.spec_preset,
                         [*row_inputs, *ui.row_boxes, ui.count, ui.base_yaml, ui.base_preset, ui.metric, ui.direction,
                          ui.reduce, ui.last_k, ui.n_trials, ui.seed, ui.prune, ui.name], show_progress="hidden")
    form_inputs = {ui.view, ui.count, ui.base_yaml, ui.metric, ui.direction, ui.reduce, ui.last_k, ui.n_trials,
                   ui.seed, ui.prune, ui.name}
    Packed(form_inputs | set(row_inputs)).on(ui.start.click, bind(on_start, ui), [ui.message, *outputs])
    ui.stop.click(bind(on_stop, ui), ui.view, outputs)
    ui.resume.click(bind(on_resume, ui), [ui.view, ui.more], outputs)
    ui.train_best.click(bind(on_train_best, ui), ui.view, [ui.runs_select, *polls.outputs])


def build(store: RunStore, polls: TabPolls, runs_select: gr.Dropdown, train_form=None, words=None) -> SweepsUI:
    """The tab's layout and events; `train_form` (the Train tab's SettingsForm) lets its settings become the
    base, and the best trial's settings go back into it to train longer; `words` (an i18n.Translatable) is given
    its words."""
    ui = layout(store, polls, runs_select, train_form, words)
    wire(ui)
    return ui
