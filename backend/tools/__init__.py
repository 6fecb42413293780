"""Tools a policy may call (issue: agentic RL): each run config's `tools` made into the Python callables TRL's
GRPOTrainer, Chat and the evaluator hand a chat template (their name, type hints and docstring are the JSON schema
the model sees) and call with the arguments the model wrote.

A call that fails (a bad expression, a program that loops, an unknown argument) raises: TRL answers the model with
the error and counts a tool failure; the run goes on. Every call is bounded: the calculator by the size of what it
computes, the Python sandbox and a user's function by their time limit (they run in other processes), the search
by its index.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

from backend.tools.spec import KIND_DESCRIPTIONS, TOOL_KINDS, ToolConfig, as_configs, check_names

__all__ = ["KIND_DESCRIPTIONS", "TOOL_KINDS", "ToolConfig", "build_tools", "tool_schemas", "validate_tools"]

_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}

# what a dry call before the run sends each built-in kind (a user's function is only described: a call could
# have effects)
_DRY_CALLS = {"calculator": {"expression": "2 + 3"}, "python": {"code": "print(2 + 3)"}, "search": {"query": "test"}}


def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _calculator(tool: ToolConfig, workspace: Path) -> Callable:
    from backend.tools.calculator import calculate

    digits = tool.params["max_digits"]

    def calculator(expression: str) -> str:
        """Evaluates an arithmetic expression exactly and returns its value.

        Args:
            expression: The arithmetic expression, for example 347 * 29 or (12 + 7) / 4.
        """
        return calculate(expression, digits)

    return calculator


def _python(tool: ToolConfig, workspace: Path) -> Callable:
    from backend.tools.sandbox import run_python

    p, limit = tool.params, tool.timeout_s

    def python(code: str) -> str:
        """Runs a short Python program (standard library only) and returns what it prints.

        Args:
            code: The program; print the values you need.
        """
        return run_python(code, timeout_s=limit, cpu_s=p["cpu_s"], memory_mb=p["memory_mb"],
                          max_output_chars=p["max_output_chars"])

    return python


def _search(tool: ToolConfig, workspace: Path) -> Callable:
    from backend.tools.search import DocumentSearch

    p = tool.params
    index = DocumentSearch(p["folder"], p["passage_words"], workspace)

    def search(query: str) -> str:
        """Searches the documents and returns the passages that best match the query.

        Args:
            query: What to look for, in a few words.
        """
        return index.search(query, p["top_k"])

    return search


def _function(tool: ToolConfig, workspace: Path) -> Callable:
    """A user's function, run in a child process (backend/core/usercode.py) with the tool's time limit, and shown
    to the model with the schema its own signature and docstring give."""
    from backend.core.usercode import UserCodeTimeout, UserFunction
    from backend.rewards.custom import workspace_file

    path = workspace_file(tool.params["file"], workspace)
    label = f"tool `{tool.name}` ({path.name}:{tool.params['function']})"
    user = UserFunction(path, tool.params["function"], label, doing="running")
    schema = user.describe()
    limit = tool.timeout_s

    def call(**arguments):
        try:
            return user(limit, **arguments)
        except UserCodeTimeout:
            raise TimeoutError(f"the tool took longer than {limit:g} s and was stopped") from None

    return _from_schema(schema, call)


def _from_schema(schema: dict, call: Callable, method: bool = False) -> Callable:
    """A callable whose signature, type hints and docstring give `schema` back through transformers'
    get_json_schema (what TRL and the chat templates read), calling `call(**arguments)`; with `method`, a function
    for a class body, calling `call(self, **arguments)` (its bound method gives the schema back)."""
    schema = schema.get("function", schema)
    params = schema.get("parameters", {})
    required = set(params.get("required", ()))
    properties = params.get("properties", {})
    signature, annotations, described = [], {}, []
    for name, prop in properties.items():
        kind = _JSON_TYPES.get(prop.get("type"), str)
        default = inspect.Parameter.empty if name in required else None
        signature.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind))
        annotations[name] = kind
        described.append(f"    {name}: {prop.get('description', name)}")

    if method:
        signature.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD))

        def tool(self, **arguments):
            return call(self, **arguments)
    else:
        def tool(**arguments):
            return call(**arguments)

    tool.__signature__ = inspect.Signature(signature)
    tool.__annotations__ = annotations
    tool.__doc__ = schema.get("description", "") + ("\n\nArgs:\n" + "\n".join(described) if described else "")
    return _named(tool, schema["name"])


_BUILDERS = {"calculator": _calculator, "python": _python, "search": _search, "function": _function}


def build_tools(tools: list, workspace: str | Path) -> list[Callable]:
    """The run's tools as callables named as the model calls them. ValueError / UserCodeError naming the tool when
    one cannot be made."""
    built = []
    for tool in as_configs(tools):
        fn = _BUILDERS[tool.type](tool, Path(workspace))
        built.append(_named(fn, tool.name))
    return built


def tool_schemas(tools: list[Callable]) -> list[dict]:
    """The JSON schema of each tool, as the chat template shows it."""
    from transformers.utils import get_json_schema

    return [get_json_schema(fn) for fn in tools]


def validate_tools(tools: list, workspace: str | Path) -> list[str]:
    """Problems to fix before a run starts, one line each naming the tool: its names, its making (a folder, a
    file, a signature), its schema, and a dry call of each built-in kind."""
    configs = as_configs(tools)
    problems = check_names(configs)
    for i, tool in enumerate(configs):
        where = f"tools.{i} ({tool.name})"
        try:
            [fn] = build_tools([tool], workspace)
            tool_schemas([fn])
            if tool.type in _DRY_CALLS:
                fn(**_DRY_CALLS[tool.type])
        except Exception as e:  # noqa: BLE001 - any problem of the tool, said with its name
            problems.append(f"{where}: {e}")
    return problems
