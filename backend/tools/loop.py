"""The tool loop outside training (evaluation, Chat, the playground): answer, and while the answer calls tools, run
them, show the model their results and let it go on, as TRL's GRPOTrainer does inside a run — so a model is judged
and talked to the way it was trained.

Results go back as TRL writes them (a tool's return value as text, a failure as {'error': ...}), so the trajectory
reward sources read evaluation answers exactly as training ones.
"""
from __future__ import annotations

import json
from typing import Callable


def tool_error(error: Exception) -> str:
    """A failed call's result as TRL writes it for the model (the trajectory sources read it back so)."""
    return str({"error": str(error)})


def call_tool(tools: dict[str, Callable], call: dict) -> tuple[str, str]:
    """(tool name, result text) of one parsed call; a failure is the result {'error': ...}, never an exception."""
    function = call.get("function", call)
    name = str(function.get("name", ""))
    try:
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        return name, str(tools[name](**arguments))
    except Exception as e:  # noqa: BLE001 - the model reads what went wrong, as in training
        return name, tool_error(e)


def answer_with_tools(model, tokenizer, conversations: list[list[dict]], tools: list[Callable], max_new_tokens: int,
                      max_iterations: int, sampling: dict | None = None,
                      own_tools: list[list[Callable]] | None = None) -> list[list[dict]]:
    """Each conversation's new messages: assistant turns (with their `tool_calls`) and `tool` results, the final
    answer last. Conversations still calling tools are generated together, left-padded; each turn may write
    `max_new_tokens`; after `max_iterations` rounds of calls the last turn is the answer. `own_tools[i]` are
    conversation i's alone besides `tools` (its environment's methods). The tokenizer must read tool calls back
    (backend.data.templates.use_tool_parser)."""
    import torch

    from backend.models.shared_prefill import generate_sharing_prompts

    each = [list(tools) + list(own_tools[i] if own_tools else []) for i in range(len(conversations))]
    by_name = [{fn.__name__: fn for fn in listed} for listed in each]
    sampling = sampling or dict(do_sample=False, temperature=None, top_p=None, top_k=None)
    added: list[list[dict]] = [[] for _ in conversations]
    active = list(range(len(conversations)))
    configured = getattr(model.generation_config, "eos_token_id", None)
    eos = {tokenizer.eos_token_id, *(configured if isinstance(configured, list) else [configured])} - {None}
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for round_ in range(max_iterations + 1):
            if not active:
                break
            texts = [tokenizer.apply_chat_template(conversations[i] + added[i], tools=each[i] or None, tokenize=False,
                                                   add_generation_prompt=True) for i in active]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.inference_mode():
                out = generate_sharing_prompts(model.generate, model, **enc, max_new_tokens=max_new_tokens,
                                               pad_token_id=tokenizer.pad_token_id, **sampling)
            start, still = enc["input_ids"].shape[1], []
            for row, i in enumerate(active):
                ids = out[row, start:].tolist()
                end = next((k + 1 for k, t in enumerate(ids) if t in eos), len(ids))
                message = _parsed(tokenizer, ids[:end], enc["input_ids"][row].tolist())
                added[i].append(message)
                if message.get("tool_calls") and round_ < max_iterations:
                    for call in message["tool_calls"]:
                        name, result = call_tool(by_name[i], call)
                        added[i].append({"role": "tool", "name": name, "content": result})
                    still.append(i)
            active = still
    finally:
        tokenizer.padding_side = side
    return added


def _parsed(tokenizer, ids: list[int], prompt_ids: list[int]) -> dict:
    """The assistant message in `ids` (its text and tool calls); plain text where the parser finds nothing."""
    pad = tokenizer.pad_token_id
    prefix = [t for t in prompt_ids if t != pad]
    try:
        message = dict(tokenizer.parse_response(ids, prefix=prefix))
    except Exception:  # noqa: BLE001 - an answer the parser cannot read is an answer without calls
        message = {}
    if not message.get("tool_calls"):
        message = {"content": tokenizer.decode(ids, skip_special_tokens=True).strip()}
    message["role"] = "assistant"
    message.setdefault("content", "")
    return message
