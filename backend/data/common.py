"""What every part of the data layer shares: its error, and the kinds of columns and values it names."""
from __future__ import annotations

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_COLUMNS = ("messages",)  # always message lists
TEXT_COLUMNS = ("text",)  # always plain strings
FLAG_COLUMNS = ("label",)  # KTO: desirable or not
PASSED_COLUMNS = ("tools",)  # read by TRL's SFTTrainer beside the format's (function schemas for the template)


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the source, row and column."""


def value_kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def short(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
