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

from app.formatting import fmt_time
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
def cached_importances(workspace: Path, sweep_id: str, completed: tuple[int, ...]) -> tuple:
    store = RunStore(workspace)
    return tuple(sweeps.param_importances(store, sweeps.get_sweep(store, sweep_id)).items())


def importances(store: RunStore, sweep: sweeps.Sweep, completed: tuple[int, ...]) -> dict:
    """Recomputed only when another trial completes (the timer renders every 1.5 s)."""
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
