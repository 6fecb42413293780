"""Metric charts: every metric a run logs, one subplot each, raw points and an EMA-smoothed line (a schedule such
as the learning rate: its logged values alone).

Plain functions over store rows ({id, step, name, value, time}); no gradio here, so they are unit-tested.
"""
from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import i18n
from backend.core.step_timing import TIMING_KEYS

RAW_COLOR = "rgba(99, 110, 250, 0.45)"
SMOOTH_COLOR = "rgb(67, 56, 202)"
BUDGET_COLOR = "rgb(220, 38, 38)"
COST_COLOR = "rgb(234, 88, 12)"
# Shown first when present (what held-out answers scored next to eval_loss); the rest keep the order logged.
FIRST = ("loss", "eval_loss", "reward", "eval_reward", "eval_rouge_l")
# Bookkeeping of each evaluation (transformers' Trainer): shown after the metrics that say how the model does.
LAST = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
# Logged once when training ends (transformers' Trainer): one point each, so a line above the charts.
SUMMARY = ("train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos")
MAX_POINTS = 2000  # per metric on screen; the EMA is computed on every point before thinning
# An RL step's time split into generate / score / update: one chart of stacked bars, after the rewards
STEP_TIME = "step time (s): generate · score · update"
PHASE_COLORS = {"timing/generate_s": "#6366f1", "timing/score_s": "#f59e0b", "timing/update_s": "#10b981"}
ROW_HEIGHT = 240
# Schedules the trainer sets rather than measures (the learning rate's warm-up and decay): drawn as logged, since an
# EMA of a schedule only lags it and bends its corners
UNSMOOTHED = ("learning_rate", "epoch")

Series = dict[str, tuple[list[int], list[float]]]  # metric name -> (steps, finite values)


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def ema(values: Iterable[float], alpha: float = 0.3) -> list[float]:
    """Exponential moving average where `alpha` is the weight of the newest value.

    Bias-corrected (like pandas' `ewm(alpha=..., adjust=True)`), so the first points are not dragged
    towards zero. Non-finite values are not expected here: callers drop them first.
    """
    if not 0 < alpha <= 1:
        raise ValueError("alpha must be in (0, 1]")
    out, num, den = [], 0.0, 0.0
    for v in values:
        num = (1 - alpha) * num + v
        den = (1 - alpha) * den + 1
        out.append(num / den)
    return out


def smoothed(name: str) -> bool:
    """Whether a metric's chart draws an EMA over its raw points (a schedule is drawn raw only)."""
    return name.rsplit("/", 1)[-1] not in UNSMOOTHED


def add_rows(series: Series, rows: Iterable[dict]) -> Series:
    """Append store rows to `series` in place (None / NaN / inf values skipped) and return it.

    A metric seen only with non-finite values still gets an (empty) entry, so its subplot shows up.
    """
    for row in rows:
        steps, values = series.setdefault(row["name"], ([], []))
        if _finite(row["value"]):
            steps.append(row["step"])
            values.append(float(row["value"]))
    return series


def _is_constraint(name: str) -> bool:
    return (name.startswith("cost/") and name.endswith("/mean")) or name.startswith("lambda/") \
        or name == "constraint/violation_rate"


def metric_order(names: Iterable[str]) -> list[str]:
    """FIRST, then each reward source's mean (RL runs: rewards/<name>/mean), its mean on held-out answers
    (eval_rewards/<name>/mean), each cost's mean, λ and the violation rate (runs with cost sources), the step
    time's split (STEP_TIME, standing for TIMING_KEYS), then the rest as logged, LAST last."""
    names = list(names)
    first = [n for n in FIRST if n in names]
    for prefix in ("rewards/", "eval_rewards/"):
        first += [n for n in names if n.startswith(prefix) and n.endswith("/mean") and n not in first]
    costs = [n for n in names if _is_constraint(n)]
    for cost in [n for n in costs if n.startswith("cost/")]:  # each cost with its λ, then the violation rate
        first += [cost] + [n for n in costs if n == "lambda/" + cost.removeprefix("cost/").removesuffix("/mean")]
    first += [n for n in costs if n not in first]
    if any(n in TIMING_KEYS for n in names):
        first.append(STEP_TIME)
    last = [n for n in names if n in LAST]
    return first + [n for n in names if n not in first and n not in last and n not in TIMING_KEYS] + last


GROUP_SLOTS = 6  # folded chart groups a run's page has room for; more fold into the last one


@dataclass
class ChartLayout:
    """A run's charts: those its mode leads with, the rest in groups by name prefix, and the flat ones (every
    value the same so far, e.g. GRPO's clip ratios early on), which are listed rather than drawn."""

    lead: list[str] = field(default_factory=list)
    groups: list[tuple[str, list[str]]] = field(default_factory=list)  # (title, names)
    flat: list[str] = field(default_factory=list)


def _group_of(name: str) -> str:
    if "/" in name:
        return name.split("/", 1)[0]
    return "eval" if name.startswith("eval_") else "other"


def chart_layout(series: Series, charts: Iterable[str] = ()) -> ChartLayout:
    """Split `series` for the page: `charts` (the mode's fnmatch patterns, in order) lead; with none, every
    chart leads. Flat ones outside the lead are listed, not drawn; a metric logged once is never flat (one
    evaluation at the end must show)."""
    names = metric_order(n for n in series if n not in SUMMARY)
    charts = list(charts)
    lead = []
    for pattern in charts:  # the mode's own charts lead even while flat (a reward stuck at 0 is news)
        lead += [n for n in names if fnmatch.fnmatchcase(n, pattern) and n not in lead]
    lead += [STEP_TIME] if STEP_TIME in names and charts else []  # where an RL step's time goes: what to tune
    flat = [n for n in names if n not in lead and n in series and len(series[n][1]) >= 2
            and min(series[n][1]) == max(series[n][1])]
    shown = [n for n in names if n not in flat and n not in lead]
    if not charts:
        return ChartLayout(lead=shown, flat=flat)
    groups: dict[str, list[str]] = {}
    for n in shown:
        groups.setdefault(_group_of(n), []).append(n)
    items = list(groups.items())
    if len(items) > GROUP_SLOTS:  # the smallest groups share the last slot
        items.sort(key=lambda kv: -len(kv[1]))
        items = items[:GROUP_SLOTS - 1] + [("more", [n for _, ns in items[GROUP_SLOTS - 1:] for n in ns])]
    return ChartLayout(lead=lead, flat=flat,
                       groups=[(f"{g}/*" if g not in ("other", "more", "eval") else g, ns) for g, ns in items])


def flat_text(series: Series, flat: list[str]) -> str:
    """The flat metrics as one line: each name with the value it keeps."""
    return " · ".join(f"`{n}` = {series[n][1][-1]:.4g}" for n in flat)


def _thin(xs: list, ys: list, limit: int) -> tuple[list, list]:
    if len(xs) <= limit:
        return xs, ys
    stride = math.ceil(len(xs) / limit)
    keep = list(range(0, len(xs), stride))
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)  # always show the latest value
    return [xs[i] for i in keep], [ys[i] for i in keep]


def empty_figure(message: str = "No metrics yet") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font=dict(size=14, color="#888"),
                       xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=200, margin=dict(l=20, r=20, t=20, b=20), template="plotly_white")
    return fig


def summary_text(series: Series) -> str:
    parts = [f"{n} {series[n][1][-1]:.4g}" for n in SUMMARY if n in series and series[n][1]]
    return " · ".join(parts)


def _grid(titles: list[str], extra_height: int, secondary: bool = False) -> tuple[go.Figure, int]:
    """An empty grid of one subplot per title (1, 2 or 3 columns), tall enough for its rows; `secondary`: each
    subplot has a right-hand y axis too."""
    cols = 1 if len(titles) == 1 else 2 if len(titles) <= 4 else 3
    rows = math.ceil(len(titles) / cols)
    height = ROW_HEIGHT * rows + extra_height
    specs = [[{"secondary_y": True}] * cols for _ in range(rows)] if secondary else None
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, specs=specs,
                        vertical_spacing=min(0.3, 70 / height) if rows > 1 else 0.0,
                        horizontal_spacing=0.06 if cols == 3 else 0.08)
    fig.update_layout(height=height)
    return fig, cols


def _style(fig: go.Figure, top: int, legend_x: str) -> None:
    fig.update_xaxes(title_text=None, showgrid=True, gridcolor="#eee")
    fig.update_yaxes(showgrid=True, gridcolor="#eee")
    fig.update_annotations(font_size=13)
    fig.update_layout(template="plotly_white", margin=dict(l=50, r=20, t=top, b=30), hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor=legend_x,
                                  x=1.0 if legend_x == "right" else 0.0, yref="container"))


def _axes(fig: go.Figure, where: dict, steps: list[int], values: list[float]) -> None:
    """Whole steps on a short x axis (one early point is not drawn on a 0.5-step scale), and small magnitudes
    such as a learning rate in exponent form on an axis fitted to them."""
    if steps:
        lo, hi = min(steps), max(steps)
        if hi - lo < 10:
            fig.update_xaxes(dtick=1, range=[lo - 0.5, max(hi, lo + 1) + 0.5] if hi - lo < 1 else None, **where)
    if values and 0 < max(abs(v) for v in values) < 1e-2:
        fig.update_yaxes(tickformat=".1e", exponentformat="e", **where)


def figure_from_series(series: Series, alpha: float = 0.3, max_points: int = MAX_POINTS,
                       budgets: dict[str, float] | None = None, names: list[str] | None = None,
                       empty: str | None = None, lang: str = i18n.DEFAULT) -> go.Figure:
    """One subplot per metric; `budgets` ({cost source name: budget}) draws each budget as a dashed line on its
    cost's chart (cost/<name>/mean), where the reward is drawn too, on the right-hand axis, so a user sees what
    keeping the cost down did to the reward. Legends and titles in `lang`."""
    t = functools.partial(i18n.text, lang=lang)
    names = metric_order(n for n in series if n not in SUMMARY) if names is None else list(names)
    summary = summary_text(series)
    if not names:
        return empty_figure(summary or empty or t("plot.no_metrics"))
    with_reward = {n for n in names if n.startswith("cost/") and series.get("reward", ([], []))[1]}
    titles = [n if n == STEP_TIME else t("plot.no_finite", name=n) if not series[n][1]
              else t("plot.with_reward", name=n) if n in with_reward else n for n in names]
    fig, cols = _grid(titles, extra_height=40, secondary=bool(with_reward))
    for i, name in enumerate(names):
        if name == STEP_TIME:
            _add_step_time_bars(fig, series, dict(row=i // cols + 1, col=i % cols + 1), max_points)
            continue
        steps, values = series[name]
        xs, raw = _thin(steps, values, max_points)
        where = dict(row=i // cols + 1, col=i % cols + 1)
        _axes(fig, where, steps, values)
        if not smoothed(name):  # a schedule: its logged values as one line, nothing averaged
            fig.add_trace(go.Scatter(x=xs, y=raw, name=t("plot.as_logged"), mode="lines", legendgroup="as logged",
                                     showlegend=False, line=dict(color=SMOOTH_COLOR, width=2),
                                     hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}}<extra></extra>"), **where)
        else:
            _, smooth = _thin(steps, ema(values, alpha), max_points)
            fig.add_trace(go.Scatter(x=xs, y=raw, name=t("plot.raw"), mode="lines+markers", legendgroup="raw",
                                     showlegend=_new_group(fig, "raw"), line=dict(color=RAW_COLOR, width=1),
                                     marker=dict(color=RAW_COLOR, size=4),
                                     hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}}<extra>raw</extra>"), **where)
            fig.add_trace(go.Scatter(x=xs, y=smooth, name=t("plot.smoothed", alpha=alpha), mode="lines",
                                     legendgroup="smoothed", showlegend=_new_group(fig, "smoothed"),
                                     line=dict(color=SMOOTH_COLOR, width=2),
                                     hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}}<extra>EMA</extra>"), **where)
        budget = (budgets or {}).get(name.removeprefix("cost/").removesuffix("/mean")) \
            if name.startswith("cost/") else None
        if budget is not None and xs:
            fig.add_trace(go.Scatter(x=[xs[0], xs[-1]], y=[budget, budget], name=t("plot.budget"), mode="lines",
                                     legendgroup="budget",
                                     showlegend=not any(trace.legendgroup == "budget" for trace in fig.data),
                                     line=dict(color=BUDGET_COLOR, width=1.5, dash="dash"),
                                     hovertemplate=f"budget {budget:g}<extra></extra>"), **where)
        if name in with_reward:
            steps, values = series["reward"]
            rx, ry = _thin(steps, ema(values, alpha), max_points)
            fig.add_trace(go.Scatter(x=rx, y=ry, name=t("plot.reward"), mode="lines",
                                     legendgroup="reward", showlegend=not any(t.legendgroup == "reward"
                                                                              for t in fig.data),
                                     line=dict(color=COST_COLOR, width=2),
                                     hovertemplate="reward<br>step %{x}: %{y:.4g}<extra>EMA</extra>"),
                          secondary_y=True, **where)
    _style(fig, top=50, legend_x="right")
    if summary:
        fig.update_layout(title=dict(text=t("plot.final", summary=summary), font=dict(size=13), x=0.0, xanchor="left",
                                     y=1.0, yanchor="top", yref="container", pad=dict(t=8, l=8)))
    return fig


def _new_group(fig: go.Figure, group: str) -> bool:
    """Whether no trace of legend group `group` is in `fig` yet (its first trace is the one the legend shows)."""
    return not any(t.legendgroup == group for t in fig.data)


def _add_step_time_bars(fig: go.Figure, series: Series, where: dict, max_points: int) -> None:
    """Per step, a bar of the seconds spent generating, scoring and updating, stacked (they add up to the step
    time); only the steps that logged all three."""
    logged = [dict(zip(*series.get(k, ([], [])))) for k in TIMING_KEYS]
    steps = sorted(set(logged[0]).intersection(*logged[1:]))
    steps, _ = _thin(steps, steps, max_points)
    for key, values in zip(TIMING_KEYS, logged):
        phase = key.removeprefix("timing/").removesuffix("_s")
        fig.add_trace(go.Bar(x=steps, y=[values[s] for s in steps], name=phase, legendgroup=phase,
                             marker=dict(color=PHASE_COLORS[key]),
                             hovertemplate=f"step %{{x}}: {phase} %{{y:.3g}} s<extra></extra>"), **where)
    fig.update_layout(barmode="stack", bargap=0.15)


def build_metrics_figure(rows: Iterable[dict], alpha: float = 0.3) -> go.Figure:
    """One subplot per metric name in `rows` (store metric rows), each with a raw and an EMA trace."""
    return figure_from_series(add_rows({}, rows), alpha)


RUN_COLORS = ("#4338ca", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")


def _faint(hex_color: str, alpha: float = 0.35) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def overlay_figure(runs: list[tuple[str, Series]], alpha: float = 0.3, max_points: int = MAX_POINTS) -> go.Figure:
    """Several runs on shared charts: one subplot per metric any of them logged, one colour per run (EMA line,
    raw points faint). Clicking a run in the legend hides it on every subplot."""
    names: list[str] = []
    for _, series in runs:
        names += [n for n in series if n not in SUMMARY and n not in names]
    names = [n for n in metric_order(names) if n != STEP_TIME]  # each phase on a line chart of its own here
    names += [n for n in TIMING_KEYS if any(n in series for _, series in runs)]
    if not names:
        return empty_figure("Pick two or more runs to compare" if len(runs) < 2 else "No metrics yet")
    fig, cols = _grid(names, extra_height=60)
    for r, (label, series) in enumerate(runs):
        color = RUN_COLORS[r % len(RUN_COLORS)]
        shown_in_legend = False
        for i, name in enumerate(names):
            steps, values = series.get(name, ([], []))
            if not values:
                continue
            xs, raw = _thin(steps, values, max_points)
            where = dict(row=i // cols + 1, col=i % cols + 1)
            if smoothed(name):
                _, line = _thin(steps, ema(values, alpha), max_points)
                fig.add_trace(go.Scatter(x=xs, y=raw, mode="markers", legendgroup=label, showlegend=False,
                                         marker=dict(color=_faint(color), size=4), name=label,
                                         hovertemplate=f"{label}<br>{name} step %{{x}}: %{{y:.4g}}<extra>raw</extra>"),
                              **where)
            else:  # a schedule: the line is the logged values themselves
                line = raw
            fig.add_trace(go.Scatter(x=xs, y=line, mode="lines", legendgroup=label,
                                     showlegend=not shown_in_legend, name=label, line=dict(color=color, width=2),
                                     hovertemplate=f"{label}<br>{name} step %{{x}}: %{{y:.4g}}<extra>"
                                                   f"{'EMA' if smoothed(name) else ''}</extra>"),
                          **where)
            shown_in_legend = True
    _style(fig, top=70, legend_x="left")
    return fig
