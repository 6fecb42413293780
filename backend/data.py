"""Datasets: loading a spec (built-in set, file, save_to_disk folder, Hub id), detecting its format for a
training mode, and checking every row before a run starts, so a bad row fails in the form, not at step 300.

The formats of each mode are its registry entry's (backend/modes/registry.py). Errors name the file,
the row (1-based) and the column, and say what was expected.
"""
from __future__ import annotations

import filecmp
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import datasets

from backend.modes.registry import MODES

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "presets" / "data"

BUILTIN_DATASETS: dict[str, Path] = {
    "demo-sft-instructions": DATA_DIR / "sft_instructions.jsonl",
    "demo-sft-prompt-completion": DATA_DIR / "sft_prompt_completion.jsonl",
    "demo-preference": DATA_DIR / "preference.jsonl",  # rm, dpo (built by presets/data/build_demo_sets.py)
    "demo-kto": DATA_DIR / "kto.jsonl",
    "demo-math": DATA_DIR / "math.jsonl",  # grpo, rloo: prompt + answer
    "demo-prompts": DATA_DIR / "prompts.jsonl",  # varied prompts to label answers to (also grpo, rloo)
}
LABELS_PREFIX = "labels:"  # labels:<session id>: a labeling session, exported for the run's mode

FILE_TYPES = (".jsonl", ".json", ".csv", ".parquet")
ROLES = ("system", "user", "assistant", "tool")
_MESSAGE_COLUMNS = ("messages",)  # always message lists
_TEXT_COLUMNS = ("text",)  # always plain strings
_FLAG_COLUMNS = ("label",)  # KTO: desirable or not


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the source, row and column."""


@dataclass
class FormatInfo:
    name: str
    columns: list[str]
    conversational: bool
    num_rows: int


def _format_label(columns: list[str]) -> str:
    return " + ".join(columns)


def _builtins_hint() -> str:
    return "built-in sets: " + ", ".join(BUILTIN_DATASETS)


# ---- loading ----

def _rows_to_dataset(rows: list, source: str) -> datasets.Dataset:
    """A Dataset from JSON objects, with every key of every row as a column (from_list keeps row 1's only)."""
    columns: dict[str, list] = {}
    kinds: dict[str, tuple[str, int]] = {}
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DatasetError(f"{source} row {i}: expected a JSON object with named columns, "
                               f"got {type(row).__name__}")
        for key, value in row.items():
            kind = _value_kind(value)
            seen = kinds.setdefault(key, (kind, i))
            if kind != seen[0] and "null" not in (kind, seen[0]):
                raise DatasetError(f"{source} row {i}: column `{key}` is {kind} but row {seen[1]} has "
                                   f"{seen[0]}; use one kind of value in the whole column")
            if seen[0] == "null" and kind != "null":
                kinds[key] = (kind, i)
            columns.setdefault(key, [None] * (i - 1)).append(value)
        for key, values in columns.items():
            if len(values) < i:
                values.append(None)
    try:
        return datasets.Dataset.from_dict(columns)
    except Exception as e:  # pyarrow cannot unify nested values (e.g. numbers and strings as content)
        raise DatasetError(f"{source}: could not build a table from the rows ({_short(e)})") from None


def _value_kind(value) -> str:
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


def _short(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_json_lines(text: str, source: str) -> list:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DatasetError(f"{source} line {lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    return rows


def _read_json(text: str, source: str) -> list:
    """A .json file: a list of objects, {"data": [...]}, or JSON lines under the wrong extension."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("{") and e.msg == "Extra data":
            return _read_json_lines(text, source)
        raise DatasetError(f"{source} line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return data["data"]
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return data
    raise DatasetError(f"{source}: expected a list of objects, got {_value_kind(data)}")


def _read_csv(path: Path, source: str) -> datasets.Dataset:
    import pandas as pd

    try:
        df = pd.read_csv(path, keep_default_na=False, dtype=object)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DatasetError(f"{source}: not a readable CSV file ({_short(e)})") from None
    rows = df.to_dict("records")
    for column in df.columns:
        cells = df[column].tolist()
        if column in _FLAG_COLUMNS:
            flags = {"true": True, "false": False, "1": True, "0": False}
            for row, cell in zip(rows, cells):
                row[column] = flags.get(cell.strip().lower(), cell)
            continue
        parsed = _parse_json_lists(cells)  # message lists are stored as their JSON text
        if parsed is not None:
            for row, value in zip(rows, parsed):
                row[column] = value
        elif column in _MESSAGE_COLUMNS:
            for i, cell in enumerate(cells, 1):
                if cell.strip() and _parse_json_lists([cell]) is None:
                    raise DatasetError(f"{source} row {i}: column `{column}` is not a JSON list of messages "
                                       f"(a CSV cell must hold the list as JSON text)")
    return _rows_to_dataset(rows, source)


def _parse_json_lists(cells: list[str]) -> list | None:
    """The cells parsed, if every non-empty one is a JSON list; else None (the column is plain text)."""
    parsed = []
    for cell in cells:
        if not cell.strip():
            parsed.append(None)
            continue
        if not cell.lstrip().startswith("["):
            return None
        try:
            value = json.loads(cell)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, list):
            return None
        parsed.append(value)
    return parsed if any(v is not None for v in parsed) else None


def _read_file(path: Path, source: str) -> datasets.Dataset:
    suffix = path.suffix.lower()
    if suffix not in FILE_TYPES:
        raise DatasetError(f"{source}: unsupported file type '{suffix or path.name}'; use one of "
                           f"{', '.join(FILE_TYPES)} or a datasets.save_to_disk folder")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return datasets.Dataset(pq.read_table(path))
        except Exception as e:
            raise DatasetError(f"{source}: not a readable Parquet file ({_short(e)})") from None
    if suffix == ".csv":
        return _read_csv(path, source)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise DatasetError(f"{source}: not UTF-8 text") from None
    rows = _read_json_lines(text, source) if suffix == ".jsonl" else _read_json(text, source)
    return _rows_to_dataset(rows, source)


def _read_saved(path: Path, source: str) -> datasets.Dataset:
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise DatasetError(f"folder {path} is not a datasets.save_to_disk folder; give a file "
                           f"({', '.join(FILE_TYPES)}) or a saved dataset folder") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        if "train" in loaded:
            return loaded["train"]
        if len(splits) == 1:
            return loaded[splits[0]]
        raise DatasetError(f"{source} holds splits [{', '.join(splits)}] and none is named 'train'; "
                           "save the split to train on as 'train'")
    return loaded


def _load_from_hub(spec: str) -> datasets.Dataset:
    from backend.hub import HubError, hub_offline, probe_hub_repo

    hint = f"use a file ({', '.join(FILE_TYPES)}) or one of the {_builtins_hint()}"
    if not hub_offline():  # a bounded check first: load_dataset retries for ~20 s when there is no network
        try:
            probe_hub_repo(spec, "dataset")
        except HubError as e:
            what = "was not found on" if e.kind in ("not_found", "invalid_id") else "could not be loaded from"
            raise DatasetError(f"dataset '{spec}' {what} the Hugging Face Hub ({e}); {hint}") from None
    try:
        return datasets.load_dataset(spec, split="train")
    except Exception as e:
        raise DatasetError(f"could not load dataset '{spec}' from the Hub (offline? {_short(e, 160)}); "
                           f"{hint}") from None


def _looks_like_path(spec: str) -> bool:
    return (spec.startswith(("/", ".", "~")) or spec.count("/") != 1 or "\\" in spec
            or Path(spec).suffix.lower() in FILE_TYPES)


def _find_path(spec: str, workspace: Path | None) -> Path | None:
    given = Path(spec).expanduser()
    bases = [Path(workspace)] if workspace and not given.is_absolute() else []
    return next((c for c in [b / given for b in bases] + [given] if c.exists()), None)


def _load(spec: str, workspace: Path | None, mode: str | None = None) -> tuple[datasets.Dataset, str]:
    """The dataset and the name that messages call it by."""
    spec = (spec or "").strip()
    if not spec:
        raise DatasetError(f"no dataset given; choose a file or one of the {_builtins_hint()}")
    if spec.startswith(LABELS_PREFIX):
        from backend.labeling import LabelError, labels_dataset

        try:
            ds, source = labels_dataset(spec, workspace, mode), spec
        except LabelError as e:
            raise DatasetError(str(e)) from None
    elif spec in BUILTIN_DATASETS:
        ds, source = _read_file(BUILTIN_DATASETS[spec], spec), spec
    elif (path := _find_path(spec, workspace)) is not None:
        source = path.name
        ds = _read_saved(path, source) if path.is_dir() else _read_file(path, source)
    elif _looks_like_path(spec):
        where = f" (looked in {workspace} and {Path.cwd()})" if workspace else ""
        raise DatasetError(f"dataset file {spec} not found{where}; {_builtins_hint()}")
    else:
        ds, source = _load_from_hub(spec), spec
    if len(ds) == 0:
        raise DatasetError(f"{source}: the dataset has no rows")
    return ds, source


def load_dataset_spec(spec: str, workspace: Path | None = None) -> datasets.Dataset:
    """A built-in name, a .jsonl/.json/.csv/.parquet file, a save_to_disk folder, or a Hub dataset id.
    Relative paths are looked up in the workspace first, then the current directory."""
    return _load(spec, workspace)[0]


# ---- format detection and row checks ----

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
    return json.dumps({c: True if c in _FLAG_COLUMNS else "..." for c in columns})


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
            message += f" for {_format_label(closest)}"
    if len(formats) == 1:
        optional = {("chosen", "rejected"): " (+ optional prompt)",
                    ("prompt",): " (other columns, such as an answer, are passed to the reward sources)"}
        optional = optional.get(tuple(closest), "")
        return f"{message}. {M} needs {_format_label(closest)}{optional}, e.g. {_example_row(closest)}"
    return f"{message}. {M} needs one of: {' | '.join(_format_label(c) for c in formats)}"


def _check_messages(value, *, need_assistant: bool) -> str | None:
    """None if `value` is a usable list of chat messages, else what is wrong with it."""
    if not isinstance(value, list):
        return f"is {_value_kind(value)}, not a list of messages"
    if not value:
        return "is an empty list of messages"
    for j, message in enumerate(value, 1):
        if not isinstance(message, dict):
            return f"message {j} is {_value_kind(message)}, not a {{role, content}} object"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            return f"message {j} has role {role!r}; expected one of {', '.join(ROLES)}"
        if not isinstance(content, str) and not (content is None and message.get("tool_calls")):
            return f"message {j} ({role}) has content of type {_value_kind(content)}; expected a string"
    if need_assistant and not any(m.get("role") == "assistant" and m.get("content") for m in value):
        return "has no assistant message with content (nothing to learn from)"
    return None


def _expected(column: str) -> str:
    if column in _MESSAGE_COLUMNS:
        return "a list of {role, content} messages"
    if column in _TEXT_COLUMNS:
        return "a non-empty string"
    if column in _FLAG_COLUMNS:
        return "true/false (or 1/0)"
    return "a non-empty string or a list of messages"


def _check_cell(column: str, value) -> str | None:
    if value is None or value == "" or (isinstance(value, str) and not value.strip()):
        return "is empty" if value is not None else "is missing"
    if column in _FLAG_COLUMNS:
        return None if isinstance(value, bool) or value in (0, 1) else f"is {value!r}"
    if column in _MESSAGE_COLUMNS:
        return _check_messages(value, need_assistant=True)  # a messages column is the whole example
    if isinstance(value, str):
        return None
    if column in _TEXT_COLUMNS:
        return f"is {_value_kind(value)}"
    if isinstance(value, list):
        return _check_messages(value, need_assistant=False)
    return f"is {_value_kind(value)}"


def validate_rows(ds: datasets.Dataset, info: FormatInfo, mode: str, source: str = "dataset",
                  limit: int | None = None) -> None:
    """Check every row (or the first `limit`) against the format; DatasetError on the first bad one."""
    columns = list(info.columns)
    if info.name == "preference" and "prompt" not in columns and "prompt" in ds.column_names:
        columns.insert(0, "prompt")  # optional for reward models, but checked when present
    n = len(ds) if limit is None else min(limit, len(ds))
    values = ds.select_columns(columns)[:n]  # plain lists: indexing a Column row by row is slow
    kinded = [c for c in columns if c not in _FLAG_COLUMNS]
    where = f"the {mode.upper()} {_format_label(info.columns)} format"
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


def prepare_dataset(spec: str, mode: str, workspace: Path | None = None) -> tuple[datasets.Dataset, FormatInfo]:
    """Load, detect and validate. SFT keeps only the format's columns (SFTTrainer trips over extras);
    other modes keep every column (GRPO hands extra columns to reward functions)."""
    ds, source = _load(spec, workspace, mode)
    info = detect_format(ds, mode, source)
    validate_rows(ds, info, mode, source)
    if not MODES[mode].keeps_extra_columns:
        ds = ds.select_columns(info.columns)
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


def prepare_eval_dataset(spec: str, split: float, seed: int, mode: str, train: datasets.Dataset | None,
                         workspace: Path | None = None) -> tuple[datasets.Dataset | None, datasets.Dataset | None]:
    """(training set, evaluation set) for a run's `eval` settings: `spec` loaded and checked like a training
    set (its file, row and column named on error), or `split` of `train` held out; (train, None) when both
    are off. `train` may be None to check only an evaluation dataset."""
    if spec:
        return train, prepare_dataset(spec, mode, workspace)[0]
    if split > 0 and train is not None:
        return hold_out(train, split, seed)
    return train, None


# ---- preview and uploads ----

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


def preview(spec: str, mode: str = "sft", workspace: Path | None = None, n: int = 5):
    """(first n rows as display text, the detected format or None, an error message or None).
    Never raises: the UI shows the message next to whatever rows could be read."""
    import pandas as pd

    try:
        ds, source = _load(spec, workspace, mode)
    except DatasetError as e:
        return pd.DataFrame(), None, str(e)
    except Exception as e:  # the UI must show something rather than a traceback
        return pd.DataFrame(), None, f"could not read dataset {spec}: {_short(e)}"
    head = ds[:n]
    df = pd.DataFrame({c: [_render(v) for v in values] for c, values in head.items()})
    try:
        info = detect_format(ds, mode, source)
    except DatasetError as e:
        return df, None, str(e)
    try:
        validate_rows(ds, info, mode, source)
    except DatasetError as e:
        return df, info, str(e)
    return df, info, None


def save_upload(src_path: str | Path, workspace: Path) -> Path:
    """Copy an uploaded file into workspace/uploads/ under its own name (name-1.ext etc. when a different
    file already has it; the same content again reuses the earlier copy) and return the copy's path."""
    src = Path(src_path)
    if not src.is_file():
        raise DatasetError(f"uploaded file {src} not found")
    name = src.name.strip()
    if Path(name).suffix.lower() not in FILE_TYPES:
        raise DatasetError(f"{name}: unsupported file type; upload one of {', '.join(FILE_TYPES)}")
    uploads = Path(workspace).resolve() / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    if src.resolve().parent == uploads:
        return src.resolve()
    stem, suffix = Path(name).stem, Path(name).suffix
    for k in range(10_000):
        dest = uploads / (name if k == 0 else f"{stem}-{k}{suffix}")
        if not dest.exists():
            shutil.copyfile(src, dest)
            return dest
        if filecmp.cmp(src, dest, shallow=False):
            return dest
    raise DatasetError(f"{uploads} already holds too many files named like {name}")
