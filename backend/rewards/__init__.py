"""Reward sources for the RL modes (GRPO, RLOO, PPO) and the reward playground.

A run config lists `reward_sources` (see spec.py). `build_reward_funcs` turns them into TRL reward
functions, `reward_weights` gives TRL their weights (TRL sums `weight × score` itself), `score_completions`
does the same sum for the playground, and `validate_sources` checks a list before a run is launched.

Importing this package is cheap (pydantic only): rules load on use, models (torch) only when built.
"""
from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Callable

from backend.rewards.base import RewardFunction, RewardSourceError, source_label
from backend.rewards.spec import (EXAMPLES, KIND_DESCRIPTIONS, PARAM_MODELS, SOURCE_KINDS, RewardSourceConfig,
                                  RewardSourceList, as_configs, cost_budgets, example_source, gates, reward_weights,
                                  source_names)

__all__ = ["RewardSourceConfig", "RewardSourceList", "RewardSourceError", "RewardFunction", "SOURCE_KINDS",
           "PARAM_MODELS", "KIND_DESCRIPTIONS", "EXAMPLES", "example_source", "build_reward_funcs",
           "reward_weights", "source_names", "cost_budgets", "score_completions", "suggested_sources", "is_suggestion",
           "validate_sources"]

_IMPLEMENTATIONS = {
    "length": ("backend.rewards.rules", "LengthReward"),
    "regex": ("backend.rewards.rules", "RegexReward"),
    "exact_match": ("backend.rewards.rules", "ExactMatchReward"),
    "numeric_match": ("backend.rewards.rules", "NumericMatchReward"),
    "blocklist": ("backend.rewards.rules", "BlocklistReward"),
    "repetition": ("backend.rewards.rules", "RepetitionReward"),
    "reward_model": ("backend.rewards.model", "RewardModelReward"),
    "embedding_similarity": ("backend.rewards.embedding", "EmbeddingSimilarityReward"),
    "diversity": ("backend.rewards.diversity", "DiversityReward"),
    "python": ("backend.rewards.custom", "PythonReward"),
    "tool_used": ("backend.rewards.trajectory", "ToolUsedReward"),
    "tool_calls": ("backend.rewards.trajectory", "ToolCallsReward"),
    "tool_errors": ("backend.rewards.trajectory", "ToolErrorsReward"),
    "environment": ("backend.rewards.trajectory", "EnvironmentReward"),
}
_COLUMN_KINDS = ("exact_match", "numeric_match", "embedding_similarity")
ANSWER_COLUMNS = ("answer", "final_answer")  # what a numeric_match suggestion reads, first found
SUGGESTED_LENGTH = 50  # words: a first target for prompts without a checkable answer


def suggested_sources(columns) -> tuple[list[dict], str]:
    """A first reward for an RL run on a dataset with these columns, and a sentence saying why: the number in an
    answer column when there is one (GSM8K's "… #### 72" too), else a length target to edit."""
    column = next((c for c in ANSWER_COLUMNS if c in (columns or ())), None)
    if column:
        return ([{"type": "numeric_match", "name": "", "weight": 1.0, "params": {"column": column}}],
                f"numeric_match against the `{column}` column")
    return ([{"type": "length", "name": "", "weight": 1.0, "params": {"target": SUGGESTED_LENGTH, "unit": "words"}}],
            f"a length target of {SUGGESTED_LENGTH} words (the dataset has no answer column to check against)")


def is_suggestion(sources) -> bool:
    """Whether `sources` are empty or one of `suggested_sources`' as suggested (nobody edited them), so a new
    dataset may replace them with its own suggestion."""
    try:
        sources = [s.model_dump() for s in as_configs(sources)]
    except ValueError:
        return False  # being edited
    if not sources:
        return True
    offers = [suggested_sources([c])[0] for c in ANSWER_COLUMNS] + [suggested_sources([])[0]]
    return any(sources == [s.model_dump() for s in as_configs(offer)] for offer in offers)


def build_reward_funcs(sources, workspace: str | Path) -> list[Callable]:
    """One TRL reward function per source, in order, each named (`__name__`) by `source_names`.

    Files, runs and models are checked and loaded here, so a bad source fails before training starts;
    models are cached per process. Dataset columns are only known at the first call, which raises a
    RewardSourceError naming the source, the column and the columns available.
    """
    sources = as_configs(sources)
    try:
        gate_of = gates(sources)
    except ValueError as e:
        raise RewardSourceError(str(e)) from None
    funcs = []
    for source, name, gate in zip(sources, source_names(sources), gate_of):
        module, cls = _IMPLEMENTATIONS[source.type]
        try:
            funcs.append(getattr(import_module(module), cls)(source, name, Path(workspace)))
        except RewardSourceError as e:
            raise RewardSourceError(f"{source_label(name, source.type)}: {e}") from e
        if gate is not None:
            funcs[-1].gate = funcs[gate]
    return funcs


def score_completions(sources, prompts: list, completions: list, workspace: str | Path, **columns) -> dict:
    """Score completions with every source, as a training step would: the reward playground.

    `columns` are dataset columns (one value per completion; a single non-list value is used for all).
    Returns {"sources": {name: [score or None, ...]}, "total": [Σ weight × score, ...], "costs": {name: [cost
    or None, ...]}}. A None score (a row a source does not score) counts as 0 in the total, as in TRL, which
    sums with nansum. Cost sources (role: cost) are left out of the total: in training their λ decides what
    they subtract.
    """
    sources = as_configs(sources)
    prompts, completions = list(prompts), list(completions)
    if len(prompts) == 1 and len(completions) > 1:
        prompts = prompts * len(completions)
    n = len(completions)
    columns = {k: (list(v) if isinstance(v, (list, tuple)) else [v] * n) for k, v in columns.items()}
    funcs = build_reward_funcs(sources, workspace)
    scores = {f.__name__: f(prompts=prompts, completions=completions, completion_ids=None, trainer_state=None,
                            **columns) for f in funcs}
    weights = [0.0 if s.is_cost else w for s, w in zip(sources, reward_weights(sources))]
    total = [sum(w * (s[i] or 0.0) for w, s in zip(weights, scores.values())) for i in range(n)]
    costs = {f.__name__: [s.as_cost(v) for v in scores[f.__name__]] for s, f in zip(sources, funcs) if s.is_cost}
    return {"sources": scores, "total": total, "costs": costs}


def validate_sources(sources, dataset_columns: list[str], workspace: str | Path) -> list[str]:
    """Problems to fix before a run starts, one line each naming the source (empty: all good).

    Checks the dataset columns sources read, that python files lie inside the workspace and define their
    function (read, not run), and that reward models are finished rm runs or classifier folders. It loads
    no model and runs no user code.
    """
    from backend.rewards.custom import defines, workspace_file
    from backend.rewards.embedding import model_dir
    from backend.rewards.model import locate_reward_model

    errors = []
    try:
        sources = as_configs(sources)
        gates(sources)
    except ValueError as e:
        return [str(e) if str(e).startswith("reward_sources.") else f"reward_sources: {e}"]
    available = ", ".join(dataset_columns) or "none"
    for i, (source, name) in enumerate(zip(sources, source_names(sources))):
        where = f"reward_sources.{i} ({name})"
        p = source.settings()
        if source.type in _COLUMN_KINDS and p.column not in dataset_columns:
            errors.append(f"{where}: the dataset has no column '{p.column}' (columns: {available})")
        try:
            if source.type == "python":
                path = workspace_file(p.file, Path(workspace))
                if not defines(path, p.function):
                    errors.append(f"{where}: {p.file} defines no function '{p.function}'")
            elif source.type == "reward_model":
                locate_reward_model(p.model, Path(workspace), p.label)
            elif source.type == "embedding_similarity" or (source.type == "diversity" and p.method == "embedding"):
                model_dir()
        except RewardSourceError as e:
            errors.append(f"{where}: {e}")
        except SyntaxError as e:
            errors.append(f"{where}: {p.file} has a syntax error at line {e.lineno}: {e.msg}")
    return errors
