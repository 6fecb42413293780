"""The Chat tab's layout: the two sides' pickers and conversations, the prompt, settings and scoring, with the
elem_ids the tests rely on, gathered in a ChatUI so handlers name the components they read and update
(app/chat_tab.py wires them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from app import i18n, serve_panel
from backend import chat
from backend.runs.store import RunStore

SIDES = ("A", "B")
DEFAULT_SOURCES = """\
# Reward sources: a YAML list, as under reward_sources in a run config
- type: length
  params: {target: 30, unit: words, tolerance: 1.0}
- type: repetition
  params: {n: 3}
- type: blocklist
  weight: 1.0
  params: {keywords: [idiot, stupid]}
"""


@dataclass
class ChatSession:
    """Per browser session: each side's conversation ({role, content} messages; with tools, also the assistant's
    `tool_calls` and the `tool` results) and, for scoring, the messages each side's last answer replied to."""

    histories: list[list[dict]] = field(default_factory=lambda: [[], []])
    asked: list[list[dict] | None] = field(default_factory=lambda: [None, None])
    labels: list[str] = field(default_factory=lambda: ["", ""])
    picked: list[bool] = field(default_factory=lambda: [False, False])  # chosen by the person, not by the page
    episodes: list = field(default_factory=lambda: [None, None])  # each side's chat.ChatEpisode, if its run has one

    def clear(self, side: int | None = None) -> ChatSession:
        """A new conversation (on one side, or both): its environment's instance ends with the old one."""
        for s in (range(2) if side is None else [side]):
            self.histories[s], self.asked[s] = [], None
            if self.episodes[s] is not None:
                self.episodes[s].close()
                self.episodes[s] = None
        return self


@dataclass
class ChatUI:
    """The tab's components, and what its handlers reach beyond them."""
    store: RunStore
    train_sources: object  # the Train tab's reward-sources editor, or None
    session: gr.State  # a ChatSession
    pickers: list  # a model dropdown per side
    use_tools: list  # per side: answer with the run's tools (shown for a run that has any)
    bots: list  # a Chatbot per side
    prompt: gr.Textbox
    send: gr.Button
    stop: gr.Button
    clear: gr.Button
    refresh: gr.Button
    status: gr.Markdown
    system: gr.Textbox
    max_new: gr.Number
    temperature: gr.Number
    top_p: gr.Number
    from_run: gr.Dropdown
    use_train: gr.Button
    sources: gr.Code
    columns: gr.Textbox
    score: gr.Button
    scores: gr.Markdown

    @property
    def workspace(self) -> Path:
        return self.store.workspace


def run_source_choices(store: RunStore) -> list[tuple[str, str]]:
    return [(f"{r.name} · {r.mode} run {r.id}", r.id) for r in store.list_runs()
            if getattr(r.config, "reward_sources", None)]


def layout(store: RunStore, train_sources=None, words=None, ui_password: str | None = None) -> ChatUI:
    """`words` (an i18n.Translatable) is given the tab's words."""
    t = i18n.given(words).add
    session = gr.State(ChatSession(), delete_callback=lambda s: s.clear())  # the page gone: no instance outlives it
    t(gr.Markdown(elem_classes=["wb-intro"]), "chat.intro", "value")
    choices = chat.model_choices(store)
    pickers, bots, use_tools = [], [], []
    with gr.Row(equal_height=False):
        for i, side in enumerate(SIDES):
            with gr.Column(min_width=320):
                pickers.append(t(gr.Dropdown(choices=choices, value=None, allow_custom_value=True, filterable=True,
                                             elem_id=f"chat-model-{side.lower()}"),
                                 "chat.model", info="chat.model_help", fmt={"side": side}))
                # the info (which tools) is set with the model; only a run with tools shows the box
                use_tools.append(t(gr.Checkbox(value=True, visible=False, elem_id=f"chat-tools-{side.lower()}"),
                                   "chat.use_tools"))
                bots.append(t(gr.Chatbot(label=side, elem_id=f"chat-{side.lower()}", height=420, buttons=["copy"],
                                         feedback_options=None), placeholder="chat.answers_here", fmt={"side": side}))
    with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
        prompt = t(gr.Textbox(lines=2, max_lines=8, elem_id="chat-prompt", scale=5), "chat.prompt",
                   placeholder="chat.prompt_placeholder")
        with gr.Column(scale=1, min_width=240):
            send = t(gr.Button(variant="primary", elem_id="chat-send"), "chat.send", "value")
            with gr.Row():
                stop = t(gr.Button(variant="stop", size="sm", elem_id="chat-stop", min_width=60), "common.stop",
                         "value")
                clear = t(gr.Button(size="sm", elem_id="chat-clear", min_width=60), "chat.clear", "value")
                refresh = t(gr.Button(size="sm", elem_id="chat-refresh", min_width=90), "chat.refresh", "value")
    status = gr.Markdown("", elem_id="chat-status")
    # model A served over the OpenAI API, as the Runs tab serves a run
    serve_panel.build(store, pickers[0], words, ui_password, spec_of=lambda v: (v or "").strip() or None,
                      prefix="chat-serve", intro="serve.intro_chat")
    with t(gr.Accordion(open=False, elem_id="chat-settings"), "chat.settings"):
        system = t(gr.Textbox(lines=2, elem_id="chat-system"), "chat.system", placeholder="chat.system_placeholder")
        with gr.Row():
            max_new = t(gr.Number(value=128, minimum=1, maximum=chat.MAX_NEW_TOKENS, precision=0,
                                  elem_id="chat-max-new-tokens"), "common.max_new_tokens")
            temperature = t(gr.Number(value=0.7, minimum=0, maximum=5, step=0.1, elem_id="chat-temperature"),
                            "common.temperature", info="chat.temperature_help")
            top_p = t(gr.Number(value=0.95, minimum=0.01, maximum=1, step=0.05, elem_id="chat-top-p"), "common.top_p")
    with t(gr.Accordion(open=True, elem_id="chat-scoring"), "chat.scoring"):
        with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
            from_run = t(gr.Dropdown(choices=run_source_choices(store), value=None, elem_id="chat-sources-run",
                                     scale=3), "chat.from_run", info="chat.from_run_help")
            use_train = t(gr.Button(elem_id="chat-sources-train", scale=0, visible=train_sources is not None,
                                    min_width=240), "common.use_train_sources", "value")
        with gr.Row(equal_height=False):
            sources = t(gr.Code(DEFAULT_SOURCES, language="yaml", interactive=True, elem_id="chat-sources", lines=8,
                                scale=3), "chat.sources")
            with gr.Column(scale=2, min_width=260):
                columns = t(gr.Textbox(lines=2, elem_id="chat-columns", placeholder="answer: 42"), "chat.columns",
                            info="chat.columns_help")
                score = t(gr.Button(variant="secondary", elem_id="chat-score"), "chat.score", "value")
        scores = gr.Markdown("", elem_id="chat-scores")

    return ChatUI(store=store, train_sources=train_sources, session=session, pickers=pickers, use_tools=use_tools,
                  bots=bots, prompt=prompt, send=send, stop=stop, clear=clear, refresh=refresh, status=status,
                  system=system, max_new=max_new, temperature=temperature, top_p=top_p, from_run=from_run,
                  use_train=use_train, sources=sources, columns=columns, score=score, scores=scores)
