"""A run's checkpoints: the complete ones on disk, and which one a resumed attempt starts from."""
from __future__ import annotations

import json
from pathlib import Path

from backend.runs.store import Run, RunStore


def checkpoints(store: RunStore, run_id: str) -> list[tuple[int, Path]]:
    """The run's complete checkpoints as (step, folder), oldest first. transformers (and the PPO loop) write a
    checkpoint in place, not atomically, trainer_state.json last: a folder without a readable one was cut off
    mid-save (a kill, a full disk) and is skipped, and the older ones are only deleted after it is written."""
    folder = store.run_dir(run_id) / "checkpoints"
    found = []
    for path in folder.glob("checkpoint-*") if folder.is_dir() else ():
        try:
            step = json.loads((path / "trainer_state.json").read_text())["global_step"]
        except (OSError, ValueError, KeyError):
            continue
        found.append((int(step), path))
    return sorted(found)


def last_checkpoint(store: RunStore, run_id: str) -> tuple[Path, int] | None:
    """The run's newest complete checkpoint and its step, or None."""
    found = checkpoints(store, run_id)
    if not found:
        return None
    step, path = found[-1]
    return path, step


def resume_checkpoint(store: RunStore, run: Run) -> str | None:
    """What the worker passes as `resume_from_checkpoint`: the last checkpoint, on a resumed attempt."""
    if run.attempt <= 1:
        return None
    found = last_checkpoint(store, run.id)
    return str(found[0]) if found else None
