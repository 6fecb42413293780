"""The Runs tab's Serve accordion: the selected run served over the OpenAI API (backend/serving: transformers
serve, its adapter merged), with its URL, a `curl` and an `openai` snippet, its requests and tokens per second,
and Stop. Bound to 127.0.0.1 unless another address is typed; with the UI's --auth, the API key is its password
unless another key is typed."""
from __future__ import annotations

import html
from collections.abc import Callable

import gradio as gr

from app import i18n
from app.formatting import error_markdown
from backend import serving
from backend.core.net import not_a_port
from backend.runs.store import RUN_PREFIX, RunStore
from backend.serving.registry import snippets


def status_markdown(server: serving.Server | None, lang: str = i18n.DEFAULT) -> str:
    if server is None:
        return ""
    if server.status == "failed":
        return error_markdown([html.escape(server.error or "")], i18n.text("serve.failed", lang), lang)
    rate = f"{server.tokens_per_s:.1f}" if server.tokens_per_s else "-"
    words = i18n.text(f"serve.status.{server.status}", lang)
    line = f"**{words}** · `{server.url}` · " + i18n.text("serve.counts", lang, n=server.requests, rate=rate)
    if server.key and server.active:
        line += " · " + i18n.text("serve.key_needed", lang)
    return line


def served(store: RunStore, spec: str | None) -> serving.Server | None:
    """The newest server of this model still serving or loading, else its newest."""
    if not spec:
        return None
    mine = [s for s in serving.list_servers(store.workspace) if s.model == spec]
    return next((s for s in mine if s.active), mine[0] if mine else None)


def run_spec(run_id: str | None) -> str | None:
    return RUN_PREFIX + run_id if run_id else None


def build(store: RunStore, select: gr.Dropdown, words=None, ui_password: str | None = None,
          spec_of: Callable[[str | None], str | None] = run_spec, prefix: str = "serve",
          intro: str = "serve.intro") -> None:
    """The accordion; `select` names what to serve, `spec_of` makes its value a model reference (the Runs tab's
    run picker by default; the Chat tab's model picker takes its value as it is); `prefix` starts every elem_id;
    `ui_password`: the UI's --auth password, the key when none is typed."""
    w = i18n.given(words)
    with w.add(gr.Accordion(open=False, elem_id=prefix), "serve.title"):
        w.add(gr.Markdown(elem_classes=["wb-help"]), intro, "value")
        with gr.Row():
            host = w.add(gr.Textbox("127.0.0.1", elem_id=f"{prefix}-host", scale=2), "serve.host")
            port = w.add(gr.Number(8000, precision=0, minimum=1, maximum=65535, elem_id=f"{prefix}-port", scale=1),
                         "serve.port")
            key = w.add(gr.Textbox(type="password", elem_id=f"{prefix}-key", scale=2), "serve.key",
                        **({"placeholder": "serve.key_placeholder"} if ui_password else {}))
        with gr.Row():
            start = w.add(gr.Button(variant="primary", elem_id=f"{prefix}-start", min_width=140), "serve.start",
                          "value")
            stop = w.add(gr.Button(variant="stop", elem_id=f"{prefix}-stop", min_width=140), "serve.stop", "value")
            refresh = w.add(gr.Button(elem_id=f"{prefix}-refresh", min_width=140), "serve.refresh", "value")
        status = gr.Markdown("", elem_id=f"{prefix}-status")
        with gr.Column(visible=False) as code_row:  # stacked: the section sits in a narrow column
            curl = gr.Code(language="shell", interactive=False, elem_id=f"{prefix}-curl", label="curl")
            python = gr.Code(language="python", interactive=False, elem_id=f"{prefix}-python",
                             label="openai (Python)")

    def shown(server: serving.Server | None, lang: str) -> dict:
        code = snippets(server) if server is not None and server.status == "serving" else None
        return {status: status_markdown(server, lang), code_row: gr.update(visible=code is not None),
                curl: code["curl"] if code else "", python: code["python"] if code else ""}

    def on_start(value, host_text, port_value, key_text, progress=gr.Progress(), request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not (spec := spec_of(value)):
            return {status: i18n.text("msg.select_run" if spec_of is run_spec else "serve.pick_model", lang)}
        port_number = int(port_value or 0)
        if why := not_a_port(port_number):
            return {status: error_markdown([why], i18n.text("serve.cannot", lang), lang)}
        typed = (key_text or "").strip()
        if typed and len(typed) < 8:
            return {status: error_markdown([i18n.text("serve.key_short", lang)], i18n.text("serve.cannot", lang),
                                           lang)}
        progress(0.0, desc=i18n.text("serve.loading", lang))
        try:
            server = serving.start_server(store.workspace, spec, (host_text or "").strip() or "127.0.0.1",
                                          port_number, typed or ui_password)
            server = serving.wait_until_ready(store.workspace, server.id)
        except serving.ServeError as e:
            return {status: error_markdown([html.escape(str(e))], i18n.text("serve.cannot", lang), lang)}
        return shown(server, lang)

    def on_stop(value, request: gr.Request = None):
        server = served(store, spec_of(value))
        if server is not None and server.active:
            server = serving.stop_server(store.workspace, server.id)
        return shown(server, i18n.lang_of(request))

    def on_refresh(value, request: gr.Request = None):
        return shown(served(store, spec_of(value)), i18n.lang_of(request))

    outputs = [status, code_row, curl, python]
    start.click(on_start, [select, host, port, key], outputs, concurrency_limit=1, concurrency_id="serve",
                show_progress_on=status)
    stop.click(on_stop, select, outputs, show_progress="hidden")
    gr.on([refresh.click, select.change], on_refresh, select, outputs, show_progress="hidden")
