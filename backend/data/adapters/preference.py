"""Preference pairs as they come: an implicit prompt (only `chosen` / `rejected`, each the whole conversation, as
TRL's implicit-prompt format and Anthropic HH), HH's raw `\\n\\nHuman: … \\n\\nAssistant: …` strings, and columns
of mixed kinds (UltraFeedback-binarized: a string `prompt`, message-list answers that repeat it). Also the
unpairing that lets KTO train on pairs.

The prompt split and the unpairing are TRL's own (`trl.data_utils`), imported only when needed: importing it
loads torch."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from backend.data.adapters.table import Adapter, Table, assistant, message, user
from backend.data.common import DatasetError, short

if TYPE_CHECKING:
    import datasets

_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ \t]?")
_HH_ROLE = {"Human": "user", "Assistant": "assistant"}


def is_hh_text(value) -> bool:
    return isinstance(value, str) and value.lstrip("\n").startswith("Human:")


_HH_TEXT = "a `\\n\\nHuman: … \\n\\nAssistant: …` conversation"


def _hh_messages(t: Table, i: int, column: str) -> list[dict]:
    text = t.text(i, column, _HH_TEXT)
    pieces = _HH_TURN.split(text.lstrip("\n"))
    if pieces[0].strip() or len(pieces) < 3:
        raise t.error(i, column, "does not start with `Human:`", _HH_TEXT)
    return [message(_HH_ROLE[role], content.strip()) for role, content in zip(pieces[1::2], pieces[2::2])]


def _split_prompt(t: Table, i: int, chosen, rejected) -> tuple:
    """(prompt, chosen, rejected): the turns (or characters) both answers begin with are the prompt, by TRL."""
    from trl.data_utils import extract_prompt

    split = extract_prompt({"chosen": chosen, "rejected": rejected})
    if not split["prompt"] or not split["chosen"] or not split["rejected"]:
        raise t.error(i, "chosen", "and `rejected` share no beginning to take as the prompt" if not split["prompt"]
                      else "and `rejected` are the same", "two answers to one conversation")
    return split["prompt"], split["chosen"], split["rejected"]


def _columns(rows: list[tuple]) -> dict[str, list]:
    return {name: [row[k] for row in rows] for k, name in enumerate(("prompt", "chosen", "rejected"))}


def _is_list(t: Table, column: str) -> bool:
    return any(isinstance(v, list) for v in t.columns.get(column, ()))


def _has_turns_before_answer(t: Table, column: str) -> bool:
    return any(isinstance(v, list) and any(isinstance(m, dict) and m.get("role") != "assistant" for m in v)
               for v in t.columns[column])


def _prompt_from_answers(t: Table) -> dict[str, list]:
    """A string `prompt` whose text the message-list answers repeat as their last shared user turn
    (UltraFeedback): the shared turns become the prompt."""
    rows = []
    for i in range(t.n):
        prompt, chosen, rejected = _split_prompt(t, i, t.cell(i, "chosen"), t.cell(i, "rejected"))
        asked = [m.get("content") or "" for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not asked or asked[-1].strip() != (t.text(i, "prompt") or "").strip():
            raise t.error(i, "prompt", "is a string that `chosen` / `rejected` do not repeat as their user turn",
                          "the same text as the conversation's question (or a list of messages)")
        rows.append((prompt, chosen, rejected))
    return _columns(rows)


def normalise_kinds(t: Table, columns: list[str]) -> tuple[dict[str, list], list[str]]:
    """Columns of mixed kinds (plain strings beside message lists) made all conversational: a string prompt
    becomes a user message, or, when the answers repeat it, their shared first turns; a string answer an
    assistant message. ({} and [] when nothing is mixed.) What was done is said in the returned notes."""
    kinded = [c for c in columns if c in t.columns and c != "label"]
    if len({_is_list(t, c) for c in kinded}) < 2:
        return {}, []
    out, notes = {}, []
    answers = [c for c in kinded if c != "prompt"]
    if "prompt" in kinded and not _is_list(t, "prompt"):
        if not any(_has_turns_before_answer(t, c) for c in answers):
            out["prompt"] = [[user(t.text(i, "prompt"))] for i in range(t.n)]
            notes.append("the string `prompt` as a user message")
        elif set(answers) == {"chosen", "rejected"}:
            out = _prompt_from_answers(t)
            notes.append("the first turns `chosen` and `rejected` share (they repeat `prompt`) as the prompt")
        else:
            (column,) = answers
            raise t.error(next(i for i, v in enumerate(t.columns[column]) if isinstance(v, list)), column,
                          "holds the question again beside a string `prompt`", "only the answer's messages")
    for column in answers:
        if not _is_list(t, column) and column not in out:
            out[column] = [[assistant(t.text(i, column))] for i in range(t.n)]
            notes.append(f"the string `{column}` as an assistant message")
    return out, notes


def _to_pairs(t: Table) -> dict[str, list]:
    if "prompt" not in t.columns:
        return _columns([_split_prompt(t, i, t.cell(i, "chosen"), t.cell(i, "rejected")) for i in range(t.n)])
    columns = ["prompt", "chosen", "rejected"]
    return {c: t.columns[c] for c in columns} | normalise_kinds(t, columns)[0]


def _describe_pairs(t: Table) -> str:
    if "prompt" not in t.columns:
        shared = "the turns `chosen` and `rejected` both begin with are" if _is_list(t, "chosen") else \
            "the text `chosen` and `rejected` both begin with is"
        return f"implicit prompt → prompt + chosen + rejected; {shared} the prompt (TRL's extract_prompt)"
    notes = normalise_kinds(t, ["prompt", "chosen", "rejected"])[1]
    return "; ".join(["preference pairs → prompt + chosen + rejected", *notes])


def _to_hh(t: Table) -> dict[str, list]:
    return _columns([_split_prompt(t, i, _hh_messages(t, i, "chosen"), _hh_messages(t, i, "rejected"))
                     for i in range(t.n)])


def unpair(ds: datasets.Dataset, source: str) -> tuple[datasets.Dataset, str]:
    """KTO from pairs: each pair becomes two rows, `chosen` labelled true and `rejected` false (TRL's own)."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from trl.data_utils import unpair_preference_dataset

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # a "Map: 100%" bar in the UI's console for every preview
    try:
        ds = unpair_preference_dataset(ds)
    except Exception as e:  # pyarrow's message names the column
        raise DatasetError(f"{source}: could not unpair the preference pairs for KTO ({short(e)})") from None
    finally:
        if not quiet:
            enable_progress_bars()
    return ds, "each pair unpaired into two rows: `chosen` with label true, `rejected` with label false"


PAIRS = Adapter("preference pairs", marker=("chosen", "rejected"), reads=("prompt",), produces="preference",
                convert=_to_pairs, describe=_describe_pairs, fits=lambda row: not is_hh_text(row.get("chosen")))
ANTHROPIC_HH = Adapter(
    "Anthropic HH", marker=("chosen", "rejected"), produces="preference", convert=_to_hh,
    fits=lambda row: is_hh_text(row.get("chosen")),
    describe=lambda t: "Anthropic HH → prompt + chosen + rejected; the `Human:` / `Assistant:` text as user / "
                       "assistant messages; the turns `chosen` and `rejected` share as the prompt (TRL's "
                       "extract_prompt)")
