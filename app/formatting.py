"""Text and HTML the UI shows for runs, errors and commands: plain functions, unit-tested without a browser."""
from __future__ import annotations

import functools
import html
import json
import re
import shlex
import time
from pathlib import Path

from app import i18n
from backend.config import RunConfig, applies, field_paths, get_path, to_yaml
from backend.doctor import status_words
from backend.runs.stall import forcing_in
from backend.runs.store import Run

RUN_COLUMNS = ["name", "mode", "status", "progress", "started", "duration", "id"]


def columns(names: list[str], lang: str) -> list[str]:
    """Table headers in `lang` (the names of reward sources and metrics stay as they are)."""
    return [i18n.text(f"col.{n}", lang) if f"col.{n}" in i18n.UI else n for n in names]


def status_text(status: str, lang: str = i18n.DEFAULT) -> str:
    """A run's (or sweep's) status word in `lang`."""
    return i18n.text(f"status.{status}", lang) if f"status.{status}" in i18n.UI else status
_STATUS_COLORS = {"queued": "#6b7280", "running": "#4f46e5", "completed": "#16a34a",
                  "failed": "#dc2626", "stopped": "#d97706", "interrupted": "#ea580c"}
_TITLES = {path: info.title for path, info in field_paths()}
# an item of a list setting: reward_sources.0, reward_sources.0.weight, reward_sources.0 (correct)
_LIST_ITEM = re.compile(r"^(?P<path>[\w.]+?)\.(?P<index>\d+)(?:\.(?P<field>[\w.]+))?(?: \((?P<name>[^)]*)\))?$")


# ---- times ----

def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_time(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return "-"
    now = time.time() if now is None else now
    same_day = time.localtime(ts)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", time.localtime(ts))


def run_duration(run: Run, now: float) -> float | None:
    if not run.started_at:
        return None
    return (run.finished_at or now) - run.started_at


def eta_seconds(run: Run, now: float) -> float | None:
    """Time left, from the pace of the steps completed (model loading excluded), less the time the step under
    way has already run; None when unknown."""
    if run.status != "running" or not run.train_started_at or not run.total_steps or run.step <= 0:
        return None
    per_step = seconds_per_step(run, now)
    if per_step is None:
        return None
    under_way = now - run.step_at if run.step_at else 0.0
    return max(0.0, per_step * (run.total_steps - run.step) - under_way)


def seconds_per_step(run: Run, now: float) -> float | None:
    """Seconds per completed step of this attempt: measured up to the last step's end, so the figure holds still
    while a step runs rather than creeping up until it ends."""
    done = run.step - run.resumed_step  # steps of this attempt: a resumed one started at its checkpoint
    if not run.train_started_at or done <= 0:
        return None
    if run.active:
        end = run.step_at if run.step_at and run.step_at > run.train_started_at else now
    else:
        end = run.finished_at or now
    return (end - run.train_started_at) / done


# ---- runs ----

def progress_cell(run: Run) -> str:
    if run.total_steps:
        return f"{run.step}/{run.total_steps} ({100 * run.step / run.total_steps:.0f}%)"
    return f"{run.step}" if run.step else "-"


def run_table_rows(runs: list[Run], now: float | None = None, lang: str = i18n.DEFAULT) -> list[list[str]]:
    now = time.time() if now is None else now
    return [[r.name, r.mode, _status_word(r, lang), progress_cell(r), fmt_time(r.started_at or r.created_at, now),
             fmt_duration(run_duration(r, now)), r.id] for r in runs]


def _status_word(run: Run, lang: str = i18n.DEFAULT) -> str:
    """The status word, and what the run doctor says of it: "completed — no learning signal", "running — stalled"."""
    if run.status == "running" and run.stop_requested:
        return i18n.text("status.stopping", lang)
    return status_words(run, lang, status_text)


def status_line(run: Run, now: float | None = None, lang: str = i18n.DEFAULT) -> str:
    """One line that starts with the status word: what the run is doing, its pace and ETA (why a queued run
    waits is the scheduler's words, in English)."""
    now = time.time() if now is None else now
    t = functools.partial(i18n.text, lang=lang)
    parts = [_status_word(run, lang)]
    if run.attempt > 1:  # resumed from a checkpoint
        parts.append(t("status.attempt", n=run.attempt))
    if run.status == "running" and run.stop_requested:
        parts[0] = t("status.stop_requested")
        if (left := forcing_in(run, now)) is not None:
            parts.append(t("status.forcing_in", s=f"{left:.0f}") if left > 0 else t("status.forcing"))
    elif run.status == "running" and not run.train_started_at:
        parts.append(t("status.loading"))
    if run.status == "queued" and run.waiting:
        parts.append(run.waiting)
    if run.gpu_ids:  # kept after the run ends: where it trained
        parts.append(("GPU " if len(run.gpu_ids) == 1 else "GPUs ") + ",".join(run.gpu_ids))
    if run.total_steps:
        parts.append(t("status.steps", step=run.step, total=run.total_steps))
    elif run.step:
        parts.append(t("status.step", step=run.step))
    pace = seconds_per_step(run, now)
    if pace:
        parts.append(t("status.pace", pace=pace))
    eta = eta_seconds(run, now)
    if eta is not None:
        parts.append(t("status.eta", left=fmt_duration(eta)))
    elif not run.active:
        parts.append(t("status.took", took=fmt_duration(run_duration(run, now))))
    return " · ".join(parts)


def progress_fraction(run: Run) -> float:
    if run.status == "completed":
        return 1.0
    if run.total_steps:
        return min(1.0, run.step / run.total_steps)
    return 0.0


def progress_html(run: Run | None, now: float | None = None, empty: str | None = None,
                  lang: str = i18n.DEFAULT) -> str:
    """A progress bar with the run's name, status, steps and ETA (the status word is in the text)."""
    if run is None:
        return f'<div class="wb-progress wb-empty">{html.escape(empty or i18n.text("status.no_run", lang))}</div>'
    color = _STATUS_COLORS.get(run.status, "#6b7280")
    if (run.status == "completed" and run.verdict) or (run.status == "running" and run.stalled):
        color = _STATUS_COLORS["stopped"]  # ended, or runs, without learning: not the green of a success
    pct = 100 * progress_fraction(run)
    busy = " wb-busy" if run.status == "running" and not run.total_steps else ""
    return (f'<div class="wb-progress" data-status="{run.status}">'
            f'<div class="wb-progress-head"><b>{html.escape(run.name)}</b>'
            f'<span class="wb-status" style="color:{color}">{html.escape(status_line(run, now, lang))}</span></div>'
            f'<div class="wb-bar{busy}"><div style="width:{pct:.1f}%;background:{color}"></div></div></div>')


# ---- errors ----

def _escape_tags(text: str) -> str:
    """`<answer>` in a message shows as text, not as an HTML tag Markdown drops (code spans stay as they are)."""
    parts = text.split("`")
    return "`".join(html.escape(p, quote=False) if i % 2 == 0 else p for i, p in enumerate(parts))


def error_markdown(errors: list[str], heading: str | None = None, lang: str = i18n.DEFAULT) -> str:
    """A Markdown list naming each bad field by its label (in `lang`) and its path (as the CLI's --set uses it);
    the messages themselves are the backend's, in English."""
    heading = heading or i18n.text("train.cannot_start", lang)
    colon = "：" if lang == "zh" else ":"
    lines = [f"**{heading}{colon}**", ""]

    def title(path: str) -> str:
        return (i18n.setting_text(path, lang)[0] if lang != i18n.DEFAULT else _TITLES[path]) or path

    for line in errors:
        path, sep, msg = line.partition(": ")
        msg = _escape_tags(msg)
        item = _LIST_ITEM.match(path) if sep else None
        if sep and path in _TITLES:
            lines.append(f"- **{title(path)}** (`{path}`): {msg}")
        elif item and item["path"] in _TITLES:
            name = f" ({item['name']})" if item["name"] else ""
            field = f", {item['field']}" if item["field"] else ""
            row = i18n.text("msg.row", lang, n=int(item["index"]) + 1)
            lines.append(f"- **{title(item['path'])}, {row}{name}{field}** "
                         f"(`{path.split(' ')[0]}`): {msg}")
        else:
            lines.append(f"- {_escape_tags(line)}")
    return "\n".join(lines)


# ---- the equivalent command line ----

def _flag_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return json.dumps(value, separators=(",", ":"))  # --set parses the value as YAML, which reads JSON
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):  # data.columns: name=column pairs, as the setting takes them
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def changed_settings(config: RunConfig) -> list[tuple[str, object]]:
    """(path, value) of every setting that differs from the schema's default, in schema order; those the run does
    not read (another mode's, left on the form) are left out: `launch.py train` refuses them."""
    data = config.model_dump()
    out = []
    for path, info in field_paths():
        value = get_path(data, path)
        if value != info.get_default(call_default_factory=True) and applies(path, config):
            out.append((path, value))
    return out


def cli_command(config: RunConfig, workspace: str | Path | None = None) -> str:
    """A shell snippet that starts the same run headless: run.yaml with the changed settings, and the
    same as --set flags."""
    ws = f" --workspace {shlex.quote(str(workspace))}" if workspace else ""
    changed = changed_settings(config)
    if not changed:
        return f"# every setting is at its default\npython launch.py train{ws}\n"
    body = to_yaml(config, only_changed=True).rstrip("\n")
    flags = " ".join(f"--set {shlex.quote(f'{p}={_flag_value(v)}')}" for p, v in changed)
    return (f"# run.yaml: the settings that differ from the defaults\n"
            f"cat > run.yaml <<'EOF'\n{body}\nEOF\n"
            f"python launch.py train run.yaml{ws}\n\n"
            f"# or the same with --set flags\n"
            f"python launch.py train{ws} {flags}\n")



# ---- the first example as the trainer sees it ----

def example_html(rendered: list, error: str | None = None, lang: str = i18n.DEFAULT) -> str:
    """backend.data.render's sequences: the text the loss is taken on in colour, the rest greyed, with the
    token counts; or why there is none."""
    if error:
        return f"<p><b>{i18n.text('msg.example_failed', lang)}</b> {html.escape(error)}</p>"
    blocks = []
    for r in rendered:
        head = i18n.text("msg.example_tokens", lang, tokens=r.tokens, learned=r.learned_tokens)
        head += f" · {html.escape(r.title)}" if r.title else ""
        body = "".join(f'<span class="{"wb-learned" if learned else "wb-masked"}">{html.escape(text)}</span>'
                       for text, learned in r.segments)
        blocks.append(f'<div class="wb-example"><div class="wb-example-head">{head}</div>'
                      f'<pre style="white-space: pre-wrap">{body}</pre></div>')
    return ('<style>.wb-masked {color: #888} .wb-learned {background: rgba(80, 160, 255, .18)}</style>'
            + "".join(blocks))


# ---- live samples of RL runs ----

SAMPLE_COLUMNS = ["step", "prompt", "completion"]  # then one column per reward source, then "total"
ALL_STEPS = "all"
SAMPLES_SHOWN = 200  # rows in the table for "all steps" (newest first)


def _score_cell(value) -> str:
    if value is None:
        return "–"
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def sample_sources(samples: list[dict], configured: list[str] = ()) -> list[str]:
    """Reward-source columns: the run's configured names, then any other name the samples carry."""
    names = list(configured)
    for s in samples:
        names += [n for n in (s.get("rewards") or {}) if n not in names]
    return names


def sample_table_rows(samples: list[dict], sources: list[str], step: str | int | None = ALL_STEPS,
                      limit: int = SAMPLES_SHOWN) -> list[list]:
    """Table rows, newest first: step, prompt, completion, one score per source, total."""
    if step not in (None, "", ALL_STEPS):
        samples = [s for s in samples if str(s["step"]) == str(step)]
    rows = []
    for s in reversed(samples[-limit:] if step in (None, "", ALL_STEPS) else samples):
        rewards = s.get("rewards") or {}
        rows.append([s["step"], s.get("prompt", ""), s.get("completion", ""),
                     *[_score_cell(rewards.get(n)) for n in sources], _score_cell(s.get("total"))])
    return rows


def sample_step_choices(samples: list[dict], lang: str = i18n.DEFAULT) -> list[tuple[str, str]]:
    steps = sorted({s["step"] for s in samples}, reverse=True)
    return [(i18n.text("steps.all", lang), ALL_STEPS)] + [(i18n.text("steps.one", lang, step=n), str(n))
                                                          for n in steps]


def score_table_widths(n_sources: int, step_column: bool) -> list[str]:
    """Column widths (percent, so they always add up to the table's width) for [step,] prompt, completion,
    one column per reward source, total: the texts share what the short number columns leave, 2 : 3."""
    fixed = (5 if step_column else 0) + 9 * n_sources + 7
    text = max(20, 100 - fixed)
    return ([f"{5}%"] if step_column else []) + [f"{0.4 * text:.0f}%", f"{0.6 * text:.0f}%",
                                                 *["9%"] * n_sources, "7%"]


def memory_markdown(summary: str | None, fits: bool | None = None, why_not: str | None = None,
                    lang: str = i18n.DEFAULT) -> str:
    """The Train tab's memory line: the estimate's summary (the backend's words), marked when it does not fit;
    or why there is none."""
    if summary is None:
        why = _escape_tags(why_not or i18n.text("msg.no_estimate", lang))
        return f"**{i18n.text('msg.memory', lang)}** {i18n.text('msg.memory_unknown', lang)} ({why})"
    head, sep, rest = summary.partition(": ") if ": " in summary else summary.partition("：")  # en / zh
    mark = "⚠️ " if fits is False else ""
    return f"{mark}**{head}{sep.strip()}** {_escape_tags(rest)}" if sep else _escape_tags(summary)
