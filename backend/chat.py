"""The chat playground: two models answer the same prompts side by side, streamed token by token.

A model to chat with is a base model (the embedded one, a local folder or a Hub id), a base plus the LoRA
adapter of a finished run, or an export (`backend.models.ModelRef`). The models live in the process's bounded
model cache; the chat lets go of those no longer selected, so a model loads once and is reused between prompts.
`stream_replies` runs each model's `generate` in its own thread with a TextIteratorStreamer and merges their
text into one stream of snapshots, so one UI event shows both answers growing at once without blocking anything
else. Reward sources score the answers through `backend.rewards.score_completions`, as in training.

No gradio here; torch and transformers load only when a model does.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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
