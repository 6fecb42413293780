"""Generation with the LoRA adapter folded into the weights (rl.merged_generation).

An unmerged LoRA layer runs three matrix products per token (the base weight, then A and B) plus their Python
overhead; folded into the base weight it runs one. RL modes generate most of every step, so they generate with
each adapted weight replaced by W + ΔW, and get the original tensor back before the update: the weights the
optimizer and the log-probs see are the very same tensors as without merging, nothing drifts the way
merge-then-subtract would. Only the generated tokens may differ, by float rounding of the merged sums.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


def mergeable_layers(model) -> list:
    """The LoRA Linear layers whose adapter folds into the base weight exactly: plain LoRA (no DoRA or other
    variant, no LoRA bias), an unquantized base weight no other module shares (a tied lm_head would change the
    embedding too), not merged already."""
    import torch
    from peft.tuners.lora import Linear as LoraLinear

    shared = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    layers = []
    for module in model.modules():
        if not isinstance(module, LoraLinear) or module.merged:
            continue
        base = module.get_base_layer()
        weight = getattr(base, "weight", None)
        if type(base) is not torch.nn.Linear or weight is None or shared[id(weight)] > 1:
            continue
        adapters = _active(module)
        if adapters and not any(module.use_dora.get(a) or module.lora_bias.get(a) or
                                getattr(module, "lora_variant", {}).get(a) for a in adapters):
            layers.append(module)
    return layers


def _active(module) -> list[str]:
    return [a for a in module.active_adapters if a in module.lora_A]


@contextmanager
def merged_lora(model) -> Iterator[int]:
    """Inside: every mergeable layer computes with W + ΔW in one product (yields how many layers); after: the
    original weight tensors are back in place, untouched."""
    import torch

    swapped = []
    try:
        with torch.no_grad():
            for module in mergeable_layers(model):
                base = module.get_base_layer()
                original = base.weight.data
                delta = sum(module.get_delta_weight(a) for a in _active(module))
                base.weight.data = original + delta.to(original.dtype)
                swapped.append((module, base, original))
                module.merged_adapters = _active(module)  # peft's forward then skips the A, B products
        yield len(swapped)
    finally:
        for module, base, original in swapped:
            base.weight.data = original
            module.merged_adapters = []
