"""The run's `data` settings applied to a dataset (the schema defines them once, in backend/config): a sample of
its rows, its columns renamed, a system message. Each says what it did, for the preview and the run log."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backend.data.common import DatasetError, rows

if TYPE_CHECKING:
    import datasets

    from backend.data.formats import FormatInfo


@dataclass(frozen=True)
class DataOptions:
    columns: dict[str, str] = field(default_factory=dict)  # {name: dataset column}
    system: str = ""
    max_samples: int = 0  # 0: every row
    shuffle: bool = False  # before taking max_samples
    chat_template: str = "model"  # a name of backend/data/templates.py; model: the model's own
    mix: str = "concat"  # several datasets: concat | interleave
    mix_weights: tuple[float, ...] = ()  # interleave: the share of each dataset (empty: equal)
    max_row_chars: int = 1_000_000  # 0: no limit
    long_rows: str = "refuse"  # or truncate
    seed: int = 42

    @classmethod
    def of(cls, config) -> DataOptions:
        """A run config's `data` section and seed."""
        d = config.data
        return cls(columns=dict(d.columns), system=d.system, max_samples=d.max_samples, shuffle=d.shuffle,
                   chat_template=d.chat_template, mix=d.mix, mix_weights=tuple(d.mix_weights),
                   max_row_chars=d.max_row_chars, long_rows=d.long_rows, seed=config.seed)


def _chars(value) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_chars(v) for v in value.values())
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    return 0


def _cut(value, budget: list[int]):
    """`value` with its texts cut, in order, to the characters left in `budget` (a one-item list, spent)."""
    if isinstance(value, str):
        kept = value[:max(0, budget[0])]
        budget[0] -= len(kept)
        return kept
    if isinstance(value, dict):  # a message keeps its role: only its texts are cut
        return {k: v if k in _LABELS else _cut(v, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, budget) for v in value]
    return value


_LABELS = ("role", "from", "name", "type")
_NAMED = 5  # rows named in a refusal; the count says how many more


def bound_rows(ds: datasets.Dataset, options: DataOptions, source: str) -> tuple[datasets.Dataset, str | None]:
    """Rows over `max_row_chars` characters refused by row number and size, or (long_rows: truncate) each of
    their texts cut so the row keeps `max_row_chars` in all: the first texts (the prompt) whole, the last (the
    answer) cut. Checked on the file's rows, before any sampling."""
    limit = options.max_row_chars
    if limit <= 0:
        return ds, None
    long: list[tuple[int, int]] = []
    for start in range(0, len(ds), 1000):
        for i, row in enumerate(_row_dicts(ds, start, 1000), start + 1):
            if (n := _chars(row)) > limit:
                long.append((i, n))
    if not long:
        return ds, None
    if options.long_rows == "truncate":
        rows_cut = {i - 1 for i, _ in long}
        ds = ds.map(lambda row, idx: _cut(dict(row), [limit]) if idx in rows_cut else row, with_indices=True,
                    keep_in_memory=True, desc=None)
        return ds, f"{rows(len(long))} over {limit:,} characters cut to {limit:,} (the last texts first)"
    named = ", ".join(f"row {i} has {n:,}" for i, n in long[:_NAMED])
    more = f" (and {len(long) - _NAMED} more)" if len(long) > _NAMED else ""
    raise DatasetError(f"{source}: {rows(len(long))} longer than data.max_row_chars = {limit:,} characters: "
                       f"{named}{more}; shorten or drop them, set data.long_rows: truncate to cut them, or raise "
                       "data.max_row_chars (0: no limit)")


def _row_dicts(ds: datasets.Dataset, start: int, n: int) -> list[dict]:
    batch = ds[start:start + n]
    return [dict(zip(batch, values)) for values in zip(*batch.values())]


def sample(ds: datasets.Dataset, options: DataOptions) -> tuple[datasets.Dataset, str | None]:
    """The first `max_samples` rows, shuffled first with the seed when `shuffle` is on."""
    n = len(ds)
    if options.shuffle:
        ds = ds.shuffle(seed=options.seed, keep_in_memory=True)  # no indices file beside a saved dataset
    if 0 < options.max_samples < n:
        ds = ds.select(range(options.max_samples))
    if len(ds) == n:
        return ds, f"rows shuffled with seed {options.seed}" if options.shuffle else None
    how = f"shuffled with seed {options.seed}" if options.shuffle else "the first ones"
    return ds, f"{len(ds)} of {rows(n)} ({how})"


def map_columns(ds: datasets.Dataset, columns: dict[str, str], source: str) -> tuple[datasets.Dataset, str | None]:
    """Each given column takes its name, replacing a column that had it (the user chose which one it is)."""
    if not columns:
        return ds, None
    names = ds.column_names
    for name, column in columns.items():
        if column not in names:
            raise DatasetError(f"data.columns: {name}={column}, but {source} has no column `{column}`; its "
                               f"columns are [{', '.join(names)}]")
    replaced = [name for name in columns if name in names and name not in columns.values()]
    ds = ds.remove_columns(replaced).rename_columns({column: name for name, column in columns.items()})
    return ds, "columns mapped: " + ", ".join(f"`{column}` as `{name}`" for name, column in columns.items())


def _chat_columns(info: FormatInfo, ds: datasets.Dataset) -> list[str]:
    """Where a conversation starts: `messages`, the prompt, or (pairs without a prompt) both answers."""
    if "messages" in info.columns:
        return ["messages"]
    if "prompt" in ds.column_names:
        return ["prompt"]
    return [c for c in ("chosen", "rejected") if c in info.columns]


def add_system(ds: datasets.Dataset, info: FormatInfo, system: str, source: str
               ) -> tuple[datasets.Dataset, str | None]:
    """`system` as the first message of every conversation that has no system message of its own."""
    if not system.strip():
        return ds, None
    columns = _chat_columns(info, ds)
    if not info.conversational or not columns:
        raise DatasetError(f"data.system: {source} is plain text ({', '.join(f'`{c}`' for c in info.columns)}), "
                           "with no chat to give a system message to; leave data.system empty, or use a "
                           "conversational dataset")
    import datasets

    data = ds.to_dict()
    kept = sum(isinstance(m, list) and bool(m) and m[0].get("role") == "system" for m in data[columns[0]])
    for column in columns:
        data[column] = [m if not isinstance(m, list) or (m and m[0].get("role") == "system")
                        else [{"role": "system", "content": system}, *m] for m in data[column]]
    own = f" ({rows(kept)} keeping {'its' if kept == 1 else 'their'} own)" if kept else ""
    return datasets.Dataset.from_dict(data), f"`data.system` as the system message{own}"
