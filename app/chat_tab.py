"""The Chat tab: two models side by side (base, base + a run's adapter, a merged export), the same prompts to
both, answers streamed token by token, a multi-turn history per side, and the reward sources' scores for the
last two answers.

The logic is in backend/chat.py: its model cache holds the two selected models (a selection change releases
the others) and `stream_replies` runs both generations in threads. The Send handler is a generator that Gradio
iterates on a worker thread, so streaming never blocks the page or the other tabs. Each browser session keeps
its conversations in a gr.State (ChatSession).

A run trained with tools answers with them ("Use the run's tools", on by default, under its picker): each call
shows as a small message titled with the call, its result inside, and the answer after; the conversation keeps the
calls and results for the model's next turn.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass, field

import gradio as gr
import yaml

from app import i18n, serve_panel
from app.formatting import error_markdown
from backend import chat
from backend.chat import ChatError, Sampling
from backend.models import ModelRef
from backend.runs.store import RunStore

log = logging.getLogger(__name__)
SIDES = ("A", "B")
UPDATE_S_PER_KCHAR = 0.08  # long answers update less often: the page re-renders each in full (Markdown)
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

    def clear(self, side: int | None = None) -> ChatSession:
        for s in (range(2) if side is None else [side]):
            self.histories[s], self.asked[s] = [], None
        return self


@dataclass
class ChatTab:
    load: tuple  # (fn, {inputs, outputs}) for the page's load event: choices and the first selection
    refresh: tuple  # (fn, {inputs, outputs}) for opening the tab: the choices only (runs may have finished)


def call_title(call: dict) -> str:
    """A tool call as its message's title: → name(arg=value, ...), as the trajectory text writes it (an arrow every
    font has)."""
    from backend.rewards.trajectory import trajectory_text

    return trajectory_text([{"role": "assistant", "tool_calls": [call]}])


def chatbot_messages(history: list[dict], busy: bool = False, lang: str = i18n.DEFAULT) -> list[dict]:
    """What a Chatbot shows of a conversation: the user's and the assistant's text as they are; each tool call
    as a small message titled with the call and holding its result (a spinner while it runs; a call left at the
    limit of rounds says it was not run); the answer as the assistant's message."""
    out, waiting = [], []  # calls shown whose result has not come yet

    def settle():  # calls of an earlier round that got no result: the loop stopped before running them
        for m in waiting:
            m["content"] = i18n.text("chat.tool_not_run", lang)
        waiting.clear()

    for m in history:
        role = m["role"]
        if role == "tool":
            if waiting:
                shown_call = waiting.pop(0)
                result = str(m["content"])
                shown_call["content"] = f"```\n{result}\n```" if "\n" in result else result
                shown_call["metadata"].pop("status", None)
            continue
        if role == "user" or m.get("tool_calls"):
            settle()
        if role != "assistant" or not m.get("tool_calls"):
            out.append({"role": role, "content": m["content"]})
            continue
        if (m["content"] or "").strip():  # what the model wrote before its calls
            out.append({"role": "assistant", "content": m["content"]})
        for call in m["tool_calls"]:
            out.append({"role": "assistant", "content": "", "metadata": {"title": call_title(call)}})
            waiting.append(out[-1])
    if busy:
        for m in waiting:
            m["metadata"]["status"] = "pending"
    else:
        settle()
    return out


def shown(history: list[dict], busy: bool = False, lang: str = i18n.DEFAULT) -> list[dict]:
    """What a Chatbot shows: the messages (tool calls inline), with a placeholder while an answer has no text
    yet."""
    out = chatbot_messages(history, busy, lang)
    if out and out[-1]["role"] == "assistant" and "metadata" not in out[-1] and not out[-1]["content"].strip():
        out[-1]["content"] = "…" if busy else i18n.text("chat.empty_answer", lang)
    return out


def last_turn(history: list[dict]) -> str | list[dict]:
    """The last answer, to score: its text, or with tools the turn's messages (calls, results, the answer)."""
    start = max((i for i, m in enumerate(history) if m["role"] == "user"), default=-1) + 1
    turn = history[start:]
    return turn[0]["content"] if len(turn) == 1 and not turn[0].get("tool_calls") else turn


def tools_note(tools: chat.ChatTools | None, lang: str = i18n.DEFAULT) -> str:
    """Which tools a side's run calls, under its "Use the run's tools" box."""
    if tools is None:
        return ""
    return i18n.text("chat.tools_info", lang, names=", ".join(tools.names), template=tools.template,
                     rounds=tools.max_iterations)


def tools_box(tools: chat.ChatTools | None, lang: str = i18n.DEFAULT, reset: bool = True):
    """The "Use the run's tools" box for a side's model: shown (and on) only for a run with tools."""
    more = {"value": True} if reset else {}
    return gr.update(visible=tools is not None, info=tools_note(tools, lang) or None, **more)


def bot_label(side: int, spec: ModelRef | None) -> str:
    return f"{SIDES[side]} · {spec.label}" if spec else SIDES[side]


def reply_stats(label: str, r: chat.Reply | None, lang: str = i18n.DEFAULT) -> str:
    if r is None:
        return ""
    if r.error:  # the error itself is the backend's, in English
        return i18n.text("chat.reply_failed", lang, side=label, error=html.escape(r.error))
    stats = i18n.text("chat.reply_done" if r.done else "chat.reply_writing", lang, side=label, tokens=r.tokens,
                      speed=r.tokens_per_second)
    return stats + (i18n.text("chat.reply_calls", lang, n=r.calls) if r.messages is not None else "")


def sources_yaml(configs) -> str:
    return yaml.safe_dump([{"type": c.type, **c.model_dump(exclude_defaults=True)} for c in configs],
                          sort_keys=False, default_flow_style=None, width=100)


def parse_sources(text: str, lang: str = i18n.DEFAULT) -> tuple[list, list[str]]:
    from backend.config import ConfigError, build_config

    try:
        configs = build_config({"mode": "grpo", "reward_sources": text or ""}).reward_sources  # sources alone
    except ConfigError as e:
        return [], e.errors
    if not configs:
        return [], [i18n.text("chat.no_sources", lang)]
    return configs, []


def parse_columns(text: str) -> dict:
    if not (text or "").strip():
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ChatError(f"dataset columns: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(data, dict):
        raise ChatError("dataset columns: give a YAML mapping, e.g. `answer: 42`")
    return {str(k): v for k, v in data.items()}


def scores_markdown(result: dict, labels: list[str], weights: list[float], lang: str = i18n.DEFAULT) -> str:
    def cell(v):
        return "–" if v is None else f"{v:.4g}"

    head = (f"| {i18n.text('chat.col.source', lang)} | {i18n.text('chat.col.weight', lang)} | "
            + " | ".join(html.escape(x) for x in labels) + " |")
    lines = [head, "|---|---:|" + "---:|" * len(labels)]
    for (name, scores), w in zip(result["sources"].items(), weights):
        lines.append(f"| {name} | {w:g} | " + " | ".join(cell(s) for s in scores) + " |")
    lines.append(f"| **{i18n.text('col.total', lang)}** | | "
                 + " | ".join(f"**{cell(t)}**" for t in result["total"]) + " |")
    return "\n".join(lines)


def run_source_choices(store: RunStore) -> list[tuple[str, str]]:
    return [(f"{r.name} · {r.mode} run {r.id}", r.id) for r in store.list_runs()
            if getattr(r.config, "reward_sources", None)]


def build(store: RunStore, train_sources=None, words=None, ui_password: str | None = None) -> ChatTab:
    """The tab's layout and events; `words` (an i18n.Translatable) is given its words."""
    t = i18n.given(words).add
    workspace = store.workspace
    session = gr.State(ChatSession())
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
                stop = t(gr.Button(variant="stop", size="sm", elem_id="chat-stop", min_width=60), "common.stop", "value")
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

    # ---- handlers ----

    def specs_of(values, lang: str = i18n.DEFAULT) -> tuple[list[ModelRef | None], list[str]]:
        specs, errors = [], []
        for side, value in zip(SIDES, values):
            try:
                specs.append(chat.chat_model(value, store) if (value or "").strip() else None)
            except (ChatError, ValueError) as e:
                specs.append(None)
                errors.append(f"{i18n.text('chat.model', lang, side=side)}: {e}")
        return specs, errors

    def tools_of(spec: ModelRef | None) -> chat.ChatTools | None:
        return chat.run_tools(spec, workspace)

    def on_model(side: int):
        """A person picked another model for one side: a new conversation there, its run's tools offered (on),
        and the models no longer selected leave memory."""
        def handler(value_a, value_b, s: ChatSession, request: gr.Request = None):
            lang = i18n.lang_of(request)
            specs, errors = specs_of([value_a, value_b], lang)
            s.clear(side)
            s.picked[side] = True
            s.labels[side] = specs[side].label if specs[side] else ""
            released = chat.MODELS.keep_only([sp for sp in specs if sp])
            note = i18n.text("chat.released", lang, n=released) if released else ""
            msg = error_markdown(errors, i18n.text("chat.cannot_use", lang), lang) if errors else \
                (i18n.text("chat.picked", lang, side=SIDES[side], name=html.escape(s.labels[side])) + note
                 if specs[side] else note.strip())
            return {bots[side]: gr.update(value=[], label=bot_label(side, specs[side])), status: msg, session: s,
                    use_tools[side]: tools_box(tools_of(specs[side]), lang)}
        return handler

    def on_send(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        s: ChatSession = values[session]
        text = (values[prompt] or "").strip()
        if not text:
            yield {status: i18n.text("chat.type_first", lang)}
            return
        specs, errors = specs_of([values[picker] for picker in pickers], lang)
        if errors or not any(specs):
            yield {status: error_markdown(errors or [i18n.text("chat.pick_model", lang)],
                                          i18n.text("chat.cannot_send", lang), lang)}
            return
        n_tokens, temp, p = values[max_new], values[temperature], values[top_p]
        try:
            sampling = Sampling(int(n_tokens or 0), float(temp if temp is not None else -1),
                                float(p if p is not None else 0)).check()
        except ChatError as e:
            yield {status: error_markdown([str(e)], i18n.text("chat.cannot_send", lang), lang)}
            return
        tools = [tools_of(sp) if values[box] else None for sp, box in zip(specs, use_tools)]
        asked = [chat.conversation(values[system], s.histories[i], text, tools=tools[i] is not None) if sp else None
                 for i, sp in enumerate(specs)]
        s.labels = [sp.label if sp else "" for sp in specs]
        before = list(s.histories)  # each side's conversation before this turn, to go back to if it fails
        for i, sp in enumerate(specs):
            if sp:
                s.histories[i] = s.histories[i] + [{"role": "user", "content": text},
                                                   {"role": "assistant", "content": ""}]
        previous, s.asked = s.asked, [a if a is not None else old for a, old in zip(asked, s.asked)]

        def page(busy: bool, note: str, prompt_text: str | None = None) -> dict:
            """Both conversations, the status line and (when given) the prompt box's text."""
            out = {bots[0]: shown(s.histories[0], busy, lang), bots[1]: shown(s.histories[1], busy, lang),
                   status: note, session: s}
            return out if prompt_text is None else out | {prompt: prompt_text}

        try:
            loaded = []
            for i, sp in enumerate(specs):
                if sp and not chat.MODELS.is_loaded(sp):
                    yield page(True, i18n.text("chat.loading", lang, side=SIDES[i], name=html.escape(sp.label)),
                               prompt_text="")
                loaded.append(chat.MODELS.get(sp) if sp else None)
            jobs = [(m, a, tl) if m else None for m, a, tl in zip(loaded, asked, tools)]
            replies = []
            yield page(True, i18n.text("chat.writing", lang), prompt_text="")
            for replies in chat.stream_replies(jobs, sampling, min_interval=0.1,
                                               interval_per_kchar=UPDATE_S_PER_KCHAR):
                for i, r in enumerate(replies):
                    if r is not None:  # kept as far as it got if Stop is pressed
                        s.histories[i] = before[i] + [{"role": "user", "content": text}, *r.turn]
                yield page(True, " · ".join(x for x in (reply_stats(SIDES[i], r, lang)
                                                        for i, r in enumerate(replies)) if x), prompt_text="")
        except Exception as e:  # a model that cannot load, or anything else: said on the page, logged in full
            log.exception("chat generation failed")
            s.histories = before
            s.asked = previous
            yield page(False, error_markdown([str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"],
                                             i18n.text("chat.generation_failed", lang), lang), prompt_text=text)
            return
        failed = []
        for i, r in enumerate(replies):
            if r is None:
                continue
            if r.error:  # not kept: the next turn should not build on a broken answer
                s.histories[i] = before[i]
                s.asked[i] = previous[i]
                failed.append(i)
        stats = " · ".join(x for x in (reply_stats(SIDES[i], r, lang) for i, r in enumerate(replies)) if x)
        if failed:
            stats += i18n.text("chat.not_kept", lang)
        yield page(False, stats)

    def on_clear(s: ChatSession):
        return {bots[0]: [], bots[1]: [], status: "", session: s.clear()}

    def on_score(sources_text, columns_text, s: ChatSession, request: gr.Request = None):
        lang = i18n.lang_of(request)
        cannot = i18n.text("chat.cannot_score", lang)
        configs, errors = parse_sources(sources_text, lang)
        if errors:
            return error_markdown(errors, cannot, lang)
        sides = [i for i in range(2) if s.asked[i] is not None and s.histories[i]]
        if not sides:
            return i18n.text("chat.send_first", lang)
        try:
            from backend.rewards.spec import reward_weights

            result = chat.score_replies(configs, [s.asked[i] for i in sides],
                                        [last_turn(s.histories[i]) for i in sides], workspace,
                                        parse_columns(columns_text))
        except ValueError as e:  # ChatError, RewardSourceError
            return error_markdown([str(e)], cannot, lang)
        except Exception as e:
            log.exception("scoring chat answers failed")
            return error_markdown([f"{type(e).__name__}: {e}"], i18n.text("chat.scoring_failed", lang), lang)
        labels = [f"{SIDES[i]} · {s.labels[i]}" if s.labels[i] else SIDES[i] for i in sides]
        return scores_markdown(result, labels, reward_weights(configs), lang)

    def on_run_sources(run_id, request: gr.Request = None):
        if not run_id:
            return gr.skip()
        lang = i18n.lang_of(request)
        try:
            configs = store.get_run(run_id).config.reward_sources
        except KeyError as e:
            return {scores: error_markdown([e.args[0]], i18n.text("chat.cannot_copy", lang), lang)}
        return {sources: sources_yaml(configs), scores: i18n.text("chat.copied_run", lang, id=run_id)}

    def on_train_sources(values: dict, request: gr.Request = None):
        from app.reward_editor import configs_from_values

        lang = i18n.lang_of(request)
        configs, errors = configs_from_values(train_sources.read(values))
        if errors:
            return {scores: error_markdown(errors, i18n.text("chat.train_sources_bad", lang), lang)}
        if not configs:
            return {scores: i18n.text("chat.train_no_sources", lang)}
        return {sources: sources_yaml(configs), scores: i18n.text("chat.copied_train", lang)}

    def on_load(value_a, value_b, request: gr.Request = None):
        """A fresh page: the choices, the base model on the left and the newest run's adapter on the right (with
        its tools, if it has any)."""
        opts = chat.model_choices(store)
        values = [v for _, v in opts]
        runs = [v for v in values if v.startswith(chat.RUN_PREFIX)]
        a = value_a or (values[0] if values else None)
        b = value_b or (runs[0] if runs else None)
        specs, _ = specs_of([a, b])
        lang = i18n.lang_of(request)
        return ({pickers[0]: gr.update(choices=opts, value=a), pickers[1]: gr.update(choices=opts, value=b),
                 from_run: gr.update(choices=run_source_choices(store))}
                | {bot: gr.update(label=bot_label(i, sp)) for i, (bot, sp) in enumerate(zip(bots, specs))}
                | {box: tools_box(tools_of(sp), lang) for box, sp in zip(use_tools, specs)})

    def on_refresh(value_b, s: ChatSession, request: gr.Request = None):
        """Opening the tab: the choices, and model B follows the newest run (one just finished) until a person
        picks B or talks to it."""
        opts = chat.model_choices(store)
        newest = next((v for _, v in opts if v.startswith(chat.RUN_PREFIX)), None)
        out = {pickers[0]: gr.update(choices=opts), pickers[1]: gr.update(choices=opts),
               from_run: gr.update(choices=run_source_choices(store))}
        if newest and newest != value_b and not s.picked[1] and not s.histories[1]:
            specs, _ = specs_of([None, newest])
            s.labels[1] = specs[1].label if specs[1] else ""
            out |= {pickers[1]: gr.update(choices=opts, value=newest),
                    bots[1]: gr.update(label=bot_label(1, specs[1])), session: s,
                    use_tools[1]: tools_box(tools_of(specs[1]), i18n.lang_of(request))}
        return out

    # ---- wiring ----

    for i, picker in enumerate(pickers):
        picker.input(on_model(i), [pickers[0], pickers[1], session], [bots[i], status, session, use_tools[i]],
                      show_progress="hidden")
    sent = gr.on([send.click, prompt.submit], on_send,
                 {*pickers, *use_tools, system, prompt, max_new, temperature, top_p, session},
                 [*bots, status, prompt, session], concurrency_limit=2, concurrency_id="chat", show_progress="hidden")
    def on_stop(request: gr.Request = None):
        return i18n.text("chat.stopped", i18n.lang_of(request))

    stop.click(on_stop, None, status, cancels=[sent], show_progress="hidden")
    clear.click(on_clear, session, [*bots, status, session], show_progress="hidden")
    score.click(on_score, [sources, columns, session], scores)
    from_run.change(on_run_sources, from_run, [sources, scores], show_progress="hidden")
    if train_sources is not None:
        use_train.click(on_train_sources, set(train_sources.inputs), [sources, scores], show_progress="hidden")
    refresh_io = dict(inputs=[pickers[1], session], outputs=[*pickers, from_run, bots[1], session, use_tools[1]])
    refresh.click(on_refresh, **refresh_io, show_progress="hidden")
    return ChatTab(load=(on_load, dict(inputs=pickers, outputs=[*pickers, from_run, *bots, *use_tools])),
                   refresh=(on_refresh, refresh_io))
