"""A small PNG of a run's metrics for model cards, drawn with Pillow (no plotting library needed).

Up to four panels, loss first, then the metrics that say most about the mode, each a line over the steps with
its range and last value. Pillow comes with gradio; without it the card simply has no picture.
"""
from __future__ import annotations

import math
from pathlib import Path

from backend.core.step_timing import TIMING_KEYS

# Logged once at the end, or bookkeeping rather than learning: not worth a panel.
PLOT_KEYS_SKIPPED = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                     "train_loss", "epoch", "num_tokens", "step_time", "memory/peak_rss_gb", "memory/gpu_peak_gb",
                     "eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "eval_num_tokens",
                     *TIMING_KEYS}
# In order of preference after loss: what each mode is judged by.
PREFERRED = ("eval_loss", "eval_rouge_l", "reward", "eval_reward", "accuracy", "mean_token_accuracy", "rewards/accuracies", "rewards/margins", "margin",
             "mean_reward", "kl", "reward_std", "completions/mean_length", "entropy", "grad_norm", "learning_rate")
PANEL_W, PANEL_H, COLUMNS = 360, 210, 2
LINE = (79, 70, 229)  # indigo, the UI's primary colour
GRID, TEXT, SUBDUED = (226, 232, 240), (30, 41, 59), (100, 116, 139)


def pick_metrics(names, limit: int = 4) -> list[str]:
    names = [n for n in names if n not in PLOT_KEYS_SKIPPED]
    ordered = [n for n in ("loss", *PREFERRED) if n in names]
    ordered += sorted(n for n in names if n not in ordered)
    return ordered[:limit]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def render_metrics_png(series: dict[str, list[tuple[int, float]]], path: str | Path, title: str = "",
                       limit: int = 4) -> bool:
    """Draw `series` ({name: [(step, value), ...]}) into `path`, at most `limit` panels; False when there is
    nothing to draw or no Pillow."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        return False
    names = pick_metrics([n for n, pts in series.items() if any(math.isfinite(v) for _, v in pts)], limit)
    if not names:
        return False
    rows = math.ceil(len(names) / COLUMNS)
    head = 30 if title else 0
    width = PANEL_W * min(COLUMNS, len(names))
    img = Image.new("RGB", (width, head + rows * PANEL_H), "white")
    draw = ImageDraw.Draw(img)
    try:
        font, small = ImageFont.load_default(size=13), ImageFont.load_default(size=11)
    except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
        font = small = ImageFont.load_default()
    if title:
        draw.text((10, 8), title, fill=TEXT, font=font)
    for i, name in enumerate(names):
        x0, y0 = (i % COLUMNS) * PANEL_W, head + (i // COLUMNS) * PANEL_H
        _panel(draw, (x0, y0), name, [(s, v) for s, v in series[name] if math.isfinite(v)], font, small)
    img.save(path, format="PNG", optimize=True)
    return True


def _panel(draw, origin, name, points, font, small) -> None:
    x0, y0 = origin
    left, right, top, bottom = x0 + 58, x0 + PANEL_W - 14, y0 + 30, y0 + PANEL_H - 26
    draw.text((x0 + 10, y0 + 8), f"{name}   last {_fmt(points[-1][1])}", fill=TEXT, font=font)
    draw.rectangle((left, top, right, bottom), outline=GRID)
    steps, values = [s for s, _ in points], [v for _, v in points]
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5 if lo == 0 else lo - abs(lo) * 0.05, hi + 0.5 if hi == 0 else hi + abs(hi) * 0.05
    s_lo, s_hi = min(steps), max(steps)
    span = max(s_hi - s_lo, 1)

    def xy(s, v):
        x = left + (right - left) * ((s - s_lo) / span if s_hi > s_lo else 0.5)
        return x, bottom - (bottom - top) * (v - lo) / (hi - lo)

    for frac in (0.25, 0.5, 0.75):
        y = top + (bottom - top) * frac
        draw.line((left + 1, y, right - 1, y), fill=GRID)
    digits = next((d for d in range(4, 9) if f"{hi:.{d}g}" != f"{lo:.{d}g}"), 9)  # labels that differ
    draw.text((x0 + 6, top - 2), f"{hi:.{digits}g}", fill=SUBDUED, font=small)
    draw.text((x0 + 6, bottom - 12), f"{lo:.{digits}g}", fill=SUBDUED, font=small)
    draw.text((left, bottom + 5), f"step {s_lo}", fill=SUBDUED, font=small)
    end = f"{s_hi}"
    draw.text((right - draw.textlength(end, font=small), bottom + 5), end, fill=SUBDUED, font=small)
    coords = [xy(s, v) for s, v in points]
    if len(coords) == 1:
        x, y = coords[0]
        draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=LINE)
    else:
        draw.line(coords, fill=LINE, width=2, joint="curve")
