"""The chat playground: two models answer the same prompts side by side, streamed token by token.

A model to chat with is a base model (the embedded one, a local folder or a Hub id), a base plus the LoRA
adapter of a finished run, or an export (`backend.models.ModelRef`). The models live in the process's bounded
model cache; the chat lets go of those no longer selected, so a model loads once and is reused between prompts.
`stream_replies` runs each model's `generate` in its own thread with a TextIteratorStreamer and merges their
text into one stream of snapshots, so one UI event shows both answers growing at once without blocking anything
else. Reward sources score the answers through `backend.rewards.score_completions`, as in training.

A run trained with tools (its config's `tools`) chats with them: its answer goes through the same tool loop as
evaluation (`backend.tools.loop.answer_with_tools`), with the run's chat template and its limit of tool-calling
rounds; each call and its result are reported as they happen, and the turn's messages (calls, results, the answer)
stay in the conversation so the model sees them on the next turn. A run trained in an environment plays it: each
conversation gets an instance of its own (a ChatEpisode), reset from a row of the run's training data picked at
random, whose methods are that conversation's tools until it is cleared.

No gradio here; torch and transformers load only when a model does.
"""
from __future__ import annotations

import functools
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from backend.core.mode_registry import modes_where
from backend.models import MODELS as MODEL_CACHE
from backend.models import RUN_PREFIX, LoadedModel, ModelCache, ModelError, ModelRef, cached_model, load_model
from backend.runs.store import RunStore

MAX_NEW_TOKENS = 4096


class ChatError(ValueError):
    """A model or setting the chat cannot use; the message says what to pick instead."""


# ---- what can be chatted with ----

def model_choices(store: RunStore) -> list[tuple[str, str]]:
    """(label, value) pairs: base models, finished runs' adapters (not reward models), merged exports."""
    from backend.export import ExportError, locate, merged_exports
    from backend.models import EMBEDDED_MODEL

    runs = store.list_runs()
    bases = list(dict.fromkeys([EMBEDDED_MODEL, *(r.config.model for r in runs)]))
    choices = [(f"base · {_short(b)}", b) for b in bases]
    for run in runs:
        if run.active or not run.config.spec.writes_answers:
            continue
        try:
            art = locate(store, run.id)
        except ExportError:
            continue
        what = "base + adapter" if art.kind == "lora" else "full fine-tune"
        choices.append((f"{run.name} · {run.mode} run {run.id} ({what})", RUN_PREFIX + run.id))
    choices += [(f"merged export · {p.name}", str(p)) for p in merged_exports(store)]
    return choices


def _short(spec: str, limit: int = 60) -> str:
    return spec if len(spec) <= limit else "…" + spec[-(limit - 1):]


def chat_model(value: str, store: RunStore) -> ModelRef:
    """The model a choice (or a typed model reference) stands for, labelled for the chat."""
    value = (value or "").strip()
    if not value:
        raise ChatError("no model selected: pick a base model, a finished run or a merged export")
    try:
        ref = ModelRef.parse(value, store)
    except ModelError as e:
        raise ChatError(str(e)) from None
    if ref.run is not None:
        if ref.task != "causal":
            raise ChatError(f"run {ref.run.id} trained a reward model (rm): it scores text and cannot chat; use it "
                            f"as a reward source, and pick a policy run ({', '.join(modes_where(task='causal'))}) "
                            "here")
        return ref.with_label(f"{ref.run.name} ({ref.run.mode})")
    if ref.kind == "export":
        return ref.with_label(f"export · {Path(ref.adapter or ref.base).name}")
    return ref.with_label(f"base · {_short(value)}")


# ---- loading, through the process's model cache ----

def chat_device() -> tuple[str, object]:
    """(device, dtype) the chat generates with: the GPU in bf16 when there is one, else the CPU in float32."""
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return "cpu", torch.float32


class ChatModels:
    """The chat's models in the process's model cache: each (model, adapter) loads once and serves both sides
    (inference only reads weights), unmerged (exactly the model the run trained); `keep_only` lets go of what is
    no longer selected."""

    HOLDER = "chat"

    def __init__(self, cache: ModelCache | None = None, loader=load_model):
        self._cache, self._loader = cache, loader

    @property
    def cache(self) -> ModelCache:
        return self._cache or MODEL_CACHE

    def get(self, ref: ModelRef) -> LoadedModel:
        device, dtype = chat_device()
        return cached_model(ref, self.HOLDER, cache=self.cache, loader=self._loader, task="causal", device=device,
                            dtype=dtype)

    # cache keys start with (model, adapter): matching on those needs no torch to tell the device
    def is_loaded(self, ref: ModelRef) -> bool:
        return ref.key in self.loaded()

    def keep_only(self, refs) -> int:
        """Let go of every chat model but `refs` (the current selection); returns how many were let go of."""
        keep = {r.key for r in refs if r is not None}
        return self.cache.keep_only([k for k in self.cache.loaded(self.HOLDER) if k[:2] in keep], self.HOLDER)

    def loaded(self) -> list[tuple]:
        """(model, adapter) of the chat's models, least recently used first."""
        return [key[:2] for key in self.cache.loaded(self.HOLDER)]


MODELS = ChatModels()


# ---- prompts ----

@dataclass
class Sampling:
    max_new_tokens: int = 128
    temperature: float = 0.7  # 0: greedy
    top_p: float = 0.95

    def check(self) -> Sampling:
        if not 1 <= int(self.max_new_tokens or 0) <= MAX_NEW_TOKENS:
            raise ChatError(f"max new tokens {self.max_new_tokens}: choose 1 to {MAX_NEW_TOKENS}")
        if self.temperature is None or self.temperature < 0:
            raise ChatError("temperature: 0 (greedy) or more")
        if self.top_p is None or not 0 < self.top_p <= 1:
            raise ChatError("top-p: more than 0, at most 1")
        return self

    def generate_kwargs(self) -> dict:
        if self.temperature == 0:
            return dict(max_new_tokens=int(self.max_new_tokens), do_sample=False)
        return dict(max_new_tokens=int(self.max_new_tokens), do_sample=True, temperature=float(self.temperature),
                    top_p=float(self.top_p))


_TOOL_KEYS = ("tool_calls", "name")  # what a tool turn's messages carry besides role and content


def conversation(system: str | None, history: list[dict], prompt: str | None = None,
                 tools: bool = False) -> list[dict]:
    """The messages a model sees: the system prompt (if any), the earlier turns, the new user prompt. With
    `tools`, earlier calls and results stay as they were; without, only the text of the turns (a model chatting
    without tools is shown no calls it cannot read)."""
    messages = [{"role": "system", "content": system.strip()}] if system and system.strip() else []
    for m in history:
        if tools and m["role"] in ("user", "assistant", "tool"):
            messages.append({"role": m["role"], "content": m["content"], **{k: m[k] for k in _TOOL_KEYS if k in m}})
        elif m["role"] in ("user", "assistant") and not (m.get("tool_calls") and not m["content"]):
            messages.append({"role": m["role"], "content": m["content"]})
    if prompt is not None:
        messages.append({"role": "user", "content": prompt})
    return messages


def prompt_inputs(tokenizer, messages: list[dict]):
    """Token ids ready for the answer: the chat template, or a plain transcript for a model without one."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, return_tensors="pt", add_special_tokens=False)
    text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"
    return tokenizer(text, return_tensors="pt")


# ---- tools: a run trained with them chats with them ----

@dataclass
class ChatTools:
    """A run's tools as the chat uses them: the run's `tools` and environment, the chat template it showed them
    through and its limit of tool-calling rounds, so the model is talked to the way it was trained. `episode` is
    one conversation's environment instance (set per answer, never shared)."""

    run_id: str
    configs: list  # backend.tools.ToolConfig
    template: str  # data.chat_template
    max_iterations: int
    workspace: Path
    environment: str = ""
    environment_timeout_s: float = 30.0
    episode: ChatEpisode | None = None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.configs] + ([self.environment] if self.environment else [])


def run_tools(ref: ModelRef | None, workspace: str | Path) -> ChatTools | None:
    """The tools of the run a chat model is (its config's `tools` and `environment`); None for any other model or a
    run without."""
    run = ref.run if ref is not None else None
    if run is None or not (run.config.tools or run.config.environment):
        return None
    c = run.config
    return ChatTools(run.id, list(c.tools), c.data.chat_template, c.rl.max_tool_calling_iterations, Path(workspace),
                     c.environment, c.rl.environment_timeout_s)


class ChatEpisode:
    """One conversation's instance of its run's environment, in a process of its own, reset from a row of the run's
    training data picked at random (what the reset returns is added to the first message, as in training). Its
    methods are the conversation's tools; `close` ends its process (clearing the conversation, or the page gone)."""

    def __init__(self, tools: ChatTools, pick: Callable[[list], dict] | None = None):
        import random

        from backend.tools.environment import environment_factory

        row = (pick or random.choice)(_training_rows(tools.run_id, str(tools.workspace)))
        self.instance = environment_factory(tools.environment, tools.workspace, tools.environment_timeout_s)()
        try:
            self.observation = self.instance.reset(**row) or ""
        except BaseException:
            self.close()
            raise

    def tools(self) -> list[Callable]:
        from backend.tools.environment import tool_methods

        return tool_methods(self.instance)

    def close(self) -> None:
        self.instance._lost = True  # a call still on its way (Clear mid-answer) is told the state is gone, and
        self.instance._close()      # starts no fresh instance that was never reset


@functools.lru_cache(maxsize=4)
def _training_rows(run_id: str, workspace: str) -> list[dict]:
    """A run's training rows as its worker prepared them (the columns its environment's reset reads)."""
    from backend.data import DataOptions, prepare_dataset

    config = RunStore(workspace).get_run(run_id).config
    dataset, _ = prepare_dataset(config.dataset, config.mode, workspace=Path(workspace), options=DataOptions.of(config))
    return [dict(r) for r in dataset.select(range(min(len(dataset), 1000)))]


_TOOLS_KEPT = 8  # runs whose built tools the chat keeps (a user function's process, a search's index each)
_built_tools: OrderedDict[tuple, list[Callable]] = OrderedDict()
_built_lock = threading.Lock()


def _tools_key(tools: ChatTools) -> tuple:
    """What the built tools depend on: the run's tool settings and the files they read as they are now (a user
    function's file edited, a search folder's files added or removed: built anew)."""
    from backend.core.usercode import in_workspace
    from backend.tools import as_configs

    configs = as_configs(tools.configs)
    stamps = []
    for t in configs:
        where = t.params.get("file") if t.type == "function" else t.params.get("folder") if t.type == "search" else None
        if where:
            try:
                stamps.append(in_workspace(where, tools.workspace)[0].stat().st_mtime_ns)
            except (OSError, ValueError):
                stamps.append(None)  # building says what is wrong
    return (tools.run_id, str(tools.workspace), tuple(t.model_dump_json() for t in configs), tuple(stamps))


def chat_tools(tools: ChatTools) -> list[Callable]:
    """The run's tools, built once and kept (a user function starts a process, ~2 s; a search indexes its folder)
    while their settings and files stay as they are. A user function answers one call at a time: each chat
    session's calls to it take turns."""
    from backend.tools import as_configs, build_tools

    key = _tools_key(tools)
    with _built_lock:
        if key in _built_tools:
            _built_tools.move_to_end(key)
            return _built_tools[key]
    built = []
    configs = as_configs(tools.configs)
    for config, fn in zip(configs, build_tools(configs, tools.workspace)):
        built.append(_one_at_a_time(fn) if config.type == "function" else fn)
    with _built_lock:
        _built_tools[key] = built
        while len(_built_tools) > _TOOLS_KEPT:
            _built_tools.popitem(last=False)  # its processes end with their last reference
    return built


def _one_at_a_time(fn: Callable) -> Callable:
    lock = threading.Lock()

    @functools.wraps(fn)
    def tool(**arguments):
        with lock:
            return fn(**arguments)

    return tool


def _reporting(fn: Callable, report: Callable) -> Callable:
    """`fn` (a tool) telling `report` of each call as it starts (name, arguments, None) and ends (…, result); the
    same name, signature and docstring, so the template shows the model the same schema."""
    from backend.tools.loop import tool_error

    @functools.wraps(fn)
    def tool(**arguments):
        report(fn.__name__, arguments, None)
        try:
            result = fn(**arguments)
        except Exception as e:
            report(fn.__name__, arguments, tool_error(e))  # what the loop answers the model
            raise
        report(fn.__name__, arguments, str(result))
        return result

    return tool


def call_message(name: str, arguments: dict) -> dict:
    """An assistant message making one call, in the shape the tool loop and TRL write."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


# ---- streaming ----

@dataclass
class Reply:
    text: str = ""
    done: bool = False
    error: str | None = None
    tokens: int = 0
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    # with tools: the calls made and their results so far (`text` is the round being written); once done, all the
    # messages the tool loop added, the answer last. None: a plain answer.
    messages: list[dict] | None = None
    finished: bool = False  # `messages` are the loop's own

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def calls(self) -> int:
        return sum(len(m.get("tool_calls") or ()) for m in self.messages or ())

    @property
    def turn(self) -> list[dict]:
        """The messages this reply adds to its conversation: the answer, after any calls and results."""
        if self.messages is None:
            return [{"role": "assistant", "content": self.text}]
        if self.finished:
            return [dict(m) for m in self.messages]
        return [*(dict(m) for m in self.messages), {"role": "assistant", "content": self.text}]


def _streamer_class():
    from transformers import TextIteratorStreamer

    class SideStreamer(TextIteratorStreamer):
        """A TextIteratorStreamer whose text goes, tagged with its side, into a queue shared by all sides."""

        def __init__(self, tokenizer, side: int, events: queue.Queue):
            super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
            self.side, self.events, self.tokens = side, events, 0

        def put(self, value):
            if not (self.skip_prompt and self.next_tokens_are_prompt):
                self.tokens += value.numel()
            super().put(value)

        def on_finalized_text(self, text: str, stream_end: bool = False):
            self.events.put((self.side, text, stream_end, None, self.tokens, None))

    class ToolStreamer(SideStreamer):
        """The tool loop generates once per round: a round's end is not the answer's (the loop's return is)."""

        def on_finalized_text(self, text: str, stream_end: bool = False):
            self.events.put((self.side, text, False, None, self.tokens, None))

    return SideStreamer, ToolStreamer


def _stop_criteria(stop: threading.Event):
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopWhenAsked(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return stop.is_set()

    return StoppingCriteriaList([StopWhenAsked()])


def _generate(loaded: LoadedModel, messages: list[dict], sampling: Sampling, streamer, stop: threading.Event,
              events: queue.Queue, side: int) -> None:
    import torch

    try:
        with loaded.encode_lock:
            inputs = prompt_inputs(loaded.tokenizer, messages).to(loaded.device)
        with torch.no_grad():
            loaded.model.generate(**inputs, streamer=streamer, pad_token_id=loaded.tokenizer.pad_token_id,
                                  stopping_criteria=_stop_criteria(stop), **sampling.generate_kwargs())
    except Exception as e:  # noqa: BLE001 - the UI shows it on that side; the other side goes on
        events.put((side, "", True, f"{type(e).__name__}: {e}", streamer.tokens, None))


def _generate_with_tools(loaded: LoadedModel, messages: list[dict], tools: ChatTools, sampling: Sampling, streamer,
                         stop: threading.Event, events: queue.Queue, side: int) -> None:
    """One answer through the tool loop; each call is reported as it starts and ends, the loop's messages last."""
    from backend.data.templates import tool_tokenizer
    from backend.tools.loop import answer_with_tools

    def report(name, arguments, result):
        events.put((side, "", False, None, streamer.tokens, {"call": (name, arguments), "result": result}))

    try:
        tokenizer = tool_tokenizer(loaded.tokenizer, tools.template)
        own = tools.episode.tools() if tools.episode is not None else []
        functions = [_reporting(fn, report) for fn in chat_tools(tools) + own]
        kwargs = sampling.generate_kwargs()
        max_new_tokens = kwargs.pop("max_new_tokens")
        if not kwargs["do_sample"]:  # as the loop's own greedy setting: no warnings about unused sampling values
            kwargs |= dict(temperature=None, top_p=None, top_k=None)
        # one conversation: a streamer takes it, and Stop ends the round being written (the next ends at once)
        kwargs |= dict(streamer=streamer, stopping_criteria=_stop_criteria(stop))
        [added] = answer_with_tools(loaded.model, tokenizer, [messages], functions, max_new_tokens,
                                    tools.max_iterations, kwargs)
        events.put((side, "", True, None, streamer.tokens, {"messages": added}))
    except Exception as e:  # noqa: BLE001 - as _generate: said on that side
        events.put((side, "", True, f"{type(e).__name__}: {e}", streamer.tokens, None))


def stream_replies(jobs: list[tuple[LoadedModel, list[dict]] | tuple[LoadedModel, list[dict], ChatTools | None]
                                | None], sampling: Sampling, min_interval: float = 0.05,
                   interval_per_kchar: float = 0.0) -> Iterator[list[Reply | None]]:
    """Generate an answer to each (model, messages[, tools]) job at once, one thread each; yields snapshots of
    every reply (None for a None job) as text arrives, and a last one when all are done. A job with tools answers
    through the tool loop: its reply's `messages` gain each call as it starts and its result as it ends.
    Snapshots are at least `min_interval` s apart, plus `interval_per_kchar` s per 1000 characters written so far
    (at most 1 s): a browser re-renders each answer in full on every update, so a long answer must update less
    often or the page falls behind. Closing the iterator early (the page went away) stops the generation threads
    at their next token."""
    sampling.check()
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    SideStreamer, ToolStreamer = _streamer_class()
    tools = [job[2] if job is not None and len(job) > 2 else None for job in jobs]
    replies = [Reply(messages=[] if tools[i] else None) if job else None for i, job in enumerate(jobs)]
    threads = []
    for side, job in enumerate(jobs):
        if job is None:
            continue
        loaded, messages = job[:2]
        if tools[side]:
            target = _generate_with_tools
            args = (loaded, messages, tools[side], sampling, ToolStreamer(loaded.tokenizer, side, events))
        else:
            target, args = _generate, (loaded, messages, sampling, SideStreamer(loaded.tokenizer, side, events))
        t = threading.Thread(target=target, args=(*args, stop, events, side), daemon=True,
                             name=f"chat-generate-{side}")
        t.start()
        threads.append(t)
    pending = {i for i, r in enumerate(replies) if r is not None}
    try:
        last = 0.0
        while pending:
            try:
                events_now = [events.get(timeout=0.5)]
            except queue.Empty:
                if not any(t.is_alive() for t in threads):  # a thread died without a word: never hang
                    for i in pending:
                        replies[i].done, replies[i].error = True, "generation ended unexpectedly"
                    pending.clear()
                    break
                continue
            while True:  # take everything already there: one snapshot for many tokens
                try:
                    events_now.append(events.get_nowait())
                except queue.Empty:
                    break
            for side, text, end, error, tokens, tool in events_now:
                r = replies[side]
                r.text += text
                r.tokens = tokens
                r.seconds = time.time() - r.started
                if error:
                    r.error = error
                if tool and "messages" in tool:  # the loop's own messages: the answer is the last one's text
                    r.messages, r.finished = tool["messages"], True
                    final = r.messages[-1] if r.messages else {}
                    r.text = "" if final.get("tool_calls") else final.get("content") or ""
                elif tool and tool["result"] is None:  # a call starts: the round's text was that call
                    r.messages.append(call_message(*tool["call"]))
                    r.text = ""
                elif tool:
                    r.messages.append({"role": "tool", "name": tool["call"][0], "content": tool["result"]})
                if end and not r.done:
                    r.done = True
                    pending.discard(side)
            chars = sum(len(r.text) for r in replies if r is not None)
            if pending and time.time() - last < max(min_interval, min(1.0, interval_per_kchar * chars / 1000)):
                continue
            last = time.time()
            yield replies
        yield replies
    finally:
        stop.set()


# ---- scoring answers with reward sources ----

def score_replies(sources, messages: list[list[dict]], replies: list[str | list[dict]], workspace: str | Path,
                  columns: dict | None = None) -> dict:
    """Each reply scored as a training step would score it for its conversation (prompt messages):
    {"sources": {name: [score, ...]}, "total": [...]}, one entry per reply. A reply with tools is its turn's
    messages (calls, results, answer), as GRPO hands a tool-calling completion to the trajectory sources."""
    from backend.rewards import score_completions, validate_sources
    from backend.rewards.spec import as_configs

    configs = as_configs(sources)
    if not configs:
        raise ChatError("no reward sources: give at least one (YAML list, e.g. `- {type: length, params: "
                        "{target: 50}}`)")
    columns = dict(columns or {})
    problems = validate_sources(configs, ["prompt", *columns], workspace)
    if problems:
        raise ChatError("; ".join(problems))
    completions = [r if isinstance(r, list) else [{"role": "assistant", "content": r}] for r in replies]
    return score_completions(configs, messages, completions, workspace, **columns)
