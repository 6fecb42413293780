"""What a server serves: any model reference as one folder `from_pretrained` loads, the adapter merged in (one
matrix product per layer instead of three, and a folder any server reads)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from backend.models.from_run import merge_ref, training_model
from backend.models.ref import RUN_PREFIX, ModelRef, run_part
from backend.models.specs import ModelError, Progress, build_once


def serving_folder(spec: str, workspace: Path, progress: Progress | None = None) -> tuple[str, str]:
    """(the folder or Hub id to serve, a short name for it) for `spec`: a run or a checkpoint (its adapter merged
    into its base once, as a run trained on from it has it), an adapter export or folder (merged once into
    <workspace>/models), a merged export, a folder, a Hub id, the embedded model. ModelError says why not."""
    ref = ModelRef.parse(spec, workspace)
    if ref.task == "seq_cls":
        from backend.core.mode_registry import modes_where

        raise ModelError(f"{spec} is a reward model (a classifier that scores text); serve a causal language model: "
                         f"a run of {', '.join(modes_where(task='causal'))}, an export of one, or a base model",
                         "task", spec)
    name = ref.label or Path(spec).name or spec
    if ref.kind == "run":
        run_id, step = run_part(spec, workspace)
        return training_model(f"{RUN_PREFIX}{run_id}" + (f"@{step}" if step is not None else ""), workspace,
                              progress), name
    if ref.adapter is None:
        return ref.resolve(progress), name
    weights = Path(ref.adapter) / "adapter_model.safetensors"
    stamp = f"{weights.stat().st_size}:{weights.stat().st_mtime_ns}" if weights.is_file() else ""
    source = f"{ref.adapter} merged into {ref.base} ({stamp})"
    target = Path(workspace) / "models" / f"serve-{Path(ref.adapter).name}-{hashlib.sha1(source.encode()).hexdigest()[:8]}"
    report = progress or (lambda f, m: None)
    return str(build_once(target, lambda out: merge_ref(ref, out, report), source, progress)), name
