"""What an evaluation is asked to do: models, an evaluation set, scorers and generation settings, and the tools the
models may call while they answer.

Pydantic only (no torch), like the run config: the CLI, the UI and the job check a spec before anything
loads. A scorer is a reward source (any kind the run config takes, same params) or a reference-text metric.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backend.data.templates import MODEL_TEMPLATE, TEMPLATE_NAMES  # plain data
from backend.rewards.spec import SOURCE_KINDS, RewardSourceConfig
from backend.tools.spec import ToolConfig, ToolList, check_names, spec_problem

# Reference-text metrics: name → (title, what it measures). Scores are 0..1 so every column reads the same way.
METRICS = {
    "rouge_l": "ROUGE-L F1 against the reference column (rouge-score; Chinese text segmented with jieba)",
    "bleu": "sentence BLEU / 100 against the reference column (sacrebleu)",
    "chrf": "chrF / 100 against the reference column (sacrebleu)",
    "math": "1 if the answer equals the reference mathematically (math-verify: fractions, LaTeX, \\boxed{})",
}
SCORER_KINDS = (*SOURCE_KINDS, *METRICS)
# Where no prompt / reference column is named, the first of these the set has is used.
PROMPT_COLUMNS = ("prompt", "question", "instruction", "input", "query", "problem")
REFERENCE_COLUMNS = ("answer", "completion", "reference", "output", "solution", "response", "chosen")
# With tools, the tool use of each model sits next to its scores: kind → column. Added with weight 0 where the spec
# has no scorer of the kind, so they show what the models did without judging them.
TOOL_FIGURES = {"tool_used": "used_tool", "tool_calls": "tool_calls", "tool_errors": "tool_errors"}


class EvalError(ValueError):
    """An evaluation that cannot start or run; the message names the model, column or scorer."""

    def __init__(self, errors: list[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))


class ScorerConfig(BaseModel):
    """One column of the results: a reward source, or a reference metric reading `column`."""

    model_config = ConfigDict(extra="forbid")

    type: Literal[SCORER_KINDS] = Field(..., title="Kind")
    name: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9_.-]*$", title="Name",
                      description="The column name in the results; empty: the kind (numbered when repeated).")
    column: str = Field("", title="Reference column",
                        description="For metrics: the column holding the reference text; empty: the set's "
                                    "reference column.")
    weight: float = Field(1.0, ge=-1e6, le=1e6, allow_inf_nan=False, title="Weight",
                          description="Reward sources only: its factor in the fused score that judges win rates.")
    params: dict[str, Any] = Field(default_factory=dict, title="Parameters",
                                   description="A reward source's params (as in reward_sources).")
    when: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9_.-]*$", title="Only when",
                      description="Reward sources only: the name of an earlier reward-source scorer; this one "
                                  "scores only the answers that one scores above 0, and 0 elsewhere.")

    @model_validator(mode="after")
    def _check(self):
        if self.type in METRICS:
            if self.params or self.when:
                raise ValueError(f"{self.type}: a metric takes no params or when (only column)")
        else:
            if self.column and "column" not in self.params and _reads_column(self.type):
                self.params = {**self.params, "column": self.column}
            try:
                self.params = self.source().params
            except ValidationError as e:
                raise ValueError(e.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self

    @property
    def is_metric(self) -> bool:
        return self.type in METRICS

    def source(self) -> RewardSourceConfig:
        return RewardSourceConfig(type=self.type, name=self.name, weight=self.weight, params=self.params,
                                  when=self.when)


def _reads_column(kind: str) -> bool:
    from backend.rewards.spec import PARAM_MODELS

    return "column" in PARAM_MODELS[kind].model_fields


class Generation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    do_sample: bool = Field(False, title="Sample",
                            description="Off: greedy decoding (reproducible). On: sample with temperature / top-p.")
    temperature: float = Field(0.7, gt=0, le=5, title="Temperature")
    top_p: float = Field(1.0, gt=0, le=1, title="Top-p")
    samples: int = Field(1, ge=1, le=64, title="Samples per prompt",
                         description="k answers per prompt (sampling only): pass@k and mean@k for 0/1 scorers.")
    max_new_tokens: int = Field(64, ge=1, le=32768, title="Max new tokens")
    batch_size: int = Field(8, ge=1, le=1024, title="Batch size", description="Prompts generated together.")
    seed: int = Field(0, ge=0, le=2**31 - 1, title="Seed")

    @model_validator(mode="after")
    def _check(self):
        if self.samples > 1 and not self.do_sample:
            raise ValueError("samples: more than one answer per prompt needs sampling (do_sample: true); greedy "
                             "decoding gives the same answer every time")
        return self


class EvalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=120, title="Name")
    models: list[str] = Field(..., min_length=1, max_length=8, title="Models",
                              description="The first is the baseline the others are compared with: `base` (the "
                                          "base model of the other models), run:<id>[@step], an export, a folder "
                                          "or a Hub id.")
    dataset: str = Field(..., min_length=1, title="Evaluation set",
                         description="A built-in set, a file, a Hub id, or heldout:<run id> (the rows that run "
                                     "held out for evaluation).")
    prompt_column: str = Field("", title="Prompt column", description="Empty: the first of " +
                               ", ".join(PROMPT_COLUMNS) + " the set has.")
    reference_column: str = Field("", title="Reference column", description="Empty: the first of " +
                                  ", ".join(REFERENCE_COLUMNS) + " the set has (none: metrics are refused).")
    scorers: list[ScorerConfig] = Field(default_factory=list, title="Scorers")
    limit: int | None = Field(None, ge=1, le=1_000_000, title="Row limit",
                              description="Evaluate the first N rows; empty: all.")
    generation: Generation = Field(default_factory=Generation)
    tools: ToolList = Field(default_factory=list, title="Tools",
                            description="Tools every model may call while it answers, as in a GRPO run's `tools`; "
                                        "each answer is then the whole exchange, scored on its final answer and "
                                        "its calls.")
    chat_template: Literal[TEMPLATE_NAMES] = Field(
        MODEL_TEMPLATE, title="Chat template",
        description="The chat template every model's tokenizer gets for the evaluation; model: each model's own. "
                    "With tools it must carry tool calls (chatml-tools for ChatML models without one).")
    max_tool_calling_iterations: int = Field(4, ge=1, le=100, title="Tool-calling turns",
                                             description="With tools: at most this many rounds of tool calls and "
                                                         "results before the final answer.")
    environment: str = Field("", title="Environment",
                             description="An environment every answer plays, as in a GRPO run's `environment`: "
                                         "an instance per answer, reset from its row, its methods the tools; the "
                                         "environment scorer reads its get_reward. Your own: envs/game.py:Game; "
                                         "shipped: guess_number.")
    environment_timeout_s: float = Field(30.0, gt=0, le=3600, title="Environment time limit per call (s)",
                                         description="With an environment: a call still running after this long "
                                                     "is answered with a tool error and that episode's state is "
                                                     "lost (reward 0); a reset this slow stops the evaluation.")

    @model_validator(mode="before")
    @classmethod
    def _limit_zero(cls, data):
        if isinstance(data, dict) and data.get("limit") == 0:
            raise ValueError("limit: 0 rows evaluates nothing; give at least 1, or leave it empty for every row")
        return data

    @model_validator(mode="after")
    def _tool_figures(self):
        if problems := check_names(self.tools):
            raise ValueError(problems[0])
        if self.environment.strip() and (problem := spec_problem(self.environment)):
            raise ValueError(problem)
        reads = [i for i, s in enumerate(self.scorers) if s.type == "environment"]
        if reads and not self.environment.strip():
            raise ValueError(f"scorers.{reads[0]}: an environment scorer reads the environment's get_reward, and "
                             "none is set: set environment, or use another kind")
        if self.plays_tools:
            kinds = {s.type for s in self.scorers}
            self.scorers += [ScorerConfig(type=kind, name=name, weight=0.0)
                             for kind, name in TOOL_FIGURES.items() if kind not in kinds]
        return self

    @property
    def plays_tools(self) -> bool:
        """Answers go through the tool loop: tools, or an environment's methods."""
        return bool(self.tools) or bool(self.environment.strip())

    def is_tool_figure(self, scorer: ScorerConfig) -> bool:
        """A tool-use figure added for the tools (it judges nothing: no share in win rates)."""
        return self.plays_tools and TOOL_FIGURES.get(scorer.type) == scorer.name and scorer.weight == 0


def scorer_names(scorers: list[ScorerConfig]) -> list[str]:
    taken, names = set(), []
    for s in scorers:
        base = s.name or s.type
        name, i = base, 1
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        taken.add(name)
        names.append(name)
    return names


_SHORT = re.compile(r"^([a-z_]+)(?::(.*))?$")


def parse_scorer(text: str) -> ScorerConfig:
    """The CLI's short form: `rouge_l`, `bleu:answer`, `numeric_match:answer`, `regex:^\\d+$`,
    `blocklist:a,b`, `reward_model:run:ID`, or a YAML / JSON mapping for anything else."""
    import yaml

    text = text.strip()
    if text.startswith("{"):
        data = yaml.safe_load(text)
        return ScorerConfig.model_validate(data)
    m = _SHORT.match(text)
    if not m:
        raise ValueError(f"scorer '{text}': expected KIND or KIND:VALUE (kinds: {', '.join(SCORER_KINDS)})")
    kind, value = m.group(1), m.group(2)
    aliases = {"rouge": "rouge_l", "rougel": "rouge_l", "math_verify": "math", "exact": "exact_match",
               "numeric": "numeric_match"}
    kind = aliases.get(kind, kind)
    if kind not in SCORER_KINDS:
        raise ValueError(f"scorer '{text}': unknown kind '{kind}'; kinds: {', '.join(SCORER_KINDS)}")
    if value is None:
        return ScorerConfig(type=kind)
    if kind in METRICS:
        return ScorerConfig(type=kind, column=value)
    key = {"regex": "pattern", "blocklist": "keywords", "reward_model": "model", "python": "file",
           "length": "target", "repetition": "n"}.get(kind, "column")
    return ScorerConfig(type=kind, params={key: value})


def parse_tool(text: str) -> ToolConfig:
    """The CLI's short form: `calculator`, `search:folder=docs,top_k=5` (`name=` and `timeout_s=` set the tool's
    own fields, the rest are params), or a YAML / JSON mapping."""
    import yaml

    text = text.strip()
    try:
        return ToolConfig.model_validate(yaml.safe_load(text) if text.startswith("{") else _tool_fields(text))
    except ValidationError as e:
        raise ValueError("; ".join(validation_errors(e))) from None


def _tool_fields(text: str) -> dict:
    kind, _, rest = text.partition(":")
    fields: dict = {"type": kind.strip()}
    for pair in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"expected KIND or KIND:KEY=VALUE,... ('{pair}' has no =)")
        key = key.strip()
        if key in ("name", "timeout_s"):
            fields[key] = value.strip()
        else:
            fields.setdefault("params", {})[key] = value.strip()
    return fields


def validation_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def build_spec(data: dict) -> EvalSpec:
    try:
        return EvalSpec.model_validate(data)
    except ValidationError as e:
        raise EvalError(validation_errors(e)) from None
