"""What every adapter shares: the dataset's columns as plain lists, read cell by cell with each problem named
by row, column and what was expected; and the messages adapters build."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.data.common import DatasetError, value_kind

if TYPE_CHECKING:
    import datasets


def message(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def user(content: str) -> dict:
    return message("user", content)


def assistant(content: str) -> dict:
    return message("assistant", content)


class Table:
    """A dataset's columns as lists (indexing an Arrow row at a time is slow), with its source and the format
    being read named in every row error."""

    def __init__(self, ds: datasets.Dataset, source: str, fmt: str):
        self.columns: dict[str, list] = ds.to_dict()
        self.n = len(ds)
        self.source = source
        self.fmt = fmt

    def has(self, column: str) -> bool:
        """The column exists and holds at least one value (an all-empty `system` column counts as absent)."""
        return any(v not in (None, "", []) for v in self.columns.get(column, ()))

    def cell(self, i: int, column: str):
        return self.columns[column][i] if column in self.columns else None

    def error(self, i: int, column: str, problem: str, expected: str) -> DatasetError:
        return DatasetError(f"{self.source} row {i + 1}: column `{column}` {problem}; {self.fmt} needs "
                            f"{expected} there")

    def text(self, i: int, column: str, expected: str = "a non-empty string", required: bool = True) -> str | None:
        """The cell as a string; None for an empty optional one; DatasetError for an empty required one."""
        value = self.cell(i, column)
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                raise self.error(i, column, "is missing" if value is None else "is empty", expected)
            return None
        if not isinstance(value, str):
            raise self.error(i, column, f"is {value_kind(value)}", expected)
        return value

    def flag(self, i: int, column: str) -> bool:
        value = self.cell(i, column)
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise self.error(i, column, "is missing" if value is None else f"is {value!r}", "true/false (or 1/0)")

    def rest(self, consumed: tuple[str, ...]) -> dict[str, list]:
        """The columns an adapter leaves alone (kept for modes that pass extra columns to the trainer)."""
        return {c: v for c, v in self.columns.items() if c not in consumed}


@dataclass(frozen=True)
class Adapter:
    """One source format: the columns that identify it, what it needs and reads, the registry format it
    produces, how it converts (columns → new columns) and the sentence that says what it did."""
    name: str  # as its users call it: "alpaca", "ShareGPT"
    marker: tuple[str, ...]  # columns that say a dataset is in this format
    produces: str  # a format name from the mode registry ("messages", "preference", ...)
    convert: Callable[[Table], dict[str, list]]
    describe: Callable[[Table], str]
    needs: tuple[str, ...] = ()  # further columns it cannot do without
    reads: tuple[str, ...] = ()  # optional columns it consumes
    fits: Callable[[dict], bool] = lambda row: True  # tells formats with the same columns apart by row 1's values

    @property
    def consumed(self) -> tuple[str, ...]:
        return self.marker + self.needs + self.reads

    @property
    def hint(self) -> str:
        """Its columns, e.g. "instruction + output (+ input, system, history)"."""
        optional = f" (+ {', '.join(self.reads)})" if self.reads else ""
        return " + ".join(self.marker + self.needs) + optional
