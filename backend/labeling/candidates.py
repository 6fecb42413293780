"""The models a session compares: a model reference (backend.models.ModelRef), e.g. run:<id> for a run's
adapter on its base model."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend.labeling.records import LabelError
from backend.models import RUN_PREFIX, ModelError, ModelRef
from backend.runs.store import RunStore


def describe_model(store: RunStore, spec: str) -> str:
    """A short name: a run's adapter by the run's name, a local folder by its own name."""
    if spec and spec.startswith(RUN_PREFIX):
        try:
            run = store.get_run(spec[len(RUN_PREFIX):])
            return f"{run.name} (adapter on {describe_model(store, run.config.model)})"
        except KeyError:
            return spec
    if spec and spec.startswith(("/", ".", "~")) and Path(spec).expanduser().is_dir():
        return Path(spec).name
    return spec


def resolve_candidate(store: RunStore, spec: str) -> tuple[str, str | None]:
    """(base model spec, adapter folder or None). `run:<id>` is that run's base model + its adapter (a full
    fine-tune: its model folder), an adapter folder is its base model + itself."""
    spec = (spec or "").strip()
    try:
        ref = ModelRef.parse(spec, store)
    except ModelError as e:
        if e.reason == "no_run":
            raise LabelError(f"model {spec}: no run with id '{e.subject}'") from None
        if e.run is None:
            return spec, None  # check_candidate says what is wrong with it
        _refuse_scorer(e.run, spec)
        raise LabelError(f"model {spec}: run {e.run.name} has no saved adapter ({e.run.status}); choose a finished "
                         "run") from None
    if ref.run is not None:
        _refuse_scorer(ref.run, spec)
    return ref.base, ref.adapter


def _refuse_scorer(run, spec: str) -> None:
    if not run.config.spec.writes_answers:
        raise LabelError(f"model {spec}: run {run.name} trained a reward model, which scores answers but does not "
                         "write them; choose a DPO, KTO, SFT or RL run")


def adapter_choices(store: RunStore) -> list[tuple[str, str]]:
    """(label, run:<id>) for every run with a saved adapter that writes answers."""
    out = []
    for run in store.list_runs(("completed", "stopped")):
        if run.adapter_path and run.config.spec.writes_answers and Path(run.adapter_path).is_dir():
            out.append((f"{run.name}: {run.mode} adapter on {run.config.model}", RUN_PREFIX + run.id))
    return out


def check_candidate(store: RunStore, spec: str) -> None:
    from backend.models import check_model

    base, _ = resolve_candidate(store, spec)
    try:
        check_model(base)
    except ModelError as e:
        raise LabelError(f"model {spec}: {e}") from None


@dataclass
class ToolPlay:
    """The tools a session's answers are written with: those of the first candidate run trained with tools, with
    its chat template and tool-calling turns, for every candidate (as an evaluation gives every model its tools,
    so the sides are compared on one footing)."""
    tools: list  # ToolConfig, as the run's config has them
    chat_template: str
    turns: int
    run_name: str


def tool_play(store: RunStore, specs: list[str]) -> ToolPlay | None:
    from backend.models.ref import run_part

    for spec in filter(None, specs):
        try:
            found = run_part(spec, store.workspace)
            run = store.get_run(found[0]) if found else None
        except (KeyError, ModelError):  # check_candidate says what is wrong with it
            continue
        if run is None:
            continue
        if run.config.tools:
            return ToolPlay(list(run.config.tools), run.config.data.chat_template,
                            run.config.rl.max_tool_calling_iterations, run.name)
    return None


def check_tool_play(store: RunStore, specs: list[str]) -> None:
    """With a run trained with tools among the models: its tools made and tried, and every model's tokenizer able to
    carry their calls through the run's chat template; LabelError listing what is wrong."""
    play = tool_play(store, specs)
    if play is None:
        return
    from backend.models import resolve_model
    from backend.runs.preflight import tokenizer_tool_problem
    from backend.tools import validate_tools

    problems = validate_tools(play.tools, store.workspace)
    for spec in filter(None, specs):
        base, _ = resolve_candidate(store, spec)
        if why := tokenizer_tool_problem(resolve_model(base), play.chat_template, describe_model(store, spec)):
            problems.append(f"model {spec}: answers with the tools of {play.run_name}: {why}")
    if problems:
        raise LabelError("; ".join(problems))
