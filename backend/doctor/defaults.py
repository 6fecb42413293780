"""Settings the data contradicts, read before a run: reference answers longer than the completions may grow, rows
longer than max_length (cut without a word), GRPO groups of 2 where the batch holds 4. Said under the setting's
own field in the Train tab, by `launch.py train --dry-run` and at the top of the run log; never applied without the
user."""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from backend.doctor.checks import _round_up

ROWS_READ = 500  # rows whose tokens are counted (the longest of a bigger set may be missed: advice, not a proof)
# every setting a Suggestion may name: the Train tab shows each one's suggestion under its field, and clears it there
SUGGESTED_PATHS = ("rl.max_completion_length", "rl.num_generations", "max_length")


@dataclass(frozen=True)
class Suggestion:
    path: str
    value: int
    key: str  # texts.SUGGESTIONS
    params: dict


@dataclass(frozen=True)
class Lengths:
    """Token counts of a prepared dataset's first ROWS_READ rows."""
    references: dict  # column a reward source compares against -> its answers' tokens
    rows: tuple  # each row's longest sequence as its trainer sees it (not RL: its prompts only)


def measure(config, dataset, info, tokenizer) -> Lengths:
    rows = dataset.select(range(min(ROWS_READ, len(dataset))))
    if config.spec.online_rl:
        columns = {s.params.get("column") for s in config.reward_sources if isinstance(s.params.get("column"), str)}
        refs = {c: tuple(len(tokenizer(str(v), add_special_tokens=False)["input_ids"]) for v in rows[c]
                         if v is not None) for c in sorted(columns) if c in dataset.column_names}
        return Lengths({c: v for c, v in refs.items() if v}, ())
    from backend.data.render import render_row

    return Lengths({}, tuple(max(r.tokens for r in render_row(row, info, config.mode, tokenizer)) for row in rows))


def suggestions(config, lengths: Lengths) -> list[Suggestion]:
    """What the data's lengths say of the run's settings."""
    spec, out = config.spec, []
    if spec.online_rl:
        rl = config.rl
        for column, refs in lengths.references.items():
            # answers that reason before the reference's number run about twice its length
            if 2 * max(refs) > rl.max_completion_length:
                out.append(Suggestion("rl.max_completion_length", _round_up(2 * max(refs)), "completion_length",
                                      {"column": column, "ref_min": min(refs), "ref_max": max(refs),
                                       "current": rl.max_completion_length}))
                break
        per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps * config.world_size
        if spec.groups_completions and rl.num_generations < 4 and per_step >= 4 and per_step % 4 == 0:
            out.append(Suggestion("rl.num_generations", 4, "num_generations",
                                  {"current": rl.num_generations, "batch": per_step}))
        return out
    cut = sum(1 for n in lengths.rows if n > config.max_length)
    if cut:
        out.append(Suggestion("max_length", _round_up(max(lengths.rows), 64), "max_length",
                              {"cut": cut, "rows": len(lengths.rows), "longest": max(lengths.rows),
                               "current": config.max_length}))
    return out


def data_suggestions(config, workspace) -> list[Suggestion]:
    """`suggestions` for a config that passed its checks, its data measured as the worker would prepare it with
    the model's tokenizer when that is on this machine ([] when it is not: nothing is downloaded for advice).
    The measure is kept for the same model, data and mode, so a form that changes a number reads it once."""
    from backend.models import local_folder

    model = config.model.strip()
    if not model.startswith("run:") and local_folder(model) is None:
        return []
    columns = sorted(c for s in config.reward_sources if isinstance(c := s.params.get("column"), str))
    key = json.dumps([model, config.dataset, config.mode, config.data.model_dump(), columns, _stamp(config.dataset),
                      str(workspace)], default=str)
    if key not in _MEASURED:
        _MEASURED[key] = _measure_data(config, Path(workspace))
        while len(_MEASURED) > 8:
            _MEASURED.popitem(last=False)
    return suggestions(config, _MEASURED[key])


_MEASURED: OrderedDict[str, Lengths] = OrderedDict()


def _stamp(dataset: str) -> float:
    """A dataset file's modification time (a file edited since is measured again)."""
    try:
        return max(Path(p.strip()).stat().st_mtime for p in dataset.split(","))
    except OSError:
        return 0.0


def _measure_data(config, workspace: Path) -> Lengths:
    from backend.data import DataOptions, prepare_dataset
    from backend.data.templates import template_text
    from backend.models import load_tokenizer, local_folder

    model = config.model.strip()
    if model.startswith("run:"):
        from backend.models.from_run import check_run_model

        folder = check_run_model(model, workspace).folder
    else:
        folder = local_folder(model)
    dataset, info = prepare_dataset(config.dataset, config.mode, workspace=workspace, options=DataOptions.of(config))
    tokenizer = load_tokenizer(folder, chat_template=template_text(config.data.chat_template))
    return measure(config, dataset, info, tokenizer)
