"""The chat playground: two models answer the same prompts side by side, streamed token by token.

A model to chat with is a base model (the embedded one, a local folder or a Hub id), a base plus the LoRA
adapter of a finished run, or a merged export. `ChatModelCache` keeps at most two loaded (the two selected)
and drops the others when the selection changes, so a model loads once and is reused between prompts.
`stream_replies` runs each model's `generate` in its own thread with a TextIteratorStreamer and merges their
text into one stream of snapshots, so one UI event shows both answers growing at once without blocking anything
else. Reward sources score the answers through `backend.rewards.score_completions`, as in training.

No gradio here; torch and transformers load only when a model does.
"""
from __future__ import annotations

import gc
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend.modes.registry import mode_spec
from backend.store import RunStore

RUN_PREFIX = "run:"
MAX_NEW_TOKENS = 4096


class ChatError(ValueError):
    """A model or setting the chat cannot use; the message says what to pick instead."""


# ---- what can be chatted with ----

@dataclass(frozen=True)
class ChatModel:
    """A base model spec and, optionally, a PEFT adapter folder applied on it."""

    model: str
    adapter: str | None = None
    label: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.model, self.adapter)


def model_choices(store: RunStore) -> list[tuple[str, str]]:
    """(label, value) pairs: base models, finished runs' adapters (not reward models), merged exports."""
    from backend.export import ExportError, locate, merged_exports
    from backend.models import EMBEDDED_MODEL

    runs = store.list_runs()
    bases = list(dict.fromkeys([EMBEDDED_MODEL, *(r.config.model for r in runs)]))
    choices = [(f"base · {_short(b)}", b) for b in bases]
    for run in runs:
        if run.active or not mode_spec(run.mode).writes_answers:
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


def chat_model(value: str, store: RunStore) -> ChatModel:
    """The model a choice (or a typed model spec) stands for."""
    from backend.export import ExportError, locate

    value = (value or "").strip()
    if not value:
        raise ChatError("no model selected: pick a base model, a finished run or a merged export")
    if not value.startswith(RUN_PREFIX):
        from backend.export import is_export

        folder = Path(value).expanduser()
        exported = folder.is_dir() and is_export(folder)
        label = f"export · {folder.name}" if exported else f"base · {_short(value)}"
        return ChatModel(value, None, label)
    try:
        art = locate(store, value[len(RUN_PREFIX):])
    except ExportError as e:
        raise ChatError(str(e)) from None
    if art.task != "causal":
        raise ChatError(f"run {art.run.id} trained a reward model (rm): it scores text and cannot chat; use it as a "
                        "reward source, and pick a policy run (sft, dpo, kto, grpo, rloo) here")
    label = f"{art.run.name} ({art.run.mode})"
    if art.kind == "full":
        return ChatModel(str(art.folder), None, label)
    return ChatModel(art.base_model, str(art.folder), label)


# ---- loading, with a small cache ----

@dataclass
class LoadedModel:
    spec: ChatModel
    model: object
    tokenizer: object
    device: str
    # a fast tokenizer mutates its padding/truncation state while encoding: one encode at a time
    encode_lock: threading.Lock = field(default_factory=threading.Lock)


def load_chat_model(spec: ChatModel) -> LoadedModel:
    import torch

    from backend.models import load_causal_lm, load_tokenizer, resolve_model

    path = resolve_model(spec.model)
    adapter = Path(spec.adapter) if spec.adapter else None
    tokenizer = load_tokenizer(adapter if adapter and (adapter / "tokenizer_config.json").is_file() else path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    model = load_causal_lm(path, dtype=dtype)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))  # unmerged: exactly the model the run trained
    model.to(device).eval()
    return LoadedModel(spec, model, tokenizer, device)


class ChatModelCache:
    """At most `capacity` loaded models keyed by (model, adapter); the least recently used goes first.

    Loads are serialised (two at once would only fight over memory); generation is not: the two sides generate
    in parallel, and a model picked on both sides loads once and serves both (inference only reads weights).
    """

    def __init__(self, capacity: int = 2, loader=load_chat_model):
        self.capacity = capacity
        self._loader = loader
        self._lock = threading.Lock()
        self._models: OrderedDict[tuple, LoadedModel] = OrderedDict()

    def get(self, spec: ChatModel) -> LoadedModel:
        with self._lock:
            if spec.key in self._models:
                self._models.move_to_end(spec.key)
                return self._models[spec.key]
            while len(self._models) >= self.capacity:
                self._models.popitem(last=False)
                gc.collect()
            loaded = self._loader(spec)
            self._models[spec.key] = loaded
            return loaded

    def is_loaded(self, spec: ChatModel) -> bool:
        return spec.key in self._models

    def keep_only(self, specs) -> int:
        """Release every model but `specs` (the current selection); returns how many were released."""
        keep = {s.key for s in specs if s is not None}
        with self._lock:
            gone = [k for k in self._models if k not in keep]
            for k in gone:
                del self._models[k]
        if gone:
            gc.collect()
            _empty_cuda_cache()
        return len(gone)

    def loaded(self) -> list[tuple]:
        return list(self._models)


def _empty_cuda_cache() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


MODELS = ChatModelCache()


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


def conversation(system: str | None, history: list[dict], prompt: str | None = None) -> list[dict]:
    """The messages a model sees: the system prompt (if any), the earlier turns, the new user prompt."""
    messages = [{"role": "system", "content": system.strip()}] if system and system.strip() else []
    messages += [{"role": m["role"], "content": m["content"]} for m in history if m["role"] in ("user", "assistant")]
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


# ---- streaming ----

@dataclass
class Reply:
    text: str = ""
    done: bool = False
    error: str | None = None
    tokens: int = 0
    started: float = field(default_factory=time.time)
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


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
            self.events.put((self.side, text, stream_end, None, self.tokens))

    return SideStreamer


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
        events.put((side, "", True, f"{type(e).__name__}: {e}", streamer.tokens))


def stream_replies(jobs: list[tuple[LoadedModel, list[dict]] | None], sampling: Sampling,
                   min_interval: float = 0.05, interval_per_kchar: float = 0.0) -> Iterator[list[Reply | None]]:
    """Generate an answer to each (model, messages) job at once, one thread each; yields snapshots of every
    reply (None for a None job) as text arrives, and a last one when all are done. Snapshots are at least
    `min_interval` s apart, plus `interval_per_kchar` s per 1000 characters written so far (at most 1 s): a
    browser re-renders each answer in full on every update, so a long answer must update less often or the page
    falls behind. Closing the iterator early (the page went away) stops the generation threads at their next
    token."""
    sampling.check()
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    SideStreamer = _streamer_class()
    replies = [Reply() if job else None for job in jobs]
    threads = []
    for side, job in enumerate(jobs):
        if job is None:
            continue
        loaded, messages = job
        streamer = SideStreamer(loaded.tokenizer, side, events)
        t = threading.Thread(target=_generate, args=(loaded, messages, sampling, streamer, stop, events, side),
                             daemon=True, name=f"chat-generate-{side}")
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
            for side, text, end, error, tokens in events_now:
                r = replies[side]
                r.text += text
                r.tokens = tokens
                r.seconds = time.time() - r.started
                if error:
                    r.error = error
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

def score_replies(sources, messages: list[list[dict]], replies: list[str], workspace: str | Path,
                  columns: dict | None = None) -> dict:
    """Each reply scored as a training step would score it for its conversation (prompt messages):
    {"sources": {name: [score, ...]}, "total": [...]}, one entry per reply."""
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
    completions = [[{"role": "assistant", "content": r}] for r in replies]
    return score_completions(configs, messages, completions, workspace, **columns)
