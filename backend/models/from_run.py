"""Training on from a finished run (`model: run:<id>[@<step>]`): an SFT warm-up before GRPO, DPO after SFT.

The run's adapter is merged into its base once and kept in <workspace>/models/<id>[@<step>]-<digest>; every run on
from it trains a new adapter on that folder, whose path the adapter records and later loads use
(`RunArtifact.base_model`)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from backend.core.mode_registry import modes_where
from backend.models.load import load_model
from backend.models.ref import RUN_PREFIX, ModelRef, RunArtifact, run_part, saved_model
from backend.models.specs import ModelError, Progress, build_once, is_complete, resolve_model
from backend.runs.store import RunStore

# Files a trainer leaves next to a saved model that do not belong in an export or a merged folder (a pickle, PEFT's
# blank card).
LEFT_OUT = ("training_args.bin", "README.md", "workbench-model.json")


def check_run_model(spec: str, workspace: Path) -> RunArtifact:
    """The saved model of the run `spec` names, when a run can train on from it; ModelError says why not."""
    art = saved_model(RunStore(workspace), *run_part(spec))
    if art.task != "causal":
        causal = modes_where(task="causal")
        raise ModelError(f"{spec} is a {art.run.mode} run's reward model (a classifier); a run trains on from a "
                         f"causal language model: name an {', '.join(causal[:-1])} or {causal[-1]} run", "task", spec)
    return art


def training_model(spec: str, workspace: Path, progress: Progress | None = None) -> str:
    """What a run with `model: spec` trains, as `from_pretrained` takes it: for a run, its adapter (or
    checkpoint) merged into its base, made once; a fully fine-tuned run's own folder. Anything else as
    `resolve_model` says. ModelError says why not (no such run, still running, a reward model)."""
    if not (spec or "").strip().startswith(RUN_PREFIX):
        return resolve_model(spec, progress)
    art = check_run_model(spec, workspace)
    if art.kind == "full":
        return str(art.folder)
    weights = art.folder / "adapter_model.safetensors"
    source = (f"{spec} merged into {art.run.config.model}: adapter of {weights.stat().st_size} bytes, written at "
              f"{weights.stat().st_mtime_ns}")  # a run deleted and its id reused is merged again
    # named by what was merged: a run resumed later (a new adapter) is merged anew beside, never over, the copy
    # that earlier runs trained on (their adapters record its path)
    run_id, step = run_part(spec)
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]
    target = Path(workspace) / "models" / f"{run_id}{f'@{step}' if step is not None else ''}-{digest}"
    if progress and not is_complete(target, source):
        progress(0.0, f"Merging {spec}'s adapter into its base model (once; kept in {target})")
    return str(build_once(target, lambda out: merge_artifact(art, out, progress or (lambda f, m: None)), source,
                          progress))


def merge_artifact(art: RunArtifact, out: Path, report: Progress, dtype: str = "f32") -> None:
    """Base + the run's adapter → merge_and_unload → save_pretrained (safetensors) with the run's tokenizer."""
    merge_ref(ModelRef.of_artifact(art), out, report, dtype)


def base_dtype(model_dir: str) -> str:
    """The dtype a model folder's config names (float32 when it names none, or for a Hub id)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return "float32"
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    return name if name in ("bfloat16", "float16", "float32") else "float32"


MERGED_DTYPES = {"auto": None, "bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def merge_ref(ref: ModelRef, out: Path, report: Progress, dtype: str = "f32") -> None:
    """Base + `ref`'s adapter → merge_and_unload → save_pretrained (safetensors) with the adapter's tokenizer.
    The sums are made in float32, then saved as `dtype` (MERGED_DTYPES; auto: the base's own, as its config says)."""
    import torch

    report(0.0, f"Loading the base model {ref.base}")
    loaded = load_model(ref, task=ref.task, merge=True, progress=lambda f, m: report(0.6 * f, m))
    model, tokenizer = loaded.model, loaded.tokenizer
    name = MERGED_DTYPES[dtype] or base_dtype(ref.resolve())
    model.to(getattr(torch, name))
    report(0.6, f"Saving the merged model ({name}, safetensors)")
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    for name in LEFT_OUT:  # nothing of these should come from save_pretrained, but never ship them
        (out / name).unlink(missing_ok=True)
    report(1.0, "Merged")
