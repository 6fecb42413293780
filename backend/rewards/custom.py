"""Python source: a reward function from a .py file the user put in the workspace.

Only files inside the workspace are loaded (after resolving symlinks), never code typed into a web form.
The function gets TRL's arguments: `f(prompts, completions, completion_ids, trainer_state, log_extra,
log_metric, **columns)`, so declare `**kwargs`. It runs in a child process with a time limit per batch
(params.timeout_s); its exceptions come back with the file and function named, so a run that uses it fails
with that message instead of hanging.
"""
from __future__ import annotations

import ast
import math
from pathlib import Path

from backend.core.usercode import UserCodeError, UserCodeTimeout, UserFunction, in_workspace, read_source
from backend.rewards.base import RewardFunction, RewardSourceError


class RewardFunctionError(RuntimeError):
    """A user's reward function raised or returned something unusable."""


class RewardTimeout(RewardFunctionError):
    """A user's reward function took longer than its source's time limit."""


def workspace_file(file: str, workspace: Path) -> Path:
    """The real path of `file` (relative to the workspace, or absolute), refused unless it is a .py file
    inside the workspace."""
    try:
        real, root = in_workspace(file, workspace)
    except ValueError as e:
        raise RewardSourceError(f"python reward file {e}: custom reward code is only loaded from files you put in "
                                "the workspace") from None
    if real.suffix != ".py":
        raise RewardSourceError(f"python reward file {file} is not a .py file")
    if not real.is_file():
        raise RewardSourceError(f"python reward file {file} not found in the workspace {root}")
    return real


def defines(path: Path, function: str) -> bool:
    """Whether the file defines `function` at top level, read without running it (the pre-launch check)."""
    try:
        text = read_source(path)
    except UserCodeError as e:
        raise RewardSourceError(str(e)) from None
    tree = ast.parse(text, filename=str(path))
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


class PythonReward(RewardFunction):
    """The function runs in a child process (backend/core/usercode.py): a call past params.timeout_s is ended
    there, and fails the run or, by params.on_timeout, scores the batch as missing."""

    def __init__(self, *args):
        super().__init__(*args)
        self.path = workspace_file(self.params.file, self.workspace)
        try:
            self.function = UserFunction(self.path, self.params.function,
                                         f"reward function {self.params.function}() in {self.path}")
        except UserCodeError as e:
            raise RewardSourceError(str(e)) from None

    def close(self) -> None:
        self.function.close()

    def score(self, prompts, completions, **kwargs):
        where = f"reward function {self.params.function}() in {self.path}"
        limit = self.params.timeout_s
        # an environment run's live instances sit in processes of their own: nothing the function's could call
        kwargs = {k: v for k, v in kwargs.items() if k != "environments"}
        try:
            out = self.function(limit, prompts=prompts, completions=completions, **kwargs)
        except UserCodeTimeout:
            state = kwargs.get("trainer_state")
            step = f" on step {state.global_step + 1}" if getattr(state, "global_step", None) is not None else ""
            said = f"reward source '{self.__name__}' ({self.path.name}:{self.params.function}) took longer than " \
                   f"{limit:g} s{step}"
            if self.params.on_timeout == "missing":
                print(f"{said}; its scores for this batch count as missing (on_timeout: missing)", flush=True)
                return [None] * len(completions)
            stopped = "; the run was stopped" if step else ""  # an evaluation or the playground says it itself
            raise RewardTimeout(f"{said}{stopped} (raise params.timeout_s, or set params.on_timeout: missing to "
                                "score such a batch as missing)") from None
        except UserCodeError as e:
            raise RewardFunctionError(str(e)) from None
        if not isinstance(out, (list, tuple)):
            raise RewardFunctionError(f"{where} returned {type(out).__name__}; return a list with one float (or "
                                      "None) per completion")
        if len(out) != len(completions):
            raise RewardFunctionError(f"{where} returned {len(out)} scores for {len(completions)} completions; "
                                      "return one float (or None) per completion")
        scores = []
        for i, s in enumerate(out):
            if s is not None and not isinstance(s, (int, float)):  # bools count as 1 / 0
                raise RewardFunctionError(f"{where} returned {s!r} for completion {i}; scores must be numbers "
                                          "or None")
            scores.append(None if s is None or not math.isfinite(s) else float(s))
        return scores
