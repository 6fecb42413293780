"""The Runs tab's Full log accordion: the selected run's whole train.log (its last MAX_LINES lines, repeated library
warnings collapsed by backend/runs/logs.py), the file's path, and a search that keeps the lines containing a text.

Closed, it costs nothing: nothing is read, and its follow tick runs in the browser alone. Open, it follows the log:
on the Runs tab's timer, a browser-side check moves a hidden counter when the store's change stamp moved (a live
run's heartbeat does every 2 s) and the accordion is on screen; the server then re-reads the log only if the file
changed since it was last sent.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

import gradio as gr

from app import i18n
from app.tab_polls import STAMP_PATH, TabPolls
from backend.runs.logs import collapse_repeats, log_path, read_text, split_lines
from backend.runs.store import RunStore

MAX_LINES = 2000  # the most lines the page holds
TAIL_BYTES = 4_000_000  # read for the unfiltered view: far more than MAX_LINES of any log
SEARCH_BYTES = 64_000_000  # read for a search: the whole log of any ordinary run


@dataclass
class LogView:
    """Per browser session: whether the accordion is open, and what was last sent (run, file state, search)."""

    open: bool = False
    sent: tuple | None = None


def _tick_js(text_id: str) -> str:
    """Move the counter when the accordion's text is on screen and the store's stamp changed since the last tick."""
    return ("async (n) => { const s = window.__wbFullLog = window.__wbFullLog || {v: null}; "
            f"const el = document.getElementById({text_id!r}); "
            "if (!el || el.offsetParent === null) { s.v = null; return n; } let v = null; "
            f"try {{ const r = await fetch({STAMP_PATH.lstrip('/') + '?any=1'!r}, {{cache: 'no-store'}}); "
            "if (r.ok) v = await r.text(); } catch (e) {} "
            "if (v === null) return n; const changed = s.v !== null && v !== s.v; s.v = v; "
            "return changed ? String(Number(n) + 1) : n; }")


def log_box(lines: list[str], query: str = "", empty: str = "") -> str:
    """The lines in a box kept scrolled to its end (column-reverse: no script), `query` marked."""
    raw = "\n".join(lines)
    parts = re.split(f"({re.escape(query)})", raw, flags=re.I) if query else [raw]  # odd indices: the matches
    body = "".join(f"<mark>{html.escape(p)}</mark>" if i % 2 else html.escape(p) for i, p in enumerate(parts))
    return (f'<div class="wb-log" style="max-height: 560px"><pre>{body or html.escape(empty)}</pre></div>')


def render_log(store: RunStore, run_id: str, query: str, lang: str) -> tuple[str, str]:
    """(the box's HTML, the line under the search) for the run's log filtered by `query` (case-insensitive)."""
    query = (query or "").strip()
    text, cut = read_text(log_path(store, run_id), SEARCH_BYTES if query else TAIL_BYTES)
    rows = collapse_repeats(split_lines(text.removesuffix("\n"))) if text else []
    if not rows:
        return log_box([], empty=i18n.text("log.none", lang)), ""
    if query:
        needle = query.lower()
        found = [line for line in rows if needle in line.lower()]
        info = i18n.text("log.matches", lang, n=len(found), total=len(rows), query=query)
    else:
        found = rows
        info = i18n.text("log.lines", lang, n=len(rows))
    if len(found) > MAX_LINES:
        info += i18n.text("log.last", lang, n=MAX_LINES)
    if cut:
        info += i18n.text("log.cut", lang, mb=(SEARCH_BYTES if query else TAIL_BYTES) // 1_000_000)
    return log_box(found[-MAX_LINES:], query), info


def build(store: RunStore, polls: TabPolls, select: gr.Dropdown, words=None) -> None:
    """The accordion; `select` is the Runs tab's run picker (its value is the run id); `words` (an
    i18n.Translatable) is given its words."""
    w = i18n.given(words)
    with w.add(gr.Accordion(open=False, elem_id="full-log"), "log.title") as box:
        with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
            path = w.add(gr.Textbox(interactive=False, buttons=["copy"], elem_id="full-log-path", scale=3),
                         "log.path")
            search = w.add(gr.Textbox(elem_id="full-log-search", scale=2), "log.search",
                           placeholder="log.search_placeholder")
            refresh = w.add(gr.Button(elem_id="full-log-refresh", scale=0, min_width=110), "log.refresh", "value")
        info = gr.Markdown("", elem_id="full-log-info", elem_classes=["wb-help"])
        text = gr.HTML(log_box([]), elem_id="full-log-text")
        view = gr.State(LogView())
        counter = gr.Textbox("0", visible=False)
    outputs = [text, info, path]

    def render(run_id, query, v: LogView, lang: str, force: bool = False):
        if not v.open:
            return gr.skip(), gr.skip(), gr.skip()
        if not run_id:
            v.sent = None
            return log_box([], empty=i18n.text("msg.select_run", lang)), "", ""
        file = log_path(store, run_id)
        st = file.stat() if file.exists() else None
        key = (run_id, st and (st.st_size, st.st_mtime_ns), (query or "").strip(), lang)
        if key == v.sent and not force:
            return gr.skip(), gr.skip(), gr.skip()
        v.sent = key
        return *render_log(store, run_id, query, lang), str(file)

    def on_change(run_id, query, v: LogView, request: gr.Request = None):
        return render(run_id, query, v, i18n.lang_of(request))

    def on_refresh(run_id, query, v: LogView, request: gr.Request = None):
        return render(run_id, query, v, i18n.lang_of(request), force=True)

    def on_open(opened: bool):
        def handler(run_id, query, v: LogView, request: gr.Request = None):
            v.open = opened
            return render(run_id, query, v, i18n.lang_of(request), force=True)
        return handler

    inputs = [select, search, view]
    box.expand(on_open(True), inputs, outputs, show_progress="hidden")
    box.collapse(on_open(False), inputs, outputs, show_progress="hidden")
    refresh.click(on_refresh, inputs, outputs, show_progress="hidden")
    gr.on([search.input, search.submit], on_change, inputs, outputs, show_progress="hidden",
          trigger_mode="always_last")
    select.change(on_change, inputs, outputs, show_progress="hidden")
    counter.change(on_change, inputs, outputs, show_progress="hidden")
    polls.timers["runs"].tick(None, counter, counter, js=_tick_js("full-log-text"), show_progress="hidden",
                              queue=False)
