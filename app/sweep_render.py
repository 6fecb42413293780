"""What the Sweeps tab shows and reads, as plain functions (unit-tested without a browser): the searchable
settings and their default ranges, a spec from the form's rows, the sweeps table, the trials frame, the
objective history and the status line."""

import functools
import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_origin

import pandas as pd
import plotly.graph_objects as go
import yaml

from app import i18n
from app.formatting import fmt_time, status_text
from app.forms import FIELDS, bounds
from app.plots import empty_figure
from app.view_state import SentValues
from backend import sweeps
from backend.config import ConfigError, choices, get_path
from backend.runs.store import RunStore


MAX_PARAMS = 6
SWEEP_PRESETS = Path(__file__).resolve().parents[1] / "presets" / "sweeps"
DEFAULT_BASE = Path(__file__).resolve().parents[1] / "presets" / "sft_demo.yaml"
SWEEP_COLUMNS = ["name", "status", "trials", "objective", "best", "started", "id"]
_BEST_STYLE = "background-color: rgba(22, 163, 74, 0.16); font-weight: 600"
_STATUS_COLORS = {"queued": "#6b7280", "running": "#4f46e5", "completed": "#16a34a", "failed": "#dc2626",
                  "stopped": "#d97706", "interrupted": "#ea580c"}


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


def sweep_columns(lang: str = i18n.DEFAULT) -> list[str]:
    """SWEEP_COLUMNS's headers in `lang`."""
    return [i18n.text(f"col.{c}" if c in ("name", "status", "started", "id") else f"sweeps.col.{c}", lang)
            for c in SWEEP_COLUMNS]


def sweep_table_rows(store: RunStore, all_sweeps: list[sweeps.Sweep], now: float | None = None,
                     lang: str = i18n.DEFAULT) -> list[list]:
    rows = []
    for s in all_sweeps:
        summary = sweeps.sweep_summary(s, sweeps.list_trials(store, s.id))
        best = f"{sweeps.format_value(summary['best_value'], 6)} (#{summary['best_trial']})" \
            if summary["best_trial"] else "-"
        rows.append([s.name, status_text(s.status, lang), f"{summary['trials_done']}/{summary['n_trials']}",
                     f"{i18n.text('sweeps.dir.' + summary['direction'], lang)} {summary['metric']}", best,
                     fmt_time(s.started_at, now), s.id])
    return rows


def _trial_status(status: str, lang: str) -> str:
    """A trial's status ("pruned", or a running run's "running 3/10") in `lang`."""
    word, sep, rest = status.partition(" ")
    return status_text(word, lang) + sep + rest


def trials_frame(store: RunStore, sweep: sweeps.Sweep | None, trials: list[sweeps.Trial], lang: str = i18n.DEFAULT):
    """The trials table; the best trial's row is highlighted (a pandas Styler, shown as is by gr.Dataframe).
    Headers and status words in `lang`; the settings' paths and the metric as they are."""
    def head(c: str) -> str:
        return i18n.text(f"sweeps.col.{c}", lang) if c in ("trial", "objective", "best", "run") else \
            i18n.text("col.status", lang) if c == "status" else c

    if sweep is None:
        return pd.DataFrame(columns=[head(c) for c in ("trial", "status", "objective", "best", "run")])
    columns = sweeps.trial_columns(sweep.spec)
    rows = [[_trial_status(r[1], lang) if i == 1 else c for i, c in enumerate(r)]
            for r in sweeps.trial_rows(store, sweep, trials)]
    fixed = {0, 1, len(columns) - 2, len(columns) - 1}  # trial, status, best, run (the settings and metric between)
    frame = pd.DataFrame(rows, columns=[head(c) if i in fixed else c for i, c in enumerate(columns)])
    best = len(columns) - 2
    return frame.style.apply(lambda row: [_BEST_STYLE if row.iloc[best] else ""] * len(row), axis=1)


def history_figure(sweep: sweeps.Sweep | None, trials: list[sweeps.Trial], lang: str = i18n.DEFAULT) -> go.Figure:
    """Objective per trial (completed and pruned) and the best so far, as a step line."""
    if sweep is None:
        return empty_figure(i18n.text("sweeps.plot.select", lang))
    o = sweep.spec.objective
    done = [t for t in trials if t.value is not None and t.status in ("completed", "pruned")]
    if not done:
        return empty_figure(i18n.text("sweeps.plot.no_values", lang, metric=o.metric))
    trial = i18n.text("sweeps.col.trial", lang)
    fig = go.Figure()
    for status, color, symbol in (("completed", "rgb(79, 70, 229)", "circle"), ("pruned", "#9ca3af", "x")):
        pts = [t for t in done if t.status == status]
        if pts:
            fig.add_trace(go.Scatter(
                x=[t.number + 1 for t in pts], y=[t.value for t in pts], mode="markers",
                name=status_text(status, lang), marker=dict(color=color, size=9, symbol=symbol),
                customdata=[", ".join(f"{k}={sweeps.format_value(v)}" for k, v in t.params.items()) for t in pts],
                hovertemplate=f"{trial} #%{{x}}<br>{o.metric} %{{y:.6g}}<br>%{{customdata}}"
                              f"<extra>{status_text(status, lang)}</extra>"))
    xs, best_ys, best = [], [], None
    better = min if o.direction == "minimize" else max
    for t in sorted(done, key=lambda t: t.number):
        if t.status == "completed":
            best = t.value if best is None else better(best, t.value)
        if best is not None:
            xs.append(t.number + 1)
            best_ys.append(best)
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=best_ys, mode="lines", name=i18n.text("sweeps.plot.best", lang),
                                 line_shape="hv",
                                 line=dict(color="#16a34a", width=2)))
    how = ({"direction": o.direction, "reduce": o.reduce} if lang == i18n.DEFAULT else  # English: the spec's words
           {"direction": i18n.text(f"sweeps.{o.direction}", lang),
            "reduce": i18n.text(f"sweeps.reduce.{o.reduce}", lang)})
    fig.update_layout(height=300, template="plotly_white", margin=dict(l=50, r=20, t=40, b=40),
                      title=dict(text=i18n.text("sweeps.plot.title", lang, metric=o.metric, **how),
                                 font=dict(size=13)),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
                      xaxis=dict(title=trial, dtick=1, gridcolor="#eee"), yaxis=dict(gridcolor="#eee"))
    return fig


def status_html(sweep: sweeps.Sweep | None, trials: list[sweeps.Trial], importances: dict | None = None,
                lang: str = i18n.DEFAULT) -> str:
    """The sweep's status line in `lang`; the sweep's error (the backend's) stays English."""
    if sweep is None:
        return f'<div class="wb-progress wb-empty">{i18n.text("sweeps.none", lang)}</div>'
    s = sweeps.sweep_summary(sweep, trials)
    color = _STATUS_COLORS.get(sweep.status, "#6b7280")
    pct = 100 * s["trials_done"] / max(1, s["n_trials"])
    best = (i18n.text("sweeps.status.best", lang, metric=html.escape(s["metric"]), value=s["best_value"],
                      trial=s["best_trial"]) if s["best_trial"] else "")
    stop = i18n.text("sweeps.status.stopping", lang) if sweep.stop_requested and sweep.active else ""
    error = f'<div class="wb-help-error">{html.escape(sweep.error)}</div>' if sweep.error else ""
    mattered = (f"<div class=\"wb-dim\">{i18n.text('sweeps.status.mattered', lang)} "
                + ", ".join(f"<code>{html.escape(k)}</code> {v:.0%}" for k, v in importances.items()) + "</div>"
                if importances else "")
    trials_done = i18n.text("sweeps.status.trials", lang, done=s["trials_done"], total=s["n_trials"])
    return (f'<div class="wb-progress"><div class="wb-progress-head"><b>{html.escape(sweep.name)}</b>'
            f'<span class="wb-status" id="sweep-status-word" style="color:{color}">'
            f'{status_text(sweep.status, lang)}</span>'
            f'<span class="wb-status">{trials_done}{best}{stop}</span></div>'
            f'<div class="wb-bar"><div style="width:{pct:.0f}%;background:{color}"></div></div>{mattered}{error}</div>')


@functools.lru_cache(maxsize=32)
def cached_importances(workspace: Path, sweep_id: str, completed: tuple[int, ...]) -> tuple:
    store = RunStore(workspace)
    return tuple(sweeps.param_importances(store, sweeps.get_sweep(store, sweep_id)).items())


def importances(store: RunStore, sweep: sweeps.Sweep, completed: tuple[int, ...]) -> dict:
    """Recomputed only when another trial completes (the tab polls at every tick that finds the store changed)."""
    return dict(cached_importances(store.workspace, sweep.id, completed))


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
