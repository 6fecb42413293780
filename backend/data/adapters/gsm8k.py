"""Question / answer sets for online RL, as GSM8K (`question`, `answer` whose last line is `#### 72`): the
question is the prompt, as a user message so the chat template applies; `answer` stays as it is for the reward
sources (numeric match reads its last number, which is the final one) and for reward functions written for
GSM8K, which parse `####` themselves; the final answer alone is added as `final_answer` (for exact match)."""
from __future__ import annotations

from backend.data.adapters.table import Adapter, Table, user

_FINAL = "####"


def _gsm8k(t: Table) -> bool:
    first = next((a for a in t.columns.get("answer", ()) if isinstance(a, str)), "")
    return _FINAL in first and "final_answer" not in t.columns


def _final(t: Table, i: int) -> str:
    answer = t.text(i, "answer", "a worked answer ending with `#### <final answer>`")
    if _FINAL not in answer:
        raise t.error(i, "answer", "has no `####` line", "a worked answer ending with `#### <final answer>`")
    return answer.rsplit(_FINAL, 1)[1].strip().replace(",", "")


def _to_prompts(t: Table) -> dict[str, list]:
    out = {"prompt": [[user(t.text(i, "question"))] for i in range(t.n)]}
    if _gsm8k(t):
        out["final_answer"] = [_final(t, i) for i in range(t.n)]
    return out


def _describe(t: Table) -> str:
    parts = ["questions → prompt; `question` as the user message"]
    if "answer" in t.columns:
        parts.append("`answer` kept for the reward sources")
    if _gsm8k(t):
        parts[0] = "GSM8K " + parts[0]
        parts.append("the text after its `####` (the final answer) as `final_answer`")
    return "; ".join(parts)


QUESTIONS = Adapter("question / answer", marker=("question",), produces="prompt_only", convert=_to_prompts,
                    describe=_describe)
