"""What labeling stores: sessions, items, labels and the settings of the generator, as plain records read from
the label tables; the limits and choices every other part checks against."""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import ClassVar

MODES = ("pair", "single")
PAIR_CHOICES = ("a", "b", "tie", "both_bad")
# "unsafe" is a thumbs down that also tags the answer as unwanted content: the cost-classifier export's positives.
SINGLE_CHOICES = ("up", "down", "unsafe")
CHOICE_NAMES = {"a": "A better", "b": "B better", "tie": "tie", "both_bad": "both bad", "up": "thumbs up",
                "down": "thumbs down", "unsafe": "unsafe"}
EXPORT_FORMATS = ("dpo", "kto", "sft", "cost")
STALE_ASSIGNMENT_S = 600.0  # an item claimed this long ago without a label may be given to someone else
LABELS_PREFIX = "labels:"  # a dataset spec, labels:<session id>: a session exported for the run's mode
MAX_PROMPTS = 10_000
MAX_NOTE = 2000
PROMPT_FILE_TYPES = (".txt", ".jsonl", ".json", ".csv", ".parquet")


class LabelError(ValueError):
    """A labeling request that cannot be done; the message says what to change."""


@dataclass
class GenerationSettings:
    max_new_tokens: int = 64  # short on purpose: a CPU writes ~8 tokens/s; raise it on a GPU
    temperature_a: float = 0.8
    temperature_b: float = 0.8
    top_p: float = 0.95
    seed: int = 0
    labels_per_item: int = 1  # >1: several annotators label each item (agreement in the summary)
    lookahead: int = 8  # items generated ahead of the labelers; 0 generates every item at once

    LIMITS: ClassVar[dict] = {"max_new_tokens": (1, 4096), "temperature_a": (0.0, 5.0), "temperature_b": (0.0, 5.0),
              "top_p": (0.01, 1.0), "seed": (0, 2**31 - 1), "labels_per_item": (1, 20), "lookahead": (0, 100_000)}

    @classmethod
    def build(cls, **values) -> "GenerationSettings":
        """Settings from loose values (None: the default); LabelError names every value out of range."""
        out, errors = {}, []
        for name, (lo, hi) in cls.LIMITS.items():
            value = values.get(name)
            if value is None or value == "":
                continue
            kind = float if isinstance(lo, float) else int
            try:
                number = float(value)
                value = number if kind is float else int(number) if number.is_integer() else None
            except (TypeError, ValueError):
                value = None
            if value is None or not lo <= value <= hi:
                errors.append(f"{name}: {values.get(name)!r} is not {'a number' if kind is float else 'a whole number'}"
                              f" from {lo} to {hi}")
                continue
            out[name] = value
        if errors:
            raise LabelError("; ".join(errors))
        return cls(**out)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class LabelSession:
    id: str
    name: str
    mode: str
    model_a: str
    model_b: str | None
    prompt_source: str
    settings: GenerationSettings
    created_at: float
    status: str
    gen_pid: int | None = None
    gen_started_at: float | None = None
    gen_heartbeat_at: float | None = None
    gen_message: str | None = None
    error: str | None = None

    @property
    def choices(self) -> tuple[str, ...]:
        return PAIR_CHOICES if self.mode == "pair" else SINGLE_CHOICES


@dataclass
class LabelItem:
    id: int
    session_id: str
    idx: int
    prompt: object  # a string or a list of messages
    answer_a: str | None
    answer_b: str | None
    source_a: dict
    source_b: dict
    swapped: bool
    status: str
    assigned_to: str | None = None
    assigned_at: float | None = None
    generated_at: float | None = None


@dataclass
class Label:
    id: int
    item_id: int
    session_id: str
    annotator: str
    client: str
    choice: str
    edited_text: str | None
    note: str | None
    created_at: float
    undone: bool


@dataclass
class SessionProgress:
    total: int  # items (prompts)
    generated: int  # items with answers
    labels: int  # active labels
    labeled_items: int  # items with all the labels they need
    remaining: int  # labels still to give (labels_per_item per item, minus those given)
    ready_ahead: int  # generated items that still need a label
    by_choice: dict[str, int] = field(default_factory=dict)
    annotators: dict[str, int] = field(default_factory=dict)
    seconds_per_item: float | None = None  # recent generation speed


@dataclass
class ExportSummary:
    fmt: str
    conversational: bool
    rows: int = 0
    items: int = 0  # labeled items considered
    decisions: dict[str, int] = field(default_factory=dict)  # one per item (the majority choice)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> items (or answers) left out
    kept: dict[str, int] = field(default_factory=dict)  # ties / both bad exported, as the user chose
    edited: int = 0  # rows that use a labeler's edited answer
    path: str | None = None

    def text(self) -> str:
        kind = "conversational" if self.conversational else "plain text"
        what = "cost-classifier pairs" if self.fmt == "cost" else f"{self.fmt.upper()} rows"
        parts = [f"{self.rows} {what} ({kind}) from {self.items} labeled prompts"]
        if self.kept:
            parts.append("kept: " + ", ".join(counted(n, k) for k, n in self.kept.items()))
        dropped = {k: n for k, n in self.dropped.items() if n}
        parts.append("dropped: " + (", ".join(counted(n, k) for k, n in dropped.items()) if dropped else "none"))
        if self.edited:
            parts.append(f"{self.edited} edited {'answer' if self.edited == 1 else 'answers'} used")
        return "; ".join(parts)


def counted(n: int, what: str) -> str:
    """Like "1 tie", "2 ties" or "1 both bad"."""
    singular = {"ties": "tie", "disagreements": "disagreement", "empty answers": "empty answer"}
    return f"{n} {singular.get(what, what) if n == 1 else what}"


def new_session_id() -> str:
    return "lab-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def loads(text, default=None):
    if text is None:
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


def session_from_row(row) -> LabelSession:
    d = dict(row)
    d["settings"] = GenerationSettings(**{k: v for k, v in loads(d["settings"], {}).items()
                                          if k in GenerationSettings.__dataclass_fields__})
    return LabelSession(**d)


def item_from_row(row) -> LabelItem:
    d = dict(row)
    d["prompt"] = loads(d["prompt"], d["prompt"])
    d["source_a"] = loads(d["source_a"], {}) or {}
    d["source_b"] = loads(d["source_b"], {}) or {}
    d["swapped"] = bool(d["swapped"])
    return LabelItem(**d)


def label_from_row(row) -> Label:
    d = dict(row)
    d["undone"] = bool(d["undone"])
    return Label(**d)


def prompt_text(prompt) -> str:
    if isinstance(prompt, list):
        return "\n\n".join(str(m.get("content") or "") for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def clean_text(text, limit: int | None = None) -> str | None:
    text = (text or "").strip()
    if not text:
        return None
    return text[:limit] if limit else text
