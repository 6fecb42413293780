"""Generation that reads each distinct prompt once.

GRPO and RLOO sample several completions of every prompt, and transformers' generate runs the prompt of each
through the model again: with short completions that prefill is a large share of the generation time (half of
it for the arithmetic preset on this CPU). Here every distinct prompt (but its last token) runs through the model
once, its key/value cache is copied to each row that asks it, and generate continues from there. Same inputs,
same sampling calls, so the same completions up to float rounding.
"""
from __future__ import annotations


def generate_sharing_prompts(generate, model, input_ids, attention_mask=None, **kwargs):
    """`generate(input_ids=…, attention_mask=…, **kwargs)` (a model's generate), with the prompts that repeat
    prefilled once through `model`. Falls back to the plain call where a shared cache does not apply."""
    import torch

    config = kwargs.get("generation_config")
    repeats = kwargs.get("num_return_sequences") or getattr(config, "num_return_sequences", None) or 1
    if repeats > 1:  # expanded here, as generate would, so the copies share their prefill too
        input_ids = input_ids.repeat_interleave(repeats, 0)
        attention_mask = None if attention_mask is None else attention_mask.repeat_interleave(repeats, 0)
        kwargs["num_return_sequences"] = 1
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    plain = lambda: generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)  # noqa: E731
    if (input_ids.shape[1] < 2 or any(k in kwargs for k in ("cache", "past_key_values", "inputs_embeds"))
            or getattr(config, "cache_implementation", None) or model.config.is_encoder_decoder):
        return plain()
    rows, inverse = torch.unique(torch.cat([input_ids, attention_mask], 1), dim=0, return_inverse=True)
    if len(rows) == len(input_ids):
        return plain()
    ids, mask = rows[:, :input_ids.shape[1]], rows[:, input_ids.shape[1]:]
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate derives them
    with torch.no_grad():
        out = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                    use_cache=True)
    cache = getattr(out, "cache", None)
    if cache is None or type(cache).__name__ != "DynamicCache":
        return plain()
    cache.batch_select_indices(inverse.to(input_ids.device))
    return generate(input_ids=input_ids, attention_mask=attention_mask, cache=cache, **kwargs)
