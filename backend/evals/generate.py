"""Batched generation for evaluation: prompts sorted by length and generated in left-padded batches with the
KV cache, the adapter merged into the weights (exact up to float rounding, and no LoRA matmuls per token); with
tools, through the tool loop training uses (backend/tools/loop.py)."""
from __future__ import annotations

from typing import Iterator

from backend.evals.spec import Generation
from backend.models.load import LoadedModel
from backend.models.shared_prefill import generate_sharing_prompts
from backend.rewards.base import is_conversation, prompt_text


def prompt_text_for(tokenizer, prompt, chat_template: bool) -> tuple[str, bool]:
    """What the model reads, and whether it is already templated (no special tokens to add). A message list goes
    through the chat template; a string too when `chat_template` (as the labeling generator and chat do)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if has_template and (is_conversation(prompt) or chat_template):
        messages = prompt if is_conversation(prompt) else [{"role": "user", "content": str(prompt)}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), True
    return prompt_text(prompt), False


def _sampling(settings: Generation) -> dict:
    return (dict(do_sample=True, temperature=settings.temperature, top_p=settings.top_p)
            if settings.do_sample else dict(do_sample=False, temperature=None, top_p=None, top_k=None))


def generate_answers(loaded: LoadedModel, prompts: list, settings: Generation, chat_template: bool = True,
                     ) -> Iterator[tuple[list[int], list[list[str]]]]:
    """Yields (indices into `prompts`, k answers for each) batch by batch, shortest prompts first."""
    import torch

    tokenizer, model = loaded.tokenizer, loaded.model
    texts = [prompt_text_for(tokenizer, p, chat_template) for p in prompts]
    lengths = [len(tokenizer(t, add_special_tokens=not templated)["input_ids"]) for t, templated in texts]
    order = sorted(range(len(prompts)), key=lambda i: (texts[i][1], lengths[i]))
    batches, current = [], []
    for i in order:  # a batch is all templated or all raw text: special tokens are added per batch
        if current and (len(current) == settings.batch_size or texts[current[0]][1] != texts[i][1]):
            batches.append(current)
            current = []
        current.append(i)
    batches += [current] if current else []
    sampling = _sampling(settings)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # answers continue every prompt at the same position
    try:
        for b, batch in enumerate(batches):
            templated = texts[batch[0]][1]
            enc = tokenizer([texts[i][0] for i in batch], return_tensors="pt", padding=True,
                            add_special_tokens=not templated).to(model.device)
            torch.manual_seed(settings.seed + b)
            with torch.inference_mode():
                out = generate_sharing_prompts(model.generate, model, **enc, max_new_tokens=settings.max_new_tokens,
                                               num_return_sequences=settings.samples,
                                               pad_token_id=tokenizer.pad_token_id, **sampling)
            new = out[:, enc["input_ids"].shape[1]:]
            decoded = [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
            k = settings.samples
            yield batch, [decoded[j * k:(j + 1) * k] for j in range(len(batch))]
    finally:
        tokenizer.padding_side = side


def answers_with_tools(loaded: LoadedModel, prompts: list, settings: Generation, tools: list, max_iterations: int,
                       rows: list[dict] | None = None, environment=None, read_rewards: bool = True,
                       ) -> Iterator[tuple[list[int], list[list[list[dict]]], list[list]]]:
    """generate_answers with tools: each answer is the message list the tool loop adds (calls, results, the final
    answer last), `samples` of them per prompt from the prompt repeated. With an `environment` (a factory, backend/
    tools/environment.py), each answer plays an episode on an instance of its own in the batch, reset from its row
    (`rows`, beside `prompts`): its methods are that answer's tools besides `tools`, and the third item holds each
    answer's PlayedEpisode (None without; its get_reward read only with `read_rewards`). The tokenizer must read
    calls back (backend.data.templates.use_tool_parser); close the iterator when stopping early."""
    import torch

    from backend.tools.environment import PlayedEpisode, tool_methods, with_observation
    from backend.tools.loop import answer_with_tools

    conversations = [p if is_conversation(p) else [{"role": "user", "content": str(p)}] for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(str(conversations[i])))  # alike lengths pad less
    k = settings.samples
    pool: list = []  # environment instances, made once and reset for each episode (as TRL pools them)
    try:
        for b, start in enumerate(range(0, len(order), settings.batch_size)):
            batch = order[start:start + settings.batch_size]
            asked = [conversations[i] for i in batch for _ in range(k)]
            episodes, own = [], None
            if environment is not None:
                pool += [environment() for _ in range(len(asked) - len(pool))]
                episodes = pool[:len(asked)]
                for j, i in enumerate(i for i in batch for _ in range(k)):
                    asked[j] = with_observation(asked[j], episodes[j].reset(**rows[i]))
                own = [tool_methods(x) for x in episodes]
            torch.manual_seed(settings.seed + b)
            added = answer_with_tools(loaded.model, loaded.tokenizer, asked, tools, settings.max_new_tokens,
                                      max_iterations, _sampling(settings), own_tools=own)
            played = [PlayedEpisode(x, environment.rewarded and read_rewards) for x in episodes] or [None] * len(added)
            yield batch, [added[j * k:(j + 1) * k] for j in range(len(batch))], \
                [played[j * k:(j + 1) * k] for j in range(len(batch))]
    finally:
        for x in pool:  # done, failed or stopped: no instance's process outlives the evaluation
            x._close()
