"""The models a session compares: a plain model spec, or run:<id> for a run's adapter on its base model."""
from __future__ import annotations

from pathlib import Path

from backend.labeling.records import LabelError
from backend.modes.registry import mode_spec
from backend.store import RunStore


def describe_model(store: RunStore, spec: str) -> str:
    """A short name: a run's adapter by the run's name, a local folder by its own name."""
    if spec and spec.startswith("run:"):
        try:
            run = store.get_run(spec[4:])
            return f"{run.name} (adapter on {describe_model(store, run.config.model)})"
        except KeyError:
            return spec
    if spec and spec.startswith(("/", ".", "~")) and Path(spec).expanduser().is_dir():
        return Path(spec).name
    return spec

def resolve_candidate(store: RunStore, spec: str) -> tuple[str, str | None]:
    """(base model spec, adapter folder or None). `run:<id>` is that run's base model + its adapter."""
    spec = (spec or "").strip()
    if not spec.startswith("run:"):
        return spec, None
    run_id = spec[4:]
    try:
        run = store.get_run(run_id)
    except KeyError:
        raise LabelError(f"model {spec}: no run with id '{run_id}'") from None
    if not mode_spec(run.mode).writes_answers:
        raise LabelError(f"model {spec}: run {run.name} trained a reward model, which scores answers but does not "
                         "write them; choose a DPO, KTO, SFT or RL run")
    if not run.adapter_path or not Path(run.adapter_path).is_dir():
        raise LabelError(f"model {spec}: run {run.name} has no saved adapter ({run.status}); choose a finished run")
    if not (Path(run.adapter_path) / "adapter_config.json").is_file():  # full fine-tuning saved a whole model
        return run.adapter_path, None
    return run.config.model, run.adapter_path

def adapter_choices(store: RunStore) -> list[tuple[str, str]]:
    """(label, run:<id>) for every run with a saved adapter that writes answers."""
    out = []
    for run in store.list_runs(("completed", "stopped")):
        if run.adapter_path and mode_spec(run.mode).writes_answers and Path(run.adapter_path).is_dir():
            out.append((f"{run.name}: {run.mode} adapter on {run.config.model}", f"run:{run.id}"))
    return out

def check_candidate(store: RunStore, spec: str) -> None:
    from backend.models import ModelError, check_model

    base, _ = resolve_candidate(store, spec)
    try:
        check_model(base)
    except ModelError as e:
        raise LabelError(f"model {spec}: {e}") from None
