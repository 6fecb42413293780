"""How the online RL modes generate faster than TRL's default, without changing what they learn: each distinct
prompt prefilled once (backend/models/shared_prefill.py), and, where rl.merged_generation allows, the LoRA adapter
folded into the weights while generating (backend/models/merged.py)."""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager, nullcontext
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
    """`merged_lora(model)` when `trainer.merge_generation`, the first time said in the run log: the number of
    layers merged, or, when none could be, why not (generation then runs through the adapter)."""
    if not trainer.merge_generation:
        yield
        return
    from backend.models.merged import merged_lora

    with merged_lora(model) as layers:
        if not getattr(trainer, "_merge_said", False) and trainer.accelerator.is_main_process:
            print(merge_line(model, layers), flush=True)
            trainer._merge_said = True
        yield


def merge_line(model, layers: int) -> str:
    """The run log's line for generating with `layers` LoRA layers merged."""
    if layers:
        return f"generation: the adapter merged into the weights ({layers} layers)"
    return (f"generation: through the adapter (no LoRA layer could be merged for generation: "
            f"{_why_none_merged(model)})")


def _why_none_merged(model) -> str:
    """Why backend/models/merged.py's mergeable_layers finds none among the model's LoRA layers."""
    import torch
    from peft.tuners.lora import Linear as LoraLinear

    lora = [m for m in model.modules() if isinstance(m, LoraLinear)]
    if not lora:
        return "the model has no LoRA Linear layer (an adapter of another kind, or none)"
    shared = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    reasons = []
    if kinds := sorted({type(m.get_base_layer()).__name__ for m in lora
                        if type(m.get_base_layer()) is not torch.nn.Linear}):
        reasons.append(f"the adapted layers are {', '.join(kinds)}, not torch Linear layers"
                       + (" (GPT-2 style)" if "Conv1D" in kinds else ""))
    if any(shared[id(getattr(m.get_base_layer(), "weight", None))] > 1 for m in lora):
        reasons.append("an adapted weight is shared with another module (tied embeddings)")
    if any(m.use_dora.get(a) or m.lora_bias.get(a) or getattr(m, "lora_variant", {}).get(a)
           for m in lora for a in m.active_adapters):
        reasons.append("DoRA, a LoRA bias or another LoRA variant does not fold in exactly")
    if any(m.merged for m in lora):
        reasons.append("the adapter is merged already")
    return "; ".join(reasons) or "no adapter is active on its LoRA layers"


def share_prompts_in_update(c: RunConfig) -> tuple[bool, str]:
    """Whether the update may read each prompt once for all its completions (exact), and why not."""
    if not c.rl.shared_prompts:
        return False, "rl.shared_prompts is off"
    if c.finetuning == "lora" and c.lora.dropout:
        return False, f"LoRA dropout {c.lora.dropout:g} draws a mask per completion"
    if c.gradient_checkpointing:
        return False, "gradient checkpointing runs each layer again in the backward pass"
    if c.use_liger_kernel:
        return False, "Liger computes the loss its own way"
    if c.world_size > 1 and c.distributed.strategy != "ddp":
        return False, f"{c.distributed.strategy} wraps every layer"
    return True, ""


def _dropout_active(model) -> bool:
    """Dropout draws a mask per row: a prompt shared by its completions would share one, which is not the same
    update. (TRL trains with the model in training mode, so LoRA dropout applies.)"""
    import torch

    config = getattr(model, "config", None)
    return model.training and (
        any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
        or bool(getattr(config, "attention_dropout", 0.0)))


@contextmanager
def labelled_positions_only():
    """TRL's fused LM head (1.16) projects every position of the batch through the vocabulary on a device without
    Triton, prompt included, and zeroes the unlabelled ones afterwards: fixed tile shapes for compilers such as
    Neuron's. Nothing compiles on a CPU, and there the prompt's positions are most of that work (a 50-token prompt,
    8-token completions: 6 of every 7 rows of a 49k-word product). Inside, it projects the labelled positions
    only, as it does on CUDA: the same log-probs."""
    import trl.trainer.utils as trl_utils

    checks = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or checks(device)
    try:
        yield
    finally:
        trl_utils._use_triton = checks


class FastGeneration:
    """Mixed into TRL's GRPOTrainer / RLOOTrainer (1.16): their transformers generation
    (`_generate_single_turn`) prefills each prompt once and, with `merge_generation`, runs inside `merged_lora`;
    the log-probs and the update run outside, on the untouched weights, each prompt read once for all its
    completions where `share_in_update` (exact: `prompts_read_once`)."""

    merge_generation = False
    share_prompts = True
    share_in_update = False

    def _generate_single_turn(self, *args, **kwargs):
        model = self.accelerator.unwrap_model(self.model_wrapped)
        with (sharing_prompts(model) if self.share_prompts else nullcontext()), merged_if(self, model):
            return super()._generate_single_turn(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args,
                                           **kwargs):
        call = partial(self._logps_of_labelled, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if not self.share_in_update or any(v is not None for v in kwargs.values() if not isinstance(v, (int, bool))):
            return call()  # images and the like ride along per row
        from backend.models.shared_prefill import decoder_and_head, prompts_read_once

        unwrapped = self.accelerator.unwrap_model(model)
        if _dropout_active(unwrapped):
            return call()
        body = decoder_and_head(unwrapped)[0]

        if not getattr(self, "_share_said", False) and self.accelerator.is_main_process:
            print("update: each prompt read once for all its completions", flush=True)
            self._share_said = True
        with prompts_read_once(body, input_ids.shape[1] - logits_to_keep):
            return call()

    def _logps_of_labelled(self, *args, **kwargs):
        with labelled_positions_only():
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)


def fast_generation(trainer_cls: type, c: RunConfig, is_main: bool) -> type:
    """`trainer_cls` generating with shared prompt prefills, and merged when the run's settings allow it, and
    updating with each prompt read once where that is exact (said in the run log either way)."""
    shared, why = share_prompts_in_update(c)
    if not shared and is_main:
        print(f"update: each completion reads its prompt again ({why})", flush=True)
    return type(trainer_cls.__name__, (FastGeneration, trainer_cls),
                {"__module__": __name__, "__doc__": trainer_cls.__doc__, "merge_generation": said(c, is_main),
                 "share_prompts": c.rl.shared_prompts, "share_in_update": shared})
