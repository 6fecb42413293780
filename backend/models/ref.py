"""Model references: one parser for every way a model is named in the workbench.

- the embedded model `smollm2-135m-instruct`;
- `run:<id>` (or a bare run id): what a finished run saved, its LoRA adapter on the run's base model or the
  whole fine-tuned model; `run:<id>@<step>` is the checkpoint it saved at that step;
- a local folder: a save_pretrained model (a merged export, a copied full fine-tune) or a PEFT adapter (an
  adapter export) whose adapter_config.json names its base model;
- a Hugging Face Hub id.

`ModelRef.parse` loads no weights and reaches no network: it says what to load (a base model spec, an optional
adapter folder, the task). `resolve` / `check` and `backend.models.load_model` do the rest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from backend.models.specs import (EMBEDDED_MODEL, TRAINED_ON, ModelError, Progress, check_model, looks_like_path,
                                   resolve_model)
from backend.runs.store import RUN_PREFIX, Run, RunStore, is_run_id

CARD = "README.md"
CARD_TAG = "rl-workbench"  # in every exported model card's front matter: marks a folder export may overwrite

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
Task = Literal["causal", "seq_cls"]


# ---- what a run saved ----

@dataclass
class RunArtifact:
    """What a finished run saved: a LoRA adapter or (finetuning: full) a whole model, for a causal LM or
    (rm runs) a one-label sequence classifier."""

    run: Run
    folder: Path
    kind: Literal["lora", "full"]
    task: Task
    workspace: Path | None = None

    @property
    def base_model(self) -> str:
        """The model the run trained on, as `resolve_model` takes it. Trained on from a run (`model:
        run:<id>`): the folder its adapter recorded, that run's merged model (backend/models/from_run.py)."""
        model = self.run.config.model
        if model.strip().startswith(RUN_PREFIX) and self.kind == "lora":
            return _read_json(self.folder / "adapter_config.json").get("base_model_name_or_path") or model
        return model


def saved_model(store: RunStore, run_id: str, step: int | None = None) -> RunArtifact:
    """The adapter (or full model) a run saved, or its checkpoint at `step`; ModelError says why there is none."""
    try:
        run = store.get_run(run_id)
    except KeyError:
        raise ModelError(f"no run with id '{run_id}' in the workspace {store.workspace} "
                         "(`launch.py runs` lists them)", "no_run", run_id) from None
    task = run.config.spec.task
    if step is not None:  # a checkpoint is complete once written, even while the run goes on
        folder = store.run_dir(run.id) / "checkpoints" / f"checkpoint-{step}"
        found = _saved_in(folder, run, task, store.workspace)
        if found is None:
            raise ModelError(f"run {run.id} has no checkpoint at step {step} (no model in {folder})", "unsaved",
                             folder, run)
        return found
    folder = Path(run.adapter_path) if run.adapter_path else store.run_dir(run.id) / "adapter"
    if run.active:
        raise ModelError(f"run {run.id} is still {run.status}: it saves its adapter when it ends; export it once it "
                         "has completed or been stopped", "active", run.id, run)
    found = _saved_in(folder, run, task, store.workspace)
    if found is not None:
        return found
    if run.status == "failed":
        why = f"it failed before saving one ({(run.error or 'no error recorded').splitlines()[0][:300]})"
    else:
        why = f"its folder {folder} holds no adapter_config.json + adapter_model.safetensors nor a full model"
    raise ModelError(f"run {run.id} ({run.status}) produced no adapter to export: {why}", "unsaved", folder, run)


def _saved_in(folder: Path, run: Run, task: Task, workspace: Path | None = None) -> RunArtifact | None:
    if all((folder / f).is_file() for f in ADAPTER_FILES):
        if _read_json(folder / "adapter_config.json").get("task_type") == "SEQ_CLS":
            task = "seq_cls"
        return RunArtifact(run, folder, "lora", task, workspace)
    if (folder / "config.json").is_file() and any(folder.glob("*.safetensors")):
        return RunArtifact(run, folder, "full", task, workspace)
    return None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {path}: {e}", "unreadable", path) from None


def run_part(text: str, workspace: Path | None = None) -> tuple[str, int | None] | None:
    """(run id, checkpoint step or None) when `text` names a run: `run:<id>[@<step>]`, or a bare id (the store's
    format, or a folder under the workspace's runs/). None for anything else."""
    text = (text or "").strip()
    prefixed = text.startswith(RUN_PREFIX)
    run_id, at, step = text[len(RUN_PREFIX):].strip().partition("@") if prefixed else text.partition("@")
    if not prefixed and not (run_id and "/" not in run_id and run_id[0].isalnum()
                             and (is_run_id(run_id) or (workspace and (workspace / "runs" / run_id).is_dir()))):
        return None
    if at and not step.isdigit():
        raise ModelError(f"model {text}: the checkpoint step after '@' must be a whole number (e.g. "
                         f"{RUN_PREFIX}{run_id}@500)", "no_run", run_id)
    return run_id, int(step) if at else None


# ---- references ----

@dataclass(frozen=True)
class ModelRef:
    """A model to load: `base` (a spec `resolve_model` accepts), optionally a PEFT `adapter` folder on it, and
    its `task` ("causal", "seq_cls", or None when only loading can tell, as for a Hub id)."""

    kind: Literal["embedded", "run", "export", "folder", "hub"]
    base: str
    adapter: str | None = None
    task: Task | None = "causal"
    text: str = field(default="", compare=False)  # as it was given
    label: str = field(default="", compare=False)  # a short name for people
    run: Run | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.base, self.adapter)

    def resolve(self, progress: Progress | None = None) -> str:
        """The base model as `from_pretrained` takes it (converts the embedded model once)."""
        return resolve_model(self.base, progress)

    def check(self) -> None:
        """Validate the base model without loading weights (a Hub id: its config.json, within seconds)."""
        check_model(self.base)

    def with_label(self, label: str) -> ModelRef:
        return replace(self, label=label)

    @classmethod
    def parse(cls, text: str, where: RunStore | str | Path | None = None) -> ModelRef:
        """What `text` names. `where` (a store, or a workspace folder) is needed for runs, and relative folders
        are also looked up inside that workspace. Raises ModelError (with a `reason`) for what cannot be used."""
        text = (text or "").strip()
        store, workspace = _store_and_workspace(where)
        found = run_part(text, workspace)
        if found is not None:
            return cls._of_run(text, *found, store, workspace)
        if text.lower() == EMBEDDED_MODEL:
            return cls("embedded", EMBEDDED_MODEL, text=text, label=EMBEDDED_MODEL)
        path = Path(text).expanduser()
        if text and workspace and not path.is_absolute() and not path.exists() and (workspace / path).is_dir():
            path = workspace / path
        if text and path.is_dir():
            return cls.of_folder(path.resolve(), text)
        if not text or path.exists() or looks_like_path(text):
            resolve_model(text)  # raises: nothing given, a file, or a missing folder
        return cls("hub", text, task=None, text=text, label=text)

    @classmethod
    def of_folder(cls, path: Path, text: str = "") -> ModelRef:
        """A local folder: a PEFT adapter (on the base its adapter_config.json names) or a whole model."""
        kind = "export" if is_export(path) else "folder"
        if (path / "adapter_config.json").is_file():
            config = _read_json(path / "adapter_config.json")
            # an export names a Hub base for other tools; TRAINED_ON keeps the exact one it was trained on
            trained_on = _read_json(path / TRAINED_ON) if (path / TRAINED_ON).is_file() else {}
            base = trained_on.get("base") or config.get("base_model_name_or_path")
            if not base:
                raise ModelError(f"folder {path} holds a LoRA adapter whose adapter_config.json names no base model "
                                 "(base_model_name_or_path)", "no_base", path)
            task = "seq_cls" if config.get("task_type") == "SEQ_CLS" else "causal"
            return cls(kind, base, str(path), task, text or str(path), path.name)
        if not (path / "config.json").is_file():
            resolve_model(str(path))  # raises: no config.json
        archs = _read_json(path / "config.json").get("architectures") or []
        task = ("seq_cls" if any(a.endswith("ForSequenceClassification") for a in archs)
                else "causal" if any(a.endswith("ForCausalLM") for a in archs) else None)
        return cls(kind, str(path), None, task, text or str(path), path.name)

    @classmethod
    def of_artifact(cls, art: RunArtifact, text: str = "") -> ModelRef:
        run = art.run
        label = f"{run.name} ({run.mode})"
        if art.kind == "full":
            return cls("run", str(art.folder), None, art.task, text or RUN_PREFIX + run.id, label, run)
        return cls("run", art.base_model, str(art.folder), art.task, text or RUN_PREFIX + run.id, label, run)

    @classmethod
    def _of_run(cls, text: str, run_id: str, step: int | None, store: RunStore | None,
                workspace: Path | None) -> ModelRef:
        if store is not None:
            return cls.of_artifact(saved_model(store, run_id, step), text)
        if workspace is None:
            raise ModelError(f"model {text} names a run, but no workspace was given to find it in", "no_run", run_id)
        # a workspace without its database (a copied runs/ folder): the run's saved folder is all there is
        run_dir = workspace / "runs" / run_id
        if not run_dir.is_dir():
            raise ModelError(f"no run with id '{run_id}' in the workspace {workspace}", "no_run", run_id)
        folder = run_dir / ("adapter" if step is None else f"checkpoints/checkpoint-{step}")
        if not ((folder / "adapter_config.json").is_file() or (folder / "config.json").is_file()):
            raise ModelError(f"run {run_id} has no saved model in {folder}", "unsaved", folder)
        return replace(cls.of_folder(folder, text), kind="run", label=run_id)


def _store_and_workspace(where) -> tuple[RunStore | None, Path | None]:
    if where is None:
        return None, None
    if isinstance(where, RunStore):
        return where, where.workspace
    workspace = Path(where)
    if (workspace / "workbench.db").is_file():
        return RunStore(workspace), workspace
    return None, workspace


def is_export(folder: Path) -> bool:
    """True for a folder the workbench exported (its model card carries the workbench's tag)."""
    try:
        return CARD_TAG in (folder / CARD).read_text(errors="replace")[:2000]
    except OSError:
        return False
