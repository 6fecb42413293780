"""One bounded cache of loaded models per process: in the UI the chat, the reward playground and reward sources
share it, so the UI never holds more than it can afford however many things were tried.

- at most `capacity` models (env WORKBENCH_MODEL_CACHE_SIZE, default 4: the chat's two sides, a reward model
  and an embedding model); the least recently used goes first;
- while less than `min_free` of the memory is available (env WORKBENCH_MODEL_CACHE_MIN_FREE, default 0.15 of
  RAM, and of GPU memory once CUDA is in use), before a load and after it, older models go too;
- each entry remembers who holds it (a `holder` name): the chat lets go of a model it no longer shows without
  dropping one the playground still uses.

Eviction drops the cache's reference, collects garbage and empties the CUDA cache; a model still in use (a
generation running) is freed when that use ends. Loads are serialised (two at once only fight over memory);
hits never wait for a load.
"""
from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Hashable

from backend.models.load import LoadedModel, load_model
from backend.models.ref import ModelRef

log = logging.getLogger(__name__)

SIZE_ENV, MIN_FREE_ENV = "WORKBENCH_MODEL_CACHE_SIZE", "WORKBENCH_MODEL_CACHE_MIN_FREE"
DEFAULT_SIZE, DEFAULT_MIN_FREE = 4, 0.15


def _setting(name: str, default, kind, low):
    raw = os.environ.get(name, "").strip()
    try:
        value = kind(raw) if raw else default
    except ValueError:
        value = low - 1
    if value < low:
        log.warning("%s=%r is not a valid setting (at least %s); using %s", name, raw, low, default)
        return default
    return value


def free_memory() -> float:
    """The share (0..1) of memory still available: RAM, or GPU memory when that is scarcer and CUDA is in use."""
    import psutil

    ram = psutil.virtual_memory()
    free = ram.available / ram.total
    torch = sys.modules.get("torch")  # never import torch just to ask
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        available, total = torch.cuda.mem_get_info()
        free = min(free, available / total)
    return free


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class _Entry:
    value: object
    holders: set = field(default_factory=set)


class ModelCache:
    """Loaded models by key, least recently used first. `capacity` / `min_free` default to the settings above;
    `free` reports the available share of memory (a parameter so tests can simulate pressure)."""

    def __init__(self, capacity: int | None = None, min_free: float | None = None,
                 free: Callable[[], float] = free_memory):
        self._capacity, self._min_free, self._free = capacity, min_free, free
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self._capacity if self._capacity is not None else _setting(SIZE_ENV, DEFAULT_SIZE, int, 1)

    @property
    def min_free(self) -> float:
        return self._min_free if self._min_free is not None else _setting(MIN_FREE_ENV, DEFAULT_MIN_FREE, float, 0)

    def get(self, key: Hashable, load: Callable[[], object], holder: str = ""):
        """The value cached under `key`, loaded with `load()` the first time; `holder` now holds it."""
        if (entry := self._hit(key, holder)) is not None:
            return entry.value
        with self._load_lock:
            if (entry := self._hit(key, holder)) is not None:  # loaded by another thread meanwhile
                return entry.value
            self._shrink(room_for=1)
            value = load()
            with self._lock:
                self._entries[key] = _Entry(value, {holder})
            self._shrink(room_for=0, keep=key)  # the load itself may have used up the memory
            return value

    def _hit(self, key, holder) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                entry.holders.add(holder)
            return entry

    def _shrink(self, room_for: int, keep: Hashable = None) -> None:
        """Evict the least recently used (never `keep`) until `room_for` more fit and enough memory is free."""
        while True:
            with self._lock:
                older = next((k for k in self._entries if k != keep), None)
                if older is None:
                    return
                if len(self._entries) + room_for <= self.capacity and self._free() >= self.min_free:
                    return
                del self._entries[older]
            log.info("model cache: evicted %s", older)
            _release_memory()

    def keep_only(self, keys, holder: str) -> int:
        """`holder` lets go of every model it holds but `keys`; a model nobody holds any more is evicted.
        Returns how many models `holder` let go of."""
        keep, gone, evicted = set(keys), 0, False
        with self._lock:
            for key, entry in list(self._entries.items()):
                if holder in entry.holders and key not in keep:
                    entry.holders.discard(holder)
                    gone += 1
                    if not entry.holders:
                        del self._entries[key]
                        evicted = True
        if evicted:
            _release_memory()
        return gone

    def release(self, holder: str) -> int:
        return self.keep_only((), holder)

    def is_loaded(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def loaded(self, holder: str | None = None) -> list:
        """The keys, least recently used first (only those `holder` holds, when given)."""
        with self._lock:
            return [k for k, e in self._entries.items() if holder is None or holder in e.holders]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
        _release_memory()


MODELS = ModelCache()  # this process's cache


def model_key(ref: ModelRef, **options) -> tuple:
    """A cache key for `ref` loaded with load_model's `options` (defaults spelled out, so equal loads share)."""
    settings = {"task": ref.task or "causal", "device": "cpu", "dtype": "torch.float32", "merge": False,
                "num_labels": 1}
    settings.update({k: v for k, v in options.items() if k != "progress" and (v is not None or k == "num_labels")})
    return (ref.base, ref.adapter, *sorted((k, str(v)) for k, v in settings.items()))


def cached_model(ref: ModelRef, holder: str = "", *, cache: ModelCache | None = None,
                 loader: Callable[..., LoadedModel] = load_model, **options) -> LoadedModel:
    """`loader(ref, **options)` (default load_model) through the cache: each distinct load happens once."""
    return (cache or MODELS).get(model_key(ref, **options), lambda: loader(ref, **options), holder)
