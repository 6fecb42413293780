"""The Labeling tab: people compare two answers (or rate one) and every label goes straight to the store.

Start a session (a model, or base + a run's adapter, or two of them side by side; prompts from a dataset
column, an uploaded file or typed text); a background generator (backend/labeling/generator.py) writes the
answers ahead of the labelers while this tab shows its progress. Keys 1-4 label (A better, B better, tie,
both bad; 1 / 2 are thumbs up / down for single answers) and U undoes the last label.

Each browser is one labeling *client*: its id, annotator name and session live in the browser's local
storage (gr.BrowserState with a key and secret fixed per workspace), so a reload, or a restart of the UI,
resumes on the same item; which item a client holds is in the store (backend/labeling.py), which makes
sure two browsers never get the same pair. The shown item's id also travels in a hidden textbox, so a key
pressed twice before the page updates labels that item once (the store ignores the repeat) and never the
next one by accident.
"""
from __future__ import annotations

import functools
import html
import logging
import secrets
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from app.formatting import error_markdown, fmt_duration
from backend import labeling
from backend.labeling import generator as label_generator
from backend.labeling import LabelError, LabelItem, LabelSession, SessionProgress
from backend.modes.registry import mode_spec
from backend.models import EMBEDDED_MODEL
from backend.runs.store import RunStore

log = logging.getLogger(__name__)
DEFAULT_PROMPTS = "demo-prompts"
STORAGE_KEY = "workbench-labeling"
PAIR_KEYS = {"a": "1", "b": "2", "tie": "3", "both_bad": "4"}
SINGLE_KEYS = {"up": "1", "down": "2"}
NO_SESSION = "Start a labeling session above, or pick one to join."

# Keys 1-4 / U click the labeling buttons, unless the user is typing (a textbox, the edit box, the note).
KEYBOARD_JS = """
() => {
  if (window.__wbLabelKeys) return;
  window.__wbLabelKeys = true;
  const pair = {"1": "label-choice-a", "2": "label-choice-b", "3": "label-choice-tie", "4": "label-choice-both-bad"};
  const single = {"1": "label-choice-up", "2": "label-choice-down"};
  const shown = (el) => el && el.offsetParent !== null && !el.disabled;
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    const key = e.key.toLowerCase();
    let id = key === "u" ? "label-undo" : null;
    if (!id && single[key] && shown(document.getElementById(single[key]))) id = single[key];
    if (!id && pair[key]) id = pair[key];
    const el = id && document.getElementById(id);
    if (!shown(el)) return;
    e.preventDefault();
    el.click();
  });
}
"""

CSS = """
.wb-label-card { padding: 10px 14px; border: 1px solid var(--border-color-primary); border-radius: var(--radius-lg);
  background: var(--block-background-fill); min-height: 2.6em; line-height: 1.5; overflow-wrap: anywhere; }
.wb-label-card > :first-child { margin-top: 0; }
.wb-label-card > :last-child { margin-bottom: 0; }
.wb-label-card pre { background: var(--background-fill-secondary); padding: 8px; border-radius: 6px; overflow-x: auto; }
.wb-label-prompt { background: var(--background-fill-secondary); font-size: var(--text-lg); }
.wb-label-answer { min-height: 9em; max-height: 460px; overflow-y: auto; }
.wb-label-empty { border-style: dashed; }
.wb-side { font-weight: 600; margin: 2px 0 4px 2px; color: var(--body-text-color-subdued); }
.wb-role { font-size: 12px; text-transform: uppercase; color: var(--body-text-color-subdued); margin-top: 4px; }
.wb-label-count { font-size: var(--text-lg); font-variant-numeric: tabular-nums; text-align: right;
  white-space: nowrap; padding: 8px 4px; }
.wb-label-tables { display: flex; flex-wrap: wrap; gap: 8px 28px; align-items: flex-start; }
.wb-label-table { border-collapse: collapse; margin: 4px 0 10px 0; font-size: 13px; width: auto; border: 0 !important; }
.wb-label-table th, .wb-label-table td { padding: 3px 10px; border: 0 !important;
  border-bottom: 1px solid var(--border-color-primary) !important; background: none !important;
  text-align: left; font-variant-numeric: tabular-nums; }
.wb-label-table td.num, .wb-label-table th.num { text-align: right; }
"""


@dataclass
class LabelView:
    """Per browser session: the labeling session it is in, who labels, and what the page shows."""

    session_id: str | None = None
    client: str = ""
    annotator: str = ""
    active: bool = False  # the Labeling tab was opened: only then does this browser take items
    item_id: int | None = None
    shown_progress: str | None = None
    shown_count: str | None = None
    shown_status: str | None = None


@dataclass
class LabelTab:
    load: tuple  # (fn, {inputs, outputs}) for the page's load event: what this browser was labeling
    open: tuple  # (fn, {inputs, outputs}) for the tab's select event: resumes on this browser's item
    remember: gr.BrowserState  # render it outside the tabs: a tab's children mount only when it is opened,
    # and the page's load event must see what the browser stored


# ---- formatting ----

def annotator_default(client: str) -> str:
    return f"labeler-{client[:4]}"


def session_choices(store: RunStore) -> list[tuple[str, str]]:
    out = []
    for s in labeling.list_sessions(store):
        kind = "A/B" if s.mode == "pair" else "thumbs"
        out.append((f"{s.name} · {kind} · {s.id}", s.id))
    return out


def model_choices(store: RunStore) -> list:
    from app.train_tab import model_choices as base_models

    return [(m, m) for m in base_models(store)] + labeling.adapter_choices(store)


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
        tables.append(table(["model", "thumbs up", "thumbs down", "up rate"],
                            [[m["model"], m["up"], m["down"], labeling.rate(m["up"], m["up"] + m["down"])]
                             for m in s.models], 3))
    if s.multi_annotated:
        agreement = (f"<p>Agreement: <b>{labeling.rate(round(s.agreement * s.annotator_pairs), s.annotator_pairs)}"
                     f"</b> of {s.annotator_pairs} annotator pairs chose the same, on {s.multi_annotated} items "
                     "labeled by several people.</p>")
    else:
        agreement = ("<p class='wb-dim'>Agreement: no item was labeled by two annotators yet (set "
                     "<i>Labels per pair</i> above 1 when starting a session to measure it).</p>")
    return f'{head}<div class="wb-label-tables">{"".join(tables)}</div>{agreement}'



# ---- layout and events ----

def browser_secret(workspace: Path) -> str:
    """A per-workspace secret for the browser-stored state: it must stay the same across UI restarts."""
    path = Path(workspace) / ".labeling-browser-secret"
    if not path.exists():
        path.write_text(secrets.token_hex(16))
        path.chmod(0o600)
    return path.read_text().strip()


def build(store: RunStore, timer: gr.Timer, train_fields: dict | None = None, tabs: gr.Tabs | None = None) -> LabelTab:
    """Lay out the tab. `train_fields` (mode, dataset, model components of the Train tab) and `tabs` let the
    "Train on these labels" buttons fill the Train tab and open it."""
    workspace = store.workspace
    remember = gr.BrowserState({}, storage_key=STORAGE_KEY + "-" + browser_secret(workspace)[:8],
                               secret=browser_secret(workspace), render=False)
    view = gr.State(LabelView())

    gr.Markdown("Compare two answers to each prompt (or rate one) and every label is saved at once. Keys: "
                "**1** A better · **2** B better · **3** tie · **4** both bad · **U** undo "
                "(single answers: **1** good, **2** bad).", elem_classes=["wb-intro"])
    with gr.Accordion("New labeling session", open=True, elem_id="label-new") as new_box:
        with gr.Row(equal_height=True):
            mode = gr.Radio([("Compare two answers (DPO, reward model)", "pair"),
                             ("Rate one answer, thumbs up / down (KTO)", "single")], value="pair",
                            label="What to label", elem_id="label-mode", scale=3)
            compare = gr.Radio([("Two samples of one model", "samples"), ("Two models side by side", "models")],
                               value="samples", label="Where A and B come from", elem_id="label-compare", scale=2)
            name = gr.Textbox(label="Session name", placeholder="generated when empty", elem_id="label-name", scale=2)
        with gr.Row(equal_height=True):
            model_a = gr.Dropdown(label="Model", choices=model_choices(store), value=EMBEDDED_MODEL,
                                  allow_custom_value=True, filterable=True, elem_id="label-model-a", scale=3,
                                  info="A model, or a finished run (its base model + adapter).")
            model_b = gr.Dropdown(label="Model B", choices=model_choices(store), value=EMBEDDED_MODEL,
                                  allow_custom_value=True, filterable=True, elem_id="label-model-b", scale=3,
                                  visible=False, info="Compared with the first model, side by side.")
            temp_a = gr.Number(label="Temperature (A)", value=0.8, minimum=0, maximum=5, step=0.1,
                               elem_id="label-temperature-a", scale=1, min_width=110)
            temp_b = gr.Number(label="Temperature (B)", value=0.8, minimum=0, maximum=5, step=0.1,
                               elem_id="label-temperature-b", scale=1, min_width=110)
            max_new = gr.Number(label="Max new tokens", value=labeling.GenerationSettings.max_new_tokens, minimum=1,
                                maximum=4096, precision=0, elem_id="label-max-new-tokens", scale=1, min_width=110)
            overlap = gr.Number(label="Labels per pair", value=1, minimum=1, maximum=20, precision=0,
                                elem_id="label-overlap", scale=1, min_width=110,
                                info="Above 1: several people label each item (agreement).")
        with gr.Row(equal_height=True):
            source = gr.Radio([("A dataset column", "dataset"), ("An uploaded file", "upload"),
                               ("Typed prompts", "typed")], value="dataset", label="Prompts from",
                              elem_id="label-source", scale=2)
            dataset = gr.Dropdown(label="Dataset", choices=_dataset_choices(store), value=DEFAULT_PROMPTS,
                                  allow_custom_value=True, filterable=True, elem_id="label-dataset", scale=2)
            column = gr.Textbox(label="Column", value="prompt", elem_id="label-column", scale=1, min_width=100)
            limit = gr.Number(label="Prompts (first N; 0: all)", value=0, minimum=0, precision=0,
                              elem_id="label-limit", scale=1, min_width=120)
            upload = gr.File(label="Prompt file (.txt one per line, or .jsonl/.csv/.parquet with the column)",
                             file_types=list(labeling.PROMPT_FILE_TYPES), type="filepath", elem_id="label-upload",
                             height=110, visible=False, scale=2)
            typed = gr.Textbox(label="Prompts, one per line (or separated by --- lines)", lines=4,
                               elem_id="label-typed", visible=False, scale=3)
    with gr.Row(equal_height=True):  # outside the accordion: one click starts a session with these settings
        start = gr.Button("Start a new labeling session", variant="primary", elem_id="label-start", scale=1)
        new_message = gr.Markdown("", elem_id="label-message")

    with gr.Row(equal_height=True):
        session = gr.Dropdown(label="Labeling session", choices=session_choices(store), value=None,
                              elem_id="label-session", scale=4, allow_custom_value=False)
        annotator = gr.Textbox(label="Annotator", elem_id="label-annotator", scale=2, min_width=140,
                               info="Recorded with each label.")
        count = gr.HTML(count_html(None), elem_id="label-count-box", padding=False, min_width=220, scale=1)
    progress = gr.HTML(progress_html(None, None), elem_id="label-progress")
    with gr.Row(equal_height=True):
        resume = gr.Button("Resume generation", size="sm", elem_id="label-resume", visible=False, scale=0)
    item_box = gr.Textbox(visible=False, elem_id="label-item")  # the shown item's id, sent with each label
    prompt = gr.HTML(card("label-prompt", "", "prompt", "Prompt"), elem_id="label-prompt-box", padding=False)
    with gr.Row(equal_height=False):
        with gr.Column():
            answer_a = gr.HTML(card("label-answer-a", "", "answer", "A"), elem_id="label-answer-a-box",
                               padding=False)
        with gr.Column() as column_b:
            answer_b = gr.HTML(card("label-answer-b", "", "answer", "B"), elem_id="label-answer-b-box",
                               padding=False)
    with gr.Row(equal_height=True):
        with gr.Column(scale=5):
            with gr.Row(visible=True) as pair_buttons:
                choice_buttons = {
                    "a": gr.Button("A is better  [1]", variant="primary", elem_id="label-choice-a"),
                    "b": gr.Button("B is better  [2]", variant="primary", elem_id="label-choice-b"),
                    "tie": gr.Button("Tie  [3]", elem_id="label-choice-tie"),
                    "both_bad": gr.Button("Both bad  [4]", elem_id="label-choice-both-bad"),
                }
            with gr.Row(visible=False) as single_buttons:
                choice_buttons["up"] = gr.Button("Good: thumbs up  [1]", variant="primary", elem_id="label-choice-up")
                choice_buttons["down"] = gr.Button("Bad: thumbs down  [2]", variant="stop", elem_id="label-choice-down")
        undo = gr.Button("Undo last label  [U]", elem_id="label-undo", scale=1, min_width=160)
    note = gr.Textbox(label="Note (optional, saved with the label)", elem_id="label-note", max_lines=2)
    with gr.Accordion("Edit the better answer before saving (optional)", open=False, elem_id="label-edit-box"):
        edit = gr.Textbox(label="Edited answer", lines=4, elem_id="label-edit",
                          info="Saved with the label and exported as the chosen answer (for both bad: a good answer "
                               "written by you).")
        with gr.Row():
            from_a = gr.Button("Start from A", size="sm", elem_id="label-edit-from-a")
            from_b = gr.Button("Start from B", size="sm", elem_id="label-edit-from-b")
    status = gr.Markdown("", elem_id="label-status")

    with gr.Accordion("Export and train", open=False, elem_id="label-export-box"):
        with gr.Row(equal_height=True):
            fmt = gr.Radio([("DPO / reward model: prompt, chosen, rejected", "dpo"),
                            ("KTO: prompt, completion, label", "kto")], value="dpo", label="Format",
                           elem_id="label-export-format", scale=3)
            file_type = gr.Radio([("JSONL", ".jsonl"), ("Parquet", ".parquet")], value=".jsonl", label="File",
                                 elem_id="label-export-type", scale=1)
            chat = gr.Checkbox(value=True, label="Conversational (chat messages)", elem_id="label-export-chat", scale=1)
        with gr.Row(equal_height=True):
            ties = gr.Radio([("Drop", "drop"), ("Keep (KTO: both good)", "keep")], value="drop", label="Ties",
                            elem_id="label-export-ties")
            both_bad = gr.Radio([("Drop", "drop"), ("Keep (KTO: both bad; DPO: your edit beats each)", "keep")],
                                value="drop", label="Both bad", elem_id="label-export-both-bad")
        with gr.Row(equal_height=False):
            export = gr.Button("Export labels", variant="primary", elem_id="label-export", scale=1)
            export_file = gr.File(label="Download", elem_id="label-export-file", interactive=False, height=80, scale=2)
        export_summary = gr.Markdown("", elem_id="label-export-summary")
        with gr.Row():
            train_buttons = {
                "dpo": gr.Button("Train DPO on these labels", elem_id="label-train-dpo"),
                "rm": gr.Button("Train a reward model on these labels", elem_id="label-train-rm"),
                "kto": gr.Button("Train KTO on these labels", elem_id="label-train-kto"),
            }
    with gr.Accordion("Summary", open=False, elem_id="label-summary-box"):
        summary = gr.HTML("", elem_id="label-summary")
        summary_refresh = gr.Button("Refresh summary", size="sm", elem_id="label-summary-refresh")

    # ---- rendering ----

    item_outputs = [item_box, prompt, answer_a, answer_b, count, progress, status, view]
    session_outputs = [pair_buttons, single_buttons, column_b, from_b, resume]

    def session_layout(s: LabelSession | None) -> list:
        single = s is not None and s.mode == "single"
        return [gr.update(visible=not single), gr.update(visible=single), gr.update(visible=not single),
                gr.update(visible=not single), gr.update(visible=s is not None and s.status == "failed")]

    def boxes(item: LabelItem | None, single: bool = False) -> list:
        """[prompt, answer A, answer B] cards for `item` (empty cards while there is none)."""
        if item is None:
            return [card("label-prompt", "", "prompt", "Prompt"),
                    card("label-answer-a", "", "answer", "Answer" if single else "A"),
                    card("label-answer-b", "", "answer", "B")]
        return [card("label-prompt", prompt_html(item.prompt), "prompt", "Prompt"),
                card("label-answer-a", markdown_html(item.answer_a), "answer", "Answer" if single else "A"),
                card("label-answer-b", markdown_html(item.answer_b), "answer", "B")]

    def around(v: LabelView, has_item: bool, message: str | None = None, force: bool = False) -> list:
        """[count, progress, status, view] for the item on the page; unchanged ones are skipped unless forced."""
        s = labeling.get_session(store, v.session_id)
        p = labeling.progress(store, v.session_id)
        mine = labeling.client_label_count(store, v.session_id, v.client)
        prog, cnt = progress_html(s, p, mine), count_html(p)
        stat = message if message is not None else ("" if has_item else waiting_status(s, p))
        new = replace(v, shown_progress=prog, shown_count=cnt, shown_status=stat)
        return [cnt if force or cnt != v.shown_count else gr.skip(),
                prog if force or prog != v.shown_progress else gr.skip(),
                stat if force or stat != v.shown_status else gr.skip(), new]

    def render(v: LabelView, item: LabelItem | None, message: str | None = None, force: bool = False) -> list:
        """Values for item_outputs: the item (or empty boxes while there is none) and what is around it."""
        if not v.session_id:
            return [None, *boxes(None), count_html(None), progress_html(None, None), message or "",
                    replace(v, item_id=None)]
        v = replace(v, item_id=item.id if item else None)
        single = labeling.get_session(store, v.session_id).mode == "single"
        return [str(item.id) if item else None, *boxes(item, single)] + around(v, item is not None, message, force)

    def join(v: LabelView, session_id: str | None, message: str | None = None) -> list:
        """Show `session_id`: this browser's item in it once the tab is open (claimed), the progress before."""
        v = replace(v, session_id=session_id or None, item_id=None)
        item = None
        if v.session_id and v.active:
            try:
                label_generator.ensure_generator(store, v.session_id)
            except Exception:  # never block labeling on the generator; the progress shows its state
                log.exception("starting the generator failed")
            item = labeling.claim_next(store, v.session_id, v.annotator, v.client)
        s = labeling.get_session(store, v.session_id) if v.session_id else None
        message = message if message is not None or v.active else ""
        return render(v, item, message, force=True) + session_layout(s)

    def remembered(v: LabelView) -> dict:
        return {"session": v.session_id, "client": v.client, "annotator": v.annotator}

    def restore(v: LabelView, saved, request: gr.Request | None = None) -> LabelView:
        """This browser's client id, annotator and session, from its storage (new ones the first time: the
        page's session hash, so the load and tab-open events agree on it whichever runs first)."""
        if v.client:
            return v
        saved = saved if isinstance(saved, dict) else {}
        page = getattr(request, "session_hash", None) if request is not None else None
        client = saved.get("client") or page or secrets.token_hex(8)
        ids = [s.id for s in labeling.list_sessions(store)]
        session_id = saved.get("session") if saved.get("session") in ids else (ids[0] if ids else None)
        return replace(v, client=client, annotator=(saved.get("annotator") or "").strip() or annotator_default(client),
                       session_id=session_id)

    # ---- handlers ----

    def on_load(v: LabelView, saved, request: gr.Request):
        # the tab may have been opened (and an item claimed) before this ran: keep that view as it is
        v = restore(v, saved, request)
        out = join(v, v.session_id)
        choices = session_choices(store)
        return [remembered(v), gr.update(choices=choices, value=v.session_id), v.annotator,
                gr.update(open=not choices), gr.update(choices=model_choices(store)),
                gr.update(choices=model_choices(store)), summary_html(store, v.session_id)] + out

    load_outputs = [remember, session, annotator, new_box, model_a, model_b, summary] + item_outputs + session_outputs

    def on_open(v: LabelView, saved, request: gr.Request):
        known = bool(v.client)  # the page's load event has filled the annotator box already
        v = replace(restore(v, saved, request), active=True)
        out = join(v, v.session_id)
        return [remembered(v), gr.update(choices=session_choices(store), value=v.session_id),
                gr.skip() if known else v.annotator] + out

    open_outputs = [remember, session, annotator] + item_outputs + session_outputs

    def on_mode(m, c):
        pair = m == "pair"
        return gr.update(visible=pair), gr.update(visible=pair and c == "models"), gr.update(visible=pair)

    def on_source(src):
        return tuple(gr.update(visible=src == shown) for shown in ("dataset", "dataset", "dataset", "upload", "typed"))

    def on_start(v: LabelView, m, c, nm, ma, mb, ta, tb, mx, k, src, ds, col, lim, up, txt, who):
        client = v.client or secrets.token_hex(8)
        v = replace(v, client=client, annotator=(who or "").strip() or v.annotator or annotator_default(client),
                    active=True)
        try:
            settings = labeling.GenerationSettings.build(temperature_a=ta, temperature_b=tb if m == "pair" else None,
                                                         max_new_tokens=mx, labels_per_item=k)
            if src == "upload":
                if not up:
                    raise LabelError("upload a prompt file first (or choose another prompt source)")
                prompts = labeling.load_prompts(file=up, column=col, limit=lim, workspace=workspace)
                where = Path(up).name
            elif src == "typed":
                prompts, where = labeling.load_prompts(text=txt or "", limit=lim, workspace=workspace), "typed prompts"
            else:
                prompts = labeling.load_prompts(dataset=ds, column=col, limit=lim, workspace=workspace)
                where = f"{ds}:{col or 'prompt'}"
            two_models = m == "pair" and c == "models"
            s = labeling.create_session(store, prompts, model_a=ma, model_b=mb if two_models else None, mode=m,
                                        name=nm, prompt_source=where, settings=settings)
        except LabelError as e:
            gr.Warning("Cannot start the session: " + str(e)[:300])
            return [gr.skip()] * 4 + [error_markdown([str(e)], "Cannot start the session")] + \
                [gr.skip()] * (len(item_outputs) + len(session_outputs))
        except Exception as e:  # never a traceback in the page; the log has it
            log.exception("starting a labeling session failed")
            return [gr.skip()] * 4 + [error_markdown([f"{type(e).__name__}: {e}"], "Could not start the session")] + \
                [gr.skip()] * (len(item_outputs) + len(session_outputs))
        out = join(v, s.id, "Generating the first answers…")
        v = out[item_outputs.index(view)]
        return [remembered(v), gr.update(choices=session_choices(store), value=s.id), gr.update(open=False),
                v.annotator, f"Started **{s.name}** (`{s.id}`): {len(prompts)} prompts."] + out

    def on_session(v: LabelView, session_id, who):
        v = replace(v, annotator=(who or "").strip() or v.annotator, active=True)
        out = join(v, session_id)
        return [remembered(out[item_outputs.index(view)]), summary_html(store, session_id)] + out

    def on_annotator(v: LabelView, who):
        who = (who or "").strip() or annotator_default(v.client)
        v = replace(v, annotator=who)
        return remembered(v), v, who

    def make_label_handler(choice: str):
        def on_label(v: LabelView, item_id, who, edited, note_text):
            if not v.session_id:
                return render(v, None, NO_SESSION, force=True) + [gr.skip(), gr.skip(), gr.skip()]
            who = (who or "").strip() or v.annotator
            v = replace(v, annotator=who, active=True)
            message = None
            if item_id:
                try:
                    # a repeated key press finds the item labeled from here already: nothing changes
                    labeling.commit_label(store, v.session_id, int(item_id), choice, who, v.client,
                                          edited_text=edited, note=note_text)
                except LabelError as e:
                    message = f"**Not saved:** {e}"
            else:
                message = "Nothing to label yet: " + waiting_status(labeling.get_session(store, v.session_id),
                                                                     labeling.progress(store, v.session_id))
            item = labeling.claim_next(store, v.session_id, who, v.client)
            try:
                label_generator.ensure_generator(store, v.session_id)
            except Exception:
                log.exception("starting the generator failed")
            out = render(v, item, message)
            same = item is not None and str(item.id) == str(item_id)
            return out + [gr.skip() if same else "", gr.skip() if same else "", remembered(out[-1])]
        return on_label

    def on_undo(v: LabelView, who):
        if not v.session_id:
            return render(v, None, NO_SESSION, force=True) + [gr.skip(), gr.skip()]
        undone = labeling.undo_last(store, v.session_id, v.client)
        item = labeling.claim_next(store, v.session_id, (who or "").strip() or v.annotator, v.client)
        if undone is None:
            return render(v, item, "Nothing to undo: no label from this browser in this session.") + \
                [gr.skip(), gr.skip()]
        message = f"Undid your label **{labeling.CHOICE_NAMES[undone.choice]}**; label this item again."
        return render(v, item, message) + [undone.edited_text or "", undone.note or ""]

    def on_tick(v: LabelView):
        if not v.session_id or not v.active:
            return [gr.skip()] * len(item_outputs)
        try:
            state = label_generator.ensure_generator(store, v.session_id)
        except Exception:
            log.exception("starting the generator failed")
            state = None
        if v.item_id is None and state != "failed":
            item = labeling.claim_next(store, v.session_id, v.annotator, v.client)
            if item is not None:
                return render(v, item, "")
        # the item on the page stays; only the progress, count and status follow the store
        rest = around(v, v.item_id is not None)
        changed = any(x is not gr.skip() for x in rest[:3])
        return [gr.skip()] * 4 + rest[:3] + [rest[3] if changed else gr.skip()]

    def on_resume(v: LabelView):
        if v.session_id:
            label_generator.ensure_generator(store, v.session_id, retry=True)
        return join(v, v.session_id)

    def on_edit_from(side: str):
        def fill(item_id):
            if not item_id:
                return gr.skip()
            item = labeling.get_item(store, int(item_id))
            return (item.answer_a if side == "a" else item.answer_b) or ""
        return fill

    def on_export(v: LabelView, f, ext, conversational, t, bb):
        if not v.session_id:
            return None, NO_SESSION
        s = labeling.get_session(store, v.session_id)
        out = workspace / "exports" / "labels" / f"{s.id}-{f}{ext}"
        try:
            result = labeling.write_export(store, s.id, out, fmt=f, conversational=conversational, ties=t, both_bad=bb)
        except LabelError as e:
            return None, error_markdown([str(e)], "Cannot export")
        if not result.rows:
            return None, f"**Nothing to export yet:** {result.text()}."
        download = Path(tempfile.mkdtemp(prefix="wb-labels-")) / out.name  # a path Gradio always serves
        shutil.copyfile(out, download)
        return str(download), f"**Exported** {result.text()}. Saved as `{out}`."

    def make_train_handler(train_mode: str):
        def on_train(v: LabelView):
            skip = [gr.skip()] * 4
            if not v.session_id:
                return skip + [NO_SESSION]
            s = labeling.get_session(store, v.session_id)
            if s.mode == "single" and mode_spec(train_mode).pairwise:
                return skip + [f"**{s.name}** rates single answers (thumbs up / down): it gives no pairs for "
                               f"{train_mode.upper()}. Train KTO on it."]
            try:
                labeling.labels_dataset(labeling.LABELS_PREFIX + s.id, workspace, train_mode)
            except LabelError as e:
                return skip + [f"**Not yet:** {e}"]
            from app.train_tab import dataset_choices

            spec = labeling.LABELS_PREFIX + s.id
            base, _ = labeling.resolve_candidate(store, s.model_a)
            return [gr.update(value=train_mode), gr.update(choices=dataset_choices(store), value=spec),
                    gr.update(value=base), gr.Tabs(selected="train"),
                    f"The Train tab is set to **{train_mode.upper()}** on `{spec}` with the model `{base}`."]
        return on_train

    # ---- wiring ----

    mode.change(on_mode, [mode, compare], [compare, model_b, temp_b], show_progress="hidden")
    compare.change(on_mode, [mode, compare], [compare, model_b, temp_b], show_progress="hidden")
    source.change(on_source, source, [dataset, column, limit, upload, typed], show_progress="hidden")
    start.click(on_start, [view, mode, compare, name, model_a, model_b, temp_a, temp_b, max_new, overlap, source,
                           dataset, column, limit, upload, typed, annotator],
                [remember, session, new_box, annotator, new_message] + item_outputs + session_outputs,
                concurrency_limit=None, show_progress="minimal", show_progress_on=[new_message])
    session.input(on_session, [view, session, annotator], [remember, summary] + item_outputs + session_outputs,
                  show_progress="hidden")
    annotator.blur(on_annotator, [view, annotator], [remember, view, annotator], show_progress="hidden")
    annotator.submit(on_annotator, [view, annotator], [remember, view, annotator], show_progress="hidden")
    for choice, button in choice_buttons.items():
        button.click(make_label_handler(choice), [view, item_box, annotator, edit, note],
                     item_outputs + [edit, note, remember], show_progress="hidden", concurrency_limit=None,
                     trigger_mode="once")
    undo.click(on_undo, [view, annotator], item_outputs + [edit, note], show_progress="hidden",
               concurrency_limit=None, trigger_mode="once")
    timer.tick(on_tick, view, item_outputs, show_progress="hidden", concurrency_limit=None)
    resume.click(on_resume, view, item_outputs + session_outputs, show_progress="hidden")
    from_a.click(on_edit_from("a"), item_box, edit, show_progress="hidden")
    from_b.click(on_edit_from("b"), item_box, edit, show_progress="hidden")
    export.click(on_export, [view, fmt, file_type, chat, ties, both_bad], [export_file, export_summary],
                 show_progress="minimal", show_progress_on=[export_summary])
    summary_refresh.click(lambda v: summary_html(store, v.session_id), view, summary, show_progress="hidden")
    if train_fields and tabs is not None:
        outputs = [train_fields["mode"], train_fields["dataset"], train_fields["model"], tabs, export_summary]
        for train_mode, button in train_buttons.items():
            button.click(make_train_handler(train_mode), view, outputs, show_progress="hidden")
    # one at a time, each reading the view the other left: a tab opened while the page still loads keeps its item
    serial = dict(concurrency_id="label-view", concurrency_limit=1)
    return LabelTab(load=(on_load, dict(inputs=[view, remember], outputs=load_outputs, **serial)),
                    open=(on_open, dict(inputs=[view, remember], outputs=open_outputs, **serial)), remember=remember)


def _dataset_choices(store: RunStore) -> list:
    from app.train_tab import dataset_choices

    return [c for c in dataset_choices(store) if not str(c[1]).startswith(labeling.LABELS_PREFIX)]
