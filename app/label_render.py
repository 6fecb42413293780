"""What the Labeling tab shows, as HTML: the prompt and answer cards (model output rendered as Markdown, never
as markup for the page), the session's progress and count, and the labels' summary tables."""
from __future__ import annotations

import functools
import html

from app import i18n
from app.formatting import fmt_duration
from backend import labeling
from backend.labeling import LabelError, LabelSession, SessionProgress
from backend.runs.store import RunStore


def no_session(lang: str = i18n.DEFAULT) -> str:
    return i18n.text("label.no_session", lang)


def choice_name(choice: str, lang: str = i18n.DEFAULT) -> str:
    """A label's name (A better, thumbs up, ...) in `lang`."""
    return i18n.text(f"label.name.{choice}", lang) if lang != i18n.DEFAULT else labeling.CHOICE_NAMES[choice]


@functools.cache
def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")


def markdown_html(text: str | None) -> str:
    """Model output rendered as Markdown; raw HTML in it shows as text (an answer is not markup for the page)."""
    return _markdown().render(text or "")


def answer_html(text: str | None, tools: bool = False) -> str:
    """An answer as the labeler reads it: Markdown, or, written with `tools` (a session with a run's tools stores
    the exchange as its trajectory text), turn by turn: the model's text, each call, each result, the answer."""
    from backend.rewards.trajectory import parse_trajectory, trajectory_text

    turns = parse_trajectory(text or "") if tools else text or ""
    if isinstance(turns, str):
        return markdown_html(turns)
    parts = []
    for m in turns:
        if m.get("role") == "tool":
            parts.append(f'<pre class="wb-tool-result">{html.escape(trajectory_text([m]))}</pre>')
            continue
        if m.get("content"):
            parts.append(markdown_html(m["content"]))
        for call in m.get("tool_calls") or []:
            shown = trajectory_text([{"role": "assistant", "tool_calls": [call]}])
            parts.append(f'<pre class="wb-tool-call">{html.escape(shown)}</pre>')
    return f'<div class="wb-trajectory">{"".join(parts)}</div>'


def prompt_html(prompt) -> str:
    if isinstance(prompt, list):
        return "".join(f'<div class="wb-role">{html.escape(str(m.get("role", "")))}</div>'
                       f'{markdown_html(str(m.get("content") or ""))}' for m in prompt if isinstance(m, dict))
    return markdown_html(str(prompt))


def card(elem_id: str, inner: str, kind: str, header: str | None = None, note: str = "") -> str:
    """A box whose element `elem_id` holds only the content (Gradio's own block around it also holds a
    progress timer, which would otherwise show up in the element's text). `note` (Markdown), in an empty box:
    why it is empty, in the box but outside `elem_id`'s element (`#label-reason`), so the content stays empty."""
    head = f'<div class="wb-side">{html.escape(header)}</div>' if header else ""
    empty = "" if inner.strip() else " wb-label-empty"
    if note.strip() and not inner.strip():
        why = markdown_html(note).replace("<p>", '<p style="margin: 0">')
        return (f'{head}<div class="wb-label-card wb-label-{kind}{empty}"><div id="{elem_id}"></div>'
                f'<div id="label-reason" class="wb-label-reason" style="color: var(--body-text-color-subdued)">'
                f'{why}</div></div>')
    return f'{head}<div id="{elem_id}" class="wb-label-card wb-label-{kind}{empty}">{inner}</div>'


def count_text(p: SessionProgress | None, lang: str = i18n.DEFAULT) -> str:
    return "" if p is None else i18n.text("label.count", lang, labels=p.labels, remaining=p.remaining)


def count_html(p: SessionProgress | None, lang: str = i18n.DEFAULT) -> str:
    return f'<div id="label-count" class="wb-label-count">{html.escape(count_text(p, lang))}</div>'


def progress_html(session: LabelSession | None, p: SessionProgress | None, mine: int = 0,
                  lang: str = i18n.DEFAULT) -> str:
    """Generation progress: answers ready, how far ahead of the labelers, speed; and this browser's count. The
    generator's own message (the backend's) stays English."""
    if session is None or p is None:
        return f'<div class="wb-progress wb-empty">{html.escape(no_session(lang))}</div>'
    unit = "pair" if session.mode == "pair" else "answer"
    pct = 100 * p.generated / p.total if p.total else 0
    parts = [i18n.text(f"label.generated.{unit}", lang, done=p.generated, total=p.total),
             i18n.text("label.ready", lang, n=p.ready_ahead)]
    if p.seconds_per_item and p.generated < p.total:
        parts.append(i18n.text(f"label.pace.{unit}", lang, s=p.seconds_per_item))
        if not session.settings.lookahead:
            parts.append(i18n.text("status.eta", lang,
                                   left=fmt_duration(p.seconds_per_item * (p.total - p.generated))))
    parts.append(i18n.text("label.yours", lang, n=mine))
    color, busy = "#4f46e5", ""
    note = session.gen_message or ""
    if session.status == "failed":
        color, note = "#dc2626", i18n.text("label.gen_failed", lang,
                                           error=session.error or i18n.text("label.unknown_error", lang))
    elif session.status == "ready" or p.generated == p.total:
        color, note = "#16a34a", i18n.text("label.all_generated", lang)
    elif p.generated == 0:
        busy = " wb-busy"
    return (f'<div class="wb-progress" data-status="{session.status}">'
            f'<div class="wb-progress-head"><b>{html.escape(session.name)}</b>'
            f'<span class="wb-status" style="color:{color}">{html.escape(" · ".join(parts))}</span>'
            f'<span class="wb-dim">{html.escape(note)}</span></div>'
            f'<div class="wb-bar{busy}"><div style="width:{pct:.1f}%;background:{color}"></div></div></div>')


def waiting_status(session: LabelSession, p: SessionProgress, lang: str = i18n.DEFAULT) -> str:
    if p.remaining == 0:
        return i18n.text("label.all_labeled", lang)
    if session.status == "failed":
        return i18n.text("label.failed_resume", lang, error=session.error)
    if p.generated < p.total:
        return i18n.text("label.waiting", lang)
    return i18n.text("label.others", lang)


def summary_html(store: RunStore, session_id: str | None, lang: str = i18n.DEFAULT) -> str:
    """The labels' tables in `lang` (model names, annotators and a session error as they are)."""
    def w(key: str, **values) -> str:
        return i18n.text(f"label.sum.{key}", lang, **values)

    if not session_id:
        return f"<p class='wb-dim'>{w('no_session')}</p>"
    try:
        session = labeling.get_session(store, session_id)
        s = labeling.summarize(store, session_id)
    except LabelError as e:
        return f"<p>{html.escape(str(e))}</p>"
    if not s.labels:
        return f"<p class='wb-dim'>{w('no_labels')}</p>"

    def table(head: list[str], rows: list[list], nums: int) -> str:
        ths = "".join(f'<th class="{"num" if i >= len(head) - nums else ""}">{html.escape(h)}</th>'
                      for i, h in enumerate(head))
        trs = "".join("<tr>" + "".join(f'<td class="{"num" if i >= len(r) - nums else ""}">{html.escape(str(c))}</td>'
                                       for i, c in enumerate(r)) + "</tr>" for r in rows)
        return f'<table class="wb-label-table"><tr>{ths}</tr>{trs}</table>'

    def heads(*keys: str) -> list[str]:
        return [w(f"col.{k}") for k in keys]

    head = f"<p>{w('head', labels=s.labels, items=s.items_labeled, annotators=len(s.annotators))}</p>"
    tables = [table(heads("label", "count", "share"),
                    [[choice_name(c, lang), s.by_choice.get(c, 0), labeling.rate(s.by_choice.get(c, 0), s.labels)]
                     for c in session.choices], 2),
              table(heads("annotator", "labels"), [[a, n] for a, n in sorted(s.annotators.items())], 1)]
    if session.mode == "pair":
        decided = s.sides["A"] + s.sides["B"]
        tables.append(table(heads("side", "won", "share_decided"),
                            [[side, n, labeling.rate(n, decided)] for side, n in s.sides.items()], 2))
        tables.append(table(heads("model", "wins", "losses", "ties", "both_bad", "win_rate"),
                            [[m["model"], m["wins"], m["losses"], m["ties"], m["both_bad"],
                              labeling.rate(m["wins"], m["wins"] + m["losses"])] for m in s.models], 5))
    else:
        tables.append(table(heads("model", "up", "down", "unsafe", "up_rate", "unsafe_rate"),
                            [[m["model"], m["up"], m["down"], m["unsafe"],
                              labeling.rate(m["up"], m["up"] + m["down"] + m["unsafe"]),
                              labeling.rate(m["unsafe"], m["up"] + m["down"] + m["unsafe"])] for m in s.models], 5))
    if s.multi_annotated:
        agreement = "<p>" + w("agreement", rate=labeling.rate(round(s.agreement * s.annotator_pairs),
                                                              s.annotator_pairs),
                               pairs=s.annotator_pairs, items=s.multi_annotated) + "</p>"
    else:
        agreement = f"<p class='wb-dim'>{w('no_agreement')}</p>"
    return f'{head}<div class="wb-label-tables">{"".join(tables)}</div>{agreement}'
