"""Several datasets trained as one (`dataset: a.jsonl, data/identity`, as LlamaBoard and LLaMA-Factory list
them): each is prepared on its own (converted, checked, its rows named by its own file), then they are put one
after another or interleaved by weight with `datasets`' own mixers. They must end in one format: plain text and
chat messages, or prompt + completion and messages, are made alike first (`_alike`)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from backend.data.common import DatasetError, rows, short

if TYPE_CHECKING:
    import datasets

    from backend.data.formats import FormatInfo
    from backend.data.options import DataOptions


def split_specs(spec: str, workspace: Path | None) -> list[str]:
    """The datasets a comma-separated spec names (a path that exists with a comma in its name is one)."""
    spec = (spec or "").strip()
    if "," not in spec or Path(spec).expanduser().exists() or (workspace and (Path(workspace) / spec).exists()):
        return [spec]
    return [part.strip() for part in spec.split(",") if part.strip()]


def _kind(info: FormatInfo) -> str:
    return f"{info.name} ({'conversational' if info.conversational else 'plain text'})"


# The columns of each format that hold a turn of text: a role each when the text becomes a message.
_TEXT_ROLES = {"prompt": "user", "completion": "assistant", "chosen": "assistant", "rejected": "assistant"}


def _as_messages(value, role: str) -> list:
    return value if isinstance(value, list) else [{"role": role, "content": value or ""}]


def _alike(parts, specs) -> tuple[list, list[str]]:
    """Parts brought to one format where that loses nothing: plain text into messages when another part is
    conversational (a plain prompt becomes the user's turn, an answer the assistant's), and SFT's prompt +
    completion into one `messages` list when another part is `messages`. A plain `text` column has no roles to
    recover, so it still mixes only with its own kind. Returns the parts and a phrase per conversion."""
    conversational = any(info.conversational for _, info in parts)
    to_messages = any(info.name == "messages" for _, info in parts)
    out, said = [], []
    for spec, (ds, info) in zip(specs, parts):
        if info.name == "text":
            out.append((ds, info))
            continue
        columns = [c for c in _TEXT_ROLES if c in ds.column_names]
        if conversational and not info.conversational:
            ds = ds.map(lambda row: {c: _as_messages(row[c], _TEXT_ROLES[c]) for c in columns})
            info = replace(info, conversational=True)
            said.append(f"{spec}: plain text as chat messages to mix with the conversational ones")
        if to_messages and info.name == "prompt_completion":
            ds = ds.map(lambda row: {"messages": row["prompt"] + row["completion"]},
                        remove_columns=["prompt", "completion"])
            info = replace(info, name="messages", columns=["messages"])
            said.append(f"{spec}: prompt + completion as one messages list, trained as a conversation like the "
                        "messages ones")
        out.append((ds, info))
    return out, said


def check_weights(specs: list[str], options: DataOptions) -> None:
    """One weight per dataset: checked before any is read, so the message is not preceded by their progress."""
    weights = list(options.mix_weights)
    if options.mix == "interleave" and weights and len(weights) != len(specs):
        raise DatasetError(f"data.mix_weights: {len(weights)} weights for {len(specs)} datasets; give one per "
                           "dataset, in the order they are listed")


def mix(parts: list[tuple[datasets.Dataset, FormatInfo]], specs: list[str], options: DataOptions
        ) -> tuple[datasets.Dataset, FormatInfo]:
    """The prepared datasets as one, with a FormatInfo that says what each conversion and the mixing did."""
    import datasets

    parts, made_alike = _alike(parts, specs)
    first = parts[0][1]
    for spec, (_, info) in zip(specs[1:], parts[1:]):
        if _kind(info) != _kind(first):
            raise DatasetError(f"datasets {specs[0]} and {spec} end in different formats, {_kind(first)} and "
                               f"{_kind(info)}; mix datasets of one format")
    check_weights(specs, options)
    weights = list(options.mix_weights)
    shared = [c for c in parts[0][0].column_names if all(c in ds.column_names for ds, _ in parts)]
    tables = [ds.select_columns(shared) for ds, _ in parts]
    try:
        tables = [tables[0]] + [t.cast(tables[0].features) for t in tables[1:]]
        if options.mix == "interleave":
            total = sum(weights) if weights else 0
            mixed = datasets.interleave_datasets(tables, probabilities=[w / total for w in weights] if total else None,
                                                 seed=options.seed, stopping_strategy="all_exhausted")
        else:
            mixed = datasets.concatenate_datasets(tables)
    except (ValueError, TypeError) as e:  # nested columns whose types cannot be made one
        raise DatasetError(f"datasets {', '.join(specs)} could not be mixed ({short(e)})") from None
    sizes = " + ".join(str(len(ds)) for ds, _ in parts)
    how = (f"interleaved{' with weights ' + ', '.join(f'{w:g}' for w in weights) if weights else ''} until each "
           "is used up" if options.mix == "interleave" else "one after another")
    notes = [f"{spec}: {'; '.join(info.applied)}" for spec, (_, info) in zip(specs, parts) if info.applied]
    notes += made_alike
    notes.append(f"{len(parts)} datasets mixed ({sizes} rows), {how}; {rows(len(mixed))}")
    if left := sorted({c for ds, _ in parts for c in ds.column_names} - set(shared)):
        notes.append(f"columns not in every dataset left out: {', '.join(left)}")
    adapters = [f"{spec}: {info.adapter}" for spec, (_, info) in zip(specs, parts) if info.adapter]
    return mixed, replace(first, num_rows=len(mixed), adapter=" | ".join(adapters) or None, applied=notes,
                          passed=[c for c in first.passed if c in shared])
