"""The reward-source schema: what a run config says about where the RL reward comes from.

Pydantic only (no torch): the run config, the UI and the pre-launch check import it. Each kind of source
has one small param model whose fields carry their title, help and range once, like backend/config.py.
"""
from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

SOURCE_KINDS = ("length", "regex", "exact_match", "numeric_match", "blocklist", "repetition", "reward_model",
                "embedding_similarity", "diversity", "python", "tool_used", "tool_calls", "tool_errors", "environment")
# Kinds that score harm as a negative penalty: as a cost (role: cost) their cost is −score, so a cost is always
# "how much of the unwanted thing", ≥ 0 for the built-in kinds. Every other kind's score is its cost as it is.
PENALTY_KINDS = ("blocklist", "repetition")

# One line per kind, for the UI's "add a source" menu.
KIND_DESCRIPTIONS = {
    "length": "1 at the target length, falling linearly to 0 at target ± tolerance × target.",
    "regex": "1 if the completion matches a regular expression (e.g. a required answer format), else 0.",
    "exact_match": "1 if the completion (or its <answer>) equals a dataset column, else 0.",
    "numeric_match": "1 if the number in the completion equals the number in a dataset column, else 0.",
    "blocklist": "A safety penalty: −penalty for each blocked keyword found (or once if any is found).",
    "repetition": "−(fraction of repeated word n-grams): 0 for varied text, near −1 for a loop.",
    "reward_model": "The score of a reward model: a finished rm run of this workspace, a local folder or a Hub id.",
    "embedding_similarity": "Cosine similarity (−1..1) between the completion and a dataset column "
                            "(all-MiniLM-L6-v2, offline).",
    "diversity": "How much a completion differs from the other completions of the same prompt (0..1): its share "
                 "of word n-grams no other one has (distinct-n), or 1 − its mean cosine similarity to them "
                 "(embedding, all-MiniLM-L6-v2, offline).",
    "python": "Your own function `f(prompts, completions, **columns) -> list[float]` from a .py file in the "
              "workspace.",
    "tool_used": "1 if the completion calls the tool (any tool when none is named) at least once, else 0 (runs "
                 "with tools; 0 without).",
    "tool_calls": "The number of tool calls in the completion (of one tool, or of all): as a cost with a budget, "
                  "a limit on the mean calls per completion.",
    "tool_errors": "The number of tool calls answered with an error (an unknown tool, bad arguments, a tool that "
                   "failed): as a cost with a budget, a limit on the mean errors per completion.",
    "environment": "The run's environment's own score of each episode (its get_reward), e.g. 1 for a game won.",
}


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _split_list(v):
    """Accept "a, b" as well as a list (form textboxes and --set)."""
    if isinstance(v, str):
        v = [p.strip() for p in v.split(",")]
    if isinstance(v, (list, tuple)):
        v = [str(p).strip() for p in v if str(p).strip()]
    return v


class LengthParams(_Params):
    target: int = Field(..., ge=1, le=1_000_000, title="Target length",
                        description="The length that scores 1, in the chosen unit.")
    unit: Literal["words", "characters", "tokens"] = Field(
        "words", title="Unit",
        description="words (split on whitespace), characters, or tokens: the policy's tokens during training, "
                    "≈ characters / 4 where no token ids are given (the playground).")
    tolerance: float = Field(0.5, gt=0, le=100, title="Tolerance",
                             description="Where the score reaches 0, as a fraction of the target: 0.5 with "
                                         "target 100 scores 0.5 at 75 or 125 and 0 at 50 or 150.")


REGEX_FLAGS = {"ignorecase": re.IGNORECASE, "multiline": re.MULTILINE, "dotall": re.DOTALL}


class RegexParams(_Params):
    pattern: str = Field(..., min_length=1, max_length=2000, title="Pattern",
                         description="A regular expression the completion must match, e.g. <answer>.*?</answer>.")
    match: Literal["search", "fullmatch"] = Field(
        "search", title="Match", description="search: anywhere in the completion; fullmatch: the whole completion "
                                             "(surrounding whitespace ignored).")
    flags: list[Literal["ignorecase", "multiline", "dotall"]] = Field(
        default_factory=list, title="Flags",
        description="Comma-separated: ignorecase, multiline, dotall (. also matches newlines).")

    @field_validator("flags", mode="before")
    @classmethod
    def _split(cls, v):
        return _split_list(v)

    @model_validator(mode="after")
    def _compiles(self):
        try:
            re.compile(self.pattern, regex_flags(self.flags))
        except re.error as e:
            raise ValueError(f"params.pattern: not a valid regular expression ({e})") from None
        return self


def regex_flags(names: list[str]) -> int:
    flags = 0
    for name in names:
        flags |= REGEX_FLAGS[name]
    return flags


class ExactMatchParams(_Params):
    column: str = Field("answer", min_length=1, title="Reference column",
                        description="The dataset column holding the expected answer.")
    extract_answer: bool = Field(True, title="Use <answer>",
                                 description="Compare the text inside the completion's last <answer>…</answer> "
                                             "when it has one, else the whole completion.")
    ignore_case: bool = Field(True, title="Ignore case", description="Compare case-insensitively.")
    normalize_whitespace: bool = Field(True, title="Normalise whitespace",
                                       description="Trim both ends and treat any run of whitespace as one space.")


class NumericMatchParams(_Params):
    column: str = Field("answer", min_length=1, title="Reference column",
                        description="The dataset column holding the expected number (a number, or text whose "
                                    "last number counts, e.g. GSM8K's '… #### 72').")
    tolerance: float = Field(1e-6, ge=0, le=1e12, title="Tolerance",
                             description="Largest absolute difference still counted as equal.")
    position: Literal["last", "first"] = Field(
        "last", title="Which number",
        description="The completion's number that answers (outside an <answer> tag): last, after any working; "
                    "first, an answer given up front (\"22, because 18 + 4 = 22\" counts, \"18 + 4 = 22\" does "
                    "not).")


class BlocklistParams(_Params):
    keywords: list[str] = Field(..., min_length=1, max_length=10_000, title="Blocked keywords",
                                description="Comma-separated words or phrases; matched case-insensitively as whole "
                                            "words.")
    penalty: float = Field(1.0, gt=0, le=1e6, title="Penalty", description="Subtracted for each hit (or once).")
    count: Literal["each", "any"] = Field("each", title="Count",
                                          description="each: −penalty × number of hits; any: −penalty once if "
                                                      "any keyword occurs.")

    @field_validator("keywords", mode="before")
    @classmethod
    def _split(cls, v):
        return _split_list(v)


class RepetitionParams(_Params):
    n: int = Field(3, ge=1, le=32, title="N-gram size",
                   description="Length of the word sequences checked for repeats.")


class RewardModelParams(_Params):
    model: str = Field(..., min_length=1, title="Reward model",
                       description="The id of a finished reward-model (rm) run of this workspace, a local folder "
                                   "of a sequence-classification model, or a Hugging Face Hub id.")
    batch_size: int = Field(8, ge=1, le=4096, title="Batch size", description="Texts scored per forward pass.")
    max_length: int = Field(1024, ge=8, le=1_000_000, title="Max length",
                            description="Tokens per prompt + completion; longer texts lose their beginning so the "
                                        "end of the completion is always scored.")
    label: str = Field("", max_length=200, title="Label",
                       description="For a classifier with several labels (e.g. a toxicity model): the label whose "
                                   "probability is the score, by name or index; empty: the one output of a reward "
                                   "model (its logit).")
    negate: bool = Field(False, title="Negate",
                         description="Score −output: a model that scores the wanted answer high then scores the "
                                     "unwanted one high (for a cost).")
    threshold: float | None = Field(None, ge=-1e6, le=1e6, allow_inf_nan=False, title="Threshold",
                                    description="Score 1 when the output (after negate) is above it, else 0: a flag, "
                                                "so a cost's budget reads as the share of flagged completions "
                                                "(e.g. 0.5 for a probability, 0 for a cost classifier's logit).")


class EmbeddingSimilarityParams(_Params):
    column: str = Field("answer", min_length=1, title="Reference column",
                        description="The dataset column holding the reference text.")
    batch_size: int = Field(32, ge=1, le=4096, title="Batch size", description="Texts embedded per forward pass.")


class DiversityParams(_Params):
    method: Literal["distinct_n", "embedding"] = Field(
        "distinct_n", title="Method",
        description="distinct_n: the share of the completion's word n-grams that no other completion of its "
                    "prompt contains; embedding: 1 − its mean cosine similarity to the others (all-MiniLM-L6-v2).")
    n: int = Field(2, ge=1, le=32, title="N-gram size", description="distinct_n: length of the word sequences.")
    batch_size: int = Field(32, ge=1, le=4096, title="Batch size",
                            description="embedding: texts embedded per forward pass.")


class PythonParams(_Params):
    file: str = Field(..., min_length=1, title="Python file",
                      description="A .py file inside the workspace (a path relative to it, or absolute). Only "
                                  "files you put in the workspace are run, never code typed into a form.")
    function: str = Field("reward", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", title="Function",
                          description="The function in that file: f(prompts, completions, completion_ids, "
                                      "trainer_state, **columns) -> one float (or None) per completion.")
    timeout_s: float = Field(30.0, gt=0, le=86_400, title="Time limit (s)",
                             description="The longest one batch's call may take; the function runs in a process "
                                         "of its own, ended when it takes longer.")
    on_timeout: Literal["fail", "missing"] = Field(
        "fail", title="Past the limit",
        description="fail: the run stops, saying which source and step; missing: that batch's scores count as "
                    "missing (None) and the run goes on.")


class ToolParams(_Params):
    """tool_used, tool_calls and tool_errors: which tool they count."""

    # the pattern of a tool's name in backend/tools/spec.py, or empty
    tool: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,63})?$", title="Tool",
                      description="The name the model calls the tool by (its name in the run config's tools); "
                                  "empty: any tool.")


class EnvironmentParams(_Params):
    """environment: nothing to set; the run's `environment` scores."""


PARAM_MODELS: dict[str, type[_Params]] = {
    "length": LengthParams,
    "regex": RegexParams,
    "exact_match": ExactMatchParams,
    "numeric_match": NumericMatchParams,
    "blocklist": BlocklistParams,
    "repetition": RepetitionParams,
    "reward_model": RewardModelParams,
    "embedding_similarity": EmbeddingSimilarityParams,
    "diversity": DiversityParams,
    "python": PythonParams,
    "tool_used": ToolParams,
    "tool_calls": ToolParams,
    "tool_errors": ToolParams,
    "environment": EnvironmentParams,
}

# A ready-to-edit source of each kind (the UI's "add" button, docs).
EXAMPLES: dict[str, dict] = {
    "length": {"target": 100, "unit": "words"},
    "regex": {"pattern": "<answer>.*?</answer>", "flags": ["dotall"]},
    "exact_match": {"column": "answer"},
    "numeric_match": {"column": "answer"},
    "blocklist": {"keywords": ["idiot", "stupid"]},
    "repetition": {"n": 3},
    "reward_model": {"model": "<id of a finished rm run>"},
    "embedding_similarity": {"column": "answer"},
    "diversity": {"method": "distinct_n", "n": 2},
    "python": {"file": "rewards.py", "function": "reward"},
    "tool_used": {"tool": "calculator"},
    "tool_calls": {"tool": ""},
    "tool_errors": {"tool": ""},
    "environment": {},
}


def _describe(info) -> str:
    text = (info.description or info.title or "").strip().rstrip(".")
    return text[:1].lower() + text[1:]


def _param_errors(kind: str, err: ValidationError) -> list[str]:
    model = PARAM_MODELS[kind]
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        top = str(e["loc"][0]) if e["loc"] else ""
        if e["type"] == "missing" and top in model.model_fields:
            lines.append(f"params.{loc}: missing — {_describe(model.model_fields[top])}")
        elif e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc, list(model.model_fields), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"{kind} takes {', '.join(model.model_fields)}"
            lines.append(f"params.{loc}: unknown parameter; {hint}")
        elif msg.startswith("params."):  # already located by a model validator
            lines.append(msg)
        else:
            got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
            lines.append(f"params.{loc}: {msg}{got}" if loc else f"params: {msg}")
    return lines


def validate_params(kind: str, params: dict | None) -> _Params:
    """The typed params of a source; ValueError with one `params.<field>: …` line per problem."""
    try:
        return PARAM_MODELS[kind].model_validate(params or {})
    except ValidationError as err:
        raise ValueError("; ".join(_param_errors(kind, err))) from None


class RewardSourceConfig(BaseModel):
    """One reward source: a kind, its params, a metric name and a weight in the summed reward; or, with
    `role: cost`, a cost the run keeps under its budget (a Lagrangian constraint, see backend/rewards/constraint.py).
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal[SOURCE_KINDS] = Field(..., title="Kind",
                                        description="; ".join(f"{k}: {v}" for k, v in KIND_DESCRIPTIONS.items()))
    name: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9_.-]*$", title="Name",
                      description="Metric name (logged as rewards/<name>/mean); empty: the kind, numbered when "
                                  "repeated (length, length_2).")
    weight: float = Field(1.0, ge=-1e6, le=1e6, allow_inf_nan=False, title="Weight",
                          description="Factor of this source in the summed reward; negative penalises, 0 logs the "
                                      "score without counting it.")
    params: dict[str, Any] = Field(default_factory=dict, title="Parameters",
                                   description="The kind's own settings (see PARAM_MODELS).")
    role: Literal["reward", "cost"] = Field(
        "reward", title="Role",
        description="reward: added to the reward with its weight; cost: kept under its budget by the trainer, "
                    "which subtracts λ × cost and raises λ while the mean cost is over the budget (PPO, GRPO, "
                    "RLOO). A blocklist's or repetition's cost is its penalty (−score); other kinds' is the score.")
    budget: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False, title="Budget",
                                 description="A cost source's limit: the mean cost per completion the run must stay "
                                             "under (e.g. 0.05 with a blocklist count: any = at most 5% of "
                                             "completions with a blocked word).")

    when: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9_.-]*$", title="Only when",
                      description="The name of an earlier source: this one scores only the completions that source "
                                  "scores above 0, and 0 elsewhere (e.g. a brevity reward for correct answers only, "
                                  "so being short never pays by itself); empty: always.")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        # Said here, not by extra="forbid": the run config would suggest a top-level setting instead.
        if isinstance(data, dict):
            problems = []
            for key in (k for k in data if k not in cls.model_fields):
                close = difflib.get_close_matches(str(key), list(cls.model_fields), n=1)
                problems.append(f"unknown key '{key}'; " + (f"did you mean '{close[0]}'?" if close else
                                                            "a source takes type, name, weight, params, "
                                                            "role, budget and when"))
            if problems:
                raise ValueError("; ".join(problems))
        return data

    @model_validator(mode="after")
    def _check_params(self):
        try:
            typed = validate_params(self.type, self.params)
        except ValueError as e:
            raise ValueError(f"{self.type} source: {e}") from None
        self.params = typed.model_dump()  # defaults filled in: a stored run shows every setting it used
        return self

    @model_validator(mode="after")
    def _check_role(self):
        if self.role == "cost":
            if self.budget is None:
                raise ValueError("budget: a cost source needs a budget, the mean cost per completion the run must "
                                 "stay under (e.g. budget: 0.05)")
            if self.weight != 1.0:
                raise ValueError("weight: a cost is weighed by its Lagrange multiplier λ (the constraint.* "
                                 "settings), not by a fixed weight; leave weight at 1")
            if self.type == "diversity":
                raise ValueError("role: diversity is something to reward, not a cost; use role: reward")
            if self.when:
                raise ValueError("when: a cost counts on every completion; only a reward can be gated")
        elif self.budget is not None:
            raise ValueError("budget: only a cost source has a budget; set role: cost, or remove budget")
        return self

    @property
    def is_cost(self) -> bool:
        return self.role == "cost"

    def as_cost(self, score: float | None) -> float | None:
        """A score of this source as its cost (see PENALTY_KINDS)."""
        if score is None:
            return None
        return 0.0 - score if self.type in PENALTY_KINDS else score

    def settings(self) -> _Params:
        """The params as their typed model (already validated)."""
        return PARAM_MODELS[self.type].model_validate(self.params)


def _parse_sources(v):
    # A form textbox or a hand-written preset may hold the list as YAML text; empty means no sources.
    if v is None or (isinstance(v, str) and not v.strip()):
        return []
    if isinstance(v, str):
        try:
            v = yaml.safe_load(v)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ValueError(f"not valid YAML ({getattr(e, 'problem', None) or 'parse error'}{where})") from None
        if v is None:
            return []
    if isinstance(v, dict):  # a single source
        v = [v]
    return v


RewardSourceList = Annotated[list[RewardSourceConfig], BeforeValidator(_parse_sources)]


def as_configs(sources) -> list[RewardSourceConfig]:
    """Sources given as configs or as plain dicts (presets, the playground), validated."""
    return [s if isinstance(s, RewardSourceConfig) else RewardSourceConfig.model_validate(s) for s in sources or []]


def source_names(sources) -> list[str]:
    """Unique metric names, in order: a given name or the kind; repeats get _2, _3 (length, length_2)."""
    sources = as_configs(sources)
    bases = [s.name or s.type for s in sources]
    taken = set()
    explicit = {s.name for s in sources if s.name}
    names = []
    for base in bases:
        name, i = base, 1
        while name in taken or (name != base and name in explicit):
            i += 1
            name = f"{base}_{i}"
        taken.add(name)
        names.append(name)
    return names


def gate_problem(when: str, earlier: list[str], what: str = "reward source") -> str | None:
    """Why `when` names none of `earlier` (the names a source may be gated on), or None when it is fine."""
    if not when or when in earlier:
        return None
    offer = f"one of: {', '.join(earlier)}" if earlier else "a reward source listed before it"
    return f"when: '{when}' is not an earlier {what}; name {offer}"


def gates(sources) -> list[int | None]:
    """For each source, the index of the earlier source its `when` names (None: always scored); ValueError
    naming the source when `when` names no earlier reward source."""
    sources = as_configs(sources)
    names = source_names(sources)
    for i, (source, name) in enumerate(zip(sources, names)):
        earlier = [n for n, s in zip(names[:i], sources[:i]) if not s.is_cost]
        if problem := gate_problem(source.when, earlier):
            raise ValueError(f"reward_sources.{i} ({name}).{problem}")
    return [names.index(s.when) if s.when else None for s in sources]


def cost_budgets(sources) -> dict[str, float]:
    """{metric name: budget} of the cost sources (role: cost), in order."""
    sources = as_configs(sources)
    return {name: s.budget for s, name in zip(sources, source_names(sources)) if s.is_cost}


def reward_weights(sources) -> list[float]:
    """TRL's `reward_weights`, in the order of `build_reward_funcs`."""
    return [float(s.weight) for s in as_configs(sources)]


def example_source(kind: str) -> dict:
    """A valid source of `kind` to start editing from."""
    return {"type": kind, "name": "", "weight": 1.0, "params": dict(EXAMPLES[kind])}
