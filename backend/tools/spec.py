"""The tool schema: what a run config says about the tools a policy may call (GRPO's tool loop, Chat, evaluation).

Pydantic only (no torch), like the reward-source schema: the run config, the UI and the pre-launch check import
it. A tool is defined once (`tools:` in a run config) and named by what the model calls it; each kind has one
small params model whose fields carry their title, help and range.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TOOL_KINDS = ("calculator", "python", "search", "function")

KIND_DESCRIPTIONS = {
    "calculator": "Arithmetic on numbers (+ − × ÷, //, %, powers, parentheses, abs/round/min/max/sqrt): the "
                  "expression is parsed, never run as code.",
    "python": "Runs a short Python program (standard library only) in a separate process with CPU-time, memory and "
              "wall-time limits, no network and a throwaway working folder; returns what it prints.",
    "search": "Searches a folder of text documents in the workspace (BM25) and returns the best passages.",
    "function": "Your own function from a .py file in the workspace; its signature and docstring are what the model "
                "sees (type-hinted arguments, a Google-style docstring with an Args section).",
}
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"  # a Python identifier: what the model writes in its call


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CalculatorParams(_Params):
    max_digits: int = Field(60, ge=1, le=10_000, title="Largest result (digits)",
                            description="A result (or a power) with more digits than this is a tool error, so an "
                                        "expression like 9**9**9 cannot hold the run.")


class PythonParams(_Params):
    cpu_s: float = Field(5.0, gt=0, le=600, title="CPU time limit (s)",
                         description="CPU seconds the program may use before it is killed.")
    memory_mb: int = Field(512, ge=32, le=65_536, title="Memory limit (MB)",
                           description="Address space of the program's process; a larger allocation fails inside "
                                       "the program.")
    max_output_chars: int = Field(2000, ge=100, le=100_000, title="Output kept (characters)",
                                  description="What the program prints, cut to this many characters for the model.")


class SearchParams(_Params):
    folder: str = Field(..., min_length=1, title="Documents folder",
                        description="A folder inside the workspace; every .txt and .md file in it (and its "
                                    "subfolders) is indexed, split into passages.")
    top_k: int = Field(3, ge=1, le=20, title="Passages returned")
    passage_words: int = Field(120, ge=20, le=2000, title="Words per passage",
                               description="Documents are split into passages of about this many words.")


class FunctionParams(_Params):
    file: str = Field(..., min_length=1, title="File", description="A .py file inside the workspace.")
    function: str = Field(..., pattern=NAME_PATTERN, title="Function",
                          description="The function's name in the file (it names the tool unless a name is given).")


PARAM_MODELS: dict[str, type[_Params]] = {"calculator": CalculatorParams, "python": PythonParams,
                                           "search": SearchParams, "function": FunctionParams}
DEFAULT_NAMES = {"calculator": "calculator", "python": "python", "search": "search"}  # function: its own name


class ToolConfig(BaseModel):
    """One tool the policy may call."""

    model_config = ConfigDict(extra="forbid")

    type: Literal[TOOL_KINDS] = Field(..., title="Kind")
    name: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,63})?$", title="Name",
                      description="What the model calls it; empty: the kind's name (a function: its own name).")
    params: dict[str, Any] = Field(default_factory=dict, title="Parameters")
    timeout_s: float = Field(30.0, gt=0, le=3600, title="Time limit per call (s)",
                             description="A call still running after this long is ended and answered with a tool "
                                         "error; the run goes on.")

    @model_validator(mode="after")
    def _check(self):
        model = PARAM_MODELS[self.type]
        self.params = model(**self.params).model_dump()
        if not self.name:
            self.name = self.params["function"] if self.type == "function" else DEFAULT_NAMES[self.type]
        return self

    @property
    def typed_params(self) -> _Params:
        return PARAM_MODELS[self.type](**self.params)


def check_names(tools: list[ToolConfig]) -> list[str]:
    """Problems with the set of tools as a whole: two tools the model would call by one name."""
    seen: dict[str, int] = {}
    problems = []
    for i, tool in enumerate(tools):
        if tool.name in seen:
            problems.append(f"tools.{i}: the name `{tool.name}` is taken by tools.{seen[tool.name]}; give one of "
                            "them another `name`")
        seen.setdefault(tool.name, i)
    return problems


ToolList = Annotated[list[ToolConfig], Field(default_factory=list)]


def as_configs(tools: list) -> list[ToolConfig]:
    return [t if isinstance(t, ToolConfig) else ToolConfig(**t) for t in tools or []]


def is_identifier(name: str) -> bool:
    return re.match(NAME_PATTERN, name or "") is not None


# ---- environments (backend/tools/environment.py plays them) ----

EXAMPLES_DIR = Path(__file__).resolve().parent / "environments"
# the shipped examples, by the name a run config gives: (file, class)
BUILTIN_ENVIRONMENTS = {"guess_number": (EXAMPLES_DIR / "guess_number.py", "GuessNumber")}
ENVIRONMENT_PATTERN = r"^(?:[A-Za-z_][A-Za-z0-9_]*|.+\.py:[A-Za-z_][A-Za-z0-9_]*)$"


def spec_problem(spec: str) -> str | None:
    """What is wrong with how an `environment` is written (no file is read), or None."""
    spec = (spec or "").strip()
    if re.match(ENVIRONMENT_PATTERN, spec) is None:
        return (f"environment: `{spec}` is neither a file and class (envs/game.py:Game) nor a shipped example "
                f"({', '.join(BUILTIN_ENVIRONMENTS)})")
    if ":" not in spec and spec not in BUILTIN_ENVIRONMENTS:
        return (f"environment: no shipped example is called `{spec}` (there are: {', '.join(BUILTIN_ENVIRONMENTS)});"
                " your own is written file.py:ClassName")
    return None
