"""Python source: a reward function from a .py file the user put in the workspace.

Only files inside the workspace are loaded (after resolving symlinks), never code typed into a web form.
The function gets TRL's arguments unchanged: `f(prompts, completions, completion_ids, trainer_state,
log_extra, log_metric, **columns)`, so declare `**kwargs`. Its exceptions propagate with the file and
function named, so a run that uses it fails with that message instead of hanging.
"""
from __future__ import annotations

import ast
import asyncio
import hashlib
import importlib.util
import inspect
import math
import sys
import traceback
from pathlib import Path

from backend.rewards.base import RewardFunction, RewardSourceError


class RewardFunctionError(RuntimeError):
    """A user's reward function raised or returned something unusable."""


def workspace_file(file: str, workspace: Path) -> Path:
    """The real path of `file` (relative to the workspace, or absolute), refused unless it is a .py file
    inside the workspace."""
    root = Path(workspace).resolve()
    path = Path(file).expanduser()
    real = (path if path.is_absolute() else root / path).resolve()  # follows symlinks
    if not real.is_relative_to(root):
        raise RewardSourceError(f"python reward file {file} is outside the workspace {root}: custom reward code "
                                "is only loaded from files you put in the workspace")
    if real.suffix != ".py":
        raise RewardSourceError(f"python reward file {file} is not a .py file")
    if not real.is_file():
        raise RewardSourceError(f"python reward file {file} not found in the workspace {root}")
    return real


def defines(path: Path, function: str) -> bool:
    """Whether the file defines `function` at top level, read without running it (the pre-launch check)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == function:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == function for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == function for a in node.names):
                return True
    return False


def load_function(path: Path, function: str):
    """Run the file as a fresh module (edits are picked up on the next build) and return the function."""
    name = "workbench_reward_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look a module up here
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any error in user code
        sys.modules.pop(name, None)
        raise RewardSourceError(f"loading {path} failed: {type(e).__name__}: {e}{_where(e, path)}") from e
    fn = getattr(module, function, None)
    if fn is None:
        found = [k for k, v in vars(module).items()
                 if inspect.isfunction(v) and v.__module__ == name and not k.startswith("_")]
        raise RewardSourceError(f"{path} defines no function '{function}'"
                                + (f" (it defines: {', '.join(found)})" if found else ""))
    if not callable(fn):
        raise RewardSourceError(f"'{function}' in {path} is a {type(fn).__name__}, not a function")
    return fn


def _where(error: BaseException, path: Path) -> str:
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == path]
    return f" (line {lines[-1]})" if lines else ""


class PythonReward(RewardFunction):
    def __init__(self, *args):
        super().__init__(*args)
        self.path = workspace_file(self.params.file, self.workspace)
        self.function = load_function(self.path, self.params.function)

    def score(self, prompts, completions, **kwargs):
        where = f"reward function {self.params.function}() in {self.path}"
        try:
            out = self.function(prompts=prompts, completions=completions, **kwargs)
            if inspect.isawaitable(out):
                out = asyncio.run(_wait(out))
        except Exception as e:  # noqa: BLE001 - re-raised with the file named
            raise RewardFunctionError(f"{where} raised {type(e).__name__}: {e}{_where(e, self.path)}") from e
        if hasattr(out, "tolist"):  # numpy array, torch tensor
            out = out.tolist()
        if not isinstance(out, (list, tuple)):
            raise RewardFunctionError(f"{where} returned {type(out).__name__}; return a list with one float (or "
                                      "None) per completion")
        if len(out) != len(completions):
            raise RewardFunctionError(f"{where} returned {len(out)} scores for {len(completions)} completions; "
                                      "return one float (or None) per completion")
        scores = []
        for i, s in enumerate(out):
            if hasattr(s, "item"):
                s = s.item()
            if s is not None and not isinstance(s, (int, float)):  # bools count as 1 / 0
                raise RewardFunctionError(f"{where} returned {s!r} for completion {i}; scores must be numbers "
                                          "or None")
            scores.append(None if s is None or not math.isfinite(s) else float(s))
        return scores


async def _wait(awaitable):
    return await awaitable
