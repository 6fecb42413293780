"""Dataset formats: which of a mode's formats (its registry entry) a dataset is in, and a check of every row
against it, naming the row, the column and what was expected."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backend.data.common import FLAG_COLUMNS, MESSAGE_COLUMNS, ROLES, TEXT_COLUMNS, DatasetError, value_kind
from backend.data.common import rows as count_rows
from backend.core.mode_registry import MODES

if TYPE_CHECKING:
    import datasets



@dataclass
class FormatInfo:
    name: str
    columns: list[str]
    conversational: bool
    num_rows: int
    adapter: str | None = None  # what converting it into this format did, when it came in another one
    passed: list[str] = field(default_factory=list)  # other columns the trainer reads (ShareGPT's `tools`)
    mapped: dict[str, str] = field(default_factory=dict)  # data.columns applied first: {name: dataset column}
    applied: list[str] = field(default_factory=list)  # what the run's data settings did, one phrase each

    def summary(self, rows: int | None = None) -> str:
        """One line for logs and the CLI: the rows (`rows` when fewer are trained on, after a hold-out), the
        format and what converting it did."""
        kind = "conversational" if self.conversational else "plain text"
        rows = self.num_rows if rows is None else rows
        line = f"{count_rows(rows)}, {self.name} format ({format_label(self.columns)}, {kind})"
        if self.applied:
            line += "; " + "; ".join(self.applied)
        return f"{line}; converted: {self.adapter}" if self.adapter else line


def format_label(columns: list[str]) -> str:
    return " + ".join(columns)


def detect_format(ds: datasets.Dataset, mode: str = "sft", source: str = "dataset") -> FormatInfo:
    if mode not in MODES:
        raise DatasetError(f"unknown training mode '{mode}'; known: {', '.join(MODES)}")
    present = set(ds.column_names)
    for name, columns in MODES[mode].formats:
        if present.issuperset(columns):
            conversational = name == "messages" or (len(ds) > 0 and isinstance(ds[0][columns[0]], list))
            return FormatInfo(name=name, columns=list(columns), conversational=conversational,
                              num_rows=len(ds))
    raise DatasetError(_no_format_message(ds.column_names, mode, source))


def _example_row(columns: list[str]) -> str:
    return json.dumps({c: True if c in FLAG_COLUMNS else "..." for c in columns})


def _no_format_message(names: list[str], mode: str, source: str) -> str:
    """Names the columns the closest format lacks, and shows what the mode needs."""
    formats = [list(columns) for _, columns in MODES[mode].formats]
    M = mode.upper()
    closest = min(formats, key=lambda columns: (len(set(columns) - set(names)), -len(set(columns) & set(names))))
    missing = [c for c in closest if c not in names]
    message = f"{source}: no {M} format found; columns are [{', '.join(names)}]"
    if len(formats) == 1 or len(missing) < len(closest):  # say what is missing when one format is nearly there
        message += ", missing " + ", ".join(f"`{c}`" for c in missing)
        if len(formats) > 1:
            message += f" for {format_label(closest)}"
    if len(formats) == 1:
        optional = {("chosen", "rejected"): " (+ optional prompt)",
                    ("prompt",): " (other columns, such as an answer, are passed to the reward sources)"}
        optional = optional.get(tuple(closest), "")
        return f"{message}. {M} needs {format_label(closest)}{optional}, e.g. {_example_row(closest)}"
    return f"{message}. {M} needs one of: {' | '.join(format_label(c) for c in formats)}"


def check_messages(value, *, need_assistant: bool) -> str | None:
    """None if `value` is a usable list of chat messages, else what is wrong with it."""
    if not isinstance(value, list):
        return f"is {value_kind(value)}, not a list of messages"
    if not value:
        return "is an empty list of messages"
    for j, message in enumerate(value, 1):
        if not isinstance(message, dict):
            return f"message {j} is {value_kind(message)}, not a {{role, content}} object"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            return f"message {j} has role {role!r}; expected one of {', '.join(ROLES)}"
        if not isinstance(content, str) and not (content is None and message.get("tool_calls")):
            return f"message {j} ({role}) has content of type {value_kind(content)}; expected a string"
    if need_assistant and not any(m.get("role") == "assistant" and m.get("content") for m in value):
        return "has no assistant message with content (nothing to learn from)"
    return None


def _expected(column: str) -> str:
    if column in MESSAGE_COLUMNS:
        return "a list of {role, content} messages"
    if column in TEXT_COLUMNS:
        return "a non-empty string"
    if column in FLAG_COLUMNS:
        return "true/false (or 1/0)"
    return "a non-empty string or a list of messages"


def _check_cell(column: str, value) -> str | None:
    if value is None or value == "" or (isinstance(value, str) and not value.strip()):
        return "is empty" if value is not None else "is missing"
    if column in FLAG_COLUMNS:
        return None if isinstance(value, bool) or value in (0, 1) else f"is {value!r}"
    if column in MESSAGE_COLUMNS:
        return check_messages(value, need_assistant=True)  # a messages column is the whole example
    if isinstance(value, str):
        return None
    if column in TEXT_COLUMNS:
        return f"is {value_kind(value)}"
    if isinstance(value, list):
        return check_messages(value, need_assistant=False)
    return f"is {value_kind(value)}"


def validate_rows(ds: datasets.Dataset, info: FormatInfo, mode: str, source: str = "dataset",
                  limit: int | None = None) -> None:
    """Check every row (or the first `limit`) against the format; DatasetError on the first bad one."""
    columns = list(info.columns)
    if info.name == "preference" and "prompt" not in columns and "prompt" in ds.column_names:
        columns.insert(0, "prompt")  # optional for reward models, but checked when present
    n = len(ds) if limit is None else min(limit, len(ds))
    values = ds.select_columns(columns)[:n]  # plain lists: indexing a Column row by row is slow
    kinded = [c for c in columns if c not in FLAG_COLUMNS]
    where = f"the {mode.upper()} {format_label(info.columns)} format"
    for i in range(n):
        for column in columns:
            problem = _check_cell(column, values[column][i])
            if problem:
                raise DatasetError(f"{source} row {i + 1}: column `{column}` {problem}; {where} needs "
                                   f"{_expected(column)}")
        kinds = {c: isinstance(values[c][i], list) for c in kinded}
        if len(set(kinds.values())) > 1:
            lists = [c for c, is_list in kinds.items() if is_list]
            strings = [c for c, is_list in kinds.items() if not is_list]
            raise DatasetError(f"{source} row {i + 1}: column `{lists[0]}` is a list of messages but "
                               f"`{strings[0]}` is a plain string; {where} needs them all of one kind")
