"""The Chat tab: two models side by side (base, base + a run's adapter, a merged export), the same prompts to
both, answers streamed token by token, a multi-turn history per side, and the reward sources' scores for the
last two answers.

The logic is in backend/chat.py: its model cache holds the two selected models (a selection change releases
the others) and `stream_replies` runs both generations in threads. The Send handler is a generator that Gradio
iterates on a worker thread, so streaming never blocks the page or the other tabs. Each browser session keeps
its conversations in a gr.State (ChatSession).

A run trained with tools answers with them ("Use the run's tools", on by default, under its picker): each call
shows as a small message titled with the call, its result inside, and the answer after; the conversation keeps the
calls and results for the model's next turn. A run trained in an environment plays an instance of it per
conversation (ChatSession.episodes), started on the first turn with tools and ended with the conversation.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass, replace

import gradio as gr
import yaml

from app import i18n
from app.chat_layout import SIDES, ChatSession, ChatUI, layout, run_source_choices
from app.events import Packed, bind
from app.formatting import error_markdown
from backend import chat
from backend.chat import ChatError, Sampling
from backend.models import ModelRef
from backend.runs.store import RunStore

log = logging.getLogger(__name__)
UPDATE_S_PER_KCHAR = 0.08  # long answers update less often: the page re-renders each in full (Markdown)


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


# ---- handlers ----


def specs_of(ui: ChatUI, values, lang: str = i18n.DEFAULT) -> tuple[list[ModelRef | None], list[str]]:
    specs, errors = [], []
    for side, value in zip(SIDES, values):
        try:
            specs.append(chat.chat_model(value, ui.store) if (value or "").strip() else None)
        except (ChatError, ValueError) as e:
            specs.append(None)
            errors.append(f"{i18n.text('chat.model', lang, side=side)}: {e}")
    return specs, errors


def tools_of(ui: ChatUI, spec: ModelRef | None) -> chat.ChatTools | None:
    return chat.run_tools(spec, ui.workspace)


def on_model(ui: ChatUI, side: int):
    """A person picked another model for one side: a new conversation there, its run's tools offered (on),
    and the models no longer selected leave memory."""
    def handler(value_a, value_b, s: ChatSession, request: gr.Request = None):
        lang = i18n.lang_of(request)
        specs, errors = specs_of(ui, [value_a, value_b], lang)
        s.clear(side)
        s.picked[side] = True
        s.labels[side] = specs[side].label if specs[side] else ""
        released = chat.MODELS.keep_only([sp for sp in specs if sp])
        note = i18n.text("chat.released", lang, n=released) if released else ""
        msg = error_markdown(errors, i18n.text("chat.cannot_use", lang), lang) if errors else \
            (i18n.text("chat.picked", lang, side=SIDES[side], name=html.escape(s.labels[side])) + note
             if specs[side] else note.strip())
        return {ui.bots[side]: gr.update(value=[], label=bot_label(side, specs[side])), ui.status: msg, ui.session: s,
                ui.use_tools[side]: tools_box(tools_of(ui, specs[side]), lang)}
    return handler


def on_send(ui: ChatUI, values: dict, request: gr.Request = None):
    lang = i18n.lang_of(request)
    s: ChatSession = values[ui.session]
    text = (values[ui.prompt] or "").strip()
    if not text:
        yield {ui.status: i18n.text("chat.type_first", lang)}
        return
    specs, errors = specs_of(ui, [values[picker] for picker in ui.pickers], lang)
    if errors or not any(specs):
        yield {ui.status: error_markdown(errors or [i18n.text("chat.pick_model", lang)],
                                         i18n.text("chat.cannot_send", lang), lang)}
        return
    n_tokens, temp, p = values[ui.max_new], values[ui.temperature], values[ui.top_p]
    try:
        sampling = Sampling(int(n_tokens or 0), float(temp if temp is not None else -1),
                            float(p if p is not None else 0)).check()
    except ChatError as e:
        yield {ui.status: error_markdown([str(e)], i18n.text("chat.cannot_send", lang), lang)}
        return
    tools = [tools_of(ui, sp) if values[box] else None for sp, box in zip(specs, ui.use_tools)]
    # a run's environment: the conversation's own instance, started on its first turn with tools, whose reset text
    # that turn carries
    said, started = [text, text], []
    try:
        for i, tl in enumerate(tools):
            if tl is not None and tl.environment and s.episodes[i] is None:
                s.episodes[i] = chat.ChatEpisode(tl)
                started.append(i)
                said[i] = text + s.episodes[i].observation
    except Exception as e:  # noqa: BLE001 - an environment that cannot start: said, nothing sent
        log.exception("starting a chat's environment failed")
        _end_episodes(s, started)
        yield {ui.status: error_markdown([str(e)], i18n.text("chat.cannot_send", lang), lang)}
        return
    tools = [replace(tl, episode=s.episodes[i]) if tl is not None and tl.environment else tl
             for i, tl in enumerate(tools)]
    asked = [chat.conversation(values[ui.system], s.histories[i], said[i], tools=tools[i] is not None) if sp
             else None for i, sp in enumerate(specs)]
    s.labels = [sp.label if sp else "" for sp in specs]
    before = list(s.histories)  # each side's conversation before this turn, to go back to if it fails
    for i, sp in enumerate(specs):
        if sp:
            s.histories[i] = s.histories[i] + [{"role": "user", "content": said[i]},
                                               {"role": "assistant", "content": ""}]
    previous, s.asked = s.asked, [a if a is not None else old for a, old in zip(asked, s.asked)]

    def page(busy: bool, note: str, prompt_text: str | None = None) -> dict:
        """Both conversations, the status line and (when given) the prompt box's text."""
        out = {ui.bots[0]: shown(s.histories[0], busy, lang), ui.bots[1]: shown(s.histories[1], busy, lang),
               ui.status: note, ui.session: s}
        return out if prompt_text is None else out | {ui.prompt: prompt_text}

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
                    s.histories[i] = before[i] + [{"role": "user", "content": said[i]}, *r.turn]
            yield page(True, " · ".join(x for x in (reply_stats(SIDES[i], r, lang)
                                                    for i, r in enumerate(replies)) if x), prompt_text="")
    except Exception as e:  # a model that cannot load, or anything else: said on the page, logged in full
        log.exception("chat generation failed")
        s.histories = before
        s.asked = previous
        _end_episodes(s, started)  # the turn that carried their reset text is gone
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
            _end_episodes(s, [i] if i in started else [])
            failed.append(i)
    stats = " · ".join(x for x in (reply_stats(SIDES[i], r, lang) for i, r in enumerate(replies)) if x)
    if failed:
        stats += i18n.text("chat.not_kept", lang)
    yield page(False, stats)


def _end_episodes(s: ChatSession, sides: list[int]) -> None:
    for i in sides:
        if s.episodes[i] is not None:
            s.episodes[i].close()
            s.episodes[i] = None


def on_clear(ui: ChatUI, s: ChatSession):
    return {ui.bots[0]: [], ui.bots[1]: [], ui.status: "", ui.session: s.clear()}


def on_score(ui: ChatUI, sources_text, columns_text, s: ChatSession, request: gr.Request = None):
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
                                    [last_turn(s.histories[i]) for i in sides], ui.workspace,
                                    parse_columns(columns_text))
    except ValueError as e:  # ChatError, RewardSourceError
        return error_markdown([str(e)], cannot, lang)
    except Exception as e:
        log.exception("scoring chat answers failed")
        return error_markdown([f"{type(e).__name__}: {e}"], i18n.text("chat.scoring_failed", lang), lang)
    labels = [f"{SIDES[i]} · {s.labels[i]}" if s.labels[i] else SIDES[i] for i in sides]
    return scores_markdown(result, labels, reward_weights(configs), lang)


def on_run_sources(ui: ChatUI, run_id, request: gr.Request = None):
    if not run_id:
        return gr.skip()
    lang = i18n.lang_of(request)
    try:
        configs = ui.store.get_run(run_id).config.reward_sources
    except KeyError as e:
        return {ui.scores: error_markdown([e.args[0]], i18n.text("chat.cannot_copy", lang), lang)}
    return {ui.sources: sources_yaml(configs), ui.scores: i18n.text("chat.copied_run", lang, id=run_id)}


def on_train_sources(ui: ChatUI, values: dict, request: gr.Request = None):
    from app.reward_editor import configs_from_values

    lang = i18n.lang_of(request)
    configs, errors = configs_from_values(ui.train_sources.read(values))
    if errors:
        return {ui.scores: error_markdown(errors, i18n.text("chat.train_sources_bad", lang), lang)}
    if not configs:
        return {ui.scores: i18n.text("chat.train_no_sources", lang)}
    return {ui.sources: sources_yaml(configs), ui.scores: i18n.text("chat.copied_train", lang)}


def on_load(ui: ChatUI, value_a, value_b, request: gr.Request = None):
    """A fresh page: the choices, the base model on the left and the newest run's adapter on the right (with
    its tools, if it has any)."""
    opts = chat.model_choices(ui.store)
    values = [v for _, v in opts]
    runs = [v for v in values if v.startswith(chat.RUN_PREFIX)]
    a = value_a or (values[0] if values else None)
    b = value_b or (runs[0] if runs else None)
    specs, _ = specs_of(ui, [a, b])
    lang = i18n.lang_of(request)
    return ({ui.pickers[0]: gr.update(choices=opts, value=a), ui.pickers[1]: gr.update(choices=opts, value=b),
             ui.from_run: gr.update(choices=run_source_choices(ui.store))}
            | {bot: gr.update(label=bot_label(i, sp)) for i, (bot, sp) in enumerate(zip(ui.bots, specs))}
            | {box: tools_box(tools_of(ui, sp), lang) for box, sp in zip(ui.use_tools, specs)})


def on_refresh(ui: ChatUI, value_b, s: ChatSession, request: gr.Request = None):
    """Opening the tab: the choices, and model B follows the newest run (one just finished) until a person
    picks B or talks to it."""
    opts = chat.model_choices(ui.store)
    newest = next((v for _, v in opts if v.startswith(chat.RUN_PREFIX)), None)
    out = {ui.pickers[0]: gr.update(choices=opts), ui.pickers[1]: gr.update(choices=opts),
           ui.from_run: gr.update(choices=run_source_choices(ui.store))}
    if newest and newest != value_b and not s.picked[1] and not s.histories[1]:
        specs, _ = specs_of(ui, [None, newest])
        s.labels[1] = specs[1].label if specs[1] else ""
        out |= {ui.pickers[1]: gr.update(choices=opts, value=newest),
                ui.bots[1]: gr.update(label=bot_label(1, specs[1])), ui.session: s,
                ui.use_tools[1]: tools_box(tools_of(ui, specs[1]), i18n.lang_of(request))}
    return out


# ---- wiring ----

def on_stop(request: gr.Request = None):
    return i18n.text("chat.stopped", i18n.lang_of(request))


def wire(ui: ChatUI) -> ChatTab:
    for i, picker in enumerate(ui.pickers):
        picker.input(on_model(ui, i), [*ui.pickers, ui.session], [ui.bots[i], ui.status, ui.session, ui.use_tools[i]],
                     show_progress="hidden")
    sent = gr.on([ui.send.click, ui.prompt.submit], bind(on_send, ui),
                 {*ui.pickers, *ui.use_tools, ui.system, ui.prompt, ui.max_new, ui.temperature, ui.top_p, ui.session},
                 [*ui.bots, ui.status, ui.prompt, ui.session], concurrency_limit=2, concurrency_id="chat",
                 show_progress="hidden")
    ui.stop.click(on_stop, None, ui.status, cancels=[sent], show_progress="hidden")
    ui.clear.click(bind(on_clear, ui), ui.session, [*ui.bots, ui.status, ui.session], show_progress="hidden")
    ui.score.click(bind(on_score, ui), [ui.sources, ui.columns, ui.session], ui.scores)
    ui.from_run.change(bind(on_run_sources, ui), ui.from_run, [ui.sources, ui.scores], show_progress="hidden")
    if ui.train_sources is not None:
        Packed(set(ui.train_sources.inputs)).on(ui.use_train.click, bind(on_train_sources, ui),
                                                [ui.sources, ui.scores], show_progress="hidden")
    refresh_fn = bind(on_refresh, ui)
    refresh_io = dict(inputs=[ui.pickers[1], ui.session],
                      outputs=[*ui.pickers, ui.from_run, ui.bots[1], ui.session, ui.use_tools[1]])
    ui.refresh.click(refresh_fn, **refresh_io, show_progress="hidden")
    return ChatTab(load=(bind(on_load, ui), dict(inputs=ui.pickers,
                                                 outputs=[*ui.pickers, ui.from_run, *ui.bots, *ui.use_tools])),
                   refresh=(refresh_fn, refresh_io))


def build(store: RunStore, train_sources=None, words=None, ui_password: str | None = None) -> ChatTab:
    """The tab's layout and events; `words` (an i18n.Translatable) is given its words."""
    return wire(layout(store, train_sources, words, ui_password))
