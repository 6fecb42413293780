"""The Sweeps tab: start an Optuna (Bayesian) hyperparameter sweep, follow its trials, train the best config.

A sweep is a base run config (a preset, edited as YAML), a few settings to search (rows; each field's kind
and range default from the schema and the base's value) and an objective. Its driver runs detached
(backend/sweeps.py): closing the page never stops it. Each trial is an ordinary run, so clicking a trial opens
it in the Runs tab. Like the Runs tab, a gr.Timer re-renders the selected sweep, leaving out of the update
whatever the page already shows; the poll only reads the store.
"""
from __future__ import annotations

import functools
import html
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_origin

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import yaml

from app.choices import preset_choices, run_selection
from app.formatting import fmt_time
from app.forms import FIELDS, bounds
from app.plots import empty_figure
from app.view_state import SentValues
from backend import sweeps
from backend.runs import jobs
from backend.config import ConfigError, build_config, choices, get_path, to_yaml
from backend.runs.store import RunStore

MAX_PARAMS = 6
SWEEP_PRESETS = Path(__file__).resolve().parents[1] / "presets" / "sweeps"
DEFAULT_BASE = Path(__file__).resolve().parents[1] / "presets" / "sft_demo.yaml"
SWEEP_COLUMNS = ["name", "status", "trials", "objective", "best", "started", "id"]
_BEST_STYLE = "background-color: rgba(22, 163, 74, 0.16); font-weight: 600"
_STATUS_COLORS = {"queued": "#6b7280", "running": "#4f46e5", "completed": "#16a34a", "failed": "#dc2626",
                  "stopped": "#d97706"}


# ---- plain functions (unit-tested without a browser) ----

def searchable_fields(mode: str) -> list[tuple[str, str]]:
    """(label, path) of the settings a sweep can search for this mode: numbers, on/off and named choices."""
    out = []
    for path, info in FIELDS.items():
        modes = (info.json_schema_extra or {}).get("modes")
        if path in sweeps.NOT_SEARCHED or (modes and mode not in modes):
            continue
        if info.annotation in (int, float, bool) or get_origin(info.annotation) is Literal:
            out.append((path, path))
    return out


def default_param(path: str, base: dict) -> dict:
    """A row for `path`: its kind and a range around the base's value, inside the schema's bounds."""
    info = FIELDS[path]
    value = get_path(base, path)
    if info.annotation is bool:
        return {"field": path, "kind": "categorical", "choices": [True, False]}
    if choices(info):
        return {"field": path, "kind": "categorical", "choices": choices(info)}
    lo, hi = bounds(path)
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if info.annotation is int:
        low = max(lo, value // 2)
        return {"field": path, "kind": "int", "low": low, "high": min(hi, max(value * 2, low + 4))}
    if value > 0:
        low, high = max(lo, value / 10), min(hi, value * 10)
        if low > 0 and high / low >= 10:
            return {"field": path, "kind": "log_float", "low": float(f"{low:.3g}"), "high": float(f"{high:.3g}")}
        return {"field": path, "kind": "float", "low": low, "high": high}
    return {"field": path, "kind": "float", "low": max(lo, 0.0), "high": min(hi, 1.0)}


def row_values(param: dict | None) -> list:
    """[field, kind, low, high, choices text] for one row; an empty row for None."""
    if not param:
        return [None, "float", None, None, ""]
    text = ", ".join(yaml.safe_dump(c, default_flow_style=True).strip().removesuffix("...").strip()
                     for c in param.get("choices") or [])
    return [param["field"], param["kind"], param.get("low"), param.get("high"), text]


def param_from_row(field_path, kind, low, high, choices_text) -> dict | None:
    if not field_path:
        return None
    if kind == "categorical":
        items = [c.strip() for c in str(choices_text or "").split(",") if c.strip()]
        return {"field": field_path, "kind": kind, "choices": [yaml.safe_load(c) for c in items]}
    return {"field": field_path, "kind": kind, "low": low, "high": high}


def parse_base(text: str) -> dict:
    try:
        data = yaml.safe_load(text or "") or {}
    except yaml.YAMLError as e:
        raise ConfigError([f"base: not valid YAML ({e})"]) from None
    if not isinstance(data, dict):
        raise ConfigError(["base: expected a mapping of run settings"])
    return data


def spec_data(base_text, rows: list[dict | None], metric, direction, reduce, last_k, n_trials, seed, prune,
              name) -> dict:
    return {"name": (name or "").strip(), "base": parse_base(base_text), "space": [r for r in rows if r],
            "objective": {"metric": (metric or "").strip(), "direction": direction, "reduce": reduce,
                          "last_k": int(last_k or 5)},
            "n_trials": int(n_trials or 0), "seed": int(seed or 0),
            "pruning": {"enabled": bool(prune)}}


def sweep_table_rows(store: RunStore, all_sweeps: list[sweeps.Sweep], now: float | None = None) -> list[list]:
    rows = []
    for s in all_sweeps:
        summary = sweeps.sweep_summary(s, sweeps.list_trials(store, s.id))
        best = f"{sweeps.format_value(summary['best_value'], 6)} (#{summary['best_trial']})" \
            if summary["best_trial"] else "-"
        rows.append([s.name, s.status, f"{summary['trials_done']}/{summary['n_trials']}",
                     f"{summary['direction'][:3]} {summary['metric']}", best, fmt_time(s.started_at, now), s.id])
    return rows


def trials_frame(store: RunStore, sweep: sweeps.Sweep | None, trials: list[sweeps.Trial]):
    """The trials table; the best trial's row is highlighted (a pandas Styler, shown as is by gr.Dataframe)."""
    if sweep is None:
        return pd.DataFrame(columns=["trial", "status", "objective", "best", "run"])
    frame = pd.DataFrame(sweeps.trial_rows(store, sweep, trials), columns=sweeps.trial_columns(sweep.spec))
    return frame.style.apply(lambda row: [_BEST_STYLE if row["best"] else ""] * len(row), axis=1)


def history_figure(sweep: sweeps.Sweep | None, trials: list[sweeps.Trial]) -> go.Figure:
    """Objective per trial (completed and pruned) and the best so far, as a step line."""
    if sweep is None:
        return empty_figure("Select a sweep")
    o = sweep.spec.objective
    done = [t for t in trials if t.value is not None and t.status in ("completed", "pruned")]
    if not done:
        return empty_figure(f"No {o.metric} values yet")
    fig = go.Figure()
    for status, color, symbol in (("completed", "rgb(79, 70, 229)", "circle"), ("pruned", "#9ca3af", "x")):
        pts = [t for t in done if t.status == status]
        if pts:
            fig.add_trace(go.Scatter(
                x=[t.number + 1 for t in pts], y=[t.value for t in pts], mode="markers", name=status,
                marker=dict(color=color, size=9, symbol=symbol),
                customdata=[", ".join(f"{k}={sweeps.format_value(v)}" for k, v in t.params.items()) for t in pts],
                hovertemplate=f"trial #%{{x}}<br>{o.metric} %{{y:.6g}}<br>%{{customdata}}<extra>{status}</extra>"))
    xs, best_ys, best = [], [], None
    better = min if o.direction == "minimize" else max
    for t in sorted(done, key=lambda t: t.number):
        if t.status == "completed":
            best = t.value if best is None else better(best, t.value)
        if best is not None:
            xs.append(t.number + 1)
            best_ys.append(best)
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=best_ys, mode="lines", name="best so far", line_shape="hv",
                                 line=dict(color="#16a34a", width=2)))
    fig.update_layout(height=300, template="plotly_white", margin=dict(l=50, r=20, t=40, b=40),
                      title=dict(text=f"{o.metric} per trial ({o.direction}, {o.reduce})", font=dict(size=13)),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
                      xaxis=dict(title="trial", dtick=1, gridcolor="#eee"), yaxis=dict(gridcolor="#eee"))
    return fig


def status_html(sweep: sweeps.Sweep | None, trials: list[sweeps.Trial], importances: dict | None = None) -> str:
    if sweep is None:
        return '<div class="wb-progress wb-empty">No sweep selected. Start one above.</div>'
    s = sweeps.sweep_summary(sweep, trials)
    color = _STATUS_COLORS.get(sweep.status, "#6b7280")
    pct = 100 * s["trials_done"] / max(1, s["n_trials"])
    best = (f" · best {html.escape(s['metric'])} <b>{s['best_value']:.6g}</b> (trial #{s['best_trial']})"
            if s["best_trial"] else "")
    stop = " · stopping after the current trial's run saves" if sweep.stop_requested and sweep.active else ""
    error = f'<div class="wb-help-error">{html.escape(sweep.error)}</div>' if sweep.error else ""
    mattered = ("<div class=\"wb-dim\">what mattered (fANOVA): "
                + ", ".join(f"<code>{html.escape(k)}</code> {v:.0%}" for k, v in importances.items()) + "</div>"
                if importances else "")
    return (f'<div class="wb-progress"><div class="wb-progress-head"><b>{html.escape(sweep.name)}</b>'
            f'<span class="wb-status" id="sweep-status-word" style="color:{color}">{sweep.status}</span>'
            f'<span class="wb-status">{s["trials_done"]}/{s["n_trials"]} trials{best}{stop}</span></div>'
            f'<div class="wb-bar"><div style="width:{pct:.0f}%;background:{color}"></div></div>{mattered}{error}</div>')


@functools.lru_cache(maxsize=32)
def _cached_importances(workspace: Path, sweep_id: str, completed: tuple[int, ...]) -> tuple:
    store = RunStore(workspace)
    return tuple(sweeps.param_importances(store, sweeps.get_sweep(store, sweep_id)).items())


def _importances(store: RunStore, sweep: sweeps.Sweep, completed: tuple[int, ...]) -> dict:
    """Recomputed only when another trial completes (the timer renders every 1.5 s)."""
    return dict(_cached_importances(store.workspace, sweep.id, completed))


def base_text_for(path: str | None) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def sweep_preset_choices() -> list[tuple[str, str]]:
    return [(p.stem, str(p)) for p in sorted(SWEEP_PRESETS.glob("*.yaml"))]


@dataclass
class SweepView(SentValues):
    """Per browser session: the selected sweep and what the page last showed (to leave unchanged outputs out)."""

    sweep_id: str | None = None


# ---- layout and events ----

def build(store: RunStore, timer: gr.Timer, runs_select: gr.Dropdown, tabs: gr.Tabs, train_form=None):
    """The tab's layout and events; `train_form` (the Train tab's SettingsForm) lets its settings become the
    base, and the best trial's settings go back into it to train longer."""
    view = gr.State(SweepView())
    base_data = parse_base(base_text_for(str(DEFAULT_BASE)))
    base_mode = base_data.get("mode", "sft")
    gr.Markdown("Search settings with Optuna's Bayesian (TPE) sampler. Every trial is an ordinary run (it shows in "
                "**Runs** with live plots); the sweep runs on its own, so closing this page never stops it. "
                "Trials are whole runs: keep the base's `max_steps` small.", elem_classes=["wb-intro"])
    with gr.Accordion("New sweep", open=True, elem_id="sweep-new"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=1):
                with gr.Row(elem_classes=["wb-bottom"]):
                    spec_preset = gr.Dropdown(label="Load a sweep preset", choices=sweep_preset_choices(),
                                              value=None, elem_id="sweep-preset", scale=3)
                    base_preset = gr.Dropdown(label="Base: a run preset", choices=preset_choices(store.workspace),
                                              value=str(DEFAULT_BASE), elem_id="sweep-base-preset", scale=3)
                from_train = gr.Button("Use the Train tab's settings as the base", size="sm",
                                       elem_id="sweep-base-from-train", visible=train_form is not None)
                base_yaml = gr.Code(base_text_for(str(DEFAULT_BASE)), language="yaml", interactive=True,
                                    label="Base run config (YAML; every trial starts from it)", elem_id="sweep-base",
                                    max_lines=16)
            with gr.Column(scale=1):
                gr.Markdown("**Objective**: a metric the trainer logs, reduced to one value per run",
                            elem_classes=["wb-section"])
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    metric = gr.Dropdown(label="Metric", choices=sweeps.objective_metrics(build_config(base_data)),
                                         value="loss", allow_custom_value=True, elem_id="sweep-metric", scale=3)
                    direction = gr.Radio(["minimize", "maximize"], value="minimize", label="Direction",
                                         elem_id="sweep-direction", scale=2)
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    reduce = gr.Dropdown([("last value", "last"), ("mean of the last k", "mean_last"),
                                          ("best value", "best")], value="last", label="Run's value",
                                         elem_id="sweep-reduce", scale=3)
                    last_k = gr.Number(5, label="k (mean of the last k)", precision=0, minimum=1,
                                       elem_id="sweep-last-k", scale=2)
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    n_trials = gr.Number(8, label="Trials", precision=0, minimum=1, elem_id="sweep-n-trials",
                                         scale=1, min_width=90)
                    seed = gr.Number(42, label="Seed", precision=0, minimum=0, elem_id="sweep-seed", scale=1,
                                     min_width=90)
                    name = gr.Textbox(label="Sweep name", placeholder="generated", elem_id="sweep-name", scale=2)
                prune = gr.Checkbox(False, label="Prune poor trials early (stop a trial whose metric is worse than "
                                    "the median of earlier trials at the same step)", elem_id="sweep-prune")
        gr.Markdown("**Search space**: the settings to search; a new row's range sits around the base's value",
                    elem_classes=["wb-section"])
        rows, row_boxes = [], []
        field_choices = searchable_fields(base_mode)
        for i in range(MAX_PARAMS):
            first = default_param("learning_rate", base_data) if i == 0 else None
            values = row_values(first)
            with gr.Row(visible=i == 0, elem_id=f"sweep-param-{i}", equal_height=False,
                        elem_classes=["wb-bottom"]) as box:
                comps = [
                    gr.Dropdown(label="Setting", choices=field_choices, value=values[0], scale=4,
                                allow_custom_value=True, elem_id=f"sweep-param-{i}-field"),
                    gr.Dropdown(label="Kind", choices=list(sweeps.KINDS), value=values[1], scale=2,
                                elem_id=f"sweep-param-{i}-kind", min_width=130),
                    gr.Number(label="Low", value=values[2], scale=2, elem_id=f"sweep-param-{i}-low", min_width=110),
                    gr.Number(label="High", value=values[3], scale=2, elem_id=f"sweep-param-{i}-high",
                              min_width=110),
                    gr.Textbox(label="Choices (categorical, comma-separated)", value=values[4], scale=4,
                               elem_id=f"sweep-param-{i}-choices", min_width=160),
                ]
                remove = gr.Button("✕", scale=0, min_width=40, elem_id=f"sweep-param-{i}-remove")
            rows.append((comps, remove))
            row_boxes.append(box)
        count = gr.State(1)
        base_mode_shown = gr.State(base_mode)
        with gr.Row():
            add = gr.Button("+ Add a setting", size="sm", elem_id="sweep-add-param", scale=1)
            start = gr.Button("Start sweep", variant="primary", elem_id="sweep-start", scale=2)
        message = gr.Markdown("", elem_id="sweep-message")

    sweeps_table = gr.Dataframe(pd.DataFrame(columns=SWEEP_COLUMNS), headers=SWEEP_COLUMNS, interactive=False,
                                elem_id="sweeps-table", max_height=220, label="Sweeps (click a row to select it)")
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        select = gr.Dropdown(label="Selected sweep", choices=[], value=None, elem_id="sweeps-select", scale=4)
        stop = gr.Button("Stop sweep", variant="stop", elem_id="sweep-stop", scale=1, min_width=120)
        more = gr.Number(0, label="Trials to add on resume", precision=0, minimum=0, elem_id="sweep-more-trials",
                         scale=1, min_width=120)
        resume = gr.Button("Resume", elem_id="sweep-resume", scale=1, min_width=100)
    status = gr.HTML(status_html(None, []), elem_id="sweep-status")
    trials_table = gr.Dataframe(trials_frame(store, None, []), interactive=False, elem_id="sweep-trials",
                                max_height=360, label="Trials (★ best; click a row to open its run)")
    history = gr.Plot(elem_id="sweep-history", show_label=False)
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        best_yaml = gr.Code(language="yaml", interactive=False, elem_id="sweep-best-config",
                            label="Best trial's run config (copy it, or train it)", max_lines=14, scale=4)
        with gr.Column(scale=1, min_width=200):
            best_to_form = gr.Button("Open it in the Train tab", elem_id="sweep-best-to-train",
                                     visible=train_form is not None)
            train_best = gr.Button("Train the best config", variant="primary", elem_id="sweep-train-best")

    outputs = [sweeps_table, select, status, trials_table, history, best_yaml, view]
    row_inputs = [c for comps, _ in rows for c in comps]

    def render(v: SweepView) -> dict:
        now = time.time()
        all_sweeps = sweeps.list_sweeps(store)
        if v.sweep_id not in {s.id for s in all_sweeps}:
            v.sweep_id = next((s.id for s in all_sweeps if s.active), all_sweeps[0].id if all_sweeps else None)
        out = {view: v}
        table = sweep_table_rows(store, all_sweeps, now)
        if v.changed("table", table):
            out[sweeps_table] = pd.DataFrame(table, columns=SWEEP_COLUMNS)
        select_choices = [(f"{s.name} · {s.id}", s.id) for s in all_sweeps]
        if v.changed("select", (select_choices, v.sweep_id)):
            out[select] = gr.update(choices=select_choices, value=v.sweep_id)
        sweep = next((s for s in all_sweeps if s.id == v.sweep_id), None)
        trials = sweeps.list_trials(store, sweep.id) if sweep else []
        rows_now = sweeps.trial_rows(store, sweep, trials) if sweep else []
        if v.changed("trials", (v.sweep_id, str(rows_now))):
            out[trials_table] = trials_frame(store, sweep, trials)
        if v.changed("plot", (v.sweep_id, [(t.number, t.status, t.value) for t in trials])):
            out[history] = history_figure(sweep, trials)
        done = tuple(t.number for t in trials if t.status == "completed")
        stat = status_html(sweep, trials, _importances(store, sweep, done) if sweep else None)
        if v.changed("status", stat):
            out[status] = stat
        best = sweeps.best_trial(sweep.spec, trials) if sweep else None
        best_text = to_yaml(sweeps.trial_config(sweep.spec, best.params, name=f"{sweep.name} best")) if best else ""
        if v.changed("best", best_text):
            out[best_yaml] = best_text
        return out

    def on_select(sweep_id, v: SweepView):
        return render(SweepView(sweep_id=sweep_id or None, shown={"table": v.shown.get("table")}))

    def on_table_select(evt: gr.SelectData, v: SweepView):
        row = evt.row_value or []
        return on_select(row[-1], v) if row else gr.skip()

    def open_run(run_id: str | None) -> dict:
        """Select the run in the Runs tab and open that tab."""
        return {runs_select: run_selection(store, run_id), tabs: gr.Tabs(selected="runs")}

    def on_trial_select(evt: gr.SelectData):
        row = evt.row_value or []
        run_id = row[-1] if row else None
        return open_run(run_id) if run_id and run_id != "-" else gr.skip()

    def on_base_change(text, current_metric, shown_mode):
        """The base's mode decides which settings and metrics are offered (re-offered only when it changes)."""
        try:
            config = build_config(parse_base(text))
        except ConfigError:
            return gr.skip()
        if config.mode == shown_mode:
            return gr.skip()
        metrics = sweeps.objective_metrics(config)
        return ({comps[0]: gr.update(choices=searchable_fields(config.mode)) for comps, _ in rows}
                | {metric: gr.update(choices=metrics, value=current_metric if current_metric in metrics else "loss"),
                   base_mode_shown: config.mode})

    def field_defaults(comps: list):
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

    def shown_rows(params: list[dict | None]) -> dict:
        params = [p for p in params if p][:MAX_PARAMS]
        values = [x for i in range(MAX_PARAMS) for x in row_values(params[i] if i < len(params) else None)]
        n = max(1, len(params))
        return (dict(zip(row_inputs, values)) | {box: gr.update(visible=i < n) for i, box in enumerate(row_boxes)}
                | {count: n})

    def current_rows(values: dict) -> list[dict | None]:
        return [param_from_row(*(values[c] for c in comps)) for comps, _ in rows]

    def on_add(n):
        if n >= MAX_PARAMS:
            gr.Warning(f"At most {MAX_PARAMS} settings in one sweep.")
            return gr.skip()
        return {box: gr.update(visible=i <= n) for i, box in enumerate(row_boxes)} | {count: n + 1}

    def remover(index: int):
        def on_remove(values: dict):
            params = current_rows(values)[:values[count]]
            return shown_rows(params[:index] + params[index + 1:])
        return on_remove

    def on_spec_preset(path):
        if not path:
            return gr.skip()
        try:
            spec = sweeps.load_sweep_spec(path)
        except ConfigError as e:
            gr.Warning("; ".join(e.errors))
            return gr.skip()
        o = spec.objective
        return shown_rows([p.model_dump(exclude_none=True) for p in spec.space]) | {
            base_yaml: to_yaml(build_config(spec.base), only_changed=True), base_preset: gr.update(value=None),
            metric: o.metric, direction: o.direction, reduce: o.reduce, last_k: o.last_k, n_trials: spec.n_trials,
            seed: spec.seed, prune: spec.pruning.enabled, name: spec.name}

    def on_start(values: dict):
        v = values[view]
        try:
            data = spec_data(values[base_yaml], current_rows(values)[:values[count]], values[metric],
                             values[direction], values[reduce], values[last_k], values[n_trials], values[seed],
                             values[prune], values[name])
            spec = sweeps.build_sweep_spec(data)
            sweep = sweeps.start_sweep(store, spec)
        except ConfigError as e:
            lines = "\n".join(f"- {html.escape(line)}" for line in e.errors)
            return render(v) | {message: f'<div class="wb-help-error">Cannot start the sweep:</div>\n\n{lines}'}
        gr.Info(f"Sweep {sweep.name} started: {spec.n_trials} trials.")
        return render(SweepView(sweep_id=sweep.id)) | {
            message: f"Started **{html.escape(sweep.name)}** (`{sweep.id}`): {spec.n_trials} trials; its runs show "
                     "in the Runs tab as they start."}

    def on_stop(v: SweepView):
        if not v.sweep_id:
            gr.Info("Select a sweep first.")
            return render(v)
        outcome = sweeps.stop_sweep(store, v.sweep_id)
        gr.Info("Stopping: the current trial's run saves its adapter, then the sweep ends."
                if outcome == "stopping" else f"The sweep is {outcome}.")
        return render(v)

    def on_resume(v: SweepView, extra):
        if not v.sweep_id:
            gr.Info("Select a sweep first.")
            return render(v)
        try:
            n = sweeps.get_sweep(store, v.sweep_id).spec.n_trials + int(extra or 0)
            sweeps.resume_sweep(store, v.sweep_id, n)
            gr.Info(f"Resumed: finished trials are kept; it goes on to {n} trials.")
        except ConfigError as e:
            gr.Warning("; ".join(e.errors))
        return render(v)

    def on_train_best(v: SweepView):
        config = sweeps.best_config(store, v.sweep_id) if v.sweep_id else None
        if config is None:
            gr.Warning("No completed trial yet.")
            return gr.skip()
        try:
            run = jobs.submit_run(store, config)
        except ConfigError as e:
            gr.Warning("; ".join(e.errors))
            return gr.skip()
        gr.Info(f"Started {run.name}.")
        return open_run(run.id)

    def on_from_train(values: dict):
        try:
            config = train_form.config_from(values)
        except ConfigError as e:
            gr.Warning("The Train tab's settings are not valid yet: " + "; ".join(e.errors))
            return gr.skip()
        return to_yaml(config, only_changed=True)

    def on_best_to_form(v: SweepView):
        config = sweeps.best_config(store, v.sweep_id) if v.sweep_id else None
        if config is None:
            gr.Warning("No completed trial yet.")
            return gr.skip()
        gr.Info("The best trial's settings are in the Train tab: raise max steps there to train it for longer.")
        return train_form.updates_from(config) | {tabs: gr.Tabs(selected="train")}

    if train_form is not None:
        from_train.click(on_from_train, set(train_form.inputs), base_yaml)
        best_to_form.click(on_best_to_form, view, [*train_form.outputs, tabs])

    # the poll only reads the store: the server's dispatcher thread marks sweeps whose driver died
    timer.tick(render, view, outputs, show_progress="hidden")
    select.input(on_select, [select, view], outputs, show_progress="hidden")
    sweeps_table.select(on_table_select, view, outputs, show_progress="hidden")
    trials_table.select(on_trial_select, None, [runs_select, tabs])
    base_preset.input(base_text_for, base_preset, base_yaml)
    base_yaml.change(on_base_change, [base_yaml, metric, base_mode_shown],
                     [comps[0] for comps, _ in rows] + [metric, base_mode_shown], show_progress="hidden")
    for comps, _ in rows:
        comps[0].input(field_defaults(comps), [comps[0], base_yaml], comps[1:], show_progress="hidden")
    for i, (_, remove) in enumerate(rows):
        remove.click(remover(i), {count, *row_inputs}, [*row_inputs, *row_boxes, count], show_progress="hidden")
    add.click(on_add, count, [*row_boxes, count], show_progress="hidden")
    metric.input(lambda m: sweeps.default_direction(m or ""), metric, direction, show_progress="hidden")
    spec_preset.input(on_spec_preset, spec_preset,
                      [*row_inputs, *row_boxes, count, base_yaml, base_preset, metric, direction, reduce, last_k,
                       n_trials, seed, prune, name], show_progress="hidden")
    form_inputs = {view, count, base_yaml, metric, direction, reduce, last_k, n_trials, seed, prune, name}
    start.click(on_start, form_inputs | set(row_inputs), [message, *outputs])
    stop.click(on_stop, view, outputs)
    resume.click(on_resume, [view, more], outputs)
    train_best.click(on_train_best, view, [runs_select, tabs])
