"""The web UI: a Train tab that starts runs and a Runs tab that follows them.

The UI only starts runs, reads what their workers write to the store and asks them to stop; closing the
browser or restarting the UI never stops a run. Per-browser state lives in gr.State; the store is shared.
"""
from __future__ import annotations

import os

# Before gradio is imported: no analytics calls, and no Hub requests from gradio or its client.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import gradio as gr  # noqa: E402

from app import runs_tab, train_tab  # noqa: E402
from app.runs_tab import RunView  # noqa: E402
from backend.store import RunStore  # noqa: E402

TITLE = "RL post-training workbench"
POLL_SECONDS = 1.5
_SYSTEM_FONTS = ["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"]
_MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]

CSS = """
.wb-header { display: flex; align-items: baseline; gap: 1em; }
.wb-header h2 { margin: 0; }
.wb-section p { margin: 0.4em 0 0 0; font-size: var(--text-lg); }
.wb-progress { padding: 10px 12px; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-lg); background: var(--block-background-fill); }
.wb-progress.wb-empty { color: var(--body-text-color-subdued); }
.wb-progress-head { display: flex; flex-wrap: wrap; gap: 0.6em; align-items: baseline; margin-bottom: 6px; }
.wb-status { font-variant-numeric: tabular-nums; }
.wb-bar { height: 8px; border-radius: 4px; background: var(--neutral-200); overflow: hidden; }
.wb-bar > div { height: 100%; transition: width 0.6s ease; }
.wb-bar.wb-busy > div { width: 30% !important; animation: wb-slide 1.4s infinite ease-in-out; }
@keyframes wb-slide { from { margin-left: -30%; } to { margin-left: 100%; } }
.wb-bottom { align-items: flex-end; }
.wb-log { display: flex; flex-direction: column-reverse; overflow-y: auto; max-height: 320px;
  border: 1px solid var(--border-color-primary); border-radius: var(--radius-lg);
  background: var(--block-background-fill); }
.wb-log pre { margin: 0; padding: 8px 10px; font-family: var(--font-mono); font-size: 12px;
  white-space: pre-wrap; word-break: break-word; }
"""


def theme() -> gr.themes.Base:
    # A theme object, not a Hub name; system fonts, so the page asks no font server for anything.
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="slate", font=_SYSTEM_FONTS,
                          font_mono=_MONO_FONTS)


def build_app(workspace: str | Path) -> gr.Blocks:
    store = RunStore(workspace)
    with gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        gr.HTML(f'<div class="wb-header"><h2>{TITLE}</h2>'
                f'<span>workspace <code>{store.workspace}</code></span></div>', elem_id="header")
        view = gr.State(RunView())
        timer = gr.Timer(POLL_SECONDS)
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Train", id="train", elem_id="tab-train"):
                train = train_tab.build(store, timer, view)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs"):
                runs = runs_tab.build(store, timer, view)

        train.start_event.then(lambda run_id: runs_tab.follow(store, run_id), train.started, [runs.select, tabs],
                               show_progress="hidden")
        preview_fn, preview_io = train.preview
        demo.load(train.refresh, None, train.refresh_outputs, show_progress="hidden")
        demo.load(preview_fn, **preview_io, show_progress="hidden")
        demo.load(lambda: runs_tab.initial_selection(store), None, runs.select, show_progress="hidden")
    return demo


def launch_ui(workspace: str | Path, host: str = "127.0.0.1", port: int = 7860,
              auth: tuple[str, str] | None = None, prevent_thread_lock: bool = False):
    demo = build_app(workspace)
    demo.queue(default_concurrency_limit=4)
    return demo.launch(server_name=host, server_port=port, auth=auth, prevent_thread_lock=prevent_thread_lock,
                       theme=theme(), css=CSS, ssr_mode=False, show_error=False, footer_links=["settings"],
                       max_file_size="500mb", quiet=False)
