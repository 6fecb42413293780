"""Prepared datasets kept in the workspace (`<workspace>/prepared/<key>/`): a run's submit checks every row of its
dataset, and its worker (each rank, each resume, every trial of a sweep on the same data) loads that result
instead of reading and checking the files again, seconds of each start on a large file.

The key is the dataset's files as they are now (path, size, modification time), the mode, the data settings and
the backend's code: a file edited since, or another setting, is prepared anew. Datasets that are not files here
(Hub ids, labeling sessions, LLaMA-Factory folder entries) are prepared each time as before. The newest KEEP
entries stay; nothing is kept on a disk short of room (it is the run's, for its checkpoints).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from backend.data.formats import FormatInfo
from backend.data.mix import split_specs
from backend.data.options import DataOptions
from backend.data.sources import BUILTIN_DATASETS, _find_path

if TYPE_CHECKING:
    import datasets

KEEP = 8
FOLDER = "prepared"
PART = ".part-"  # an entry being written
ROOM, ROOM_FLOOR = 4, 256 * 2**20  # kept only with this many times its size free, and this much besides
_INFO = "format.json"


def _files(spec: str, workspace: Path | None) -> list[Path] | None:
    """Every file the spec's datasets are read from, or None when one of them is not a file or folder here."""
    files = []
    for part in split_specs(spec, workspace):
        path = BUILTIN_DATASETS.get(part) or _find_path(part, workspace)
        if path is None:
            return None
        files += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return files


def _code_stamp() -> int:
    """The backend's source as it is now (the mode registry and reward helpers shape a prepared set too): a
    change to how rows are read or checked prepares anew."""
    return max(p.stat().st_mtime_ns for p in Path(__file__).parents[1].rglob("*.py"))


def key(spec: str, mode: str, workspace: Path | None, options: DataOptions) -> str | None:
    import datasets

    try:
        files = _files(spec, workspace)
        if files is None:
            return None
        stats = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    except OSError:  # a file that cannot be read is refused by the preparation itself
        return None
    what = [stats, mode, dataclasses.asdict(options), datasets.__version__, _code_stamp()]
    return hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:20]


def load_kept(workspace: Path, entry: str) -> tuple[datasets.Dataset, FormatInfo] | None:
    import datasets

    folder = Path(workspace) / FOLDER / entry
    if not folder.is_dir():
        return None
    try:
        info = FormatInfo(**json.loads((folder / _INFO).read_text()))
        ds = datasets.load_from_disk(str(folder), keep_in_memory=True)  # no trainer's cache files beside it
    except Exception:  # noqa: BLE001 - a damaged entry is only a cache: prepare anew
        return None
    try:
        os.utime(folder)  # the entries used last are the ones kept
    except OSError:
        pass
    return ds, info


def keep(workspace: Path, entry: str, ds: datasets.Dataset, info: FormatInfo) -> None:
    root = Path(workspace) / FOLDER
    try:
        root.mkdir(exist_ok=True)  # never the workspace itself: a dry run on a new one leaves nothing behind
        if shutil.disk_usage(root).free < ROOM * ds.data.nbytes + ROOM_FLOOR:
            return  # the room is the run's: its checkpoints and its store
        part = Path(tempfile.mkdtemp(prefix=PART, dir=root))
        try:
            _quietly(lambda: ds.save_to_disk(str(part)))
            (part / _INFO).write_text(json.dumps(dataclasses.asdict(info)))
            part.rename(root / entry)  # whole or not at all; another process may have kept it first
        except Exception:  # noqa: BLE001 - only a cache: the run goes on with what it prepared
            shutil.rmtree(part, ignore_errors=True)
            return
        _prune(root)
    except OSError:
        pass


def _prune(root: Path) -> None:
    """The newest KEEP entries stay; a half-written one whose process died goes after an hour."""
    entries = sorted((p for p in root.iterdir() if not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime_ns, reverse=True)
    stale = [p for p in root.glob(PART + "*") if time.time() - p.stat().st_mtime > 3600]
    for old in entries[KEEP:] + stale:
        shutil.rmtree(old, ignore_errors=True)


def _quietly(save) -> None:
    """Without datasets' progress bar: the submit's output and the run's log say what matters."""
    from datasets.utils import logging as bars

    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()
    try:
        save()
    finally:
        if shown:
            bars.enable_progress_bar()


def prepare_kept(spec: str, mode: str, workspace: Path | None, options: DataOptions,
                 keeping: bool = True) -> tuple[datasets.Dataset, FormatInfo]:
    """prepare_dataset's result, from the workspace when it was prepared from these files and settings before;
    kept when it was not, unless `keeping` is False (a check that may still refuse: see keep_prepared)."""
    from backend.data.prepare import prepare_dataset

    entry = key(spec, mode, workspace, options) if workspace is not None else None
    if entry and (kept := load_kept(workspace, entry)):
        return kept
    ds, info = prepare_dataset(spec, mode, workspace=workspace, options=options)
    if entry and keeping:
        keep(workspace, entry, ds, info)
    return ds, info


def keep_prepared(spec: str, mode: str, workspace: Path, options: DataOptions, ds: datasets.Dataset,
                  info: FormatInfo) -> None:
    """Keep what a submit's checks prepared, once they have all passed (a refused command writes nothing)."""
    if (entry := key(spec, mode, workspace, options)) and not (Path(workspace) / FOLDER / entry).is_dir():
        keep(workspace, entry, ds, info)
