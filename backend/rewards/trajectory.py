"""Trajectory sources: what a completion did with its tools, read from the whole message list.

With tools, TRL 1.16's GRPOTrainer hands each reward function a completion as a list of messages: assistant turns
(a call is in `tool_calls`: [{"type": "function", "function": {"name", "arguments"}}]), then {"role": "tool",
"name", "content"} results, then more assistant turns. A call that failed is answered with str({"error": ...}).
A plain-text completion made no calls: 0 for every kind. Plain Python, microseconds per completion.
"""
from __future__ import annotations

import ast
import json
import re

from backend.rewards.base import RewardFunction, content_text, is_conversation

# How TRL writes a failed call's result (str of a dict); the JSON spelling too, for other loops.
_ERROR_PREFIXES = ("{'error'", '{"error"')


def messages(completion) -> list[dict]:
    """The messages of a completion: a message list as it is, one message as a list, anything else (text) none."""
    if isinstance(completion, dict):
        return [completion]
    return completion if is_conversation(completion) else []


def calls(completion) -> list[dict]:
    """Every tool call of a completion, in order, as its `function` part: {"name": ..., "arguments": ...}."""
    found = []
    for m in messages(completion):
        for call in m.get("tool_calls") or ():
            if isinstance(call, dict):
                found.append(call.get("function") if isinstance(call.get("function"), dict) else call)
    return found


def results(completion) -> list[dict]:
    """The tool messages (results) of a completion."""
    return [m for m in messages(completion) if m.get("role") == "tool"]


def is_error(result: dict) -> bool:
    """Whether a tool message reports a failed call."""
    content = result.get("content")
    if isinstance(content, dict):
        return "error" in content
    return isinstance(content, str) and content.lstrip().startswith(_ERROR_PREFIXES)


def has_tool_traffic(completion) -> bool:
    return bool(calls(completion) or results(completion))


def assistant_turns(completion) -> int:
    """Assistant messages of a message list; a plain-text completion is one turn."""
    if not isinstance(completion, (list, dict)):
        return 1
    return sum(1 for m in messages(completion) if m.get("role", "assistant") == "assistant")


def tool_metrics(completions: list, seen: set[str] | None = None) -> dict[str, float]:
    """A batch's tool use: calls and assistant turns per completion (mean), errors / calls (0 without calls), and
    per tool the share of completions calling it. `seen` (updated) names tools met in earlier batches, so a tool
    no completion of this batch called logs 0 instead of nothing and its share is not overstated."""
    n = len(completions)
    if not n:
        return {}
    made = [calls(c) for c in completions]
    names = [{call.get("name") for call in cs} - {None} for cs in made]
    n_calls = sum(map(len, made))
    n_errors = sum(is_error(r) for c in completions for r in results(c))
    seen = set() if seen is None else seen
    seen.update(*names)
    out = {"tools/calls_per_episode": n_calls / n,
           "tools/error_rate": n_errors / n_calls if n_calls else 0.0,
           "tools/turns_per_episode": sum(assistant_turns(c) for c in completions) / n}
    for tool in sorted(seen):
        out[f"tools/episodes_using/{tool}"] = sum(tool in used for used in names) / n
    return out


class _ToolReward(RewardFunction):
    def named(self, name) -> bool:
        return not self.params.tool or name == self.params.tool


class ToolUsedReward(_ToolReward):
    """1 if the completion calls the tool (any tool when `tool` is empty) at least once, else 0."""

    def score(self, prompts, completions, **kwargs):
        return [float(any(self.named(c.get("name")) for c in calls(completion))) for completion in completions]


class ToolCallsReward(_ToolReward):
    """The number of calls to the tool (or to any): ≥ 0, so as a cost it is the count itself."""

    def score(self, prompts, completions, **kwargs):
        return [float(sum(self.named(c.get("name")) for c in calls(completion))) for completion in completions]


class ToolErrorsReward(_ToolReward):
    """The number of the tool's (or any tool's) results that report an error: ≥ 0, a cost as it is."""

    def score(self, prompts, completions, **kwargs):
        return [float(sum(self.named(r.get("name")) and is_error(r) for r in results(completion)))
                for completion in completions]


class EnvironmentReward(RewardFunction):
    """The score the run's environment gives each episode (get_reward of the instance that played it); None where
    no environment played (the playground, an evaluation without one)."""

    def score(self, prompts, completions, environments=None, **kwargs):
        if not environments:
            return [None] * len(completions)
        # underscored (backend/tools/environment.py): a public method would be one more tool for TRL
        return [e._episode_reward() for e in environments]


_TOOL_CHARS = 500  # a tool result (or a call's arguments) shown: enough to see what came back


def _cut(text: str, limit: int = _TOOL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _call_text(call: dict) -> str:
    """A tool call as `→ name(arg=value, ...)`; arguments may come as a dict or as JSON text."""
    args = call.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    inner = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else \
        ("" if args is None else str(args))
    return f"→ {call.get('name')}({_cut(inner)})"


def trajectory_text(messages: list[dict]) -> str:
    """A tool-calling completion turn by turn: assistant text, its calls (→), their results (←, a result's further
    lines indented), the final answer last, as the model wrote them. `parse_trajectory` reads it back."""
    lines = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            result = _cut(content_text(m.get("content")).strip()).replace("\n", "\n" + _MORE)
            lines.append(f"← {m.get('name') or 'tool'}: {result}")
            continue
        if text := content_text(m.get("content")).strip():
            lines.append(text if role in (None, "assistant") else f"{role}: {text}")
        lines += [_call_text(c) for c in calls(m)]
    return "\n".join(lines)


_MORE = "  "  # a tool result's further lines
_CALL = re.compile(r"^→ ([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$")
_RESULT = re.compile(r"^← ([^:]*): ?(.*)$")


def parse_trajectory(text: str):
    """`trajectory_text` read back into messages (assistant turns with their `tool_calls`, `tool` results), so a
    shown or pasted exchange is scored as one; text without a call or result line is returned as it is. Arguments
    shown cut short (…) stay their text."""
    lines = text.splitlines()
    if not any(_CALL.match(line.strip()) or _RESULT.match(line) for line in lines):
        return text
    messages: list[dict] = []
    current = None  # the assistant message being read, or the tool result lines continue

    def assistant() -> dict:
        nonlocal current
        if current is None or current.get("role") != "assistant":
            current = {"role": "assistant", "content": ""}
            messages.append(current)
        return current

    for line in lines:
        if call := _CALL.match(line.strip()):
            assistant().setdefault("tool_calls", []).append(
                {"type": "function", "function": {"name": call[1], "arguments": _arguments(call[2])}})
        elif result := _RESULT.match(line):
            current = {"role": "tool", "name": result[1], "content": result[2]}
            messages.append(current)
        elif current is not None and current["role"] == "tool" and line.startswith(_MORE):
            current["content"] += "\n" + line[len(_MORE):]
        else:
            message = assistant()
            message["content"] = f"{message['content']}\n{line}" if message["content"] else line
    return messages


def _arguments(inner: str):
    """`a=1, b='x'` as {"a": 1, "b": "x"}; text that does not read so, as it is."""
    try:
        call = ast.parse(f"f({inner})", mode="eval").body
        return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (SyntaxError, ValueError, TypeError):
        return inner
