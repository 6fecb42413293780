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
    seed: int = 42

    @classmethod
    def of(cls, config) -> DataOptions:
        """A run config's `data` section and seed."""
        d = config.data
        return cls(columns=dict(d.columns), system=d.system, max_samples=d.max_samples, shuffle=d.shuffle,
                   chat_template=d.chat_template, mix=d.mix, mix_weights=tuple(d.mix_weights), seed=config.seed)


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
