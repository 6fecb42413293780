"""ShareGPT and LLaMA-Factory's chat layouts: `conversations` of `{from, value}` turns (optional `system` and
`tools` columns) for SFT; with `chosen` / `rejected` single turns (dpo_en_demo.json) for preferences; with a
`kto_tag`, or as `messages` of role / content whose last turn is the answer plus a `label` (kto_en_demo.json),
for KTO.

Tool use keeps its place in the conversation: a `function_call` turn is an assistant message holding the call's
JSON text and an `observation` turn is a tool message, so the chat template renders them as the model's own
turns and the results it was given."""
from __future__ import annotations

import json

from backend.data.adapters.table import Adapter, Table, assistant, message
from backend.data.common import value_kind
from backend.data.formats import check_messages

ROLE_OF = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
           "function_call": "assistant", "observation": "tool", "tool": "tool"}
_FROM = "`from` one of human, gpt, system, function_call, observation"
_TURNS = "a list of {from, value} turns"
_TOOLS = "a JSON list of function schemas"


def _turn(t: Table, i: int, column: str, turn, where: str = "") -> dict:
    if not isinstance(turn, dict):
        raise t.error(i, column, f"{where}is {value_kind(turn)}", _TURNS)
    speaker = turn.get("from", turn.get("role"))  # some ShareGPT copies use OpenAI's role / content keys
    text = turn.get("value", turn.get("content"))
    role = ROLE_OF.get(speaker)
    if role is None:
        raise t.error(i, column, f"{where}has from {speaker!r}", _FROM)
    if not isinstance(text, str):
        raise t.error(i, column, f"{where}({speaker}) has value of type {value_kind(text)}",
                      "a string `value` in every turn")
    return message(role, text)


def _turns(t: Table, i: int, column: str) -> list[dict]:
    value = t.cell(i, column)
    if not isinstance(value, list) or not value:
        raise t.error(i, column, "is an empty list" if value == [] else f"is {value_kind(value)}", _TURNS)
    turns = [_turn(t, i, column, turn, f"turn {j} ") for j, turn in enumerate(value, 1)]
    system = t.text(i, "system", required=False)
    if system and turns[0]["role"] != "system":  # a system turn of the conversation's own wins, as in LLaMA-Factory
        turns.insert(0, message("system", system))
    return turns


def _checked(t: Table, i: int, column: str, messages: list[dict], need_assistant: bool) -> list[dict]:
    if problem := check_messages(messages, need_assistant=need_assistant):
        raise t.error(i, column, problem, "a conversation with an answer")
    return messages


def _tools(t: Table, i: int) -> str | None:
    """JSON text, as TRL's SFTTrainer reads a `tools` column (it parses strings); None when the row has none."""
    value = t.cell(i, "tools")
    if value in (None, "", [], "[]"):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise t.error(i, "tools", f"is not valid JSON ({e.msg})", _TOOLS) from None
    value = [value] if isinstance(value, dict) else value
    if not isinstance(value, list) or not all(isinstance(tool, dict) for tool in value):
        raise t.error(i, "tools", f"is {value_kind(value)}", _TOOLS)
    return json.dumps(value, ensure_ascii=False) if value else None


def _to_messages(t: Table) -> dict[str, list]:
    out = {"messages": [_checked(t, i, "conversations", _turns(t, i, "conversations"), True) for i in range(t.n)]}
    if t.has("tools"):
        out["tools"] = [_tools(t, i) for i in range(t.n)]
    return out


def _answer(t: Table, i: int, column: str) -> list[dict]:
    """A single {from, value} turn (LLaMA-Factory), a list of turns, or a plain string: the answer messages."""
    value = t.cell(i, column)
    if isinstance(value, str) and value.strip():
        return [assistant(value)]
    if isinstance(value, list):
        return [_turn(t, i, column, turn, f"turn {j} ") for j, turn in enumerate(value, 1)]
    if isinstance(value, dict):
        return [_turn(t, i, column, value)]
    raise t.error(i, column, "is missing" if value is None else f"is {value_kind(value)}", "a {from, value} turn")


def _to_preference(t: Table) -> dict[str, list]:
    return {"prompt": [_turns(t, i, "conversations") for i in range(t.n)],
            "chosen": [_answer(t, i, "chosen") for i in range(t.n)],
            "rejected": [_answer(t, i, "rejected") for i in range(t.n)]}


def _split_answer(t: Table, i: int, column: str, messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the turns before the last, the last), which must be the assistant's answer."""
    _checked(t, i, column, messages, True)
    if messages[-1]["role"] != "assistant" or len(messages) < 2:
        raise t.error(i, column, f"ends with a {messages[-1]['role']} turn" if len(messages) > 1 else
                      "has a single turn", "the conversation to end with the answer being rated")
    return messages[:-1], messages[-1:]


def _unpaired(t: Table, column: str, messages_of, label: str) -> dict[str, list]:
    split = [_split_answer(t, i, column, messages_of(i)) for i in range(t.n)]
    return {"prompt": [p for p, _ in split], "completion": [c for _, c in split],
            "label": [t.flag(i, label) for i in range(t.n)]}


def _kto_messages(t: Table, i: int) -> list[dict]:
    messages = t.cell(i, "messages")
    if problem := check_messages(messages, need_assistant=True):
        raise t.error(i, "messages", problem, "a conversation of {role, content} messages")
    return [message(m["role"], m["content"]) for m in messages]


def _describe_messages(t: Table) -> str:
    parts = ["ShareGPT → messages; `from` human → user, gpt → assistant, system → system"]
    roles = {turn.get("from") for turns in t.columns["conversations"] if isinstance(turns, list)
             for turn in turns if isinstance(turn, dict)}
    if roles & {"function_call", "observation"}:
        parts.append("function_call → an assistant message with the call's JSON, observation → a tool message")
    if t.has("system"):
        parts.append("`system` as the system message")
    if t.has("tools"):
        parts.append("`tools` passed to the chat template")
    return "; ".join(parts)


SHAREGPT = Adapter("ShareGPT", marker=("conversations",), reads=("system", "tools"), produces="messages",
                   convert=_to_messages, describe=_describe_messages)
SHAREGPT_PREFERENCE = Adapter(
    "LLaMA-Factory preference", marker=("conversations", "chosen", "rejected"), reads=("system",),
    produces="preference", convert=_to_preference,
    describe=lambda t: "LLaMA-Factory preference (ShareGPT) → prompt + chosen + rejected; `conversations` as "
                       "the prompt, the `chosen` / `rejected` turns as the answers"
                       + ("; `system` as the system message" if t.has("system") else ""))
SHAREGPT_KTO = Adapter(
    "ShareGPT KTO", marker=("conversations", "kto_tag"), reads=("system",), produces="unpaired_preference",
    convert=lambda t: _unpaired(t, "conversations", lambda i: _turns(t, i, "conversations"), "kto_tag"),
    describe=lambda t: "ShareGPT KTO → prompt + completion + label; the last turn of `conversations` as the "
                       "completion, `kto_tag` as the label")
LLAMAFACTORY_KTO = Adapter(
    "LLaMA-Factory KTO", marker=("messages", "label"), produces="unpaired_preference",
    convert=lambda t: _unpaired(t, "messages", lambda i: _kto_messages(t, i), "label"),
    describe=lambda t: "LLaMA-Factory KTO → prompt + completion + label; the last turn of `messages` as the "
                       "completion, the turns before it as the prompt")
