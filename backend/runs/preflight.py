"""Before a run is queued: the checks that refuse it with the reason (model reachable, dataset trainable, memory
and disk enough), and the disk checks a running run is judged by."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from backend.config import ConfigError, RunConfig
from backend.runs import gpus
from backend.runs.checkpoints import last_checkpoint
from backend.runs.store import RUN_PREFIX, RunStore

if TYPE_CHECKING:
    from backend.data import FormatInfo
    from backend.models.memory import MemoryEstimate

log = logging.getLogger(__name__)


def tokenizer_tool_problem(tokenizer_source, template_name: str, model: str) -> str | None:
    """tool_template_problem for the tokenizer saved at `tokenizer_source` (no weights loaded), with the template
    set; a tokenizer that cannot be read is said so."""
    from backend.data.templates import template_text, tool_template_problem
    from backend.models import load_tokenizer

    try:
        tokenizer = load_tokenizer(tokenizer_source, chat_template=template_text(template_name))
    except Exception as e:  # noqa: BLE001 - the model's own check says why it cannot be loaded
        return f"the tokenizer could not be read to check its chat template ({e})"
    return tool_template_problem(tokenizer, template_name, model)


def tools_problems(config: RunConfig, tokenizer_source, workspace: Path) -> list[str]:
    """The run's tools made and tried (a dry call each), and its chat template able to carry them."""
    from backend.tools import validate_tools

    errors = validate_tools(config.tools, workspace)
    if why := tokenizer_tool_problem(tokenizer_source, config.data.chat_template, config.model):
        errors.append(f"data.chat_template: {why}")
    return errors


def environment_problems(config: RunConfig, workspace: Path, dataset) -> list[str]:
    """The run's environment found, made, described and reset from the dataset's first row (when there is one)."""
    from backend.tools.environment import validate_environment

    row = dict(dataset[0]) if dataset is not None and len(dataset) else None
    owns = any(s.type == "environment" for s in config.reward_sources)
    return validate_environment(config.environment, workspace, config.rl.environment_timeout_s, row, owns)


def preflight(config: RunConfig, workspace: Path, keep_data: bool = False) -> FormatInfo:
    """Refuse a run before any process starts: the model must be reachable and the dataset trainable.
    Returns the training dataset's format (what the CLI reports). `keep_data`: a submit's, whose worker loads the
    prepared dataset (backend/data/kept.py) once every check has passed."""
    from backend.data import DataOptions, DatasetError, generation_rows, prepare_eval_dataset
    from backend.data.kept import keep_prepared, prepare_kept
    from backend.data.templates import chat_template_problem, template_problem
    from backend.models import ModelError, check_model, local_folder, unknown_modules
    from backend.models.from_run import check_run_model
    from backend.rewards import validate_sources

    errors, model_ok = [], False
    try:
        model, tokenizer_folder = config.model, local_folder(config.model)
        if config.model.strip().startswith(RUN_PREFIX):  # training on from a run: it must have saved a causal LM
            art = check_run_model(config.model, workspace)  # its base's modules, its own saved tokenizer
            model, tokenizer_folder = (art.base_model if art.kind == "lora" else str(art.folder)), art.folder
        else:
            check_model(config.model)
    except ModelError as e:
        errors.append(f"model: {e}")
    if config.teacher:
        errors += teacher_problems(config, workspace)
    else:
        model_ok = True
        if config.finetuning == "lora" and (why := unknown_modules(model, config.lora.target_modules)):
            errors.append(f"lora.target_modules: {why}")
        if why := template_problem(config.data.chat_template, tokenizer_folder):
            errors.append(f"data.chat_template: {why}")
        elif config.tools or config.environment:
            errors += tools_problems(config, tokenizer_folder or model, workspace)
    try:
        dataset, info = prepare_kept(config.dataset, config.mode, workspace, DataOptions.of(config), keeping=False)
    except DatasetError as e:
        dataset = None
        errors.append(f"dataset: {e}")
    else:
        if config.reward_sources and config.spec.online_rl:
            errors += validate_sources(config.reward_sources, dataset.column_names, workspace)
        if model_ok and (why := chat_template_problem(config, tokenizer_folder, info)):
            errors.append(f"data.chat_template: {why}")
    if config.environment:
        errors += environment_problems(config, workspace, dataset)
    e = config.eval
    try:  # the evaluation dataset is checked even when the training one failed
        eval_dataset = prepare_eval_dataset(e.dataset, e.split, config.seed, config.mode, dataset,
                                            workspace=workspace, options=DataOptions.of(config))[1]
    except DatasetError as err:
        eval_dataset = None
        errors.append(f"{'eval.dataset' if e.dataset else 'eval.split'}: {err}")
    if e.generate and eval_dataset is not None and not config.spec.online_rl:
        try:  # sft / dpo / kto score only what they generate at evaluation: the sources read those rows
            rows = generation_rows(eval_dataset, config.mode)
        except DatasetError as err:
            errors.append(f"eval.generate: {err}")
        else:
            errors += validate_sources(config.reward_sources, ["prompt", *rows.columns], workspace)
    if "ppo" in config.spec.sections and config.ppo.value_init_run:
        from backend.rewards import RewardSourceError
        from backend.rewards.model import locate_reward_model

        try:
            locate_reward_model(config.ppo.value_init_run, Path(workspace))
        except RewardSourceError as e:
            errors.append(f"ppo.value_init_run: {e}")
    from backend.runs.distributed import check

    errors += check(config, workspace)
    if why := disk_problem(config, workspace):
        errors.append(why)
    if errors:
        raise ConfigError(errors)
    if keep_data:
        keep_prepared(config.dataset, config.mode, workspace, DataOptions.of(config), dataset, info)
    return info


def teacher_problems(config: RunConfig, workspace: Path) -> list[str]:
    """Why a distilling mode's teacher cannot teach the run's model: unreachable, not a causal language model, or
    another vocabulary than the student's (GKDTrainer compares whole next-token distributions, and refuses a
    different vocab_size only once both models have loaded). The vocabularies are compared from the config.json
    files on this machine; one that is not here yet is not compared."""
    from backend.models import ModelError, check_model
    from backend.models.from_run import check_run_model
    from backend.models.memory import read_shape

    path = next(f"{s}.teacher" for s in config.spec.sections if hasattr(getattr(config, s), "teacher"))
    try:
        if config.teacher.startswith(RUN_PREFIX):
            check_run_model(config.teacher, workspace)
        else:
            check_model(config.teacher)
    except ModelError as e:
        return [f"{path}: {e}"]
    try:
        student, teacher = read_shape(config.model, workspace), read_shape(config.teacher, workspace)
    except ModelError:
        return []
    if student.vocab_size != teacher.vocab_size:
        return [f"{path}: the teacher's vocabulary has {teacher.vocab_size} tokens and the model's "
                f"{student.vocab_size}; distillation compares their next-token distributions token by token, so "
                "the teacher must share the model's tokenizer (a model of the same family, or a run trained from "
                "the same base)"]
    return []


def memory_estimate(config: RunConfig, workspace: Path, here: gpus.Machine | None = None) -> MemoryEstimate:
    """The memory one process of the run needs (backend/models/memory.py), against this machine's: available RAM
    on a CPU, each GPU's memory on GPUs. ModelError when the model's config.json is not on this machine."""
    from backend.models import ModelError
    from backend.models.memory import estimate_memory, read_shape

    device, available = gpus.memory_here(here)
    teacher = None
    if config.teacher:
        try:
            teacher = read_shape(config.teacher, workspace)
        except ModelError:  # not on this machine yet: counted at the model's size, and the estimate says so
            pass
    return estimate_memory(config, read_shape(config.model, workspace), device, available=available,
                           teacher=teacher)


def memory_lines(config: RunConfig, workspace: Path) -> list[str]:
    """The run log's memory lines: the estimate and, when it does not fit, a warning. Only a warning: the
    estimate is approximate, and memory another process holds now may be free when the run starts."""
    from backend.models import ModelError

    try:
        estimate = memory_estimate(config, workspace)
    except ModelError as e:
        return [f"memory: no estimate before the start ({e})"]
    except Exception as e:  # noqa: BLE001 - the estimate is advice: it never keeps a run from starting
        log.exception("estimating a run's memory failed")
        return [f"memory: no estimate before the start ({type(e).__name__}: {e})"]
    lines = [f"memory: {estimate.summary()}"]
    if estimate.fits is False:
        lines.append("warning: the memory estimate exceeds this machine's memory; the run may be killed for "
                     "memory. Lower per_device_train_batch_size, max_length or rl.max_completion_length, turn on "
                     "gradient_checkpointing, or train a LoRA adapter instead")
    return lines


def disk_problem(config: RunConfig, workspace: Path, free: int | None = None) -> str | None:
    """Why the run's checkpoints and final adapter would not fit on the workspace's disk, or None (also when
    the model's size cannot be read here: the check does not guess). free: the disk's free bytes; None
    measures them."""
    from backend.models import ModelError
    from backend.models.memory import run_disk_need, size_text

    try:
        need = run_disk_need(config, workspace)
    except ModelError:
        return None
    except Exception:  # noqa: BLE001 - an estimate that fails never keeps a run from starting
        log.exception("estimating a run's disk need failed")
        return None
    if free is None:
        folder = Path(workspace).resolve() / "runs"  # where checkpoints go
        while not folder.exists():  # not made yet: the disk it will be made on
            folder = folder.parent
        free = shutil.disk_usage(folder).free
    if need <= free:
        return None
    kept = config.checkpoints_kept()
    final = "the adapter" if config.finetuning == "lora" else "the model"
    what = f"{kept} checkpoint{'s' if kept > 1 else ''} and {final}" if kept else final
    return (f"disk: the run needs about {size_text(need)} for {what}, the workspace disk has {size_text(free)} free; "
            "free some space, keep fewer checkpoints (save_total_limit) or use a workspace on a larger disk")


_NEARLY_FULL = 64 * 2**20  # less free than this on a run's disk after a failure: the disk is why


def disk_nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < _NEARLY_FULL
    except OSError:
        return False


def disk_full_message(store: RunStore, run_id: str, error: str) -> str:
    """A run that failed writing to a full disk: which disk, how full, and what is left to resume from."""
    from backend.models.memory import size_text

    folder = store.run_dir(run_id)
    free = shutil.disk_usage(folder).free
    kept = last_checkpoint(store, run_id)
    left = f"the last complete checkpoint (step {kept[1]}) is kept: free some space, then resume the run" if kept \
        else "no complete checkpoint was saved"
    return f"the disk holding {folder} is full ({size_text(free)} free): {error}; {left}"
