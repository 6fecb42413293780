"""The first example of a prepared dataset as its trainer sees it: the model's chat template applied the way TRL
applies it, the text the loss is taken on told apart from the text it is not, and the tokens counted.

What is trained follows TRL 1.16: SFT on `messages` or `text` learns every token, on a prompt and completion
only the completion; DPO and KTO learn the answers, not the prompt; a reward model scores each whole sequence;
the online RL modes see only the prompt (their completions are generated). The tokenizer is the caller's (this
layer loads no models)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.core.mode_registry import MODES

if TYPE_CHECKING:
    import datasets

    from backend.data.formats import FormatInfo


@dataclass
class Rendered:
    title: str  # which sequence of the example: "chosen", "prompt (completions are generated)", ...
    segments: list[tuple[str, bool]]  # (text, learned from)
    tokens: int
    learned_tokens: int


def _template(tokenizer, messages: list[dict], generation: bool = False, tools=None) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation,
                                         tools=tools or None)


def _split(tokenizer, prompt, answer, tools=None) -> tuple[str, str]:
    """(prompt text, answer text) with the template applied to chats, as TRL renders prompt + answer."""
    if isinstance(prompt, list):
        asked = _template(tokenizer, prompt, generation=True, tools=tools)
        whole = _template(tokenizer, prompt + answer, tools=tools)
        if whole.startswith(asked):
            return asked, whole[len(asked):]
        return "", whole  # a template that rewrites earlier turns: the whole text, unsplit
    eos = tokenizer.eos_token or ""
    return prompt, answer if answer.endswith(eos) else answer + eos  # TRL appends eos to a plain answer


def _rendered(tokenizer, title: str, segments: list[tuple[str, bool]]) -> Rendered:
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    counts = [count(text) for text, _ in segments]
    return Rendered(title, [s for s in segments if s[0]], sum(counts),
                    sum(n for n, (_, learned) in zip(counts, segments) if learned))


def render_first(ds: datasets.Dataset, info: FormatInfo, mode: str, tokenizer) -> list[Rendered]:
    """The first row of a prepared dataset (prepare_dataset's output), one Rendered per sequence it makes."""
    return render_row(ds[0], info, mode, tokenizer)


def render_row(row: dict, info: FormatInfo, mode: str, tokenizer) -> list[Rendered]:
    """A row of a prepared dataset as its trainer sees it, one Rendered per sequence it makes."""
    spec = MODES[mode]
    tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
    if spec.online_rl:
        prompt = row["prompt"]
        text = _template(tokenizer, prompt, generation=True) if isinstance(prompt, list) else prompt
        return [_rendered(tokenizer, "prompt (completions are generated)", [(text, False)])]
    if info.name == "messages":
        return [_rendered(tokenizer, "", [(_template(tokenizer, row["messages"], tools=tools), True)])]
    if info.name == "text":
        eos = tokenizer.eos_token or ""
        text = row["text"]
        return [_rendered(tokenizer, "", [(text if text.endswith(eos) else text + eos, True)])]
    answers = [c for c in ("completion", "chosen", "rejected") if c in info.columns]
    out = []
    for column in answers:
        prompt = row.get("prompt")
        if prompt is None:  # a reward model's pairs without a prompt: each answer is the whole conversation
            prompt = [] if isinstance(row[column], list) else ""
        asked, answer = _split(tokenizer, prompt, row[column], tools)
        if spec.task == "seq_cls":
            out.append(_rendered(tokenizer, f"{column} (scored whole)", [(asked + answer, True)]))
        else:
            label = f" (label {str(row['label']).lower()})" if "label" in row else ""
            out.append(_rendered(tokenizer, f"{column}{label}" if len(answers) > 1 or label else "",
                                 [(asked, False), (answer, True)]))
    return out
