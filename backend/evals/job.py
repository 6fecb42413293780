"""Evaluations as background jobs, like runs: checked before anything loads, queued for the training slot (an
evaluation and a run never share the machine unless WORKBENCH_MAX_CONCURRENT says so), run by a detached
process (`python -m backend.evals run ID --workspace DIR`) that commits every batch's answers and scores, stopped
on request, and carried on where it stopped when it is started again."""
from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from backend.core.procs import Heartbeat, is_dead, job_args, pid_alive, spawn_detached
from backend.data.templates import MODEL_TEMPLATE, template_text
import backend.evals.store as db
from backend.evals.results import JUDGE
from backend.evals.scorers import build_scorers, check_scorers, fused
from backend.evals.spec import PROMPT_COLUMNS, REFERENCE_COLUMNS, EvalError, EvalSpec, scorer_names
from backend.evals.store import Answer, Evaluation
from backend.runs.store import RunReferences, RunStore, register_references, slot_holders

BASE = "base"  # a model named `base`: the base model of the other models


def log_path(store: RunStore, eval_id: str) -> Path:
    return store.workspace / "evals" / f"{eval_id}.log"


# ---- checking ----

@dataclass
class Plan:
    """A checked evaluation: the models to load, the rows with their prompt and reference, the columns."""
    refs: list  # ModelRef per model
    labels: list[str]
    rows: list[dict]
    prompt_column: str
    reference_column: str
    columns: list[str]


def resolve_models(store: RunStore, names: list[str]) -> tuple[list, list[str]]:
    from backend.models import ModelError, ModelRef

    refs, errors = [None] * len(names), []
    for i, name in enumerate(names):
        if name.strip().lower() == BASE:
            continue
        try:
            ref = ModelRef.parse(name, store)
            ref.check()
            if ref.task == "seq_cls":
                raise ModelError(f"{name} is a sequence classifier (a reward model): it scores answers, it does not "
                                 "write them; use it as a reward_model scorer")
            refs[i] = ref
        except ModelError as e:
            errors.append(f"models.{i} ({name}): {e}")
    others = [r for r in refs if r is not None]
    for i, name in enumerate(names):
        if refs[i] is None and name.strip().lower() == BASE:
            if not others:
                errors.append(f"models.{i} (base): `base` means the base model of the other models, and no other "
                              "model is given")
            else:
                refs[i] = ModelRef.parse(others[0].base, store).with_label(f"base ({_short(others[0].base)})")
    if errors:
        raise EvalError(errors)
    labels = [r.label or r.text for r in refs]
    # two checkpoints of one run share a label: add what was typed
    return refs, [f"{label} · {name}" if labels.count(label) > 1 else label for label, name in zip(labels, names)]


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else "…" + text[-n:]


def load_rows(store: RunStore, spec: EvalSpec) -> tuple[list[dict], str]:
    """The evaluation set's rows (first `limit`) and what messages call it."""
    from backend.data import DatasetError, hold_out, prepare_dataset
    from backend.data.sources import load

    try:
        if spec.dataset.startswith("heldout:"):
            run_id = spec.dataset.removeprefix("heldout:")
            run = store.get_run(run_id)
            cfg = run.config
            if cfg.eval.dataset:
                ds = prepare_dataset(cfg.eval.dataset, cfg.mode, store.workspace)[0]
            elif cfg.eval.split > 0:
                ds = hold_out(prepare_dataset(cfg.dataset, cfg.mode, store.workspace)[0], cfg.eval.split, cfg.seed)[1]
            else:
                raise EvalError(f"dataset: run {run_id} held nothing out (its eval.split is 0 and it has no "
                                "eval.dataset); choose an evaluation set")
            source = f"the held-out rows of run {run_id}"
        else:
            ds, source = load(spec.dataset, store.workspace)
    except KeyError:
        raise EvalError(f"dataset: no run with id '{spec.dataset.removeprefix('heldout:')}'") from None
    except DatasetError as e:
        raise EvalError(f"dataset: {e}") from None
    if spec.limit:
        ds = ds.select(range(min(spec.limit, len(ds))))
    return [dict(r) for r in ds], source


def _split_messages(rows: list[dict]) -> None:
    """A `messages` set (SFT): the turns before the last assistant answer are the prompt, that answer the
    reference."""
    from backend.data import split_answer

    for r in rows:
        r["prompt"], r["answer"] = split_answer(r.get("messages") or [])


def plan(store: RunStore, spec: EvalSpec) -> Plan:
    """Everything checked before anything generates: every problem at once, each naming what to fix."""
    errors = []
    try:
        refs, labels = resolve_models(store, spec.models)
    except EvalError as e:
        errors += e.errors
        refs, labels = [], []
    try:
        rows, source = load_rows(store, spec)
    except EvalError as e:
        raise EvalError(errors + e.errors) from None
    columns = list(rows[0]) if rows else []
    if not spec.prompt_column and "messages" in columns and not set(PROMPT_COLUMNS) & set(columns):
        _split_messages(rows)
        columns = list(rows[0])
    prompt_col = spec.prompt_column or next((c for c in PROMPT_COLUMNS if c in columns), "")
    if not prompt_col:
        errors.append(f"prompt_column: {source} has none of the usual prompt columns ({', '.join(PROMPT_COLUMNS)}); "
                      f"name the one that holds the prompts (columns: {', '.join(columns)})")
    elif prompt_col not in columns:
        errors.append(f"prompt_column: {source} has no column '{prompt_col}' (columns: {', '.join(columns)})")
    ref_col = spec.reference_column or next((c for c in REFERENCE_COLUMNS if c in columns and c != prompt_col), "")
    if spec.reference_column and ref_col not in columns:
        errors.append(f"reference_column: {source} has no column '{ref_col}' (columns: {', '.join(columns)})")
    if prompt_col in columns:
        empty = next((i for i, r in enumerate(rows) if r.get(prompt_col) in (None, "", [])), None)
        if empty is not None:
            errors.append(f"{source}, row {empty + 1}: the prompt column '{prompt_col}' is empty")
    errors += check_scorers(spec.scorers, columns, ref_col if ref_col in columns else "", store.workspace)
    if spec.plays_tools or spec.chat_template != MODEL_TEMPLATE:
        errors += template_problems(store, spec, refs, labels)
    if spec.environment.strip():
        from backend.tools.environment import validate_environment

        owns_reward = any(s.type == "environment" for s in spec.scorers)
        errors += validate_environment(spec.environment, store.workspace, spec.environment_timeout_s,
                                       rows[0] if rows else None, owns_reward)
    if errors:
        raise EvalError(errors)
    return Plan(refs, labels, rows, prompt_col, ref_col, columns)


def _tokenizer_source(ref) -> str:
    """Where load_model reads the model's tokenizer: the adapter's own when it saved one, else the base's."""
    own = Path(ref.adapter) if ref.adapter else None
    return str(own) if own and (own / "tokenizer_config.json").is_file() else ref.resolve()


def template_problems(store: RunStore, spec: EvalSpec, refs: list, labels: list[str]) -> list[str]:
    """The tools made and tried (a dry call each), and the chat template fitting every model and, with tools,
    carrying their calls: a tokenizer per model, no weights."""
    from backend.data.templates import template_problem
    from backend.models import ModelError
    from backend.runs.preflight import tokenizer_tool_problem
    from backend.tools import validate_tools

    errors = validate_tools(spec.tools, store.workspace)
    for i, (ref, label) in enumerate(zip(refs, labels)):
        where = f"chat_template (models.{i}, {label})"
        try:
            source = _tokenizer_source(ref)
        except ModelError as e:
            errors.append(f"{where}: {e}")
            continue
        if why := template_problem(spec.chat_template, Path(source) if Path(source).is_dir() else None):
            errors.append(f"{where}: {why}")
        elif spec.plays_tools and (why := tokenizer_tool_problem(source, spec.chat_template, label)):
            errors.append(f"{where}: {why.replace('data.chat_template', 'chat_template')}")
    return errors


def judge_info(spec: EvalSpec) -> tuple[list[str], str | None, list[str]]:
    """(result columns, the judge column, the 0/1 columns) of a spec, before any scorer is built."""
    names = scorer_names(spec.scorers)
    judged = [(n, s) for n, s in zip(names, spec.scorers) if not spec.is_tool_figure(s)]  # figures judge nothing
    sources = [s for _, s in judged if not s.is_metric]
    columns = names + ([JUDGE] if len(sources) > 1 else [])
    judge = (JUDGE if len(sources) > 1 else next((n for n, s in judged if not s.is_metric), None)
             ) if sources else (judged[0][0] if judged else None)
    binary = [n for n, s in zip(names, spec.scorers) if s.type in ("exact_match", "numeric_match", "regex", "math")]
    return columns, judge, binary


# ---- submitting, queueing, stopping ----

def submit_eval(store: RunStore, spec: EvalSpec) -> Evaluation:
    p = plan(store, spec)
    info = {"models": p.labels, "prompt_column": p.prompt_column, "reference_column": p.reference_column,
            "rows": len(p.rows)}
    evaluation = db.create_eval(store, spec, info, total=len(p.rows) * spec.generation.samples * len(p.refs))
    log_path(store, evaluation.id).parent.mkdir(parents=True, exist_ok=True)
    dispatch_evals(store)
    return db.get_eval(store, evaluation.id)


def reconcile_evals(store: RunStore) -> list[str]:
    """Running evaluations whose process is gone: interrupted (started again, they carry on)."""
    now, changed = time.time(), []
    for e in db.list_evals(store, ("running",)):
        if is_dead(e.pid, e.heartbeat_at, e.started_at or e.created_at, now=now):
            if db.finish_eval(store, e.id, "interrupted", error=f"the evaluation's process (pid {e.pid}) is gone; "
                              "start it again to carry on", message=f"Interrupted after {e.done} answers"):
                changed.append(e.id)
    return changed


def dispatch_evals(store: RunStore) -> list[str]:
    from backend.runs.jobs import MAX_CONCURRENT

    reconcile_evals(store)
    started = []
    while True:
        with store.transaction() as conn:
            busy = conn.execute("SELECT COUNT(*) FROM runs WHERE status='running'").fetchone()[0] + slot_holders(conn)
            row = conn.execute("SELECT id FROM evals WHERE status='queued' ORDER BY created_at LIMIT 1").fetchone()
            if busy >= MAX_CONCURRENT or row is None:
                return started
            now = time.time()
            conn.execute("UPDATE evals SET status='running', started_at=?, heartbeat_at=?, message=? WHERE id=?",
                         (now, now, "Starting", row[0]))
        proc = spawn_detached(["-m", "backend.evals", "run", row[0], "--workspace", str(store.workspace)],
                              log_path(store, row[0]))
        db.update_eval(store, row[0], pid=proc.pid)
        started.append(row[0])


def restart_eval(store: RunStore, eval_id: str) -> Evaluation:
    """Queue a stopped, failed or interrupted evaluation again; it skips the rows it already scored."""
    e = db.get_eval(store, eval_id)
    if e.active:
        raise EvalError(f"evaluation {eval_id} is {e.status}")
    db.update_eval(store, eval_id, status="queued", error=None, finished_at=None, stop_requested=0,
                   message="Queued again")
    dispatch_evals(store)
    return db.get_eval(store, eval_id)


def stop_eval(store: RunStore, eval_id: str, wait_s: float = 15.0) -> str:
    """Stop an evaluation, keeping every row scored so far. It stops after its current batch; a process that
    does not within `wait_s` is killed with its process group."""
    e = db.get_eval(store, eval_id)
    if e.status == "queued":
        db.finish_eval(store, eval_id, "stopped", message="Stopped before it started")
        return "stopped"
    if e.status != "running":
        return e.status
    db.update_eval(store, eval_id, stop_requested=1)
    end = time.time() + wait_s
    while time.time() < end and db.get_eval(store, eval_id).status == "running" and pid_alive(e.pid):
        time.sleep(0.2)
    if db.get_eval(store, eval_id).status == "running" and e.pid and pid_alive(e.pid):
        try:
            os.killpg(e.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    done = db.get_eval(store, eval_id).done
    db.finish_eval(store, eval_id, "stopped", message=f"Stopped after {done} answers")
    return "stopped"


# ---- the detached process ----

class _Stop(Exception):
    pass


def run_eval(store: RunStore, eval_id: str) -> int:
    e = db.get_eval(store, eval_id)
    db.update_eval(store, eval_id, pid=os.getpid(), heartbeat_at=time.time())
    beat = Heartbeat(lambda: db.update_eval(store, eval_id, heartbeat_at=time.time()), name="eval-heartbeat").start()
    signal.signal(signal.SIGTERM, lambda *_: db.update_eval(store, eval_id, stop_requested=1))
    try:
        _evaluate(store, e)
    except _Stop:
        db.finish_eval(store, eval_id, "stopped", message=f"Stopped after {db.get_eval(store, eval_id).done} answers")
    except EvalError as err:
        db.finish_eval(store, eval_id, "failed", error=str(err), message="Failed")
        return 1
    except Exception as err:  # noqa: BLE001 - recorded for the UI; the traceback goes to the log
        traceback.print_exc()
        db.finish_eval(store, eval_id, "failed", error=f"{type(err).__name__}: {err}", message="Failed")
        return 1
    finally:
        beat.stop()
        from backend.runs.jobs import dispatch

        dispatch(store)  # the slot is free: the next queued run or evaluation
    return 0


def _evaluate(store: RunStore, e: Evaluation) -> None:
    from backend.models import load_model
    from backend.models.load import default_device

    spec = e.spec
    p = plan(store, spec)
    scorers = build_scorers(spec.scorers, p.reference_column, store.workspace)
    columns, judge, binary = judge_info(spec)
    db.update_eval(store, e.id, info={**e.info, "models": p.labels, "columns": columns, "judge": judge,
                                      "binary": binary})
    started, done_before = time.time(), db.get_eval(store, e.id).done
    prompts = [r[p.prompt_column] for r in p.rows]
    extra = {c: [r.get(c) for r in p.rows] for c in p.columns if c != p.prompt_column}
    references = extra.get(p.reference_column) if p.reference_column else None
    tools, environment = [], None
    if spec.plays_tools:
        from backend.rewards.trajectory import trajectory_text
        from backend.tools import build_tools

        tools = build_tools(spec.tools, store.workspace)
    if spec.environment.strip():
        from backend.tools.environment import environment_factory

        environment = environment_factory(spec.environment, store.workspace, spec.environment_timeout_s)
    for m, (ref, label) in enumerate(zip(p.refs, p.labels)):
        done = db.answered(store, e.id, m)
        todo = [i for i in range(len(p.rows)) if i not in done]
        if not todo:
            continue
        db.update_eval(store, e.id, message=f"Loading {label}")
        loaded = load_model(ref, merge=True, device=default_device())
        from backend.evals.generate import answers_with_tools, generate_answers

        if spec.chat_template != MODEL_TEMPLATE:
            loaded.tokenizer.chat_template = template_text(spec.chat_template)
        if spec.plays_tools:
            from backend.data.templates import use_tool_parser

            use_tool_parser(loaded.tokenizer, spec.chat_template)
            scored = any(s.type == "environment" for s in spec.scorers)  # else get_reward is never read
            batches = answers_with_tools(loaded, [prompts[i] for i in todo], spec.generation, tools,
                                         spec.max_tool_calling_iterations, [p.rows[i] for i in todo], environment,
                                         read_rewards=scored)
        else:
            batches = ((idx, outs, None) for idx, outs in generate_answers(loaded, [prompts[i] for i in todo],
                                                                           spec.generation))
        with contextlib.closing(batches):  # stopped or failed: the environment's processes end now
            for idx, outs, played in batches:
                rows = [todo[j] for j in idx]
                flat_rows = [r for r, k_answers in zip(rows, outs) for _ in k_answers]
                flat_answers = [a for k_answers in outs for a in k_answers]
                cols = {c: [extra[c][r] for r in flat_rows] for c in extra}
                if environment is not None:  # the environment scorer reads each answer's episode
                    cols["environments"] = [episode for k_played in played for episode in k_played]
                batch_prompts = [prompts[r] for r in flat_rows]
                scores = {}
                for s in scorers:
                    s.errors.clear()
                    scores[s.name] = s(batch_prompts, flat_answers, cols)
                errors = {s.name: dict(s.errors) for s in scorers}
                if JUDGE in columns:
                    scores[JUDGE] = fused(scorers, scores)
                samples: dict[int, int] = {}
                answers = []
                for j, (r, text) in enumerate(zip(flat_rows, flat_answers)):
                    k = samples[r] = samples.get(r, -1) + 1
                    text = trajectory_text(text) if spec.plays_tools else text  # scored as messages, stored as text
                    ref_value = references[r] if references else None
                    answers.append(Answer(m, r, k, prompts[r], None if ref_value is None else _as_text(ref_value), text,
                                          {n: v[j] for n, v in scores.items()},
                                          {n: why[j] for n, why in errors.items() if j in why}))
                db.save_answers(store, e.id, answers)
                now = db.get_eval(store, e.id)
                rate = (now.done - done_before) / max(time.time() - started, 1e-6)
                eta = (now.total - now.done) / rate if rate > 0 and now.total else None
                db.update_eval(store, e.id, message=f"{label}: {now.done}/{now.total} answers" +
                               (f", about {_duration(eta)} left" if eta is not None else ""))
                if now.stop_requested:
                    raise _Stop()
        del loaded
    db.finish_eval(store, e.id, "completed", message=f"Completed: {db.get_eval(store, e.id).done} answers")


def _as_text(value) -> str:
    from backend.rewards.base import completion_text

    return value if isinstance(value, str) else completion_text(value) if isinstance(value, (list, dict)) else str(value)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def main(argv=None) -> int:
    eval_id, workspace = job_args("Run one evaluation (started by the workbench).", argv, "run")
    return run_eval(RunStore(workspace), eval_id)


register_references(RunReferences(tables=db.TABLES, refuse=db.using_run, forget=lambda conn, run_ids: None,
                                  holding_slot=db.holding_slot, dispatch=dispatch_evals))
