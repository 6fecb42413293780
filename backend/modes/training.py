"""Plumbing shared by every mode: the run's context, trainer arguments, LoRA, and the store callback."""
from __future__ import annotations

import dataclasses
import importlib
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from transformers import TrainerCallback

from backend import reporting
from backend.config import RunConfig
from backend.config.build import field_info, get_path, trainer_settings
from backend.config.run_config import AUTO_SAVE_RATIO
from backend.core.mode_registry import mode_spec


class RunSink(Protocol):
    """What the training process reads and writes of its run: the run store (backend.runs.store.RunStore) is
    one; the modes know it only by these."""

    workspace: Path

    def add_metrics(self, run_id: str, step: int, values: dict) -> int: ...
    def add_samples(self, run_id: str, step: int, items: list[dict]) -> None: ...
    def update_run(self, run_id: str, **fields) -> None: ...
    def request_stop(self, run_id: str) -> None: ...
    def stop_requested(self, run_id: str) -> bool: ...


@dataclass
class TrainContext:
    config: RunConfig
    run_id: str
    run_dir: Path
    store: RunSink
    model_path: str
    dataset: object  # datasets.Dataset, already validated for the mode
    eval_dataset: object = None  # the same, for evaluation; None: the run is not evaluated

    @property
    def output_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def adapter_dir(self) -> Path:
        return self.run_dir / "adapter"

    def tokenizer(self):
        """The model's tokenizer, with the run's chat template when one is chosen (data.chat_template)."""
        from backend.data.templates import template_text
        from backend.models import load_tokenizer

        return load_tokenizer(self.model_path, chat_template=template_text(self.config.data.chat_template))

    @property
    def is_main(self) -> bool:
        """Rank 0 (set by accelerate launch / torchrun): the only process that writes to the store."""
        return int(os.environ.get("RANK", "0")) == 0


def resolved_precision(config: RunConfig) -> str:
    """auto → fp32 on CPU (bf16 is ~12× slower there), bf16 on a GPU that has it, else fp16."""
    if config.precision != "auto":
        return config.precision
    if not torch.cuda.is_available():
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def model_dtype(config: RunConfig) -> torch.dtype:
    # LoRA keeps the frozen base in the compute dtype; full fine-tuning keeps fp32 master weights.
    if config.finetuning == "lora" and resolved_precision(config) == "bf16":
        return torch.bfloat16
    return torch.float32


def model_kwargs(config: RunConfig) -> dict:
    """`from_pretrained` arguments for the trained model: its dtype and, for QLoRA, the 4-bit base (NF4 with
    double quantization, computing in the run's precision) placed on this process's GPU."""
    kwargs = {"dtype": model_dtype(config)}
    if config.quantization == "4bit":
        from transformers import BitsAndBytesConfig

        compute = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(resolved_precision(config), torch.float32)
        kwargs.update(quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                             bnb_4bit_use_double_quant=True,
                                                             bnb_4bit_compute_dtype=compute,
                                                             bnb_4bit_quant_storage=compute),
                      device_map={"": int(os.environ.get("LOCAL_RANK", "0"))})  # a 4-bit base loads onto its GPU
    return kwargs


def args_class(mode: str) -> type:
    """The config dataclass of `mode`'s trainer (its registry entry's `args_class`)."""
    module, _, name = mode_spec(mode).args_class.partition(":")
    return getattr(importlib.import_module(module), name)


def schema_args(config: RunConfig, args_cls: type) -> dict:
    """The run config's settings that `args_cls` has a field for, under TRL's name (config.build.trainer_settings
    lists them); a setting the schema hands over and TRL lacks is an error (tests/unit/test_trainer_args.py)."""
    fields = {f.name: f for f in dataclasses.fields(args_cls)}
    out = {}
    for path, names in trainer_settings(config.mode):
        name = next((n for n in names if n in fields), None)
        if name is None:
            raise TypeError(f"setting {path}: {args_cls.__name__} has no field {' or '.join(names)}")
        value = get_path(config, path)
        if value == (field_info(path).json_schema_extra or {}).get("unset", object()):
            value = None  # the schema's "off" (0) is TRL's None
        out[name] = [value] if _takes_list(fields[name]) and not isinstance(value, list) else value
    return out


def _takes_list(f: dataclasses.Field) -> bool:
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return isinstance(default, list) or str(f.type).lower().startswith("list")


def trainer_args(ctx: TrainContext, **mode_kwargs):
    """The mode's trainer arguments: every schema setting TRL names (schema_args), then what the workbench sets
    or converts itself; `mode_kwargs` adds the mode's own conversions."""
    c = ctx.config
    args_cls = args_class(c.mode)
    precision = resolved_precision(c)
    return args_cls(**(schema_args(c, args_cls) | dict(
        output_dir=str(ctx.output_dir),
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=not torch.cuda.is_available(),
        logging_first_step=True,
        save_strategy="steps" if c.save_steps else "no",
        save_steps=AUTO_SAVE_RATIO if c.save_steps == -1 else c.save_steps or 500,  # <1: a ratio of the run
        save_total_limit=c.save_total_limit or None,
        disable_tqdm=True,
        ddp_find_unused_parameters=False,
        dataloader_pin_memory=torch.cuda.is_available(),
        **reporting.trainer_settings(c.report_to, ctx.run_id, c.name, ctx.run_dir, ctx.store.workspace),
        **eval_settings(ctx),
        **mode_kwargs,
    )))


def eval_settings(ctx: TrainContext) -> dict:
    """Evaluation every `eval.steps` steps; 0 leaves it to `evaluate_at_end`."""
    if ctx.eval_dataset is None or ctx.config.spec.online_rl:  # RL: generation_eval.GenerationEval instead
        return {}
    e = ctx.config.eval
    return {"eval_strategy": "steps" if e.steps else "no", "eval_steps": e.steps or None,
            "per_device_eval_batch_size": e.batch_size or ctx.config.per_device_train_batch_size}


def evaluate_at_end(trainer, ctx: TrainContext, stopped: bool) -> None:
    """A finished run is always evaluated on its last step (unless the interval has just done it); a stopped
    one is not, so that a stop stays quick. Every rank calls this: evaluation is a collective."""
    every, step = ctx.config.eval.steps, trainer.state.global_step
    if ctx.eval_dataset is None or stopped or (every and step % every == 0) or ctx.config.spec.online_rl:
        return
    trainer.evaluate()


def lora_config(config: RunConfig, task_type: str = "CAUSAL_LM"):
    if config.finetuning != "lora":
        return None
    from peft import LoraConfig

    modules = config.lora.target_modules
    return LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules="all-linear" if modules == ["all-linear"] else modules,
        use_dora=config.lora.use_dora,
        use_rslora=config.lora.use_rslora,
        task_type=task_type,
    )


def peak_memory() -> dict[str, float]:
    """This process's peak memory so far, in GiB: resident set, and on a GPU the most torch has allocated and
    the GPU's utilisation now (percent busy, when NVML can tell)."""
    import resource

    out = {"memory/peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # KiB on Linux
    if torch.cuda.is_available():
        out["memory/gpu_peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
        try:
            out["gpu/utilization"] = float(torch.cuda.utilization())
        except Exception:  # noqa: BLE001 - no pynvml / NVML here: the memory figure still counts
            pass
    return out


def _broadcast_flag(flag: bool) -> bool:
    """All ranks must stop on the same step, or the next collective hangs."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return flag
    device = f"cuda:{torch.cuda.current_device()}" if torch.distributed.get_backend() == "nccl" else "cpu"
    t = torch.tensor([int(flag)], device=device)
    torch.distributed.broadcast(t, src=0)
    return bool(t.item())


class StoreCallback(TrainerCallback):
    """Streams the trainer's logs and progress into the run store; turns a stop request into a clean stop."""

    def __init__(self, store: RunSink, run_id: str, is_main: bool, node_main: bool | None = None):
        # node_main: this machine's first process, which keeps the progress of this machine's record
        self.store, self.run_id, self.is_main = store, run_id, is_main
        self.node_main = is_main if node_main is None else node_main
        self.stopped = False
        self.logged: tuple[int, set[str]] = (-1, set())  # the step last logged and the names stored for it
        self._step_began: float | None = None
        self._step_seconds: list[float] = []  # since the last log: the steps' own time (no evaluation, no saving)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.node_main:
            now = time.time()
            self.store.update_run(self.run_id, total_steps=state.max_steps, step=state.global_step,
                                  train_started_at=now, step_at=now)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.is_main and logs:
            # the last step is logged again with the run's totals (train_runtime, ...) and an evaluation's with
            # eval_*: both repeat epoch, and the memory is read each time; each name is stored once per step
            step, names = self.logged
            if step != state.global_step:
                step, names = state.global_step, set()
            timing = {"step_time": statistics.fmean(self._step_seconds)} if self._step_seconds else {}
            self._step_seconds = []
            # TRL's online trainers log their own step_time; the others get the doctor's slowdown check from ours
            values = {k: v for k, v in {**timing, **logs, **peak_memory()}.items() if k not in names}
            names.update(values)
            self.logged = (step, names)
            self.store.add_metrics(self.run_id, step, values)
            shown = ", ".join(f"{k}={v:.4g}" for k, v in logs.items() if isinstance(v, (int, float)))
            print(f"step {state.global_step}/{state.max_steps}: {shown}", flush=True)

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._step_began is not None:
            self._step_seconds.append(time.perf_counter() - self._step_began)
            self._step_began = None
        requested = False
        if self.node_main:
            self.store.update_run(self.run_id, step=state.global_step, step_at=time.time())
        if self.is_main:
            requested = self.store.stop_requested(self.run_id)
        if _broadcast_flag(requested):
            self.stopped = True
            control.should_training_stop = True
            if self.is_main:
                print(f"stop requested: stopping after step {state.global_step}", flush=True)


class WallClockSave(TrainerCallback):
    """A checkpoint every `minutes` of wall time since the last one, beside save_steps' (save_minutes). Rank 0's
    clock decides for every rank: saving is collective, and the ranks' clocks differ."""

    def __init__(self, minutes: float, clock=time.monotonic):
        self.every_s, self.clock = minutes * 60, clock
        self.last = clock()

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        if _broadcast_flag(self.clock() - self.last >= self.every_s):
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        self.last = self.clock()
