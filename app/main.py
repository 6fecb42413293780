"""The web UI: a Train tab that starts runs, a Runs tab that follows them, and a Reward playground that tries
reward sources on a few completions before a run trains with them.

The UI only starts runs, reads what their workers write to the store and asks them to stop; closing the
browser or restarting the UI never stops a run. Per-browser state lives in gr.State; the store is shared.
"""
from __future__ import annotations

import contextlib
import html
import os

# Before gradio is imported: no analytics calls, and no Hub requests from gradio or its client.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import gradio as gr  # noqa: E402
from gradio.blocks import BlockContext  # noqa: E402

from app import (chat_tab, doctor_render, eval_tab, gradio_locale, i18n, label_layout, label_tab, playground_tab,  # noqa: E402
                 runs_tab, sweeps_tab, train_tab)
from app.events import PACKED_CLASS, Packed  # noqa: E402
from app.choices import run_selection  # noqa: E402
from app.routes import exports_route, metrics_route, stamp_route  # noqa: E402
from app.runs_tab import RunView  # noqa: E402
from app.tab_polls import TabPolls  # noqa: E402
from backend import sweeps  # noqa: E402
from backend.doctor import fix_text  # noqa: E402
from backend.runs import jobs  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.workspace import load_providers  # noqa: E402

TITLE = "RL post-training workbench"
POLL_SECONDS = 1.0  # a tick only fetches the change stamp: a shorter one shows a new point sooner
POLLING_TABS = ("train", "runs", "evaluate", "sweeps", "labeling")  # the first is the tab a page opens on
DISPATCH_SECONDS = 2.0  # how often the server starts queued runs and marks dead workers and sweep drivers
_SYSTEM_FONTS = ["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"]
_MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]

CSS = """
.wb-header { display: flex; align-items: baseline; gap: 1em; }
.wb-header h2 { margin: 0; }
.wb-warning { margin: 0.3em 0; padding: 0.4em 0.8em; border-radius: 6px; background: #fdecea; color: #8a1c12; }
.wb-section p { margin: 0.4em 0 0 0; font-size: var(--text-lg); }
.wb-progress { padding: 10px 12px; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-lg); background: var(--block-background-fill); }
.wb-progress.wb-empty { color: var(--body-text-color-subdued); }
.wb-progress-head { display: flex; flex-wrap: wrap; gap: 0.6em; align-items: baseline; margin-bottom: 6px; }
.wb-status { font-variant-numeric: tabular-nums; }
.wb-bar { height: 8px; border-radius: 4px; background: var(--neutral-200); overflow: hidden; }
.wb-bar > div { height: 100%; transition: width 0.6s ease; }
.wb-bar.wb-busy > div { width: 30% !important; animation: wb-slide 1.4s infinite ease-in-out;
  will-change: transform; }
@keyframes wb-slide { from { transform: translateX(-100%); } to { transform: translateX(334%); } }
.wb-bottom { align-items: flex-end; }
.wb-log { display: flex; flex-direction: column-reverse; overflow-y: auto; max-height: 320px;
  border: 1px solid var(--border-color-primary); border-radius: var(--radius-lg);
  background: var(--block-background-fill); }
.wb-sources { gap: 6px; }
.wb-source-row { padding: 8px 10px 4px 10px; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-lg); background: var(--background-fill-secondary); gap: 4px !important; }
.wb-help { font-size: 12px; line-height: 1.35; color: var(--body-text-color-subdued); padding: 0 4px 4px 4px; }
.wb-help ul { margin: 2px 0 2px 1.2em; padding: 0; }
.wb-help li { margin: 0; }
.wb-help code { font-size: 11.5px; }
.wb-help-error { color: #dc2626; font-weight: 600; margin-bottom: 2px; }
.wb-help-ok { color: #16a34a; margin-bottom: 2px; }
.wb-help-kind { color: var(--body-text-color); }
.wb-help details summary { cursor: pointer; }
.wb-kinds { font-size: 12px; color: var(--body-text-color-subdued); }
.wb-kinds abbr { text-decoration: underline dotted; cursor: help; }
.wb-prompts { margin: 0 0 0 1.4em; padding: 0; font-size: 13px; }
.wb-prompts li { margin: 2px 0; }
.wb-dim { color: var(--body-text-color-subdued); }
.wb-intro p { color: var(--body-text-color-subdued); }
.wb-log pre { margin: 0; padding: 8px 10px; font-family: var(--font-mono); font-size: 12px;
  white-space: pre-wrap; word-break: break-word; }
"""


def theme() -> gr.themes.Base:
    # A theme object, not a Hub name; system fonts, so the page asks no font server for anything.
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="slate", font=_SYSTEM_FONTS,
                          font_mono=_MONO_FONTS)


def _import_transformers() -> None:
    """Import transformers' tokenizer base here, once, before handlers run on worker threads: `datasets` looks it
    up whenever transformers is in sys.modules, and a preview doing so while another handler's thread was still
    importing it failed with "module 'transformers' has no attribute 'PreTrainedTokenizerBase'" (~0.7 s)."""
    import transformers

    transformers.PreTrainedTokenizerBase  # noqa: B018 - resolves the lazy attribute


def build_app(workspace: str | Path, warning: str | None = None, lang: str = i18n.DEFAULT,
              auth: tuple[str, str] | None = None) -> gr.Blocks:
    """`warning`: said in the page header on every tab (e.g. served to the network without a password);
    `lang`: the interface language of a browser that has not chosen one; `auth`: the UI's --auth (its password
    is a model server's API key unless another is typed)."""
    _import_transformers()
    load_providers()
    store = RunStore(workspace)
    i18n.serve_default(lang)
    words = i18n.Translatable()
    with gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        sink = gr.HTML(visible=False, elem_id="progress-sink")  # first in the tree: see untracked_progress
        with gr.Row(equal_height=True, elem_classes=["wb-header-row"]):
            def header(lang: str) -> str:
                return (f'<div class="wb-header"><h2>{i18n.text("page.title", lang)}</h2>'
                        f'<span>{i18n.text("page.workspace", lang)} <code>{store.workspace}</code></span></div>'
                        + (f'<div class="wb-warning" role="alert"><b>{i18n.text("page.warning", lang)}</b> '
                           f'{html.escape(warning)}</div>' if warning else ""))

            words.add(gr.HTML(elem_id="header"), header, "value")
            language = gr.Radio([(name, code) for code, name in i18n.LANGUAGES.items()], value=i18n.pick(lang),
                                label="Language / 语言", show_label=False, elem_id="language", scale=0,
                                min_width=190, container=False)
        chosen = gr.BrowserState("", storage_key="workbench-language", secret=label_layout.browser_secret(store.workspace))
        view = gr.State(RunView())
        polls = TabPolls(POLL_SECONDS, POLLING_TABS)
        pages = {}
        with gr.Tabs(elem_id="tabs") as polls.tabs:
            with gr.Tab("Train", id="train", elem_id="tab-train") as pages["train"]:
                train = train_tab.build(store, polls, view, words)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs") as pages["runs"]:
                runs = runs_tab.build(store, polls, view, words, ui_password=auth[1] if auth else None)
            with gr.Tab("Evaluate", id="evaluate", elem_id="tab-evaluate") as pages["evaluate"]:
                evaluate = eval_tab.build(store, polls, words)
            with gr.Tab("Sweeps", id="sweeps", elem_id="tab-sweeps") as pages["sweeps"]:
                sweeps_tab.build(store, polls, runs.select, train.form, words)
            with gr.Tab("Reward playground", id="playground", elem_id="tab-playground") as pages["playground"]:
                play = playground_tab.build(store, train.sources, words)
            with gr.Tab("Chat", id="chat", elem_id="tab-chat") as pages["chat"]:
                chat = chat_tab.build(store, train.sources, words, ui_password=auth[1] if auth else None)
            with gr.Tab("Labeling", id="labeling", elem_id="tab-labeling") as pages["labeling"]:
                fields = train.form.components
                label = label_tab.build(store, polls, {k: fields[k] for k in ("mode", "dataset", "model")}, words)
        for tab_id, page in pages.items():
            words.add(page, f"tab.{tab_id}")
            polls.follow(page, tab_id)

        def on_language(code, request: gr.Request = None):
            """A language picked in the header: the page's words in it, remembered by this browser (and by this
            session, for the messages handlers write)."""
            return {**words.updates(code), chosen: i18n.remember(request, code)}

        def on_open(saved, request: gr.Request = None):
            """A fresh page: the language this browser chose before, else the server's."""
            code = i18n.remember(request, saved or lang)
            # the picker as built needs no update: one sent late would undo a language picked while the page loaded
            picker = {language: code if code != i18n.pick(lang) else gr.update()}
            if code == i18n.DEFAULT:
                return picker  # the page is built in it
            return {**words.updates(code), **picker}

        # the js keeps the choice for Gradio's own words, from the next load
        switched = language.input(on_language, language, [*words.components, chosen], show_progress="hidden",
                                  js=gradio_locale.CHOSEN_JS)
        opened = demo.load(on_open, chosen, [*words.components, language], show_progress="hidden")

        def follow(run_id):
            """After Start: select the new run in the Runs tab and open that tab (nothing when none started)."""
            return {runs.select: run_selection(store, run_id), **polls.open("runs")} if run_id else gr.skip()

        train.start_event.then(follow, train.started, [runs.select, *polls.outputs], show_progress="hidden")

        def evaluate_run(run_id, request: gr.Request = None):
            """Runs tab → Evaluate: the form filled to judge the run against its base, and the tab opened."""
            return {**eval_tab.open_for_run(store, evaluate, run_id, i18n.lang_of(request)), **polls.open("evaluate")}

        runs.evaluate.click(evaluate_run, runs.select, [evaluate.models, evaluate.dataset, evaluate.scorers,
                                                        evaluate.max_new_tokens, *evaluate.tools.components,
                                                        evaluate.environment,
                                                        *polls.outputs], show_progress="hidden")

        def fix_run(run_id, request: gr.Request = None):
            """Runs tab → Fix and restart: the run's settings with the doctor's suggestions in the Train tab."""
            lang = i18n.lang_of(request)
            try:
                run = store.get_run(run_id)
            except KeyError:
                return {train.message: i18n.text("msg.select_run", lang)}
            fix = doctor_render.fixes(doctor_render.run_diagnoses(run))
            fixed = doctor_render.fixed_config(run.config, fix)
            if fixed is None:
                return {train.message: i18n.text("doctor.no_fix", lang)}
            note = i18n.text("doctor.fixed", lang, name=run.name, fix=fix_text(fix))
            return {**train.form.updates_from(fixed.model_copy(update={"name": ""}), lang), train.message: note,
                    **polls.open("train")}

        train.memory(runs.fix.click(fix_run, runs.select, [*train.form.outputs, train.message, *polls.outputs],
                                    show_progress="hidden").then)  # its suggestions
        demo.load(train.refresh, None, train.refresh_outputs, show_progress="hidden")
        # what handlers write follows the session's language: after it is known, and again when it changes
        polls.rerun_after(switched)
        polls.rerun_after(opened, (POLLING_TABS[0],))  # the tab a page opens on
        # inputs read at the page's load or a language switch go packed (app/events.Packed): each input an event
        # has run with costs every later event a lookup in the whole page, and these sit deep in later tabs
        helps = [(help_fn, Packed(help_in), help_out)
                 for help_fn, help_in, help_out in (train.sources.help_refresh, play.sources.help_refresh)]
        for event in (opened, switched):
            train.preview(event.then, show_progress="hidden")
            train.memory(event.then)
            for help_fn, pack, help_out in helps:  # each reward source's help, in the language
                pack.on(event.then, help_fn, help_out, show_progress="hidden")
        for load_fn, load_io in (play.load, chat.load):
            Packed(load_io["inputs"]).on(demo.load, load_fn, load_io["outputs"], show_progress="hidden")
        pages["chat"].select(chat.refresh[0], **chat.refresh[1], show_progress="hidden")  # runs finished since
        opened.then(lambda: runs_tab.initial_selection(store), None, runs.select, show_progress="hidden")
        label.remember.render()  # outside the tabs, so the page's load event reads the browser's storage
        label_fn, label_io = label.load
        opened.then(label_fn, **label_io, show_progress="hidden")  # its cards in the page's language
        open_fn, open_io = label.open
        pages["labeling"].select(open_fn, **open_io, show_progress="hidden")  # takes an item only once the tab is seen
        untracked_progress(demo, sink)
    return demo


def untracked_progress(demo: gr.Blocks, sink: gr.components.Component) -> None:
    """Keeps the page's bookkeeping per event small. Gradio's page keeps a loading status for every progress
    target of every event it has run, and every input, and at each status message of every later event looks
    each one up in the whole component tree (~1000 blocks, depth first, so a late one costs the whole tree),
    walking a target's children too: the language's load event (~500 outputs), a tab-opening button (the Tabs
    as a target) and the Train form's ~190 settings as inputs each kept the renderer busy while a run loaded
    beside it on the same two cores (bench/README.md, start latency). So events that show no progress all track
    it on `sink`, and the others never on a layout block or a timer; many inputs go packed into one box
    (app/events.Packed); the sink, the boxes and the states (inputs of many events, drawn nowhere) go first in the
    tree."""
    def plain(block) -> bool:  # an HTML is a BlockContext too, one without children
        return not (isinstance(block, BlockContext) and block.children or isinstance(block, gr.Timer))

    for fn in demo.fns.values():
        if fn.show_progress_on is not None:
            continue
        targets = [o for o in fn.outputs if plain(o)] or fn.outputs
        fn.show_progress_on = [sink] if fn.show_progress == "hidden" else targets
    early = [sink, *(b for b in demo.blocks.values() if isinstance(b, (gr.State, gr.BrowserState))
                     or PACKED_CLASS in (getattr(b, "elem_classes", None) or []))]
    for block in early:
        block.parent.children.remove(block)
        block.parent = demo
    demo.children[:0] = early


def dispatching(workspace: str | Path, every_s: float = DISPATCH_SECONDS):
    """The server's lifespan: one dispatcher thread while it serves (backend.runs.jobs.start_dispatcher), so queued
    runs start and dead workers and sweep drivers are marked failed however many browsers are open, and
    their polls only read the store."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        dispatcher = jobs.start_dispatcher(RunStore(workspace), every_s, also=[sweeps.reconcile_sweeps])
        try:
            yield
        finally:
            dispatcher.stop()

    return lifespan


def _patient_url_ok(url: str, wait_s: float = 60.0, try_s: float = 10.0) -> bool:
    """Gradio's check that the server answers its own page before `launch` returns: one 3 s try per attempt, and
    a timeout ends it, so on a busy machine the UI refused to start ("localhost is not accessible"). The same
    check, waiting up to `wait_s` for the page."""
    import time

    import httpx

    deadline = time.monotonic() + wait_s
    while True:
        try:
            if httpx.head(url, timeout=try_s, verify=False).status_code in (200, 401, 301, 302, 303, 307, 308):
                return True
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def launch_ui(workspace: str | Path, host: str = "127.0.0.1", port: int = 7860,
              auth: tuple[str, str] | None = None, prevent_thread_lock: bool = False, lang: str = i18n.DEFAULT):
    from app import auth as login
    from backend.monitoring import open_warning

    from gradio import networking

    networking.url_ok = _patient_url_ok
    warning = open_warning(host, auth)  # the page's banner; `launch.py ui` has printed it once already
    demo = build_app(workspace, warning, lang, auth)
    demo.queue(default_concurrency_limit=4)
    routes = [metrics_route(workspace, auth), stamp_route(workspace), exports_route(workspace)]  # Gradio's follow
    if auth:
        routes.append(login.routes_route())
    return demo.launch(server_name=host, server_port=port, auth=auth, prevent_thread_lock=prevent_thread_lock,
                       theme=theme(), css=CSS + label_layout.CSS, ssr_mode=False, show_error=False,
                       footer_links=["settings"], js=label_layout.KEYBOARD_JS,
                       max_file_size="500mb", quiet=False,
                       enable_monitoring=False,  # its /monitoring/<key> page opened without the login
                       # Gradio's own history of calls: every poll's outputs (plots, tables) parsed and rewritten
                       # in the browser's localStorage at each status message, slower as it fills; runs have theirs
                       run_history=False,
                       app_kwargs={"routes": routes,
                                   # Gradio checks the login on some of its routes only
                                   "middleware": [gradio_locale.middleware(lang), *([login.guard()] if auth else [])],
                                   "lifespan": dispatching(workspace),
                                   # FastAPI's route listing would answer without --auth; the UI needs none of it
                                   "openapi_url": None, "docs_url": None, "redoc_url": None},
                       allowed_paths=[str(Path(workspace).resolve() / "exports")])  # export downloads
