"""The Labeling tab's layout: every control, with the elem_ids the keyboard script and the tests rely on, gathered
in a LabelUI so handlers name the components they read and update (app/label_tab.py wires them)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from app import i18n
from app.choices import dataset_choices, generation_model_choices, session_choices
from app.label_render import card, count_html, progress_html
from backend import labeling
from backend.models import EMBEDDED_MODEL
from backend.runs.store import RunStore

DEFAULT_PROMPTS = "demo-prompts"
STORAGE_KEY = "workbench-labeling"

# Keys 1-4 (single answers: 1-3) / U click the labeling buttons, unless the user is typing (a textbox, the edit box, the note).
KEYBOARD_JS = """
() => {
  if (window.__wbLabelKeys) return;
  window.__wbLabelKeys = true;
  const pair = {"1": "label-choice-a", "2": "label-choice-b", "3": "label-choice-tie", "4": "label-choice-both-bad"};
  const single = {"1": "label-choice-up", "2": "label-choice-down", "3": "label-choice-unsafe"};
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
.wb-trajectory pre { margin: 4px 0; white-space: pre-wrap; font-size: 13px; }
.wb-trajectory pre.wb-tool-call { border-left: 3px solid #4f46e5; }
.wb-trajectory pre.wb-tool-result { border-left: 3px solid #16a34a; margin-left: 14px; }
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
    lang: str = "en"  # the page's language, for the words handlers write (taken when the page loads or the tab opens)


@dataclass
class NewSessionForm:
    """The "New labeling session" controls and the Start button."""

    box: gr.Accordion
    mode: gr.Radio
    compare: gr.Radio
    name: gr.Textbox
    model_a: gr.Dropdown
    model_b: gr.Dropdown
    temp_a: gr.Number
    temp_b: gr.Number
    max_new: gr.Number
    overlap: gr.Number
    source: gr.Radio
    dataset: gr.Dropdown
    column: gr.Textbox
    limit: gr.Number
    upload: gr.File
    typed: gr.Textbox
    start: gr.Button
    message: gr.Markdown

    @property
    def inputs(self) -> set:
        """What Start reads (wired as a set: the handler gets one {component: value} dict)."""
        return {self.mode, self.compare, self.name, self.model_a, self.model_b, self.temp_a, self.temp_b,
                self.max_new, self.overlap, self.source, self.dataset, self.column, self.limit, self.upload,
                self.typed}


@dataclass
class ExportForm:
    """The "Export and train" controls."""

    fmt: gr.Radio
    file_type: gr.Radio
    chat: gr.Checkbox
    ties: gr.Radio
    both_bad: gr.Radio
    button: gr.Button
    file: gr.File
    summary: gr.Markdown
    train_buttons: dict[str, gr.Button]  # by training mode: dpo, rm, kto

    @property
    def inputs(self) -> set:
        return {self.fmt, self.file_type, self.chat, self.ties, self.both_bad}


@dataclass
class LabelUI:
    remember: gr.BrowserState  # render it outside the tabs (see LabelTab)
    view: gr.State  # LabelView
    started: gr.State  # {"session", "annotator"} the New session form just created, or None
    new: NewSessionForm
    session: gr.Dropdown
    annotator: gr.Textbox
    count: gr.HTML
    progress: gr.HTML
    resume: gr.Button
    item_box: gr.Textbox  # the shown item's id, sent with each label
    prompt: gr.HTML
    answer_a: gr.HTML
    answer_b: gr.HTML
    column_b: gr.Column
    pair_buttons: gr.Row
    single_buttons: gr.Row
    choice_buttons: dict[str, gr.Button]  # by choice: a, b, tie, both_bad, up, down, unsafe
    undo: gr.Button
    note: gr.Textbox
    edit: gr.Textbox
    from_a: gr.Button
    from_b: gr.Button
    status: gr.Markdown
    export: ExportForm
    summary: gr.HTML
    summary_refresh: gr.Button

    @property
    def item_outputs(self) -> list:
        """The shown item and what is around it: what `render` fills."""
        return [self.item_box, self.prompt, self.answer_a, self.answer_b, self.count, self.progress, self.status,
                self.view]

    @property
    def session_outputs(self) -> list:
        """What depends on the session's kind (pairs or single answers) and state: `session_layout`."""
        return [self.pair_buttons, self.single_buttons, self.column_b, self.from_b, self.resume]


def browser_secret(workspace: Path) -> str:
    """A per-workspace secret for the browser-stored state: it must stay the same across UI restarts."""
    path = Path(workspace) / ".labeling-browser-secret"
    if not path.exists():
        path.write_text(secrets.token_hex(16))
        path.chmod(0o600)
    return path.read_text().strip()


def layout(store: RunStore, words=None) -> LabelUI:
    """Every control of the tab; `words` (an i18n.Translatable) is given their words."""
    t = i18n.given(words).add
    secret = browser_secret(store.workspace)
    remember = gr.BrowserState({}, storage_key=STORAGE_KEY + "-" + secret[:8], secret=secret, render=False)
    view = gr.State(LabelView())
    started = gr.State(None)
    t(gr.Markdown(elem_classes=["wb-intro"]), "label.intro", "value")
    with t(gr.Accordion(open=True, elem_id="label-new"), "label.new") as new_box:
        with gr.Row(equal_height=True):
            mode = t(gr.Radio(["pair", "single"], value="pair", elem_id="label-mode", scale=3), "label.mode",
                     choices=[("label.mode.pair", "pair"), ("label.mode.single", "single")])
            compare = t(gr.Radio(["samples", "models"], value="samples", elem_id="label-compare", scale=2),
                        "label.compare", choices=[("label.compare.samples", "samples"),
                                                  ("label.compare.models", "models")])
            name = t(gr.Textbox(elem_id="label-name", scale=2), "label.name", placeholder="label.name_placeholder")
        with gr.Row(equal_height=True):
            model_a = t(gr.Dropdown(choices=generation_model_choices(store), value=EMBEDDED_MODEL,
                                    allow_custom_value=True, filterable=True, elem_id="label-model-a", scale=3),
                        "label.model", info="label.model_help")
            model_b = t(gr.Dropdown(choices=generation_model_choices(store), value=EMBEDDED_MODEL,
                                    allow_custom_value=True, filterable=True, elem_id="label-model-b", scale=3,
                                    visible=False), "label.model_b", info="label.model_b_help")
            temp_a = t(gr.Number(value=0.8, minimum=0, maximum=5, step=0.1, elem_id="label-temperature-a", scale=1,
                                 min_width=110), "label.temperature", fmt={"side": "A"})
            temp_b = t(gr.Number(value=0.8, minimum=0, maximum=5, step=0.1, elem_id="label-temperature-b", scale=1,
                                 min_width=110), "label.temperature", fmt={"side": "B"})
            max_new = t(gr.Number(value=labeling.GenerationSettings.max_new_tokens, minimum=1, maximum=4096,
                                  precision=0, elem_id="label-max-new-tokens", scale=1, min_width=110),
                        "common.max_new_tokens")
            overlap = t(gr.Number(value=1, minimum=1, maximum=20, precision=0, elem_id="label-overlap", scale=1,
                                  min_width=110), "label.overlap", info="label.overlap_help")
        with gr.Row(equal_height=True):
            source = t(gr.Radio(["dataset", "upload", "typed"], value="dataset", elem_id="label-source", scale=2),
                       "label.source", choices=[("label.source.dataset", "dataset"), ("label.source.upload", "upload"),
                                                ("label.source.typed", "typed")])
            dataset = t(gr.Dropdown(choices=dataset_choices(store, labels=False), value=DEFAULT_PROMPTS,
                                    allow_custom_value=True, filterable=True, elem_id="label-dataset", scale=2),
                        "common.dataset")
            column = t(gr.Textbox(value="prompt", elem_id="label-column", scale=1, min_width=100), "label.column")
            limit = t(gr.Number(value=0, minimum=0, precision=0, elem_id="label-limit", scale=1, min_width=120),
                      "label.limit")
            upload = t(gr.File(file_types=list(labeling.PROMPT_FILE_TYPES), type="filepath", elem_id="label-upload",
                               height=110, visible=False, scale=2), "label.upload")
            typed = t(gr.Textbox(lines=4, elem_id="label-typed", visible=False, scale=3), "label.typed")
    with gr.Row(equal_height=True):  # outside the accordion: one click starts a session with these settings
        start = t(gr.Button(variant="primary", elem_id="label-start", scale=1), "label.start", "value")
        new_message = gr.Markdown("", elem_id="label-message")

    with gr.Row(equal_height=True):
        session = t(gr.Dropdown(choices=session_choices(store), value=None, elem_id="label-session", scale=4,
                                allow_custom_value=False), "label.session")
        annotator = t(gr.Textbox(elem_id="label-annotator", scale=2, min_width=140), "label.annotator",
                      info="label.annotator_help")
        count = gr.HTML(count_html(None), elem_id="label-count-box", padding=False, min_width=220, scale=1)
    progress = gr.HTML(progress_html(None, None), elem_id="label-progress")
    with gr.Row(equal_height=True):
        resume = t(gr.Button(size="sm", elem_id="label-resume", visible=False, scale=0), "label.resume", "value")
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
                    "a": gr.Button(variant="primary", elem_id="label-choice-a"),
                    "b": gr.Button(variant="primary", elem_id="label-choice-b"),
                    "tie": gr.Button(elem_id="label-choice-tie"),
                    "both_bad": gr.Button(elem_id="label-choice-both-bad"),
                }
            with gr.Row(visible=False) as single_buttons:
                choice_buttons["up"] = gr.Button(variant="primary", elem_id="label-choice-up")
                choice_buttons["down"] = gr.Button(variant="stop", elem_id="label-choice-down")
                choice_buttons["unsafe"] = gr.Button(variant="stop", elem_id="label-choice-unsafe")
            for choice, button in choice_buttons.items():
                t(button, f"label.choice.{choice}", "value")
        undo = t(gr.Button(elem_id="label-undo", scale=1, min_width=160), "label.undo", "value")
    note = t(gr.Textbox(elem_id="label-note", max_lines=2), "label.note")
    with t(gr.Accordion(open=False, elem_id="label-edit-box"), "label.edit_box"):
        edit = t(gr.Textbox(lines=4, elem_id="label-edit"), "label.edit", info="label.edit_help")
        with gr.Row():
            from_a = t(gr.Button(size="sm", elem_id="label-edit-from-a"), "label.start_from", "value", fmt={"side": "A"})
            from_b = t(gr.Button(size="sm", elem_id="label-edit-from-b"), "label.start_from", "value", fmt={"side": "B"})
    status = gr.Markdown("", elem_id="label-status")

    with t(gr.Accordion(open=False, elem_id="label-export-box"), "label.export_box"):
        with gr.Row(equal_height=True):
            fmt = t(gr.Radio(["dpo", "kto", "cost"], value="dpo", elem_id="label-export-format", scale=3),
                    "label.format", choices=[(f"label.format.{f}", f) for f in ("dpo", "kto", "cost")])
            file_type = t(gr.Radio([("JSONL", ".jsonl"), ("Parquet", ".parquet")], value=".jsonl",
                                   elem_id="label-export-type", scale=1), "label.file")
            chat = t(gr.Checkbox(value=True, elem_id="label-export-chat", scale=1), "label.chat")
        with gr.Row(equal_height=True):
            ties = t(gr.Radio(["drop", "keep"], value="drop", elem_id="label-export-ties"), "label.ties",
                     choices=[("label.drop", "drop"), ("label.ties.keep", "keep")])
            both_bad = t(gr.Radio(["drop", "keep"], value="drop", elem_id="label-export-both-bad"), "label.both_bad",
                         choices=[("label.drop", "drop"), ("label.both_bad.keep", "keep")])
        with gr.Row(equal_height=False):
            export = t(gr.Button(variant="primary", elem_id="label-export", scale=1), "label.export", "value")
            export_file = t(gr.File(elem_id="label-export-file", interactive=False, height=80, scale=2),
                            "common.download")
        export_summary = gr.Markdown("", elem_id="label-export-summary")
        with gr.Row():
            train_buttons = {mode: t(gr.Button(elem_id=f"label-train-{mode}"), f"label.train.{mode}", "value")
                             for mode in ("dpo", "orpo", "simpo", "rm", "kto")}
    with t(gr.Accordion(open=False, elem_id="label-summary-box"), "label.summary"):
        summary = gr.HTML("", elem_id="label-summary")
        summary_refresh = t(gr.Button(size="sm", elem_id="label-summary-refresh"), "label.summary_refresh", "value")

    return LabelUI(
        remember=remember, view=view, started=started,
        new=NewSessionForm(new_box, mode, compare, name, model_a, model_b, temp_a, temp_b, max_new, overlap, source,
                           dataset, column, limit, upload, typed, start, new_message),
        session=session, annotator=annotator, count=count, progress=progress, resume=resume, item_box=item_box,
        prompt=prompt, answer_a=answer_a, answer_b=answer_b, column_b=column_b, pair_buttons=pair_buttons,
        single_buttons=single_buttons, choice_buttons=choice_buttons, undo=undo, note=note, edit=edit,
        from_a=from_a, from_b=from_b, status=status,
        export=ExportForm(fmt, file_type, chat, ties, both_bad, export, export_file, export_summary, train_buttons),
        summary=summary, summary_refresh=summary_refresh)
