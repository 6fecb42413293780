"""The reward playground: try reward sources on a few completions before training with them.

Prompts come from a dataset (a row range), completions from a model (generated here, the model cached
between calls) or pasted by a person; `score` runs the sources as a training step would, and `summarize`
says per source what a trainer would see: its mean and spread, and whether it can teach anything (a source
that gives every completion the same score, or every completion of a prompt the same score, gives GRPO and
RLOO no signal; one whose spread dwarfs the others' decides the total alone).

No gradio here: the UI formats what these functions return. torch loads only when generating.
"""
from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend.models import MODELS as MODEL_CACHE
from backend.models import ModelCache, ModelRef, cached_model
from backend.models.shared_prefill import generate_sharing_prompts
from backend.rewards.base import completion_text, is_conversation, prompt_text
from backend.rewards.trajectory import has_tool_traffic, parse_trajectory, trajectory_text

SEPARATOR = "---"  # a line of its own between pasted multi-line completions
DOMINANCE = 0.8  # share of the total's spread one source must exceed to be called dominant
MAX_PROMPTS = 64
MAX_COMPLETIONS = 512


class PlaygroundError(ValueError):
    """Input the playground cannot use; the message says what to change."""


# ---- prompts ----

@dataclass
class PromptRow:
    """One dataset row: its prompt (text or messages) and its other columns (for column-reading sources)."""

    index: int  # 1-based row number in the dataset
    prompt: object
    columns: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return prompt_text(self.prompt)


def select_prompts(dataset: str, workspace: str | Path | None, first: int = 1, count: int = 4) -> list[PromptRow]:
    """Rows first..first+count-1 (1-based) of a dataset that has a `prompt` column."""
    from backend.data import load_dataset_spec

    first, count = int(first or 1), int(count or 1)
    if first < 1:
        raise PlaygroundError(f"first row {first}: rows are numbered from 1")
    if not 1 <= count <= MAX_PROMPTS:
        raise PlaygroundError(f"number of prompts {count}: choose 1 to {MAX_PROMPTS}")
    ds = load_dataset_spec(dataset, Path(workspace) if workspace else None)
    if "prompt" not in ds.column_names:
        raise PlaygroundError(f"dataset {dataset} has no `prompt` column (columns: {', '.join(ds.column_names)}); "
                              "the playground needs prompt-only data like the RL modes (e.g. demo-math)")
    if first > len(ds):
        raise PlaygroundError(f"first row {first}: dataset {dataset} has only {len(ds)} rows")
    rows = ds.select(range(first - 1, min(len(ds), first - 1 + count)))
    return [PromptRow(first + i, row["prompt"], {k: v for k, v in row.items() if k != "prompt"})
            for i, row in enumerate(rows)]


# ---- completions as text (pasted, or shown after generating) ----

def split_completions(text: str) -> list[str]:
    """Completions from a text box: blocks between `---` lines when there are any, else one per line."""
    lines = (text or "").splitlines()
    if any(line.strip() == SEPARATOR for line in lines):
        blocks, current = [], []
        for line in lines + [SEPARATOR]:
            if line.strip() == SEPARATOR:
                block = "\n".join(current).strip("\n")
                if block.strip():
                    blocks.append(block)
                current = []
            else:
                current.append(line)
        return blocks
    return [line for line in lines if line.strip()]


def join_completions(completions: list[str]) -> str:
    """The text `split_completions` reads back: blocks separated by `---` lines (a `---` line inside a
    completion is written as `- - -` so it does not split it)."""
    return f"\n{SEPARATOR}\n".join("\n".join("- - -" if line.strip() == SEPARATOR else line
                                             for line in c.splitlines()) or " " for c in completions)


def assign_completions(n_completions: int, n_prompts: int) -> list[int]:
    """Which prompt (0-based) each completion answers: one each, or k consecutive ones per prompt."""
    if n_completions == 0:
        raise PlaygroundError("no completions: generate some, or paste one per line (or blocks separated by "
                              f"'{SEPARATOR}' lines)")
    if n_prompts == 0:
        raise PlaygroundError("no prompts selected")
    if n_completions % n_prompts:
        raise PlaygroundError(f"{n_completions} completions for {n_prompts} prompts: give one per prompt, or "
                              f"the same number for each (a multiple of {n_prompts}), in prompt order")
    per = n_completions // n_prompts
    return [i // per for i in range(n_completions)]


# ---- generating (the model is cached between calls) ----

class PlaygroundModel:
    """The playground's one causal LM, in the process's model cache between calls for the same model spec;
    another spec (or `release`) lets go of it first, so the playground never holds two models."""

    HOLDER = "playground"

    def __init__(self, cache: ModelCache | None = None):
        self._cache = cache
        self._lock = threading.Lock()
        self.spec: str | None = None

    @property
    def cache(self) -> ModelCache:
        return self._cache or MODEL_CACHE

    def get(self, spec: str, progress=None):
        spec = (spec or "").strip()
        with self._lock:
            if self.spec != spec:
                self._release()
            loaded = cached_model(ModelRef.parse(spec), self.HOLDER, cache=self.cache, progress=progress)
            self.spec = spec
            return loaded.model, loaded.tokenizer

    def release(self, keep: str | None = None) -> bool:
        """Let go of the model unless it is `keep`; True when one was let go of."""
        with self._lock:
            if self.spec is None or (keep is not None and (keep or "").strip() == self.spec):
                return False
            self._release()
            return True

    def _release(self):
        self.spec = None
        self.cache.release(self.HOLDER)


MODELS = PlaygroundModel()


@dataclass
class GenerationProgress:
    done: int  # completions generated so far
    total: int
    message: str
    completions: list[str] = field(default_factory=list)  # grouped by prompt, in prompt order


def _prompt_ids(tokenizer, prompt):
    if is_conversation(prompt):  # as TRL does for conversational data: the chat template, ready for the answer
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, return_tensors="pt", add_special_tokens=False)
    return tokenizer(str(prompt), return_tensors="pt")


@dataclass
class ToolSetting:
    """Tools the playground's model may call while it answers, as a GRPO run with them would (its `tools`, chat
    template and tool-calling turns); each completion is then the whole exchange, shown as trajectory text."""

    tools: list
    chat_template: str
    max_iterations: int
    workspace: Path


def generate_completions(prompts: list, model: str, num_completions: int = 2, max_new_tokens: int = 64,
                         temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
                         cache: PlaygroundModel = MODELS, tools: ToolSetting | None = None
                         ) -> Iterator[GenerationProgress]:
    """Sample `num_completions` per prompt; yields progress after loading and after each prompt, the last
    one holding every completion (grouped by prompt). Temperature 0 decodes greedily. With `tools`, each answer
    goes through the tool loop (max_new_tokens per turn) and reads as `trajectory_text`."""
    import torch

    n, max_new_tokens = int(num_completions), int(max_new_tokens)
    if not 1 <= n <= 64:
        raise PlaygroundError(f"completions per prompt {n}: choose 1 to 64")
    if not 1 <= max_new_tokens <= 4096:
        raise PlaygroundError(f"max new tokens {max_new_tokens}: choose 1 to 4096")
    if temperature is None or temperature < 0:
        raise PlaygroundError("temperature: 0 (greedy) or more")
    total = n * len(prompts)
    if total > MAX_COMPLETIONS:
        raise PlaygroundError(f"{total} completions: at most {MAX_COMPLETIONS} at once")
    cached = cache.spec == (model or "").strip()
    yield GenerationProgress(0, total, f"Using the loaded model {model}" if cached else f"Loading {model}")
    built = _tools(tools) if tools else None  # a tool that cannot be made is said before the model loads
    lm, tokenizer = cache.get(model)
    if seed is not None:
        torch.manual_seed(int(seed))
    sampling = dict(do_sample=True, temperature=float(temperature), top_p=float(top_p)) if temperature > 0 \
        else dict(do_sample=False)
    if built is not None:
        answer = _with_tools(lm, _tool_tokenizer(tokenizer, tools, model), built, tools, n, max_new_tokens, sampling)
    else:
        answer = _plain(lm, tokenizer, n, max_new_tokens, sampling)
    out: list[str] = []
    for i, prompt in enumerate(prompts):
        out += answer(prompt)
        yield GenerationProgress(len(out), total, f"Generated {len(out)}/{total} completions "
                                                  f"(prompt {i + 1}/{len(prompts)})", list(out))


def _plain(lm, tokenizer, n: int, max_new_tokens: int, sampling: dict):
    import torch

    def answer(prompt) -> list[str]:
        inputs = _prompt_ids(tokenizer, prompt)
        with torch.no_grad():
            ids = generate_sharing_prompts(lm.generate, lm, **inputs, max_new_tokens=max_new_tokens,
                                           num_return_sequences=n, pad_token_id=tokenizer.pad_token_id, **sampling)
        start = inputs["input_ids"].shape[1]
        return [tokenizer.decode(row[start:], skip_special_tokens=True).strip() for row in ids]

    return answer


def _tools(setting: ToolSetting) -> list:
    from backend.tools import build_tools

    try:
        return build_tools(setting.tools, setting.workspace)
    except Exception as e:  # noqa: BLE001 - a tool that cannot be made (a folder, a file, a signature), said so
        raise PlaygroundError(f"tools: {e}") from None


def _tool_tokenizer(tokenizer, setting: ToolSetting, model: str):
    from backend.data.templates import tool_template_problem, tool_tokenizer

    tokenizer = tool_tokenizer(tokenizer, setting.chat_template)
    if why := tool_template_problem(tokenizer, setting.chat_template, model):
        raise PlaygroundError(f"chat template: {why}")
    return tokenizer


def _with_tools(lm, tokenizer, built: list, setting: ToolSetting, n: int, max_new_tokens: int, sampling: dict):
    from backend.tools.loop import answer_with_tools

    def answer(prompt) -> list[str]:
        conversation = prompt if is_conversation(prompt) else [{"role": "user", "content": str(prompt)}]
        added = answer_with_tools(lm, tokenizer, [list(conversation)] * n, built, max_new_tokens,
                                  setting.max_iterations, sampling)
        return [trajectory_text(messages) for messages in added]

    return answer


# ---- scoring and what it says ----

@dataclass
class ScoredCompletion:
    prompt: str
    completion: str
    scores: dict[str, float | None]
    total: float


@dataclass
class SourceStats:
    name: str
    weight: float
    scores: list[float | None]
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    scored: int  # completions with a score (not None)
    budget: float | None = None  # a cost source's: its scores are costs, kept out of the total


@dataclass
class PlaygroundResult:
    rows: list[ScoredCompletion]
    stats: list[SourceStats]
    total: SourceStats
    warnings: list[str]
    lam: float = 0.0  # the λ the totals subtract λ × cost with
    penalty: float | None = None  # the mean λ × Σ cost taken off the totals; None without cost sources


def score(sources, prompts: list[PromptRow], completions: list[str], workspace: str | Path,
          groups: list[int] | None = None, lam: float = 0.0) -> PlaygroundResult:
    """Score each completion (for the prompt `groups[i]`, default as `assign_completions`) with every
    source, as a training step would; each total subtracts `lam` × its costs, as a step at that λ would.
    Raises RewardSourceError / ValueError naming the source."""
    from backend.rewards import score_completions
    from backend.rewards.spec import as_configs, cost_budgets, reward_weights

    configs = as_configs(sources)
    if not configs:
        raise PlaygroundError("no reward sources: add at least one")
    groups = groups if groups is not None else assign_completions(len(completions), len(prompts))
    rows = [prompts[g] for g in groups]
    # conversational prompts get conversational completions, as in training; a shown exchange (calls →, results
    # ←) is scored as its messages, as a run with tools scores it
    given = [parse_trajectory(c) for c in completions]
    given = [c if is_conversation(c) else [{"role": "assistant", "content": c}] if is_conversation(r.prompt) else c
             for r, c in zip(rows, given)]
    names = sorted({k for r in rows for k in r.columns})
    columns = {k: [r.columns.get(k) for r in rows] for k in names}
    result = score_completions(configs, [r.prompt for r in rows], given, workspace, **columns)
    weights, budgets, costs = reward_weights(configs), cost_budgets(configs), result["costs"]
    # a cost shows its cost (≥ 0), weighs nothing in the total and is not judged as a reward
    stats = [source_stats(name, costs[name], 0.0, budgets[name]) if name in costs else source_stats(name, scores, w)
             for (name, scores), w in zip(result["sources"].items(), weights)]
    penalties = [lam * sum(c[i] or 0.0 for c in costs.values()) for i in range(len(given))]
    totals = [t - p for t, p in zip(result["total"], penalties)]
    table = [ScoredCompletion(r.text, trajectory_text(c) if has_tool_traffic(c) else completion_text(c),
                              {s.name: s.scores[i] for s in stats}, totals[i])
             for i, (r, c) in enumerate(zip(rows, given))]
    total = source_stats("total", totals, 1.0)
    penalty = statistics.fmean(penalties) if costs and penalties else None
    return PlaygroundResult(table, stats, total, warnings(stats, groups, total), lam, penalty)


def source_stats(name: str, scores: list, weight: float = 1.0, budget: float | None = None) -> SourceStats:
    values = [float(s) for s in scores if s is not None and math.isfinite(float(s))]
    if not values:
        return SourceStats(name, weight, list(scores), None, None, None, None, 0, budget)
    return SourceStats(name, weight, list(scores), statistics.fmean(values), statistics.pstdev(values),
                       min(values), max(values), len(values), budget)


def _num(x: float) -> str:
    return f"{x:.3g}" if x is not None else "–"


def summary_line(stats: list[SourceStats], total: SourceStats | None = None) -> str:
    """`correct mean 0.25 ± 0.43 · format mean 1 ± 0 · total mean 0.75 ± 0.43` (± is the std)."""
    parts = []
    for s in stats + ([total] if total else []):
        if s.mean is None:
            parts.append(f"{s.name}: no scores")
            continue
        partial = f" ({s.scored}/{len(s.scores)} scored)" if s.scored < len(s.scores) else ""
        cost = "" if s.budget is None else f" cost (budget {s.budget:g}{', over' if s.mean > s.budget else ''})"
        parts.append(f"{s.name}{cost} mean {_num(s.mean)} ± {_num(s.std)}{partial}")
    return " · ".join(parts)


def _constant(values: list) -> bool:
    return len(values) > 1 and max(values) - min(values) <= 1e-12


def warnings(stats: list[SourceStats], groups: list[int] | None = None,
             total: SourceStats | None = None) -> list[str]:
    """What would keep a source (or the total) from teaching anything, one line each (empty: all good)."""
    out = []
    for s in (s for s in stats if s.budget is None):  # a cost that never fires is what one wants
        values = [v for v in s.scores if v is not None]
        if not values:
            out.append(f"{s.name} scored none of the completions (None for every one): it adds nothing to the "
                       "reward")
        elif len(s.scores) > 1 and _constant(values):
            value = values[0]
            if value == 0:
                out.append(f"{s.name} is 0 for every completion: rewards stuck at zero")
            else:
                out.append(f"{s.name} is {_num(value)} for every completion: it cannot tell completions apart, "
                           "so it adds no learning signal")
        elif groups is not None and _same_within_groups(s.scores, groups):
            out.append(f"{s.name} gives every completion of a prompt the same score: GRPO and RLOO compare "
                       "completions of the same prompt, so they learn nothing from it")
    spread = {s.name: abs(s.weight) * s.std for s in stats if s.std and s.weight}
    if len(spread) >= 2:
        whole = sum(spread.values())
        name, top = max(spread.items(), key=lambda kv: kv[1])
        if top / whole >= DOMINANCE:
            out.append(f"{name} dominates the total: {100 * top / whole:.0f}% of the spread of the weighted "
                       "scores comes from it, so the other sources barely matter; lower its weight or raise "
                       "theirs")
    if total is not None and spread and total.std is not None and total.std <= 1e-12 and len(total.scores) > 1:
        out.append(f"the total is {_num(total.mean)} for every completion although sources vary: their weighted "
                   "scores cancel out, so training gets no signal; check the weights' signs")
    return out


def _same_within_groups(scores: list, groups: list[int]) -> bool:
    by_group: dict[int, list] = {}
    for score_, g in zip(scores, groups):
        by_group.setdefault(g, []).append(score_)
    sized = [v for v in by_group.values() if len(v) > 1]
    return bool(sized) and all(len(set(v)) == 1 for v in sized)
