"""Chat templates to train with instead of the model's own (`data.chat_template`), for base models that have none
or to train a chat format of one's choice. Plain data (the schema reads the names).

The family templates (chatml, qwen, llama-3, mistral, gemma) write that family's special tokens, which a base
model of the family has in its vocabulary; `plain` (role: text lines, the answer ended by eos) suits any
tokenizer. Each renders a prompt with `add_generation_prompt` as the beginning of the same prompt with its
answer, which is how TRL tells the prompt from the completion."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.config import RunConfig
    from backend.data.formats import FormatInfo

MODEL_TEMPLATE = "model"  # the model's own

_CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# ChatML that carries tools: their JSON schemas in the system turn, each call as <tool_call>{json}</tool_call> in
# the assistant's turn (the format TRL's Qwen3 response parser reads back), each result as a `tool` turn. Every
# turn renders the same whatever follows it (prefix-preserving), as TRL's multi-turn training needs.
_CHATML_TOOLS = (
    "{%- if tools %}{{ '<|im_start|>system\\n' }}{% if messages[0]['role'] == 'system' %}"
    "{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "{{ 'You can call these tools. To call one, write <tool_call>{\"name\": the tool, \"arguments\": {...}}"
    "</tool_call> and wait for its result.\\n<tools>\\n' }}"
    "{% for tool in tools %}{{ (tool.function if tool.function is defined else tool) | tojson }}{{ '\\n' }}"
    "{% endfor %}{{ '</tools><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if message['content'] %}{{ message['content'] }}{% endif %}"
    "{%- for call in message['tool_calls'] or [] %}{% set f = call.function if call.function is defined else call %}"
    "{{ '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{%- if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
    "{{ '}\\n</tool_call>' }}{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CHAT_TEMPLATES: dict[str, str] = {
    "chatml": _CHATML,
    "chatml-tools": _CHATML_TOOLS,
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
_MARKERS = {"chatml": ("<|im_start|>", "<|im_end|>"), "chatml-tools": ("<|im_start|>", "<|im_end|>"),
            "qwen": ("<|im_start|>", "<|im_end|>"),
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


def has_chat_template(folder: Path) -> bool | None:
    """Whether the tokenizer saved in `folder` brings a chat template, from its files as transformers reads them
    (chat_template.jinja, additional_chat_templates/*.jinja, the `chat_template` of tokenizer_config.json; a
    processor's chat_template.json too); None when the folder holds no tokenizer_config.json to judge by."""
    folder = Path(folder)
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file() \
            or any((folder / "additional_chat_templates").glob("*.jinja")):
        return True
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return None


def _hub_has_chat_template(repo_id: str) -> bool | None:
    """has_chat_template of a Hub model whose tokenizer is in the local cache (nothing is downloaded); None when
    the cache cannot tell (its tokenizer not downloaded yet, or chat_template.jinja neither there nor known to be
    absent)."""
    try:
        from huggingface_hub import _CACHED_NO_EXIST, try_to_load_from_cache

        config = try_to_load_from_cache(repo_id, "tokenizer_config.json")
        template = try_to_load_from_cache(repo_id, "chat_template.jinja")
    except Exception:  # an invalid id: the model check says so
        return None
    if not isinstance(config, str):
        return None
    if isinstance(template, str):
        return True
    found = has_chat_template(Path(config).parent)
    return None if found is False and template is not _CACHED_NO_EXIST else found


def chat_template_problem(config: RunConfig, tokenizer_folder: Path | None, info: FormatInfo | None) -> str | None:
    """Why the run cannot turn its conversations into text, or None: its data is conversational (messages, or
    prompts as messages), data.chat_template keeps the model's own, and the model's tokenizer has none (a base
    model) — found before the run starts rather than as transformers' error in the worker. `tokenizer_folder`:
    where the tokenizer the run loads is saved on this machine (preflight's: a folder, a run's saved one), None
    for a Hub id (judged from the local cache, if it is there); a tokenizer not on this machine is not judged."""
    if info is None or not info.conversational or config.data.chat_template != MODEL_TEMPLATE:
        return None
    spec = (config.model or "").strip()
    if tokenizer_folder is not None:
        found = has_chat_template(tokenizer_folder)
    else:
        found = _hub_has_chat_template(spec) if spec else None
    if found is not False:
        return None
    families = ", ".join(name for name in CHAT_TEMPLATES if name != "plain")
    return (f"the model {spec}: its tokenizer has no chat template, and the {info.name} rows are conversations, "
            "which become text through one; set data.chat_template to plain (role: text lines, any tokenizer) or "
            f"to the template of the model's family ({families}), or give plain-text rows")


TOOLS_TEMPLATE = "chatml-tools"


def use_tool_parser(tokenizer, template_name: str) -> None:
    """How tool calls are read back from what the model writes: the workbench's chatml-tools through TRL's Qwen3
    parser (the same <tool_call> JSON), a model's own template through TRL's table of the ones it knows
    (ValueError for another)."""
    from trl.chat_template_utils import add_response_schema, qwen3_template

    if template_name == TOOLS_TEMPLATE:
        tokenizer.response_template = qwen3_template
    elif getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)


def tool_template_problem(tokenizer, template_name: str, model: str) -> str | None:
    """Why the run's chat template cannot carry tools (render the calls and results, and have them read back from
    the model's answers), or None."""
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    fix = (f"set data.chat_template: {TOOLS_TEMPLATE} (a ChatML model: <|im_start|> turns) or use a model whose "
           "template calls tools (Qwen2.5 / Qwen3, Llama 3.1+)")
    if getattr(tokenizer, "chat_template", None) is None or not supports_tool_calling(tokenizer):
        which = f"data.chat_template {template_name}" if template_name != MODEL_TEMPLATE else f"{model}'s own template"
        return f"{which} does not show tool calls and their results to the model; {fix}"
    try:
        use_tool_parser(tokenizer, template_name)
    except ValueError:
        return f"{model}'s own template shows tools, but TRL cannot read tool calls back from its answers; {fix}"
    if template_name == TOOLS_TEMPLATE and not is_chat_template_prefix_preserving(tokenizer):
        return f"{TOOLS_TEMPLATE} renders turns differently as the conversation goes on"  # a guard on our own template
    return None


def tool_tokenizer(tokenizer, template: str):
    """A cached model's tokenizer as a run with tools used it: `template`, reading tool calls back. A copy: the
    cached one stays as it is for everything else using the model (Chat's other side, the API), and the loop pads
    and encodes without the model's encode lock."""
    import copy

    tokenizer = copy.deepcopy(tokenizer)  # ~0.1 s: a shallow copy would share the fast tokenizer's padding state
    if (text := template_text(template)) is not None:
        tokenizer.chat_template = text
    use_tool_parser(tokenizer, template)
    return tokenizer
