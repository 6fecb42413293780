"""The Runs tab's Export accordion: the selected run's adapter as a zip to download, or a merged model saved
under workspace/exports/ and zipped too; each with a model card. The work is backend/export.py's; these
handlers pass gr.Progress along and say where the result is. The zip is downloaded from the exports folder
itself (app.routes.exports_route), never copied.
"""
from __future__ import annotations

import html
import logging

import gradio as gr

from app import i18n
from app.formatting import error_markdown
from backend import export
from backend.gguf_export import QUANT_TYPES
from backend.models.from_run import MERGED_DTYPES
from backend.runs.store import RunStore

log = logging.getLogger(__name__)
EXPORTS_PATH = "/wb/exports"


def download_link(zip_path, lang: str = i18n.DEFAULT) -> str:
    """A link that downloads `zip_path` (a file in the workspace's exports folder) through EXPORTS_PATH; relative,
    so it works under whatever path the page is served from."""
    from urllib.parse import quote

    name = zip_path.name
    size = zip_path.stat().st_size / 2**20
    return (f'<a class="wb-download" href="{EXPORTS_PATH.lstrip("/")}/{quote(name)}" download="{html.escape(name)}">'
            f'⬇ {html.escape(i18n.text("common.download", lang))} {html.escape(name)} ({size:.1f} MiB)</a>')


def result_markdown(result: export.ExportResult, lang: str = i18n.DEFAULT) -> str:
    lines = [f"**{i18n.text('export.done.' + result.kind, lang)}**", "",
             i18n.text("export.folder", lang, path=result.folder)]
    if result.zip_path:
        size = result.zip_path.stat().st_size / 2**20
        lines.append(i18n.text("export.zip_file", lang, size=size, path=result.zip_path))
    if result.kind in ("merged", "full"):
        lines.append(i18n.text("export.in_chat", lang, name=result.folder.name))
    if result.kind == "gguf":
        lines.append(i18n.text("export.ollama", lang, path=result.folder / "Modelfile"))
    return "\n".join(lines)


def build(store: RunStore, select: gr.Dropdown, words=None) -> None:
    """The accordion; `select` is the Runs tab's run picker (its value is the run id); `words` (an
    i18n.Translatable) is given its words."""
    w = i18n.given(words)
    with w.add(gr.Accordion(open=False, elem_id="export"), "export.title"):
        w.add(gr.Markdown(elem_classes=["wb-help"]), "export.intro", "value")
        with gr.Row():
            zip_button = w.add(gr.Button(variant="primary", elem_id="export-zip", min_width=160), "export.zip",
                               "value")
            merge_button = w.add(gr.Button(elem_id="export-merge", min_width=160), "export.merge", "value")
            dtype = w.add(gr.Dropdown(choices=list(MERGED_DTYPES), value="auto", elem_id="export-dtype",
                                      min_width=140), "export.dtype", info="export.dtype_info")
        with gr.Row():
            gguf_button = w.add(gr.Button(elem_id="export-gguf", min_width=160), "export.gguf", "value")
            quant = w.add(gr.Dropdown(choices=list(QUANT_TYPES), value="f16", elem_id="export-quant", min_width=140),
                          "export.quant", info="export.quant_info")
        status = gr.Markdown("", elem_id="export-status")
        file = gr.HTML("", visible=False, elem_id="export-file")
        with gr.Row():
            repo = w.add(gr.Textbox(elem_id="push-repo", scale=3), "push.repo", placeholder="push.repo_placeholder")
            token = w.add(gr.Textbox(type="password", elem_id="push-token", scale=3), "push.token",
                          placeholder="push.token_placeholder")
            with gr.Column(scale=2, min_width=160):
                merged = w.add(gr.Checkbox(False, elem_id="push-merged"), "push.merged")
                private = w.add(gr.Checkbox(True, elem_id="push-private"), "push.private")
        push_button = w.add(gr.Button(elem_id="push", min_width=160), "push.button", "value")

    def exporter(merge: bool, gguf: bool = False):
        def handler(run_id, option="auto", progress=gr.Progress(), request: gr.Request = None):
            lang = i18n.lang_of(request)
            hidden = gr.update(value="", visible=False)
            if not run_id:
                return {status: i18n.text("msg.select_run", lang), file: hidden}
            progress(0.0, desc=i18n.text("export.starting", lang))  # then the exporter's own steps, in English
            try:
                folder = export.default_export_dir(store, run_id, merge, option if gguf else None)
                result = export.export_run(store, run_id, folder, merge=merge, make_zip=True, overwrite=True,
                                           progress=lambda f, m: progress(f, desc=m),
                                           dtype="auto" if gguf else option or "auto",
                                           gguf=(option or "f16") if gguf else None)
            except export.ExportError as e:
                return {status: error_markdown([str(e)], i18n.text("export.cannot", lang), lang), file: hidden}
            except Exception as e:  # never a traceback in the page; the log has it
                log.exception("export failed")
                return {status: error_markdown([html.escape(f"{type(e).__name__}: {e}")],
                                               i18n.text("export.failed", lang), lang), file: hidden}
            return {status: result_markdown(result, lang), file: gr.update(value=download_link(result.zip_path, lang),
                                                                           visible=True)}
        return handler

    def on_push(run_id, repo_id, token_text, merge, is_private, dtype_name, progress=gr.Progress(),
                request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not run_id:
            return i18n.text("msg.select_run", lang)
        progress(0.0, desc=i18n.text("export.starting", lang))
        try:  # the token lives in this call only: never stored, logged or sent back to the page
            result = export.push_run(store, run_id, (repo_id or "").strip(), merge=merge, dtype=dtype_name or "auto",
                                     private=is_private, token=(token_text or "").strip() or None,
                                     progress=lambda f, m: progress(f, desc=m))
        except export.ExportError as e:
            return error_markdown([html.escape(str(e))], i18n.text("push.cannot", lang), lang)
        except Exception as e:  # never a traceback in the page; the log has it (without the token)
            log.exception("push failed")
            return error_markdown([html.escape(f"{type(e).__name__}: {e}")], i18n.text("push.cannot", lang), lang)
        return i18n.text("push.done", lang, url=result.url, folder=result.folder)

    # one export at a time: a merge holds a whole model in memory
    zip_button.click(exporter(False), select, [status, file], concurrency_limit=1, concurrency_id="export")
    merge_button.click(exporter(True), [select, dtype], [status, file], concurrency_limit=1, concurrency_id="export")
    gguf_button.click(exporter(False, gguf=True), [select, quant], [status, file], concurrency_limit=1,
                      concurrency_id="export")
    push_button.click(on_push, [select, repo, token, merged, private, dtype], status, concurrency_limit=1,
                      concurrency_id="export")
    select.change(lambda: {status: "", file: gr.update(value="", visible=False)}, None, [status, file],
                  show_progress="hidden")
