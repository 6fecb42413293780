"""Choices several tabs offer (models, datasets, presets, runs, labeling sessions), read from the store and the
workspace each time they are asked for, so a tab never imports another tab to list them."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from backend.runs.store import Run, RunStore

REPO_PRESETS = Path(__file__).resolve().parents[1] / "presets"
UPLOAD_TYPES = [".jsonl", ".json", ".csv", ".parquet"]


def model_choices(store: RunStore) -> list[str]:
    """The embedded model, then the base models earlier runs used."""
    from backend.models import EMBEDDED_MODEL

    used = [r.config.model for r in store.list_runs()]
    return list(dict.fromkeys([EMBEDDED_MODEL, *used]))


def generation_model_choices(store: RunStore) -> list[tuple[str, str]]:
    """Models that can write answers: the base models, then finished runs (their base + adapter)."""
    from backend import labeling

    runs = labeling.adapter_choices(store)
    named = {value for _, value in runs}  # a run trained on from a run lists that run once, by its name
    return [(m, m) for m in model_choices(store) if m not in named] + runs


def dataset_choices(store: RunStore, labels: bool = True) -> list[tuple[str, str]]:
    """Built-in sets, the workspace's uploads, the datasets of LLaMA-Factory data folders in the workspace,
    datasets earlier runs used, then (with `labels`) labeling sessions as `labels:<session id>`."""
    from backend.data import BUILTIN_DATASETS
    from backend.data.llamafactory import workspace_datasets

    out = {name: f"{name} (built-in)" for name in BUILTIN_DATASETS}
    uploads = store.workspace / "uploads"
    if uploads.is_dir():
        for f in sorted(uploads.iterdir()):
            if f.suffix.lower() in UPLOAD_TYPES:
                out.setdefault(str(f), f"{f.name} (uploaded)")
    for spec in workspace_datasets(store.workspace):
        folder, name = spec.rsplit("/", 1)
        out.setdefault(spec, f"{name} (LLaMA-Factory, {Path(folder).name}/dataset_info.json)")
    for run in store.list_runs():
        out.setdefault(run.config.dataset, run.config.dataset)
    if labels:
        from backend.labeling import dataset_choices as labeling_sessions

        for label, value in labeling_sessions(store):  # exported for the chosen mode when a run reads it
            out[value] = label
    else:
        from backend.labeling import LABELS_PREFIX

        out = {value: label for value, label in out.items() if not str(value).startswith(LABELS_PREFIX)}
    return [(label, value) for value, label in out.items()]


def preset_choices(workspace: Path) -> list[tuple[str, str]]:
    found = [(f"{p.stem} (built-in)", str(p)) for p in sorted(REPO_PRESETS.glob("*.yaml"))]
    found += [(f"{p.stem} (saved)", str(p)) for p in sorted((Path(workspace) / "presets").glob("*.yaml"))]
    return found


def run_choices(runs: list[Run]) -> list[tuple[str, str]]:
    return [(f"{r.name} · {r.id}", r.id) for r in runs]


def run_selection(store: RunStore, run_id: str | None) -> dict:
    """An update for a run picker: every run as a choice, `run_id` selected."""
    return gr.update(choices=run_choices(store.list_runs()), value=run_id)


def session_choices(store: RunStore) -> list[tuple[str, str]]:
    from backend import labeling

    out = []
    for s in labeling.list_sessions(store):
        kind = "A/B" if s.mode == "pair" else "thumbs"
        out.append((f"{s.name} · {kind} · {s.id}", s.id))
    return out
