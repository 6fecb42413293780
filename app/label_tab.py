"""The Labeling tab: people compare two answers (or rate one) and every label goes straight to the store.

Start a session (a model, or base + a run's adapter, or two of them side by side; prompts from a dataset
column, an uploaded file or typed text); a background generator (backend/labeling/generator.py) writes the
answers ahead of the labelers while this tab shows its progress. Keys 1-4 label (A better, B better, tie,
both bad; 1 / 2 / 3 are thumbs up / down / unsafe for single answers) and U undoes the last label.

Each browser is one labeling *client*: its id, annotator name and session live in the browser's local
storage (gr.BrowserState with a key and secret fixed per workspace), so a reload, or a restart of the UI,
resumes on the same item; which item a client holds is in the store (backend/labeling.py), which makes
sure two browsers never get the same pair. The shown item's id also travels in a hidden textbox, so a key
pressed twice before the page updates labels that item once (the store ignores the repeat) and never the
next one by accident.

The layout is app/label_layout.py (a LabelUI of named components), the HTML app/label_render.py. Handlers
here are module-level functions of (ui, store, ...) bound with app.events.bind; each returns a
{component: update} dict, and those with many inputs take them as one {component: value} dict.
"""
from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from app import i18n
from app.choices import dataset_choices, generation_model_choices, session_choices
from app.events import bind
from app.formatting import error_markdown
from app.label_layout import LabelUI, LabelView, layout
from app.label_render import (answer_html, card, choice_name, count_html, no_session, progress_html, prompt_html,
                              summary_html, waiting_status)
from app.tab_polls import TabPolls
from backend import labeling
from backend.labeling import LabelError, LabelItem, LabelSession
from backend.labeling import generator as label_generator
from backend.core.mode_registry import mode_spec
from backend.runs.store import RunStore

log = logging.getLogger(__name__)


@dataclass
class LabelTab:
    load: tuple  # (fn, {inputs, outputs}) for the page's load event: what this browser was labeling
    open: tuple  # (fn, {inputs, outputs}) for the tab's select event: resumes on this browser's item
    remember: gr.BrowserState  # render it outside the tabs: a tab's children mount only when it is opened,
    # and the page's load event must see what the browser stored
    ui: LabelUI


def annotator_default(client: str) -> str:
    return f"labeler-{client[:4]}"


def remembered(v: LabelView) -> dict:
    """What the browser stores: its session, client id and annotator."""
    return {"session": v.session_id, "client": v.client, "annotator": v.annotator}


def restore(store: RunStore, v: LabelView, saved, request: gr.Request | None = None) -> LabelView:
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


def in_language(v: LabelView, request: gr.Request | None) -> LabelView:
    """The view with the session's language now (a handler called without a request keeps the view's)."""
    return replace(v, lang=i18n.lang_of(request)) if request is not None else v


def ensure_generator(store: RunStore, session_id: str, retry: bool = False) -> str | None:
    """Start the session's generator if it is not running; never blocks labeling (the progress shows its state)."""
    try:
        return label_generator.ensure_generator(store, session_id, retry=retry)
    except Exception:
        log.exception("starting the generator failed")
        return None


# ---- rendering: {component: update} dicts ----

def session_layout(ui: LabelUI, s: LabelSession | None) -> dict:
    single = s is not None and s.mode == "single"
    return {ui.pair_buttons: gr.update(visible=not single), ui.single_buttons: gr.update(visible=single),
            ui.column_b: gr.update(visible=not single), ui.from_b: gr.update(visible=not single),
            ui.resume: gr.update(visible=s is not None and s.status == "failed")}


def _with_tools(source: dict | None) -> bool:
    """The answer was written through a run's tools (the generator records them in its source)."""
    return bool((source or {}).get("tools"))


def boxes(ui: LabelUI, item: LabelItem | None, single: bool = False, lang: str = i18n.DEFAULT,
          reason: str = "") -> dict:
    """The prompt and answer cards for `item`; while there is none, empty cards, the prompt's saying why
    (`reason`: where the item would be, not below the fold)."""
    a_title = i18n.text("label.card.answer", lang) if single else "A"
    prompt = i18n.text("label.card.prompt", lang)
    if item is None:
        return {ui.prompt: card("label-prompt", "", "prompt", prompt, note=reason),
                ui.answer_a: card("label-answer-a", "", "answer", a_title),
                ui.answer_b: card("label-answer-b", "", "answer", "B")}
    return {ui.prompt: card("label-prompt", prompt_html(item.prompt), "prompt", prompt),
            ui.answer_a: card("label-answer-a", answer_html(item.answer_a, _with_tools(item.source_a)), "answer",
                              a_title),
            ui.answer_b: card("label-answer-b", answer_html(item.answer_b, _with_tools(item.source_b)), "answer", "B")}


def around(ui: LabelUI, store: RunStore, v: LabelView, has_item: bool, message: str | None = None,
           force: bool = False) -> dict:
    """Count, progress, status and view for the item on the page; unchanged ones are left out unless forced."""
    s = labeling.get_session(store, v.session_id)
    p = labeling.progress(store, v.session_id)
    mine = labeling.client_label_count(store, v.session_id, v.client)
    prog, cnt = progress_html(s, p, mine, v.lang), count_html(p, v.lang)
    stat = message if message is not None else ("" if has_item else waiting_status(s, p, v.lang))
    out = {ui.view: replace(v, shown_progress=prog, shown_count=cnt, shown_status=stat)}
    for component, new, old in ((ui.count, cnt, v.shown_count), (ui.progress, prog, v.shown_progress),
                                (ui.status, stat, v.shown_status)):
        if force or new != old:
            out[component] = new
    return out


def render(ui: LabelUI, store: RunStore, v: LabelView, item: LabelItem | None, message: str | None = None,
           force: bool = False) -> dict:
    """Updates for ui.item_outputs: the item (or empty boxes while there is none) and what is around it."""
    if not v.session_id:
        return {ui.item_box: None, **boxes(ui, None, lang=v.lang), ui.count: count_html(None),
                ui.progress: progress_html(None, None, lang=v.lang), ui.status: message or "",
                ui.view: replace(v, item_id=None)}
    v = replace(v, item_id=item.id if item else None)
    single = labeling.get_session(store, v.session_id).mode == "single"
    rest = around(ui, store, v, item is not None, message, force)
    reason = "" if item else rest[ui.view].shown_status
    return {ui.item_box: str(item.id) if item else None} | boxes(ui, item, single, v.lang, reason) | rest


def join(ui: LabelUI, store: RunStore, v: LabelView, session_id: str | None, message: str | None = None) -> dict:
    """Show `session_id`: this browser's item in it once the tab is open (claimed), the progress before."""
    v = replace(v, session_id=session_id or None, item_id=None)
    item = None
    if v.session_id and v.active:
        ensure_generator(store, v.session_id)
        item = labeling.claim_next(store, v.session_id, v.annotator, v.client)
    s = labeling.get_session(store, v.session_id) if v.session_id else None
    message = message if message is not None or v.active else ""
    return render(ui, store, v, item, message, force=True) | session_layout(ui, s)


# ---- handlers ----

def on_load(ui: LabelUI, store: RunStore, v: LabelView, saved, request: gr.Request) -> dict:
    # the tab may have been opened before this ran (the view is active then): the item is taken here
    v = replace(restore(store, v, saved, request), lang=i18n.lang_of(request))
    out = join(ui, store, v, v.session_id)
    choices = session_choices(store)
    models = generation_model_choices(store)
    return out | {ui.remember: remembered(v), ui.session: gr.update(choices=choices, value=v.session_id),
                  ui.annotator: v.annotator, ui.new.box: gr.update(open=not choices),
                  ui.new.model_a: gr.update(choices=models), ui.new.model_b: gr.update(choices=models),
                  ui.summary: summary_html(store, v.session_id, v.lang)}


def on_open(ui: LabelUI, store: RunStore, v: LabelView, saved, request: gr.Request) -> dict:
    if not v.client and not (isinstance(saved, dict) and saved.get("client")):
        # before the page's load event, the browser's storage may not be read yet: that event restores this
        # browser's labeler (a new one only if it has none) and takes the item
        return {ui.view: replace(v, active=True)}
    v = replace(restore(store, v, saved, request), active=True, lang=i18n.lang_of(request))
    out = join(ui, store, v, v.session_id) | {ui.remember: remembered(v),
                                              ui.session: gr.update(choices=session_choices(store), value=v.session_id)}
    return out


def on_mode(ui: LabelUI, mode: str, compare: str) -> dict:
    pair = mode == "pair"
    return {ui.new.compare: gr.update(visible=pair), ui.new.model_b: gr.update(visible=pair and compare == "models"),
            ui.new.temp_b: gr.update(visible=pair)}


def on_source(ui: LabelUI, source: str) -> dict:
    f = ui.new
    return {c: gr.update(visible=source == shown) for c, shown in
            ((f.dataset, "dataset"), (f.column, "dataset"), (f.limit, "dataset"), (f.upload, "upload"),
             (f.typed, "typed"))}


def read_prompts(ui: LabelUI, store: RunStore, values: dict) -> tuple[list, str]:
    """The prompts the New session form points at, and where they came from (for the session's record)."""
    f, workspace = ui.new, store.workspace
    source, column, limit = values[f.source], values[f.column], values[f.limit]
    if source == "upload":
        if not values[f.upload]:
            raise LabelError("upload a prompt file first (or choose another prompt source)")
        return (labeling.load_prompts(file=values[f.upload], column=column, limit=limit, workspace=workspace),
                Path(values[f.upload]).name)
    if source == "typed":
        return labeling.load_prompts(text=values[f.typed] or "", limit=limit, workspace=workspace), "typed prompts"
    dataset = values[f.dataset]
    return (labeling.load_prompts(dataset=dataset, column=column, limit=limit, workspace=workspace),
            f"{dataset}:{column or 'prompt'}")


def on_start(ui: LabelUI, store: RunStore, values: dict, request: gr.Request = None) -> dict:
    """Create the session the New session form describes (reading its prompts may take a while: this step runs
    beside the tab's serial events); `on_started` then shows it."""
    f = ui.new
    lang = i18n.lang_of(request)
    pair = values[f.mode] == "pair"
    try:
        settings = labeling.GenerationSettings.build(
            temperature_a=values[f.temp_a], temperature_b=values[f.temp_b] if pair else None,
            max_new_tokens=values[f.max_new], labels_per_item=values[f.overlap])
        prompts, where = read_prompts(ui, store, values)
        two_models = pair and values[f.compare] == "models"
        s = labeling.create_session(store, prompts, model_a=values[f.model_a],
                                    model_b=values[f.model_b] if two_models else None, mode=values[f.mode],
                                    name=values[f.name], prompt_source=where, settings=settings)
    except LabelError as e:
        gr.Warning(i18n.text("label.cannot_start_warning", lang, error=str(e)[:300]))
        return {f.message: error_markdown([str(e)], i18n.text("label.cannot_start", lang), lang), ui.started: None}
    except Exception as e:  # never a traceback in the page; the log has it
        log.exception("starting a labeling session failed")
        return {f.message: error_markdown([f"{type(e).__name__}: {e}"], i18n.text("label.could_not_start", lang),
                                          lang), ui.started: None}
    # the labeler's name as typed now: the page's load event may yet put the remembered one in the box
    started = {"session": s.id, "annotator": (values[ui.annotator] or "").strip()}
    return {ui.started: started, f.box: gr.update(open=False),
            f.message: i18n.text("label.started", lang, name=s.name, id=s.id, n=len(prompts))}


def on_started(ui: LabelUI, store: RunStore, v: LabelView, started: dict | None,
               request: gr.Request = None) -> dict:
    """Show the session just created, in the view as the serial events left it (the page's load event may have
    run meanwhile)."""
    if not started:
        return gr.skip()
    session_id, who = started["session"], started["annotator"]
    client = v.client or secrets.token_hex(8)
    v = replace(v, client=client, annotator=who or v.annotator or annotator_default(client), active=True,
                lang=i18n.lang_of(request))
    out = join(ui, store, v, session_id, i18n.text("label.generating", v.lang))
    v = out[ui.view]
    return out | {ui.remember: remembered(v), ui.session: gr.update(choices=session_choices(store), value=session_id),
                  ui.annotator: v.annotator}


def on_session(ui: LabelUI, store: RunStore, v: LabelView, session_id: str | None, who: str | None,
               request: gr.Request = None) -> dict:
    v = replace(in_language(v, request), annotator=(who or "").strip() or v.annotator, active=True)
    out = join(ui, store, v, session_id)
    return out | {ui.remember: remembered(out[ui.view]), ui.summary: summary_html(store, session_id, v.lang)}


def on_annotator(ui: LabelUI, v: LabelView, who: str | None) -> dict:
    who = (who or "").strip() or annotator_default(v.client)
    v = replace(v, annotator=who)
    return {ui.remember: remembered(v), ui.view: v, ui.annotator: who}


def on_label(ui: LabelUI, store: RunStore, choice: str, values: dict, request: gr.Request = None) -> dict:
    """A label button (or its key): save the label for the item shown, then show the next one."""
    v, item_id = in_language(values[ui.view], request), values[ui.item_box]
    if not v.session_id:
        return render(ui, store, v, None, no_session(v.lang), force=True)
    who = (values[ui.annotator] or "").strip() or v.annotator
    v = replace(v, annotator=who, active=True)
    message = None
    if item_id:
        try:
            # a repeated key press finds the item labeled from here already: nothing changes
            labeling.commit_label(store, v.session_id, int(item_id), choice, who, v.client,
                                  edited_text=values[ui.edit], note=values[ui.note])
        except LabelError as e:
            message = i18n.text("label.not_saved", v.lang, error=e)
    else:
        message = i18n.text("label.nothing_yet", v.lang, why=waiting_status(
            labeling.get_session(store, v.session_id), labeling.progress(store, v.session_id), v.lang))
    item = labeling.claim_next(store, v.session_id, who, v.client)
    ensure_generator(store, v.session_id)
    out = render(ui, store, v, item, message)
    out[ui.remember] = remembered(out[ui.view])
    if item is None or str(item.id) != str(item_id):  # a new item: its edit and note start empty
        out |= {ui.edit: "", ui.note: ""}
    return out


def on_undo(ui: LabelUI, store: RunStore, v: LabelView, who: str | None, request: gr.Request = None) -> dict:
    v = in_language(v, request)
    if not v.session_id:
        return render(ui, store, v, None, no_session(v.lang), force=True)
    undone = labeling.undo_last(store, v.session_id, v.client)
    item = labeling.claim_next(store, v.session_id, (who or "").strip() or v.annotator, v.client)
    if undone is None:
        return render(ui, store, v, item, i18n.text("label.nothing_to_undo", v.lang))
    message = i18n.text("label.undid", v.lang, name=choice_name(undone.choice, v.lang))
    return render(ui, store, v, item, message) | {ui.edit: undone.edited_text or "", ui.note: undone.note or ""}


def on_tick(ui: LabelUI, store: RunStore, v: LabelView, request: gr.Request = None):
    if not v.active:
        return gr.skip()
    if not v.session_id:  # an open tab always shows a session once there is one (the newest, as a load takes it)
        newest = labeling.list_sessions(store)[:1]
        if not newest or not v.client:
            return gr.skip()
        v = replace(v, session_id=newest[0].id, item_id=None)
    v = in_language(v, request)
    state = ensure_generator(store, v.session_id)
    if v.item_id is None and state != "failed":
        item = labeling.claim_next(store, v.session_id, v.annotator, v.client)
        if item is not None:
            return render(ui, store, v, item, "")
    # the item on the page stays; only the progress, count and status follow the store
    rest = around(ui, store, v, v.item_id is not None)
    if v.item_id is None and ui.status in rest:  # no item: the card says why, as the status does
        single = labeling.get_session(store, v.session_id).mode == "single"
        rest |= boxes(ui, None, single, v.lang, rest[ui.status])
    return rest if len(rest) > 1 else gr.skip()  # the view alone: nothing changed


def on_resume(ui: LabelUI, store: RunStore, v: LabelView, request: gr.Request = None) -> dict:
    v = in_language(v, request)
    if v.session_id:
        ensure_generator(store, v.session_id, retry=True)
    return join(ui, store, v, v.session_id)


def on_edit_from(store: RunStore, side: str, item_id):
    if not item_id:
        return gr.skip()
    item = labeling.get_item(store, int(item_id))
    return (item.answer_a if side == "a" else item.answer_b) or ""


def on_export(ui: LabelUI, store: RunStore, values: dict, request: gr.Request = None) -> dict:
    """The export's own account of what it wrote (result.text(), the CLI's too) stays English."""
    e, v = ui.export, in_language(values[ui.view], request)
    if not v.session_id:
        return {e.file: None, e.summary: no_session(v.lang)}
    s = labeling.get_session(store, v.session_id)
    fmt = values[e.fmt]
    out = store.workspace / "exports" / "labels" / f"{s.id}-{fmt}{values[e.file_type]}"
    try:
        result = labeling.write_export(store, s.id, out, fmt=fmt, conversational=values[e.chat], ties=values[e.ties],
                                       both_bad=values[e.both_bad])
    except LabelError as err:
        return {e.file: None, e.summary: error_markdown([str(err)], i18n.text("label.cannot_export", v.lang), v.lang)}
    if not result.rows:
        return {e.file: None, e.summary: i18n.text("label.nothing_to_export", v.lang, what=result.text())}
    download = Path(tempfile.mkdtemp(prefix="wb-labels-")) / out.name  # a path Gradio always serves
    shutil.copyfile(out, download)
    return {e.file: str(download), e.summary: i18n.text("label.exported", v.lang, what=result.text(), path=out)}


def on_train(ui: LabelUI, store: RunStore, train_fields: dict, polls: TabPolls, train_mode: str, v: LabelView,
             request: gr.Request = None) -> dict:
    """Fill the Train tab (`train_fields`: its mode, dataset and model) to train on the session's labels."""
    say, lang = ui.export.summary, in_language(v, request).lang
    if not v.session_id:
        return {say: no_session(lang)}
    s = labeling.get_session(store, v.session_id)
    if s.mode == "single" and mode_spec(train_mode).pairwise and mode_spec(train_mode).task != "seq_cls":
        return {say: i18n.text("label.no_pairs", lang, name=s.name, mode=train_mode.upper())}
    spec = labeling.LABELS_PREFIX + s.id
    try:
        labeling.labels_dataset(spec, store.workspace, train_mode)
    except LabelError as e:
        return {say: i18n.text("label.not_yet", lang, error=e)}
    base, _ = labeling.resolve_candidate(store, s.model_a)
    return {train_fields["mode"]: gr.update(value=train_mode),
            train_fields["dataset"]: gr.update(choices=dataset_choices(store), value=spec),
            train_fields["model"]: gr.update(value=base), **polls.open("train"),
            say: i18n.text("label.train_set", lang, mode=train_mode.upper(), spec=spec, base=base)}


# ---- wiring ----

# the events that write the view run one at a time, each reading the view the last one left (a tab opened while
# the page still loads keeps its item; a tick never puts back the item a label moved on from); each takes ms
SERIAL = dict(concurrency_id="label-view", concurrency_limit=1)


def wire(ui: LabelUI, store: RunStore, polls: TabPolls, train_fields: dict | None) -> None:
    f, items, layout_outputs = ui.new, ui.item_outputs, ui.session_outputs
    hidden = dict(show_progress="hidden")
    once = dict(SERIAL, trigger_mode="once")
    gr.on([f.mode.change, f.compare.change], bind(on_mode, ui), [f.mode, f.compare], [f.compare, f.model_b, f.temp_b],
          **hidden)
    f.source.change(bind(on_source, ui), f.source, [f.dataset, f.column, f.limit, f.upload, f.typed], **hidden)
    f.start.click(bind(on_start, ui, store), f.inputs | {ui.annotator}, [ui.started, f.box, f.message],
                  concurrency_limit=None, show_progress="minimal", show_progress_on=[f.message]).then(
        bind(on_started, ui, store), [ui.view, ui.started],
        [ui.remember, ui.session, ui.annotator, *items, *layout_outputs], **SERIAL, **hidden)
    ui.session.input(bind(on_session, ui, store), [ui.view, ui.session, ui.annotator],
                     [ui.remember, ui.summary, *items, *layout_outputs], **SERIAL, **hidden)
    gr.on([ui.annotator.blur, ui.annotator.submit], bind(on_annotator, ui), [ui.view, ui.annotator],
          [ui.remember, ui.view, ui.annotator], **SERIAL, **hidden)
    for choice, button in ui.choice_buttons.items():
        button.click(bind(on_label, ui, store, choice), {ui.view, ui.item_box, ui.annotator, ui.edit, ui.note},
                     [*items, ui.edit, ui.note, ui.remember], **once, **hidden)
    ui.undo.click(bind(on_undo, ui, store), [ui.view, ui.annotator], [*items, ui.edit, ui.note], **once, **hidden)
    polls.add("labeling", bind(on_tick, ui, store), ui.view, items, **SERIAL, **hidden)
    ui.resume.click(bind(on_resume, ui, store), ui.view, [*items, *layout_outputs], **SERIAL, **hidden)
    ui.from_a.click(bind(on_edit_from, store, "a"), ui.item_box, ui.edit, **hidden)
    ui.from_b.click(bind(on_edit_from, store, "b"), ui.item_box, ui.edit, **hidden)
    e = ui.export
    e.button.click(bind(on_export, ui, store), e.inputs | {ui.view}, [e.file, e.summary], show_progress="minimal",
                   show_progress_on=[e.summary])
    def on_summary(v: LabelView, request: gr.Request = None) -> str:
        return summary_html(store, v.session_id, in_language(v, request).lang)

    ui.summary_refresh.click(on_summary, ui.view, ui.summary, **hidden)
    if train_fields:
        outputs = [train_fields["mode"], train_fields["dataset"], train_fields["model"], *polls.outputs, e.summary]
        for train_mode, button in e.train_buttons.items():
            button.click(bind(on_train, ui, store, train_fields, polls, train_mode), ui.view, outputs, **hidden)


def build(store: RunStore, polls: TabPolls, train_fields: dict | None = None, words=None) -> LabelTab:
    """Lay out the tab and wire it. `train_fields` (mode, dataset, model components of the Train tab) let the
    "Train on these labels" buttons fill the Train tab and open it; `words` (an i18n.Translatable) is given the
    tab's words."""
    ui = layout(store, words)
    wire(ui, store, polls, train_fields)
    load_outputs = [ui.remember, ui.session, ui.annotator, ui.new.box, ui.new.model_a, ui.new.model_b, ui.summary,
                    *ui.item_outputs, *ui.session_outputs]
    open_outputs = [ui.remember, ui.session, ui.annotator, *ui.item_outputs, *ui.session_outputs]
    inputs = [ui.view, ui.remember]
    return LabelTab(load=(bind(on_load, ui, store), dict(inputs=inputs, outputs=load_outputs, **SERIAL)),
                    open=(bind(on_open, ui, store), dict(inputs=inputs, outputs=open_outputs, **SERIAL)),
                    remember=ui.remember, ui=ui)
