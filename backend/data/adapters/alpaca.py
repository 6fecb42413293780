"""alpaca, as in LLaMA-Factory's alpaca_en_demo.json and identity.json: `instruction`, `input`, `output`, optional
`system` and `history` ([user, assistant] pairs); with `chosen` / `rejected` instead of `output` for preferences
(LLaMA-Factory's `ranking: true`), or a `kto_tag` for KTO.

Always conversational: LLaMA-Factory puts alpaca through the chat template, and TRL joins a plain prompt and
completion with nothing between them ("...healthy.1. Eat a balanced diet")."""
from __future__ import annotations

from backend.data.adapters.table import Adapter, Table, assistant, message, user
from backend.data.common import value_kind

_PAIRS = "a list of [user, assistant] pairs of strings"


def _history(t: Table, i: int) -> list[dict]:
    pairs = t.cell(i, "history") or []
    if not isinstance(pairs, list):
        raise t.error(i, "history", f"is {value_kind(pairs)}", _PAIRS)
    turns = []
    for j, pair in enumerate(pairs, 1):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) and s.strip() for s in pair)):
            raise t.error(i, "history", f"pair {j} is {pair!r}"[:120], _PAIRS)
        turns += [user(pair[0]), assistant(pair[1])]
    return turns


def _prompt(t: Table, i: int) -> list[dict]:
    text = t.text(i, "instruction")
    if extra := t.text(i, "input", required=False):
        text = f"{text}\n{extra}"  # as LLaMA-Factory joins them
    system = t.text(i, "system", required=False)
    return ([message("system", system)] if system else []) + _history(t, i) + [user(text)]


def _answer(t: Table, i: int, column: str) -> list[dict]:
    return [assistant(t.text(i, column, "the answer as a non-empty string"))]


def _to_prompt_completion(t: Table) -> dict[str, list]:
    return {"prompt": [_prompt(t, i) for i in range(t.n)],
            "completion": [_answer(t, i, "output") for i in range(t.n)]}


def _to_preference(t: Table) -> dict[str, list]:
    return {"prompt": [_prompt(t, i) for i in range(t.n)],
            "chosen": [_answer(t, i, "chosen") for i in range(t.n)],
            "rejected": [_answer(t, i, "rejected") for i in range(t.n)]}


def _to_unpaired(t: Table) -> dict[str, list]:
    return {"prompt": [_prompt(t, i) for i in range(t.n)],
            "completion": [_answer(t, i, "output") for i in range(t.n)],
            "label": [t.flag(i, "kto_tag") for i in range(t.n)]}


def _describer(target: str):
    def describe(t: Table) -> str:
        parts = [f"alpaca → {target}"]
        if t.has("input"):
            parts.append("`input` appended to the instruction after a newline")
        if t.has("system"):
            parts.append("`system` as the system message")
        if t.has("history"):
            parts.append("`history` as earlier turns")
        return "; ".join(parts)
    return describe


ALPACA = Adapter("alpaca", marker=("instruction",), needs=("output",), reads=("input", "system", "history"),
                 produces="prompt_completion", convert=_to_prompt_completion,
                 describe=_describer("prompt + completion (user message → assistant message)"))
ALPACA_KTO = Adapter("alpaca KTO", marker=("instruction", "kto_tag"), needs=("output",),
                     reads=("input", "system", "history"), produces="unpaired_preference", convert=_to_unpaired,
                     describe=_describer("prompt + completion + label (`kto_tag` as the label)"))
ALPACA_PREFERENCE = Adapter("alpaca preference", marker=("instruction", "chosen", "rejected"),
                            reads=("input", "system", "history"), produces="preference", convert=_to_preference,
                            describe=_describer("prompt + chosen + rejected (user message → assistant messages)"))
