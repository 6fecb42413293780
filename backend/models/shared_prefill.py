"""Generation that reads each distinct prompt once.

GRPO and RLOO sample several completions of every prompt, and transformers' generate runs the prompt of each
through the model again: with short completions that prefill is a large share of the generation time (half of
it for the arithmetic preset on this CPU). Here every distinct prompt (but its last token) runs through the model
once, its key/value cache is copied to each row that asks it, and generate continues from there. Same inputs,
same sampling calls, so the same completions up to float rounding.
"""
from __future__ import annotations

from contextlib import contextmanager


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


def decoder_and_head(model):
    """(decoder trunk, output head) of a transformers model, under a PEFT wrapper if there is one.

    Calling the trunk directly returns the last (normalised) hidden state: PPO computes logits for the response
    positions only and reads its shared value head there; `prompts_read_once` patches the trunk's forward.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    trunk = getattr(base, base.base_model_prefix)
    for name in ("score", "classifier"):  # a sequence classifier's head
        if isinstance(getattr(base, name, None), torch.nn.Module):
            return trunk, getattr(base, name)
    return trunk, base.get_output_embeddings()


@contextmanager
def prompts_read_once(backbone, prompt_len: int):
    """Inside, a forward of `backbone` (a decoder's transformer body, e.g. LlamaModel) over rows of a left-padded
    prompt (`prompt_len` tokens) and a completion runs each distinct prompt once, with gradients, copies its
    keys / values and hidden states to every row that asks it, and runs only the completions after that: the same
    hidden states, hence the same log-probs and gradients, up to float rounding (the copies' gradients add up in
    the one prompt). GRPO and RLOO score 8 completions of a prompt: their update then reads the prompt once, not 8
    times. A call this does not apply to (no repeated prompt, inputs_embeds, another cache type) runs as it was."""
    import torch

    forward = backbone.forward

    def shared(input_ids=None, attention_mask=None, **kwargs):
        plain = lambda: forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)  # noqa: E731
        p = prompt_len
        if (input_ids is None or attention_mask is None or not 0 < p < input_ids.shape[1]
                or any(kwargs.get(k) is not None for k in ("inputs_embeds", "cache", "past_key_values"))
                or kwargs.get("output_router_logits") or kwargs.get("output_hidden_states")
                or kwargs.get("output_attentions")):
            return plain()
        positions = kwargs.pop("position_ids", None)
        key = [input_ids[:, :p], attention_mask[:, :p].to(input_ids.dtype)]
        if positions is not None:
            key.append(positions.expand(len(input_ids), -1)[:, :p].to(input_ids.dtype))
        rows, inverse = torch.unique(torch.cat(key, 1), dim=0, return_inverse=True)
        if len(rows) == len(input_ids):
            kwargs["position_ids"] = positions
            return plain()
        kwargs.pop("use_cache", None)
        head = forward(input_ids=rows[:, :p], attention_mask=rows[:, p:2 * p].to(attention_mask.dtype),
                       position_ids=None if positions is None else rows[:, 2 * p:], use_cache=True, **kwargs)
        cache = getattr(head, "cache", None)
        if type(cache).__name__ != "DynamicCache" or any(type(l).__name__ != "DynamicLayer" for l in cache.layers):
            kwargs["position_ids"] = positions
            return plain()  # a sliding window would drop keys the completion needs
        cache.batch_select_indices(inverse)
        tail = forward(input_ids=input_ids[:, p:], attention_mask=attention_mask, cache=cache, use_cache=False,
                       position_ids=None if positions is None else positions[:, p:], **kwargs)
        hidden = torch.cat([head.last_hidden_state[inverse], tail.last_hidden_state], 1)
        return type(tail)(last_hidden_state=hidden)

    backbone.forward = shared  # an instance attribute, then gone
    try:
        yield
    finally:
        del backbone.forward
