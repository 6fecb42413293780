"""What the Labeling tab shows, as HTML: the prompt and answer cards (model output rendered as Markdown, never
as markup for the page), the session's progress and count, and the labels' summary tables."""
from __future__ import annotations

import functools
import html

from app.formatting import fmt_duration
from backend import labeling
from backend.labeling import LabelError, LabelSession, SessionProgress
from backend.runs.store import RunStore

NO_SESSION = "Start a labeling session above, or pick one to join."


@functools.cache
def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")


def markdown_html(text: str | None) -> str:
    """Model output rendered as Markdown; raw HTML in it shows as text (an answer is not markup for the page)."""
    return _markdown().render(text or "")


def prompt_html(prompt) -> str:
    if isinstance(prompt, list):
        return "".join(f'<div class="wb-role">{html.escape(str(m.get("role", "")))}</div>'
                       f'{markdown_html(str(m.get("content") or ""))}' for m in prompt if isinstance(m, dict))
    return markdown_html(str(prompt))


def card(elem_id: str, inner: str, kind: str, header: str | None = None) -> str:
    """A box whose element `elem_id` holds only the content (Gradio's own block around it also holds a
    progress timer, which would otherwise show up in the element's text)."""
    head = f'<div class="wb-side">{html.escape(header)}</div>' if header else ""
    empty = "" if inner.strip() else " wb-label-empty"
    return f'{head}<div id="{elem_id}" class="wb-label-card wb-label-{kind}{empty}">{inner}</div>'


def count_text(p: SessionProgress | None) -> str:
    return "" if p is None else f"{p.labels} labeled / {p.remaining} remaining"


def count_html(p: SessionProgress | None) -> str:
    return f'<div id="label-count" class="wb-label-count">{html.escape(count_text(p))}</div>'


def progress_html(session: LabelSession | None, p: SessionProgress | None, mine: int = 0) -> str:
    """Generation progress: answers ready, how far ahead of the labelers, speed; and this browser's count."""
    if session is None or p is None:
        return f'<div class="wb-progress wb-empty">{html.escape(NO_SESSION)}</div>'
    unit = "pairs" if session.mode == "pair" else "answers"
    pct = 100 * p.generated / p.total if p.total else 0
    parts = [f"{p.generated}/{p.total} {unit} generated", f"{p.ready_ahead} ready to label"]
    if p.seconds_per_item and p.generated < p.total:
        parts.append(f"{p.seconds_per_item:.1f} s per {unit[:-1]}")
        if not session.settings.lookahead:
            parts.append(f"ETA {fmt_duration(p.seconds_per_item * (p.total - p.generated))}")
    parts.append(f"your labels: {mine}")
    color, busy = "#4f46e5", ""
    note = session.gen_message or ""
    if session.status == "failed":
        color, note = "#dc2626", f"Generation failed: {session.error or 'unknown error'}"
    elif session.status == "ready" or p.generated == p.total:
        color, note = "#16a34a", "Every answer is generated"
    elif p.generated == 0:
        busy = " wb-busy"
    return (f'<div class="wb-progress" data-status="{session.status}">'
            f'<div class="wb-progress-head"><b>{html.escape(session.name)}</b>'
            f'<span class="wb-status" style="color:{color}">{html.escape(" · ".join(parts))}</span>'
            f'<span class="wb-dim">{html.escape(note)}</span></div>'
            f'<div class="wb-bar{busy}"><div style="width:{pct:.1f}%;background:{color}"></div></div></div>')


def waiting_status(session: LabelSession, p: SessionProgress) -> str:
    if p.remaining == 0:
        return "**Every item is labeled.** Export the labels or train on them below."
    if session.status == "failed":
        return f"**Generation failed:** {session.error}. Press *Resume generation* to try again."
    if p.generated < p.total:
        return "Waiting for the next answers to be generated…"
    return "The remaining items are being labeled by others; new ones show here if they come free."


def summary_html(store: RunStore, session_id: str | None) -> str:
    if not session_id:
        return "<p class='wb-dim'>No session selected.</p>"
    try:
        session = labeling.get_session(store, session_id)
        s = labeling.summarize(store, session_id)
    except LabelError as e:
        return f"<p>{html.escape(str(e))}</p>"
    if not s.labels:
        return "<p class='wb-dim'>No labels yet.</p>"

    def table(head: list[str], rows: list[list], nums: int) -> str:
        ths = "".join(f'<th class="{"num" if i >= len(head) - nums else ""}">{html.escape(h)}</th>'
                      for i, h in enumerate(head))
        trs = "".join("<tr>" + "".join(f'<td class="{"num" if i >= len(r) - nums else ""}">{html.escape(str(c))}</td>'
                                       for i, c in enumerate(r)) + "</tr>" for r in rows)
        return f'<table class="wb-label-table"><tr>{ths}</tr>{trs}</table>'

    head = (f"<p><b>{s.labels}</b> labels on <b>{s.items_labeled}</b> items by <b>{len(s.annotators)}</b> "
            "annotators.</p>")
    tables = [table(["label", "count", "share"],
                    [[labeling.CHOICE_NAMES[c], s.by_choice.get(c, 0), labeling.rate(s.by_choice.get(c, 0), s.labels)]
                     for c in session.choices], 2),
              table(["annotator", "labels"], [[a, n] for a, n in sorted(s.annotators.items())], 1)]
    if session.mode == "pair":
        decided = s.sides["A"] + s.sides["B"]
        tables.append(table(["side", "won", "share of decided"],
                            [[side, n, labeling.rate(n, decided)] for side, n in s.sides.items()], 2))
        tables.append(table(["model", "wins", "losses", "ties", "both bad", "win rate"],
                            [[m["model"], m["wins"], m["losses"], m["ties"], m["both_bad"],
                              labeling.rate(m["wins"], m["wins"] + m["losses"])] for m in s.models], 5))
    else:
        tables.append(table(["model", "thumbs up", "thumbs down", "unsafe", "up rate", "unsafe rate"],
                            [[m["model"], m["up"], m["down"], m["unsafe"],
                              labeling.rate(m["up"], m["up"] + m["down"] + m["unsafe"]),
                              labeling.rate(m["unsafe"], m["up"] + m["down"] + m["unsafe"])] for m in s.models], 5))
    if s.multi_annotated:
        agreement = (f"<p>Agreement: <b>{labeling.rate(round(s.agreement * s.annotator_pairs), s.annotator_pairs)}"
                     f"</b> of {s.annotator_pairs} annotator pairs chose the same, on {s.multi_annotated} items "
                     "labeled by several people.</p>")
    else:
        agreement = ("<p class='wb-dim'>Agreement: no item was labeled by two annotators yet (set "
                     "<i>Labels per pair</i> above 1 when starting a session to measure it).</p>")
    return f'{head}<div class="wb-label-tables">{"".join(tables)}</div>{agreement}'
