"""LLaMA-Factory's data folders, as LlamaBoard users have them: a `dataset_info.json` names each dataset with its
file (or Hub id), its `formatting` (alpaca or sharegpt), `ranking`, `columns` and `tags`. A dataset in such a
folder is named `<folder>/<name>`.

Reading an entry renames its columns to the names the adapters know (alpaca's `instruction` / `input` /
`output`, ShareGPT's `conversations`) and its ShareGPT tags to the usual `from` / `value` and human / gpt, so the
same adapters convert it and say what they did."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from backend.data.common import DatasetError, value_kind

if TYPE_CHECKING:
    import datasets

INFO_FILE = "dataset_info.json"

# LLaMA-Factory's column keys → the column the adapters read (its own defaults: instruction, input, output,
# conversations)
_COLUMNS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output", "system": "system",
               "history": "history", "chosen": "chosen", "rejected": "rejected", "kto_tag": "kto_tag"},
    "sharegpt": {"messages": "conversations", "system": "system", "tools": "tools", "chosen": "chosen",
                 "rejected": "rejected", "kto_tag": "kto_tag"},
}
# ShareGPT tag keys and their defaults, which the ShareGPT adapter reads
_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
         "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"}


def read_info(folder: Path) -> dict[str, dict]:
    path = folder / INFO_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(info, dict) or not all(isinstance(v, dict) for v in info.values()):
        raise DatasetError(f"{path}: expected an object of datasets, each an object with a file_name")
    return info


def is_data_folder(path: Path) -> bool:
    """Holds LLaMA-Factory's dataset_info.json (a datasets.save_to_disk folder has one of its own, beside its
    state.json or dataset_dict.json)."""
    return (path.is_dir() and (path / INFO_FILE).is_file() and not (path / "state.json").exists()
            and not (path / "dataset_dict.json").exists())


def dataset_names(folder: Path, shown_as: str | None = None) -> list[str]:
    """`<folder>/<name>` (the folder as `shown_as`, when given) for each dataset its dataset_info.json
    describes with a file here or a Hub id."""
    prefix = (shown_as or str(folder)).rstrip("/\\")
    return [f"{prefix}/{name}" for name, entry in read_info(folder).items()
            if "file_name" in entry or "hf_hub_url" in entry]


def workspace_datasets(workspace: Path) -> list[str]:
    """The datasets of the LLaMA-Factory data folders in the workspace (itself or a folder directly inside it),
    as `<folder>/<name>` specs; a folder whose dataset_info.json cannot be read is left out (the preview names
    its problem when it is chosen)."""
    folders = [workspace, *sorted(p for p in workspace.iterdir() if p.is_dir())] if workspace.is_dir() else []
    names = []
    for folder in filter(is_data_folder, folders):
        try:
            names += dataset_names(folder)
        except DatasetError:
            continue
    return names


def entry(folder: Path, name: str) -> dict:
    info = read_info(folder)
    if name not in info:
        raise DatasetError(f"{folder / INFO_FILE} has no dataset '{name}'; it has: {', '.join(info) or 'none'}")
    return info[name]


def _retag(value, tags: dict[str, str]):
    """A turn, or a list of turns, with the entry's tags made `from` / `value` and the usual role names."""
    if isinstance(value, list):
        return [_retag(turn, tags) for turn in value]
    if not isinstance(value, dict):
        return value  # the ShareGPT adapter names what is wrong with it
    roles = {tags.get(key, default): default for key, default in _TAGS.items() if key.endswith("_tag")
             and key not in ("role_tag", "content_tag")}
    speaker = value.get(tags.get("role_tag", "from"))
    return {"from": roles.get(speaker, speaker), "value": value.get(tags.get("content_tag", "value"))}


def apply_entry(ds: datasets.Dataset, name: str, spec: dict, source: str) -> datasets.Dataset:
    """The entry's `columns` renamed to the adapters' names and its ShareGPT `tags` made the usual ones."""
    formatting = spec.get("formatting", "alpaca")
    if formatting not in _COLUMNS:
        raise DatasetError(f"{INFO_FILE}: dataset '{name}' has formatting {formatting!r}; the workbench reads "
                           "alpaca and sharegpt")
    columns = spec.get("columns") or {}
    if not isinstance(columns, dict):
        raise DatasetError(f"{INFO_FILE}: dataset '{name}' has columns of {value_kind(columns)}; expected an object")
    rename = {}
    for key, column in columns.items():
        ours = _COLUMNS[formatting].get(key)
        if ours is None:
            continue  # images, videos, audios, score columns: nothing the workbench trains on
        if column not in ds.column_names:
            raise DatasetError(f"{INFO_FILE}: dataset '{name}' takes {key} from column `{column}`, but {source} "
                               f"has no such column; its columns are [{', '.join(ds.column_names)}]")
        if column != ours:
            rename[column] = ours
    ds = ds.rename_columns(rename)
    tags = spec.get("tags") or {}
    if formatting != "sharegpt" or all(tags.get(k, v) == v for k, v in _TAGS.items()):
        return ds
    import datasets

    data = ds.to_dict()
    for column in ("conversations", "chosen", "rejected"):
        if column in data:
            data[column] = [_retag(value, tags) for value in data[column]]
    return datasets.Dataset.from_dict(data)
