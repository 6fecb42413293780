"""Environments: a class whose instance plays one episode (GRPO's `environment_factory` in TRL 1.16).

An environment is a user's class in a .py file of the workspace (`environment: envs/game.py:Game`) or a shipped
example by name (`environment: guess_number`). Each episode gets an instance: `reset(**row)` starts it from its
dataset row (a returned string is added to the prompt), its public methods are the tools the policy may call
(their type hints and docstring are the schema the model sees), and `get_reward()` scores the episode once it
ends (the `environment` reward source reads it).

The class is code the workbench does not control, so every instance lives in a child process of its own
(backend/core/usercode.py) and every call is time-limited: a tool call past the limit is answered with a tool
error and ends that instance's process, so the episode's later calls answer that its state is gone (reward 0),
and the next episode starts on a fresh instance. A reset past the limit, or one that raises, stops the run
saying so: no episode can start.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backend.core.usercode import UserCodeError, UserCodeTimeout, UserObject, in_workspace
from backend.tools.spec import BUILTIN_ENVIRONMENTS, spec_problem

LOST = ("the environment was restarted after a call failed or ran over its time limit: this episode's state is "
        "gone; answer without it")


class EnvironmentProblem(ValueError):
    """An environment that cannot be found, made or described; the message names it."""


@dataclass(frozen=True)
class EnvironmentSource:
    path: Path
    class_name: str

    @property
    def label(self) -> str:
        return f"{self.path.name}:{self.class_name}"


def resolve(spec: str, workspace: str | Path) -> EnvironmentSource:
    """The file and class `spec` names; EnvironmentProblem saying why not (a user's file must be a .py file inside
    the workspace)."""
    if problem := spec_problem(spec):
        raise EnvironmentProblem(problem)
    spec = spec.strip()
    if spec in BUILTIN_ENVIRONMENTS:
        path, name = BUILTIN_ENVIRONMENTS[spec]
        return EnvironmentSource(path, name)
    file, name = spec.rsplit(":", 1)
    try:
        real, root = in_workspace(file, workspace)
    except ValueError as e:
        raise EnvironmentProblem(f"environment: {e}: an environment's code is only loaded from files you put in "
                                 "the workspace") from None
    if not real.is_file():
        raise EnvironmentProblem(f"environment: {file} not found in the workspace {root}")
    return EnvironmentSource(real, name)


def describe(source: EnvironmentSource) -> tuple[UserObject, dict]:
    """An instance (in its child process) and its description: {"tools": [schemas], "reset", "get_reward"};
    EnvironmentProblem naming the file, the method and its line when it cannot be used."""
    try:
        user = UserObject(source.path, source.class_name, source.label, doing="running")
        found = user.describe()
    except UserCodeError as e:
        raise EnvironmentProblem(f"environment: {e}") from None
    if not found["reset"]:
        user.close()
        raise EnvironmentProblem(f"environment: {source.label} has no reset method: define reset(self, **row), "
                                 "which starts an episode from its dataset row")
    if not found["tools"]:
        user.close()
        raise EnvironmentProblem(f"environment: {source.label} has no public method for the model to call: each "
                                 "method not starting with _ (besides reset and get_reward) is a tool")
    return user, found


def _tool_method(name: str, schema: dict, timeout_s: float) -> Callable:
    from backend.tools import _from_schema

    def call(self, **arguments):
        if self._lost:
            raise RuntimeError(LOST)
        try:
            return self._user.call(name, timeout_s, **arguments)
        except UserCodeTimeout:
            self._lost = True
            raise TimeoutError(f"the call took longer than {timeout_s:g} s and was stopped") from None
        except UserCodeError as e:
            self._lost = not self._user.running
            raise RuntimeError(str(e)) from None

    return _from_schema(schema, call, method=True)


def proxy_class(source: EnvironmentSource, found: dict, timeout_s: float) -> type:
    """A class TRL can pool: reset and each tool method forward to the user's instance in its child process;
    `_episode_reward()` (underscored: not a tool, not TRL's get_reward hook; the `environment` reward source reads
    it) is get_reward's value."""

    def __init__(self, user: UserObject | None = None):
        self._user = user or UserObject(source.path, source.class_name, source.label, doing="running")
        self._lost = False

    def reset(self, **row):
        self._lost = False  # a fresh episode (an instance restarted after a failure starts over anyway)
        try:
            observation = self._user.call("reset", timeout_s, **row)
        except UserCodeTimeout:
            raise EnvironmentProblem(f"environment: {source.label}: reset took longer than {timeout_s:g} s "
                                     "(rl.environment_timeout_s)") from None
        except UserCodeError as e:
            raise EnvironmentProblem(f"environment: {source.label}: {e}") from None
        if observation is not None and not isinstance(observation, str):
            raise EnvironmentProblem(f"environment: {source.label}: reset returned a {type(observation).__name__}; "
                                     "return a string (added to the prompt) or None")
        return observation

    def episode_reward(self) -> float:
        """The episode's score by get_reward; 0 for an episode whose state was lost."""
        if self._lost or not self._user.running:
            return 0.0
        try:
            value = self._user.call("get_reward", timeout_s)
        except UserCodeError as e:
            raise EnvironmentProblem(f"environment: {source.label}: get_reward: {e}") from None
        try:
            return float(value)
        except (TypeError, ValueError):
            raise EnvironmentProblem(f"environment: {source.label}: get_reward returned {value!r}; return a "
                                     "number") from None

    def close(self) -> None:
        self._user.close()

    members = {"__init__": __init__, "reset": reset, "_episode_reward": episode_reward, "_close": close,
               "__doc__": f"{source.label}, played in a child process"}
    for schema in found["tools"]:
        name = schema.get("function", schema)["name"]
        members[name] = _tool_method(name, schema, timeout_s)
    return type(source.class_name, (), members)


def environment_factory(spec: str, workspace: str | Path, timeout_s: float) -> Callable[[], object]:
    """What GRPOTrainer's `environment_factory` takes: each call makes an instance of the run's environment (the
    one described to check it is the first handed out)."""
    source = resolve(spec, workspace)
    first, found = describe(source)
    cls = proxy_class(source, found, timeout_s)
    spare = [first]

    def factory():
        return cls(spare.pop() if spare else None)

    factory.rewarded = bool(found["get_reward"])  # an episode's get_reward can be read
    return factory


class PlayedEpisode:
    """An episode played outside training (an evaluation): its reward read as it ended, before its instance is
    reset for the next; the environment reward source reads `_episode_reward()` from it as from a live instance (a
    get_reward that failed raises there, so the scorer records that answer's error)."""

    def __init__(self, instance, rewarded: bool):
        self.reward, self.problem = None, None
        try:
            if rewarded:
                self.reward = instance._episode_reward()
        except EnvironmentProblem as e:
            self.problem = e

    def _episode_reward(self) -> float | None:
        if self.problem is not None:
            raise self.problem
        return self.reward


def tool_methods(instance) -> list[Callable]:
    """An environment instance's tools, bound: its public methods but reset and get_reward (as TRL reads them)."""
    import inspect

    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def with_observation(conversation: list[dict], observation) -> list[dict]:
    """The conversation an episode starts from: reset's text added to the last message, as TRL's GRPOTrainer adds
    it in training."""
    if observation is None:
        return conversation
    last = conversation[-1]
    content = last.get("content")
    if isinstance(content, list):
        content = content + [{"type": "text", "text": observation}]
    else:
        content = (content or "") + observation
    return conversation[:-1] + [{**last, "content": content}]


def validate_environment(spec: str, workspace: str | Path, timeout_s: float, row: dict | None,
                         owns_reward: bool) -> list[str]:
    """Problems to fix before a run starts: the environment found, made and described, its reward there when a
    reward source reads it, and a reset from the dataset's first row within its time limit."""
    try:
        source = resolve(spec, workspace)
        user, found = describe(source)
    except EnvironmentProblem as e:
        return [str(e)]
    problems = []
    try:
        if owns_reward and not found["get_reward"]:
            problems.append(f"reward_sources: the environment source reads {source.label}'s get_reward, which it "
                            "does not define: add get_reward(self) -> float, or use another reward source")
        if row is not None:
            cls = proxy_class(source, found, timeout_s)
            try:
                cls(user).reset(**row)
            except EnvironmentProblem as e:
                problems.append(f"{e} (tried on the dataset's first row)")
    finally:
        user.close()
    return problems
