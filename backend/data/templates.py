"""Chat templates to train with instead of the model's own (`data.chat_template`), for base models that have none
or to train a chat format of one's choice. Plain data (the schema reads the names).

The family templates (chatml, qwen, llama-3, mistral, gemma) write that family's special tokens, which a base
model of the family has in its vocabulary; `plain` (role: text lines, the answer ended by eos) suits any
tokenizer. Each renders a prompt with `add_generation_prompt` as the beginning of the same prompt with its
answer, which is how TRL tells the prompt from the completion."""
from __future__ import annotations

import json
from pathlib import Path

MODEL_TEMPLATE = "model"  # the model's own

_CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CHAT_TEMPLATES: dict[str, str] = {
    "chatml": _CHATML,
    # Qwen2.5's own default system message when a conversation brings none
    "qwen": ("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant."
             "<|im_end|>\\n' }}{% endif %}" + _CHATML),
    "llama-3": ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
                "{% endif %}"),
    # [INST] turns; a system message goes before the first one, a tool result is read like a user turn
    "mistral": ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}"
                "{{ message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
                "{{ message['content'] + '\\n\\n' }}{% else %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                "{% endif %}{% endfor %}"),
    # Gemma has user and model turns only: a system or tool message is a user turn
    "gemma": ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}"
              "{% set role = 'model' %}{% else %}{% set role = 'user' %}{% endif %}"
              "{{ '<start_of_turn>' + role + '\\n' + message['content'] + '<end_of_turn>\\n' }}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"),
    "plain": ("{% for message in messages %}{{ message['role'] + ': ' + message['content'] }}"
              "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
              "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"),
}
TEMPLATE_NAMES = (MODEL_TEMPLATE, *CHAT_TEMPLATES)

# the tokens a family template writes that must each be one token of the model's vocabulary: read as several text
# pieces, the model would never learn where a turn ends (mistral's [INST] is plain text in its own vocabulary)
_MARKERS = {"chatml": ("<|im_start|>", "<|im_end|>"), "qwen": ("<|im_start|>", "<|im_end|>"),
            "llama-3": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
            "gemma": ("<start_of_turn>", "<end_of_turn>")}


def template_text(name: str) -> str | None:
    """The Jinja template to set on the tokenizer; None keeps the model's own."""
    return None if name == MODEL_TEMPLATE else CHAT_TEMPLATES[name]


def template_problem(name: str, model_folder: Path | None) -> str | None:
    """Why the family template `name` does not fit the model whose files are in `model_folder` (its special
    tokens are not in the vocabulary), or None; a model whose tokenizer.json is not on this machine is not
    judged."""
    markers = _MARKERS.get(name, ())
    path = model_folder / "tokenizer.json" if model_folder else None
    if not markers or path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pieces = (data.get("model") or {}).get("vocab") or ()  # BPE / WordPiece: {token: id}; Unigram: [[piece, score]]
    vocab = {p[0] if isinstance(p, list) else p for p in pieces} | {t.get("content") for t in data.get("added_tokens", ())}
    if not (missing := [m for m in markers if m not in vocab]):
        return None
    return (f"{name} writes {', '.join(markers)}, and {', '.join(missing)} "
            f"{'is not a token' if len(missing) == 1 else 'are not tokens'} of this model's vocabulary: it would read "
            "each as several pieces of text and not learn where a turn ends; choose plain, the model's own template "
            "(model), or the template of the model's family")
