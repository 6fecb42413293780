"""How the online RL modes generate faster than TRL's default, without changing what they learn: each distinct
prompt prefilled once (backend/models/shared_prefill.py), and, where rl.merged_generation allows, the LoRA adapter
folded into the weights while generating (backend/models/merged.py)."""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial

from backend.config import RunConfig


def merge_for_generation(c: RunConfig, dropout_applies: bool = True) -> tuple[bool, str]:
    """Whether the run generates with its adapter merged, and why not when it does not (for the run log).
    `dropout_applies`: the trainer generates in training mode (TRL's), so LoRA dropout is part of generation."""
    rl = c.rl
    if rl.merged_generation == "off":
        return False, "rl.merged_generation is off"
    if rl.generation_backend == "vllm":
        return False, "vLLM generates"
    if c.finetuning != "lora":
        return False, "no adapter: full fine-tuning"
    if c.quantization != "none" or c.lora.use_dora:
        return False, "a 4-bit base or DoRA does not fold in exactly"
    if c.world_size > 1 and c.distributed.strategy != "ddp":
        return False, f"{c.distributed.strategy} shards the weights"
    if rl.merged_generation == "auto" and c.lora.dropout and dropout_applies:
        return False, (f"LoRA dropout {c.lora.dropout:g} applies while generating, and merged it would not "
                       "(rl.merged_generation: on merges anyway)")
    return True, ""


def said(c: RunConfig, is_main: bool, dropout_applies: bool = True) -> bool:
    """`merge_for_generation`, with the reason it does not merge in the run log."""
    merged, why = merge_for_generation(c, dropout_applies)
    if not merged and is_main:
        print(f"generation: through the adapter ({why})", flush=True)
    return merged


@contextmanager
def sharing_prompts(model):
    """Inside, `model.generate` prefills each distinct prompt once."""
    from backend.models.shared_prefill import generate_sharing_prompts

    model.generate = partial(generate_sharing_prompts, model.generate, model)  # an instance attribute, then gone
    try:
        yield model
    finally:
        del model.generate


@contextmanager
def merged_if(trainer, model):
    """`merged_lora(model)` when `trainer.merge_generation`, the first time said in the run log with the number
    of layers merged."""
    if not trainer.merge_generation:
        yield
        return
    from backend.models.merged import merged_lora

    with merged_lora(model) as layers:
        if not getattr(trainer, "_merge_said", False) and trainer.accelerator.is_main_process:
            print(f"generation: the adapter merged into the weights ({layers} layers)", flush=True)
            trainer._merge_said = True
        yield


class FastGeneration:
    """Mixed into TRL's GRPOTrainer / RLOOTrainer (1.16): their transformers generation
    (`_generate_single_turn`) prefills each prompt once and, with `merge_generation`, runs inside `merged_lora`;
    the log-probs and the update run outside, on the untouched weights."""

    merge_generation = False

    def _generate_single_turn(self, *args, **kwargs):
        model = self.accelerator.unwrap_model(self.model_wrapped)
        with sharing_prompts(model), merged_if(self, model):
            return super()._generate_single_turn(*args, **kwargs)


def fast_generation(trainer_cls: type, c: RunConfig, is_main: bool) -> type:
    """`trainer_cls` generating with shared prompt prefills, and merged when the run's settings allow it (said in
    the run log either way)."""
    return type(trainer_cls.__name__, (FastGeneration, trainer_cls),
                {"__module__": __name__, "__doc__": trainer_cls.__doc__, "merge_generation": said(c, is_main)})
