"""What every reward source shares: TRL's calling convention, text extraction and dataset columns.

A source is a callable object with TRL 1.16's reward-function signature
`f(prompts, completions, completion_ids=None, trainer_state=None, **kwargs) -> list[float | None]`, where
kwargs holds the dataset's extra columns (one value per completion) plus TRL's own `log_extra`,
`log_metric` (and `environments` for environment-based runs). Its `__name__` is the metric name TRL logs
(`rewards/<name>/mean`).
"""
from __future__ import annotations

from pathlib import Path

from backend.rewards.spec import RewardSourceConfig

# Keyword arguments TRL adds next to the dataset columns.
TRL_KWARGS = ("trainer_state", "log_extra", "log_metric", "environments", "completion_ids")


class RewardSourceError(ValueError):
    """A reward source that cannot be built or run; the message names the source."""


def content_text(content) -> str:
    """The text of one message's content: a string, or a list of parts ({"type": "text", "text": ...})."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def is_conversation(x) -> bool:
    return isinstance(x, list) and all(isinstance(m, dict) for m in x)


def completion_text(completion) -> str:
    """A completion's text: a plain string, or the last assistant message of a message list
    (all contents joined when no message has the assistant role)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return content_text(completion.get("content"))
    if is_conversation(completion):
        assistant = [m for m in completion if m.get("role") == "assistant"]
        if assistant:
            return content_text(assistant[-1].get("content"))
        return "\n".join(content_text(m.get("content")) for m in completion)
    return str(completion)


def prompt_text(prompt) -> str:
    """A prompt's text: the string, or every message's content joined by newlines."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if is_conversation(prompt):
        return "\n".join(content_text(m.get("content")) for m in prompt)
    return str(prompt)


def as_messages(x, role: str) -> list[dict]:
    if is_conversation(x):
        return list(x)
    if isinstance(x, dict):
        return [x]
    return [{"role": role, "content": "" if x is None else str(x)}]


def source_label(name: str, kind: str) -> str:
    """How errors name a source: reward source 'correct' (numeric_match)."""
    return f"reward source '{name}'" + ("" if name == kind else f" ({kind})")


def dataset_columns(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in TRL_KWARGS}


class RewardFunction:
    """Base of every source: checks TRL's arguments and the result; subclasses implement `score`."""

    gate: RewardFunction | None = None  # the source `when` names: this one scores only where it scores > 0

    def __init__(self, source: RewardSourceConfig, name: str, workspace: Path):
        self.source = source
        self.params = source.settings()
        self.__name__ = name  # TRL's metric name (trl.trainer.utils.get_callable_name)
        self.workspace = Path(workspace)
        self._last: tuple[list, list] | None = None  # (completions, scores) of the last call, for a gated source

    @property
    def label(self) -> str:
        return source_label(self.__name__, self.source.type)

    def __repr__(self) -> str:
        return f"<{self.label}>"

    def __call__(self, prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
        n = len(completions)
        if len(prompts) != n:
            raise RewardSourceError(f"{self.label}: got {len(prompts)} prompts for {n} completions")
        scores = self.score(list(prompts), list(completions), completion_ids=completion_ids,
                            trainer_state=trainer_state, **kwargs)
        if len(scores) != n:  # a bug in a source, not in the data
            raise RewardSourceError(f"{self.label}: returned {len(scores)} scores for {n} completions")
        scores = [None if s is None else float(s) for s in scores]
        if self.gate is not None:
            opened = self.gate.scores_of(prompts, completions, completion_ids, trainer_state, kwargs)
            scores = [s if g is not None and g > 0 else 0.0 for s, g in zip(scores, opened)]
        self._last = (completions, scores)
        return scores

    def scores_of(self, prompts, completions, completion_ids, trainer_state, kwargs) -> list[float | None]:
        """This source's scores of `completions`: those of its last call when it was on the same list (every
        source of a step gets the same list, and a gate is listed first), else scored now."""
        if self._last is not None and self._last[0] is completions:
            return self._last[1]
        return self(prompts, completions, completion_ids=completion_ids, trainer_state=trainer_state, **kwargs)

    def score(self, prompts: list, completions: list, **kwargs) -> list[float | None]:
        raise NotImplementedError

    def column(self, kwargs: dict, name: str, n: int) -> list:
        """The dataset column `name` (one value per completion), or an error naming what is there."""
        columns = dataset_columns(kwargs)
        values = columns.get(name)
        if values is None:
            available = ", ".join(sorted(columns)) or "none besides the prompt"
            raise RewardSourceError(f"{self.label}: the dataset has no column '{name}' (columns available: "
                                    f"{available}); set params.column to one of them")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise RewardSourceError(f"{self.label}: column '{name}' should hold one value per completion, "
                                    f"got {type(values).__name__}")
        values = list(values)
        if len(values) != n:
            raise RewardSourceError(f"{self.label}: column '{name}' has {len(values)} values for {n} completions")
        return values
