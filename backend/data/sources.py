"""Where datasets come from: a built-in set, a JSONL / JSON / CSV / Parquet file, a save_to_disk folder, a Hub
id, a dataset of a LLaMA-Factory data folder (`<folder>/<name>`, described by its dataset_info.json), or a source
another package registers under a prefix (`labels:<session>`), each read into a
datasets.Dataset with its problems named by file, line and column.
"""
from __future__ import annotations

import filecmp
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import backend.data.llamafactory as llamafactory
from backend.data.common import FLAG_COLUMNS, MESSAGE_COLUMNS, DatasetError, short, value_kind
from backend.data.mix import split_specs

if TYPE_CHECKING:
    import datasets  # imported where a dataset is built: importing the data layer stays light

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "presets" / "data"

BUILTIN_DATASETS: dict[str, Path] = {
    "demo-sft-instructions": DATA_DIR / "sft_instructions.jsonl",
    "demo-sft-prompt-completion": DATA_DIR / "sft_prompt_completion.jsonl",
    "demo-preference": DATA_DIR / "preference.jsonl",  # rm, dpo (built by presets/data/build_demo_sets.py)
    "demo-kto": DATA_DIR / "kto.jsonl",
    "demo-math": DATA_DIR / "math.jsonl",  # grpo, rloo: prompt + answer
    "demo-prompts": DATA_DIR / "prompts.jsonl",  # varied prompts to label answers to (also grpo, rloo)
    "demo-safe-dialogue": DATA_DIR / "safe_dialogue.jsonl",  # grpo, rloo, ppo: rude baits + open requests
    "demo-arithmetic": DATA_DIR / "arithmetic.jsonl",  # grpo: a + b (0..20), number only
    "demo-arithmetic-eval": DATA_DIR / "arithmetic_eval.jsonl",  # its 32 held-out sums, never trained on
    "demo-number-format": DATA_DIR / "number_format.jsonl",  # sft: differences and products, the number alone
    "demo-calculator": DATA_DIR / "calculator.jsonl",  # grpo with tools: three-digit products
    "demo-calculator-eval": DATA_DIR / "calculator_eval.jsonl",  # its 64 held-out products
    "demo-calculator-sft": DATA_DIR / "calculator_sft.jsonl",  # sft: calculator calls demonstrated
    "demo-guess-number": DATA_DIR / "guess_number.jsonl",  # grpo with the guess_number environment
}
FILE_TYPES = (".jsonl", ".json", ".csv", ".parquet")

# Added by packages above the data layer when imported (labeling's labels:<session>), which each process's entry
# point does (backend.workspace.load_providers): this layer never imports them.
_SOURCES: dict[str, Callable] = {}
_PREFIXED = re.compile(r"^[a-z][a-z_]*:")


def register_source(prefix: str, load: Callable) -> None:
    """`load(spec, workspace, mode) -> datasets.Dataset` serves every spec starting with `prefix`; it raises
    DatasetError with the source named."""
    _SOURCES[prefix] = load


def source_prefixes() -> list[str]:
    return list(_SOURCES)


def _registered(spec: str) -> Callable | None:
    if not _PREFIXED.match(spec):  # files and Hub ids never look like `name:...`
        return None
    prefix = next((p for p in source_prefixes() if spec.startswith(p)), None)
    return _SOURCES.get(prefix)


def builtins_hint() -> str:
    return "built-in sets: " + ", ".join(BUILTIN_DATASETS)


def _rows_to_dataset(rows: list, source: str) -> datasets.Dataset:
    """A Dataset from JSON objects, with every key of every row as a column (from_list keeps row 1's only)."""
    import datasets

    columns: dict[str, list] = {}
    kinds: dict[str, tuple[str, int]] = {}
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DatasetError(f"{source} row {i}: expected a JSON object with named columns, "
                               f"got {type(row).__name__}")
        for key, value in row.items():
            kind = value_kind(value)
            seen = kinds.setdefault(key, (kind, i))
            if kind != seen[0] and "null" not in (kind, seen[0]):
                raise DatasetError(f"{source} row {i}: column `{key}` is {kind} but row {seen[1]} has "
                                   f"{seen[0]}; use one kind of value in the whole column")
            if seen[0] == "null" and kind != "null":
                kinds[key] = (kind, i)
            if (values := columns.get(key)) is None:  # not setdefault: its default list would be built every row
                values = columns[key] = [None] * (i - 1)
            values.append(value)
        for key, values in columns.items():
            if len(values) < i:
                values.append(None)
    try:
        return datasets.Dataset.from_dict(columns)
    except Exception as e:  # pyarrow cannot unify nested values (e.g. numbers and strings as content)
        raise DatasetError(f"{source}: could not build a table from the rows ({short(e)})") from None


def _read_json_lines(text: str, source: str) -> list:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line, object_pairs_hook=_unique_keys(source, f"line {lineno}")))
        except json.JSONDecodeError as e:
            raise DatasetError(f"{source} line {lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    return rows


def _read_json(text: str, source: str) -> list:
    """A .json file: a list of objects, {"data": [...]}, or JSON lines under the wrong extension."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys(source, "(JSON)"))
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
    raise DatasetError(f"{source}: expected a list of objects, got {value_kind(data)}")


def _read_csv(text: str, source: str) -> datasets.Dataset:
    import csv
    import io

    import pandas as pd

    header = next(csv.reader(io.StringIO(text)), [])
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # pandas would rename the second one `name.1` and train on the first silently
        raise DatasetError(f"{source} line 1: the column name{'s' if len(twice) > 1 else ''} "
                           f"{', '.join(f'`{c}`' for c in twice)} appear{'' if len(twice) > 1 else 's'} more than "
                           "once in the header; give each column its own name")
    try:
        df = pd.read_csv(io.StringIO(text), keep_default_na=False, dtype=object)
    except (ValueError, pd.errors.ParserError) as e:
        raise DatasetError(f"{source}: not a readable CSV file ({short(e)})") from None
    rows = df.to_dict("records")
    for column in df.columns:
        cells = df[column].tolist()
        if column in FLAG_COLUMNS:
            flags = {"true": True, "false": False, "1": True, "0": False}
            for row, cell in zip(rows, cells):
                row[column] = flags.get(cell.strip().lower(), cell)
            continue
        parsed = _parse_json_lists(cells)  # message lists are stored as their JSON text
        if parsed is not None:
            for row, value in zip(rows, parsed):
                row[column] = value
        elif column in MESSAGE_COLUMNS:
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
    if not path.is_file():  # a FIFO would block the read forever, a device never end
        raise DatasetError(f"{source}: not a regular file (a FIFO, device or socket); save the data to a file "
                           f"({', '.join(FILE_TYPES)}) and give that")
    suffix = path.suffix.lower()
    if suffix not in FILE_TYPES:
        raise DatasetError(f"{source}: unsupported file type '{suffix or path.name}'; use one of "
                           f"{', '.join(FILE_TYPES)} or a datasets.save_to_disk folder")
    if suffix == ".parquet":
        import datasets
        import pyarrow.parquet as pq

        try:
            return datasets.Dataset(pq.read_table(path))
        except Exception as e:
            raise DatasetError(f"{source}: not a readable Parquet file ({short(e)})") from None
    text = _read_text(path, source)
    if suffix == ".csv":
        return _read_csv(text, source)
    rows = _read_json_lines(text, source) if suffix == ".jsonl" else _read_json(text, source)
    return _rows_to_dataset(rows, source)


def _read_text(path: Path, source: str) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DatasetError(f"{source} line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {column}); "
                           "save the file as UTF-8") from None


def _unique_keys(source: str, where: str):
    """A json object_pairs_hook that refuses an object naming one key twice (json keeps the last silently)."""
    def hook(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) < len(keys):
            twice = sorted({k for k in keys if keys.count(k) > 1})
            raise DatasetError(f"{source} {where}: the key{'s' if len(twice) > 1 else ''} "
                               f"{', '.join(f'`{k}`' for k in twice)} appear{'' if len(twice) > 1 else 's'} "
                               "twice in one object; keep one of each")
        return dict(pairs)
    return hook


def _read_saved(path: Path, source: str) -> datasets.Dataset:
    import datasets

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
    import datasets

    from backend.hub import HubError, hub_offline, probe_hub_repo

    hint = f"use a file ({', '.join(FILE_TYPES)}) or one of the {builtins_hint()}"
    if not hub_offline():  # a bounded check first: load_dataset retries for ~20 s when there is no network
        try:
            probe_hub_repo(spec, "dataset")
        except HubError as e:
            what = "was not found on" if e.kind in ("not_found", "invalid_id") else "could not be loaded from"
            raise DatasetError(f"dataset '{spec}' {what} the Hugging Face Hub ({e}); {hint}") from None
    try:
        return datasets.load_dataset(spec, split="train")
    except Exception as e:
        raise DatasetError(f"could not load dataset '{spec}' from the Hub (offline? {short(e, 160)}); "
                           f"{hint}") from None


def _looks_like_path(spec: str) -> bool:
    return (spec.startswith(("/", ".", "~")) or spec.count("/") != 1 or "\\" in spec
            or Path(spec).suffix.lower() in FILE_TYPES)


def _find_path(spec: str, workspace: Path | None) -> Path | None:
    given = Path(spec).expanduser()
    bases = [Path(workspace)] if workspace and not given.is_absolute() else []
    return next((c for c in [b / given for b in bases] + [given] if c.exists()), None)


def pinned_spec(spec: str, workspace: Path | None) -> str:
    """`spec` with each relative path found outside the workspace (from the current directory) made absolute:
    the worker runs from elsewhere and would not find it. Built-in names, Hub ids and workspace files stay."""
    if not (spec or "").strip():
        return spec
    parts = split_specs(spec, workspace)
    pinned = []
    for part in parts:
        given = Path(part).expanduser()
        in_workspace = workspace is not None and (Path(workspace) / given).exists()
        if part in BUILTIN_DATASETS or given.is_absolute() or in_workspace or not given.exists():
            pinned.append(part)
        else:
            pinned.append(str(given.resolve()))
    return ", ".join(pinned) if len(parts) > 1 else (pinned[0] if pinned else spec)


def data_folder_datasets(spec: str, workspace: Path | None) -> list[str]:
    """When `spec` is a LLaMA-Factory data folder, its datasets as specs (`<spec>/<name>`); else []."""
    path = _find_path((spec or "").strip(), workspace) if (spec or "").strip() else None
    if path is None or not llamafactory.is_data_folder(path):
        return []
    try:
        return llamafactory.dataset_names(path, spec.strip())
    except DatasetError:
        return []  # the preview names what is wrong with its dataset_info.json


def _data_folder_entry(spec: str, workspace: Path | None) -> tuple[datasets.Dataset, str] | None:
    """`<folder>/<name>` for a dataset that the folder's dataset_info.json describes (LLaMA-Factory), read
    with its columns and tags applied; None when the spec is not one."""
    folder_spec, _, name = spec.replace("\\", "/").rpartition("/")
    folder = _find_path(folder_spec, workspace) if folder_spec else None
    if folder is None or not llamafactory.is_data_folder(folder):
        return None
    entry = llamafactory.entry(folder, name)
    if "file_name" in entry:
        path = folder / str(entry["file_name"])
        if not path.is_file():
            raise DatasetError(f"{llamafactory.INFO_FILE}: dataset '{name}' reads {entry['file_name']}, which is not "
                               f"a file in {folder}")
        ds, source = _read_file(path, path.name), path.name
    elif "hf_hub_url" in entry:
        ds, source = _load_from_hub(str(entry["hf_hub_url"])), str(entry["hf_hub_url"])
    else:
        raise DatasetError(f"{llamafactory.INFO_FILE}: dataset '{name}' has neither a file_name nor an hf_hub_url, "
                           "the two the workbench reads")
    return llamafactory.apply_entry(ds, name, entry, source), source


def load(spec: str, workspace: Path | None, mode: str | None = None) -> tuple[datasets.Dataset, str]:
    """The dataset and the name that messages call it by."""
    spec = (spec or "").strip()
    if not spec:
        raise DatasetError(f"no dataset given; choose a file or one of the {builtins_hint()}")
    if (registered := _registered(spec)) is not None:
        ds, source = registered(spec, workspace, mode), spec
    elif spec in BUILTIN_DATASETS:
        ds, source = _read_file(BUILTIN_DATASETS[spec], spec), spec
    elif (path := _find_path(spec, workspace)) is not None:
        source = path.name
        if llamafactory.is_data_folder(path):
            raise DatasetError(f"{spec} is a LLaMA-Factory data folder ({llamafactory.INFO_FILE}); name one of its "
                               f"datasets: {', '.join(llamafactory.dataset_names(path, spec)) or 'none'}")
        ds = _read_saved(path, source) if path.is_dir() else _read_file(path, source)
    elif (found := _data_folder_entry(spec, workspace)) is not None:
        ds, source = found
    elif _looks_like_path(spec):
        where = f" (looked in {workspace} and {Path.cwd()})" if workspace else ""
        raise DatasetError(f"dataset file {spec} not found{where}; {builtins_hint()}")
    else:
        ds, source = _load_from_hub(spec), spec
    if len(ds) == 0:
        raise DatasetError(f"{source}: the dataset has no rows")
    return ds, source


def load_dataset_spec(spec: str, workspace: Path | None = None) -> datasets.Dataset:
    """A built-in name, a .jsonl/.json/.csv/.parquet file, a save_to_disk folder, or a Hub dataset id.
    Relative paths are looked up in the workspace first, then the current directory."""
    return load(spec, workspace)[0]


def save_upload(src_path: str | Path, workspace: Path) -> Path:
    """Copy an uploaded file into workspace/uploads/ under its own name (name-1.ext etc. when a different
    file already has it; the same content again reuses the earlier copy) and return the copy's path. A file
    that cannot be read as a table (DatasetError, naming its line) is not copied."""
    src = Path(src_path)
    if not src.is_file():
        raise DatasetError(f"uploaded file {src} not found")
    name = src.name.strip()
    if Path(name).suffix.lower() not in FILE_TYPES:
        raise DatasetError(f"{name}: unsupported file type; upload one of {', '.join(FILE_TYPES)}")
    _read_file(src, name)  # an unreadable file is refused, not kept in uploads/ and selected
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
