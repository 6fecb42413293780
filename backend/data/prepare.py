"""A dataset made ready for a run: loaded, its format detected and every row checked; the evaluation split;
and the preview the Train tab shows."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from backend.data.adapters import conform
from backend.data.common import DatasetError, short
from backend.data.formats import FormatInfo, validate_rows
from backend.data.mix import check_weights, mix, split_specs
from backend.data.options import DataOptions, add_system, bound_rows, map_columns, sample
from backend.data.sources import load
from backend.core.mode_registry import MODES
from backend.rewards.base import completion_text

if TYPE_CHECKING:
    import datasets



def _conform(ds: datasets.Dataset, mode: str, source: str, options: DataOptions | None):
    """The run's data settings applied around the conversion: rows sampled and columns renamed before it (the
    names it reads are the user's choice), the system message after it (into the chat it made)."""
    options = options or DataOptions()
    ds, cut = bound_rows(ds, options, source)
    ds, sampled = sample(ds, options)
    ds, mapped = map_columns(ds, options.columns, source)
    ds, info = conform(ds, mode, source)
    ds, system = add_system(ds, info, options.system, source)
    applied = [note for note in (cut, mapped, sampled, system) if note]
    return ds, replace(info, num_rows=len(ds), mapped=dict(options.columns), applied=applied)


def prepare_dataset(spec: str, mode: str, workspace: Path | None = None,
                    options: DataOptions | None = None) -> tuple[datasets.Dataset, FormatInfo]:
    """Load, apply the run's data settings (`options`: a sample, column names, a system message), detect
    (converting a dataset in another known format, see adapters) and validate. SFT keeps only the format's
    columns (SFTTrainer trips over extras); other modes keep every column (GRPO hands extra columns to reward
    functions). Several datasets, comma-separated, are each prepared so and then mixed (data.mix)."""
    if len(specs := split_specs(spec, workspace)) > 1:
        check_weights(specs, options or DataOptions())
        parts = [prepare_dataset(s, mode, workspace, options) for s in specs]
        return mix(parts, specs, options or DataOptions())
    ds, source = load(spec, workspace, mode)
    ds, info = _conform(ds, mode, source, options)
    validate_rows(ds, info, mode, source)
    if not MODES[mode].keeps_extra_columns:
        ds = ds.select_columns(info.columns + info.passed)
    return ds, info


def hold_out(ds: datasets.Dataset, fraction: float, seed: int) -> tuple[datasets.Dataset, datasets.Dataset]:
    """(training rows, evaluation rows): `fraction` of the rows (at least one) chosen at random with `seed`,
    so the same seed holds out the same rows."""
    n = len(ds)
    n_eval = max(1, round(n * fraction))
    if n - n_eval < 1:
        raise DatasetError(f"the training set has {n} row(s), too few to hold out {fraction:g} for evaluation "
                           "and still train on something; use a larger dataset or give an eval.dataset")
    split = ds.train_test_split(test_size=n_eval, seed=seed, shuffle=True)
    return split["train"], split["test"]


ROWS_MARGIN = 4  # rows a trainer drops (too long, uneven last batches): the cut keeps this many times the reach
MIN_ROWS_KEPT = 1000


def reachable_note(total: int, rows: int | None, seed: int) -> str:
    """What `reachable` keeps of `total` rows when the run reads at most `rows`, said in one line ("" when all)."""
    if rows is None or total <= (keep := max(ROWS_MARGIN * rows, MIN_ROWS_KEPT)):
        return ""
    return (f"data: the run reads at most {rows} rows (max_steps × rows per step), so {keep} of the {total} "
            f"rows are prepared for training, chosen at random with seed {seed}; max_steps: -1 trains by epochs "
            "over all of them")


def reachable(ds: datasets.Dataset, rows: int | None, seed: int) -> tuple[datasets.Dataset, str]:
    """The training rows worth preparing when the run can read at most `rows` of them (RunConfig.reachable_rows):
    a trainer tokenizes every row it is given before its first step, so 100,000 rows for 2 steps cost more than the
    training. Rows chosen at random with `seed`; (ds, "") when all are kept, else the line that says so."""
    if not (note := reachable_note(len(ds), rows, seed)):
        return ds, ""
    keep = max(ROWS_MARGIN * rows, MIN_ROWS_KEPT)
    return ds.shuffle(seed=seed).select(range(keep)).flatten_indices(), note


def prepare_eval_dataset(spec: str, split: float, seed: int, mode: str, train: datasets.Dataset | None,
                         workspace: Path | None = None, options: DataOptions | None = None
                         ) -> tuple[datasets.Dataset | None, datasets.Dataset | None]:
    """(training set, evaluation set) for a run's `eval` settings: `spec` loaded and checked like a training
    set (its file, row and column named on error; the same data `options` applied), or `split` of `train`
    held out; (train, None) when both are off. `train` may be None to check only an evaluation dataset."""
    if spec:
        return train, prepare_dataset(spec, mode, workspace, options)[0]
    if split > 0 and train is not None:
        return hold_out(train, split, seed)
    return train, None


def split_answer(messages: list) -> tuple[list, str | None]:
    """A conversation's turns before its last assistant answer, and that answer's text (None: it ends otherwise,
    and the whole conversation is the prompt)."""
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        return list(messages[:-1]), completion_text(messages[-1])
    return list(messages or []), None


@dataclass
class GenerationRows:
    """An evaluation set as prompts to answer: the prompts, the other columns (what reward sources read) and the
    answer each prompt asks for (None for a row that gives none, e.g. KTO's answers labelled bad)."""
    prompts: list
    columns: dict[str, list]
    references: list[str | None] | None  # None: the mode's rows name no answer (RL prompts)


def generation_rows(ds: datasets.Dataset, mode: str, source: str = "the evaluation set") -> GenerationRows:
    """What a run generating at evaluation answers and compares with. SFT's `messages` rows are split before their
    last assistant turn, which becomes the `completion` column, as in prompt / completion rows."""
    answer_column = MODES[mode].answer_column
    columns = {c: list(ds[c]) for c in ds.column_names}
    if "prompt" not in columns and "messages" in columns:
        split = [split_answer(m) for m in columns.pop("messages")]
        columns["prompt"] = [p for p, _ in split]
        columns["completion"] = [a for _, a in split]
    if "prompt" not in columns:
        raise DatasetError(f"{source} has no prompts to answer (columns: {', '.join(ds.column_names)}): a plain "
                           "`text` set is one piece of text per row; generating at evaluation needs messages or "
                           "prompt / completion rows, or turn eval.generate off")
    prompts = columns.pop("prompt")
    references = None
    if answer_column in columns:
        good = columns.get("label", [True] * len(prompts))  # KTO: an answer labelled bad is not one to match
        references = [completion_text(a) if a is not None and ok else None
                      for a, ok in zip(columns[answer_column], good)]
    return GenerationRows(prompts, columns, references)


def _clip(text: str, limit: int = 200) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _render(value) -> str:
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return _clip(" / ".join(f"{m.get('role')}: {_clip(m.get('content') or '', 80)}" for m in value))
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return _clip(json.dumps(value, ensure_ascii=False))
    return _clip(value)


def _table(ds: datasets.Dataset, n: int):
    import pandas as pd

    return pd.DataFrame({c: [_render(v) for v in values] for c, values in ds[:n].items()})


def preview(spec: str, mode: str = "sft", workspace: Path | None = None, n: int = 5,
            options: DataOptions | None = None):
    """(first n rows as display text, the detected format or None, an error message or None). The rows are
    shown as the trainer gets them (the data `options` applied; converted, when the dataset came in another
    format).
    Never raises: the UI shows the message next to whatever rows could be read."""
    import pandas as pd

    if len(split_specs(spec, workspace)) > 1:  # only the mixed result says something
        try:
            ds, info = prepare_dataset(spec, mode, workspace, options)
        except DatasetError as e:
            return pd.DataFrame(), None, str(e)
        return _table(ds, n), info, None
    try:
        ds, source = load(spec, workspace, mode)
    except DatasetError as e:
        return pd.DataFrame(), None, str(e)
    except Exception as e:  # the UI must show something rather than a traceback
        return pd.DataFrame(), None, f"could not read dataset {spec}: {short(e)}"
    try:
        ds, info = _conform(ds, mode, source, options)
    except DatasetError as e:
        return _table(ds, n), None, str(e)
    df = _table(ds, n)
    try:
        validate_rows(ds, info, mode, source)
    except DatasetError as e:
        return df, info, str(e)
    return df, info, None
