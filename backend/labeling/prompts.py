"""The prompts a labeling session starts from: typed text, an uploaded file or a dataset column."""
from __future__ import annotations

from pathlib import Path

from backend.data import DatasetError, load_dataset_spec
from backend.labeling.records import MAX_PROMPTS, PROMPT_FILE_TYPES, LabelError, prompt_text


def split_typed_prompts(text: str) -> list[str]:
    """Typed prompts: one per line, or blocks separated by a line of `---` when a prompt spans lines."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    if any(line.strip() == "---" for line in lines):
        blocks, current = [], []
        for line in lines + ["---"]:
            if line.strip() == "---":
                if "\n".join(current).strip():
                    blocks.append("\n".join(current).strip())
                current = []
            else:
                current.append(line)
        return blocks
    return [line.strip() for line in lines if line.strip()]

def load_prompts(*, dataset: str | None = None, column: str = "prompt", file: str | Path | None = None,
                 text: str | None = None, limit: int | None = None, workspace: Path | None = None) -> list:
    """Prompts from typed text, an uploaded file (.txt: one per line; .jsonl/.json/.csv/.parquet: a column)
    or a dataset spec's column; at most `limit` (the first ones). Strings or message lists."""
    column = (column or "prompt").strip()
    if text is not None:
        prompts, where = split_typed_prompts(text), "the typed prompts"
    elif file is not None:
        path = Path(file)
        where = path.name
        if path.suffix.lower() not in PROMPT_FILE_TYPES:
            raise LabelError(f"{path.name}: unsupported file type; upload one of {', '.join(PROMPT_FILE_TYPES)}")
        if path.suffix.lower() == ".txt":
            prompts = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        else:
            prompts = _column(load_dataset_spec(str(path), workspace), column, where)
    elif dataset:
        where = dataset
        try:
            ds = load_dataset_spec(dataset, workspace)
        except DatasetError as e:
            raise LabelError(str(e)) from None
        prompts = _column(ds, column, where)
    else:
        raise LabelError("no prompts: choose a dataset, upload a file or type some prompts")
    prompts = [p for p in prompts if (prompt_text(p).strip() if p is not None else "")]
    if not prompts:
        raise LabelError(f"{where}: no prompts found (empty)")
    if limit is not None and int(limit) > 0:
        prompts = prompts[:int(limit)]
    if len(prompts) > MAX_PROMPTS:
        raise LabelError(f"{where}: {len(prompts)} prompts; a session holds at most {MAX_PROMPTS} (set a limit)")
    return prompts

def _column(ds, column: str, where: str) -> list:
    if column not in ds.column_names:
        raise LabelError(f"{where} has no column `{column}` (columns: {', '.join(ds.column_names)}); "
                         "choose the column that holds the prompts")
    values = list(ds[column])
    bad = next((i for i, v in enumerate(values, 1)
                if not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(m, dict) for m in v))
                        or v is None)), None)
    if bad is not None:
        raise LabelError(f"{where} row {bad}: column `{column}` is not text or a list of messages")
    return values
