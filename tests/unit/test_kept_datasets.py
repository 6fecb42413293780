"""A dataset prepared for a submit is kept in the workspace and loaded by the worker, until its file or the run's
data settings change."""
import json
import os

import pytest

from backend.data import DataOptions, DatasetError
from backend.data.kept import FOLDER, KEEP, keep_prepared, key, prepare_kept


def _write(path, answers):
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "completion": a}) + "\n" for i, a in enumerate(answers)))


def _entries(ws):
    folder = ws / FOLDER
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


def test_kept_once_then_loaded_and_prepared_anew_when_the_file_changes(tmp_path):
    data = tmp_path / "d.jsonl"
    _write(data, ["a", "b", "c"])
    ds, info = prepare_kept("d.jsonl", "sft", tmp_path, DataOptions())
    assert len(_entries(tmp_path)) == 1 and info.num_rows == 3
    again, info_again = prepare_kept("d.jsonl", "sft", tmp_path, DataOptions())
    assert again.to_list() == ds.to_list() and info_again == info
    _write(data, ["a", "b", "c", "d"])
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 10**9))  # a later edit, whatever the clock
    changed, info_changed = prepare_kept("d.jsonl", "sft", tmp_path, DataOptions())
    assert [r["completion"] for r in changed.to_list()] == ["a", "b", "c", "d"] and info_changed.num_rows == 4
    assert len(_entries(tmp_path)) == 2


def test_other_settings_or_mode_are_other_entries_and_errors_are_not_kept(tmp_path):
    _write(tmp_path / "d.jsonl", ["a", "b", "c", "d"])
    sampled, _ = prepare_kept("d.jsonl", "sft", tmp_path, DataOptions(max_samples=2))
    assert len(sampled) == 2
    assert len(prepare_kept("d.jsonl", "sft", tmp_path, DataOptions())[0]) == 4
    assert key("d.jsonl", "sft", tmp_path, DataOptions()) != key("d.jsonl", "grpo", tmp_path, DataOptions())
    (tmp_path / "bad.jsonl").write_text('{"prompt": "q"}\n{"prompt": 3}\n')
    with pytest.raises(DatasetError):
        prepare_kept("bad.jsonl", "sft", tmp_path, DataOptions())
    assert len(_entries(tmp_path)) == 2


def test_only_files_here_are_kept_and_the_newest_entries_stay(tmp_path):
    assert key("someone/a-hub-dataset", "sft", tmp_path, DataOptions()) is None
    assert key("demo-sft-instructions", "sft", tmp_path, DataOptions()) is not None  # a built-in set is a file
    _write(tmp_path / "d.jsonl", [str(i) for i in range(KEEP + 3)])
    for n in range(1, KEEP + 3):
        prepare_kept("d.jsonl", "sft", tmp_path, DataOptions(max_samples=n))
    assert len(_entries(tmp_path)) == KEEP
    assert key("d.jsonl", "sft", tmp_path, DataOptions(max_samples=KEEP + 2)) in _entries(tmp_path)


def test_a_check_keeps_nothing_until_it_has_passed(tmp_path):
    _write(tmp_path / "d.jsonl", ["a", "b"])
    ds, info = prepare_kept("d.jsonl", "sft", tmp_path, DataOptions(), keeping=False)
    assert _entries(tmp_path) == []  # a dry run, or a submit its other checks may still refuse
    keep_prepared("d.jsonl", "sft", tmp_path, DataOptions(), ds, info)
    assert _entries(tmp_path) == [key("d.jsonl", "sft", tmp_path, DataOptions())]
