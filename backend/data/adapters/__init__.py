"""Datasets as users already have them (alpaca, ShareGPT, LLaMA-Factory's preference and KTO files, implicit
prompts, Anthropic HH, UltraFeedback's mixed kinds, GSM8K), converted into one of the mode's TRL formats.

Only a dataset in none of the mode's own formats is converted, or one whose columns are a known format's that
include the mode's own and more (LLaMA-Factory's `conversations` + `chosen` + `rejected` for a reward model).
The format is told by its columns, and where two formats share columns, by row 1's values; the most specific
match wins (ShareGPT preference data over plain ShareGPT). A dataset that two formats fit for the mode, or that
one format fits only for other modes, is refused with its columns named, never guessed at. What the conversion
did is one sentence in FormatInfo.adapter.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from backend.data.adapters.alpaca import ALPACA, ALPACA_KTO, ALPACA_PREFERENCE
from backend.data.adapters.gsm8k import QUESTIONS
from backend.data.adapters.preference import ANTHROPIC_HH, PAIRS, normalise_kinds, unpair
from backend.data.adapters.sharegpt import LLAMAFACTORY_KTO, SHAREGPT, SHAREGPT_KTO, SHAREGPT_PREFERENCE
from backend.data.adapters.table import Adapter, Table
from backend.data.common import FLAG_COLUMNS, PASSED_COLUMNS, DatasetError, short
from backend.data.formats import FormatInfo, detect_format
from backend.core.mode_registry import MODES

if TYPE_CHECKING:
    import datasets

ADAPTERS: tuple[Adapter, ...] = (ALPACA, ALPACA_PREFERENCE, ALPACA_KTO, SHAREGPT, SHAREGPT_PREFERENCE,
                                 SHAREGPT_KTO, LLAMAFACTORY_KTO, PAIRS, ANTHROPIC_HH, QUESTIONS)

__all__ = ["ADAPTERS", "Adapter", "conform"]


def _format_names(mode: str) -> set[str]:
    return {name for name, _ in MODES[mode].formats}


def converts_for(adapter: Adapter, mode: str) -> bool:
    """Its output trains `mode`: directly, or pairs unpaired for a mode that trains on single rated answers."""
    names = _format_names(mode)
    return adapter.produces in names or (adapter.produces == "preference" and "unpaired_preference" in names)


def _candidates(ds: datasets.Dataset, mode: str) -> tuple[list[Adapter], list[Adapter]]:
    """(the most specific formats whose columns the dataset has, those of them that convert for `mode`)."""
    present, row = set(ds.column_names), ds[0]
    matched = [a for a in ADAPTERS if present.issuperset(a.marker) and a.fits(row)]
    matched = [a for a in matched if not any(set(a.marker) < set(b.marker) for b in matched)]
    return matched, [a for a in matched if converts_for(a, mode)]


def _one(ds: datasets.Dataset, source: str, fitting: list[Adapter]) -> Adapter:
    """The single candidate, with the columns it needs; DatasetError naming the columns otherwise."""
    columns = f"columns are [{', '.join(ds.column_names)}]"
    if len(fitting) > 1:
        both = " and ".join(f"{a.name} ({a.hint})" for a in fitting)
        raise DatasetError(f"{source}: {columns}, which fit both {both}; keep the columns of one format only")
    (adapter,) = fitting
    if missing := [c for c in adapter.needs if c not in ds.column_names]:
        raise DatasetError(f"{source}: {columns}, which look like {adapter.name} (`{adapter.marker[0]}`), but "
                           f"{', '.join(f'`{c}`' for c in missing)} is missing; {adapter.name} needs {adapter.hint}")
    return adapter


def choose(ds: datasets.Dataset, mode: str, source: str, native: DatasetError) -> Adapter:
    """The one adapter for a dataset in none of the mode's formats, or DatasetError saying why there is none
    (`native`: why it is in none of them)."""
    matched, fitting = _candidates(ds, mode)
    if not fitting and matched:
        modes = ", ".join(m.upper() for m in MODES if converts_for(matched[0], m))
        raise DatasetError(f"{native}; these columns are {matched[0].name} data ({matched[0].hint}), "
                           f"which is converted for {modes} only")
    if not fitting:
        known = [f"{a.name} ({a.hint})" for a in ADAPTERS if converts_for(a, mode)]
        raise DatasetError(f"{native}; or one converted on the way: {' | '.join(known)}" if known else str(native))
    return _one(ds, source, fitting)


def _more_specific(ds: datasets.Dataset, mode: str, source: str, info: FormatInfo) -> Adapter | None:
    """For a dataset in one of the mode's formats, an adapter whose columns include that format's and more:
    LLaMA-Factory's `conversations` + `chosen` + `rejected` is its own format for RM, not plain pairs with an
    extra column."""
    specific = [a for a in _candidates(ds, mode)[1] if set(a.marker) > set(info.columns)]
    return _one(ds, source, specific) if specific else None


def _build(columns: dict[str, list], source: str) -> datasets.Dataset:
    import datasets

    try:
        return datasets.Dataset.from_dict(columns)
    except Exception as e:  # pyarrow cannot unify nested values (e.g. numbers and strings as content)
        raise DatasetError(f"{source}: could not build a table from the converted rows ({short(e)})") from None


def _apply(adapter: Adapter, ds: datasets.Dataset, source: str) -> tuple[datasets.Dataset, str]:
    table = Table(ds, source, adapter.name)
    made = adapter.convert(table)
    rest = table.rest(adapter.consumed)
    if clash := [c for c in made if c in rest]:
        raise DatasetError(f"{source}: column `{clash[0]}` exists and {adapter.name} makes a `{clash[0]}` from "
                           f"`{adapter.marker[0]}` too; rename or drop one of them")
    return _build(made | rest, source), adapter.describe(table)


def _mixed_kinds(ds: datasets.Dataset, info: FormatInfo, source: str) -> tuple[datasets.Dataset, str | None]:
    """A dataset in the mode's format with message lists beside plain strings, made all conversational."""
    optional = ["prompt"] if info.name == "preference" else []  # a reward model's prompt is checked when present
    columns = [c for c in dict.fromkeys(info.columns + optional) if c in ds.column_names and c not in FLAG_COLUMNS]
    row = ds[0]  # a column holds one kind (Arrow), so row 1 tells; null cells say nothing
    if len({isinstance(row[c], list) for c in columns if row[c] is not None}) < 2:
        return ds, None
    table = Table(ds, source, f"the {info.name} format")
    made, notes = normalise_kinds(table, columns)
    if not made:
        return ds, None
    return _build(table.columns | made, source), "mixed kinds → conversational; " + "; ".join(notes)


def conform(ds: datasets.Dataset, mode: str, source: str) -> tuple[datasets.Dataset, FormatInfo]:
    """The dataset in one of the mode's formats (converted when it was in none), and that format."""
    try:
        info = detect_format(ds, mode, source)
        adapter = _more_specific(ds, mode, source, info)
    except DatasetError as native:
        adapter = choose(ds, mode, source, native)
    if adapter is not None:
        ds, note = _apply(adapter, ds, source)
        notes = [note]
        if adapter.produces == "preference" and "preference" not in _format_names(mode):
            ds, note = unpair(ds, source)
            notes.append(note)
        info = detect_format(ds, mode, source)
        passed = [c for c in PASSED_COLUMNS if c in ds.column_names and c in adapter.consumed]
        return ds, replace(info, adapter="; ".join(notes), passed=passed)
    ds, note = _mixed_kinds(ds, info, source)
    # a native format's tools column too (tool-calling conversations: the schemas the template shows)
    return ds, replace(info, adapter=note, passed=[c for c in PASSED_COLUMNS if c in ds.column_names])
