"""Rule-based sources: plain Python over the completion text, no model, microseconds per completion."""
from __future__ import annotations

import math
import re

from backend.rewards.base import RewardFunction, completion_text
from backend.rewards.spec import regex_flags

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
# A number: optional sign, thousands separators or plain digits, decimals, exponent ("5kg" counts).
# Not after a letter ("x2", "H2O"), and a minus right after a digit is a range or a subtraction
# ("10-3" gives 10 and 3), not a sign.
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\d)"
                     r"|(?<![\w.])[-+]?\.\d+(?!\d)")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})


def answer_text(text: str) -> str | None:
    """The inside of the last <answer>…</answer>, or None when there is none."""
    found = _ANSWER.findall(text)
    return found[-1] if found else None


def extract_number(text: str, position: str = "last") -> float | None:
    """The number a completion answers with: inside its last <answer></answer> if present, else the last (or
    first) number in the text. Handles 1,234.5, -7, .5, 1e3 and a Unicode minus; None when there is no number."""
    text = text.translate(_MINUS_SIGNS)
    inner = answer_text(text)
    numbers = _NUMBER.findall(inner if inner is not None else text)
    if not numbers:
        return None
    value = float(numbers[0 if position == "first" else -1].replace(",", ""))
    return value if math.isfinite(value) else None


def _normalise(text: str, ignore_case: bool, whitespace: bool) -> str:
    if whitespace:
        text = " ".join(text.split())
    return text.casefold() if ignore_case else text


class LengthReward(RewardFunction):
    """1 at the target length, falling linearly to 0 at target × (1 ± tolerance), 0 beyond."""

    def measure(self, text: str, ids) -> int:
        unit = self.params.unit
        if unit == "words":
            return len(text.split())
        if unit == "characters":
            return len(text)
        return len(ids) if ids is not None else math.ceil(len(text) / 4)  # ~4 characters per token

    def score(self, prompts, completions, completion_ids=None, **kwargs):
        target, width = self.params.target, self.params.tolerance * self.params.target
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        return [max(0.0, 1.0 - abs(self.measure(completion_text(c), i) - target) / width)
                for c, i in zip(completions, ids)]


class RegexReward(RewardFunction):
    """1 if the completion matches the pattern (anywhere, or as a whole), else 0."""

    def __init__(self, *args):
        super().__init__(*args)
        self.pattern = re.compile(self.params.pattern, regex_flags(self.params.flags))

    def score(self, prompts, completions, **kwargs):
        if self.params.match == "fullmatch":
            return [float(self.pattern.fullmatch(completion_text(c).strip()) is not None) for c in completions]
        return [float(self.pattern.search(completion_text(c)) is not None) for c in completions]


class ExactMatchReward(RewardFunction):
    """1 if the completion (or its <answer>) equals the reference column after normalising, else 0.
    Rows whose reference is None are not scored (None)."""

    def score(self, prompts, completions, **kwargs):
        p = self.params
        refs = self.column(kwargs, p.column, len(completions))
        scores = []
        for c, ref in zip(completions, refs):
            if ref is None:
                scores.append(None)
                continue
            text = completion_text(c)
            if p.extract_answer and (inner := answer_text(text)) is not None:
                text = inner
            same = _normalise(text, p.ignore_case, p.normalize_whitespace) == \
                _normalise(completion_text(ref), p.ignore_case, p.normalize_whitespace)
            scores.append(float(same))
        return scores


class NumericMatchReward(RewardFunction):
    """1 if the completion's number equals the reference's within the tolerance, else 0 (also when the
    completion has no number). Rows whose reference is None or holds no number are not scored (None)."""

    def score(self, prompts, completions, **kwargs):
        refs = self.column(kwargs, self.params.column, len(completions))
        scores = []
        for c, ref in zip(completions, refs):
            expected = _reference_number(ref)
            if expected is None:
                scores.append(None)
                continue
            got = extract_number(completion_text(c), self.params.position)
            scores.append(float(got is not None and abs(got - expected) <= self.params.tolerance))
        return scores


def _reference_number(ref) -> float | None:
    if ref is None or isinstance(ref, bool):
        return None
    if isinstance(ref, (int, float)):
        return float(ref) if math.isfinite(ref) else None
    return extract_number(completion_text(ref))


class BlocklistReward(RewardFunction):
    """−penalty per blocked keyword occurrence (or once if any): whole words, case-insensitive."""

    def __init__(self, *args):
        super().__init__(*args)
        words = sorted({k.strip() for k in self.params.keywords if k.strip()}, key=len, reverse=True)
        # Word boundaries that also work for keywords starting or ending with punctuation; inner spaces
        # match any whitespace.
        alternatives = "|".join(r"\s+".join(re.escape(part) for part in w.split()) for w in words)
        self.pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)

    def score(self, prompts, completions, **kwargs):
        scores = []
        for c in completions:
            hits = len(self.pattern.findall(completion_text(c)))
            if self.params.count == "any":
                hits = min(hits, 1)
            scores.append(0.0 - self.params.penalty * hits)  # 0.0, not -0.0
        return scores


def repeated_fraction(text: str, n: int) -> float:
    """Share of the word n-grams that repeat an earlier one (0 for fewer than n words)."""
    words = re.findall(r"\w+", text.casefold())
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


class RepetitionReward(RewardFunction):
    """−(fraction of repeated word n-grams): 0 for text that never repeats itself, near −1 for a loop."""

    def score(self, prompts, completions, **kwargs):
        return [0.0 - repeated_fraction(completion_text(c), self.params.n) for c in completions]
