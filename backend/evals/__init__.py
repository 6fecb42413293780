"""Evaluation: does a run help? Models (the base, runs, checkpoints, exports) generate on an evaluation set,
scored by the reward sources and reference metrics, side by side, with intervals, win rates and the examples
that changed.

Modules: `spec` (what an evaluation asks for), `scorers`, `generate` (batched, adapter merged), `store` (its
tables), `job` (checks, queue, the detached process), `results` (summaries, examples, predictions). Importing
the package registers its tables and its share of the training slot with the run store.
"""
from backend.evals.job import (BASE, Plan, dispatch_evals, log_path, plan, restart_eval, stop_eval, submit_eval)
from backend.evals.results import (CATEGORIES, RunEvaluation, Summary, comparison_record, comparison_rows, examples,
                                   format_table, summarize, table_rows, write_predictions)
from backend.evals.spec import (METRICS, SCORER_KINDS, EvalError, EvalSpec, Generation, ScorerConfig, build_spec,
                                parse_scorer)
from backend.evals.store import (ACTIVE, FINAL, Answer, Evaluation, answers, delete_eval, ended_stamp, get_eval,
                                 list_evals)

__all__ = ["ACTIVE", "BASE", "CATEGORIES", "ENDED", "FINAL", "METRICS", "SCORER_KINDS", "Answer", "EvalError", "EvalSpec",
           "Evaluation", "Generation", "Plan", "RunEvaluation", "ScorerConfig", "Summary", "answers", "build_spec",
           "comparison_record", "comparison_rows", "delete_eval", "dispatch_evals", "ended_stamp", "evaluations_of",
           "examples", "format_table", "get_eval", "latest_evaluations", "list_evals", "log_path", "plan",
           "restart_eval", "stop_eval", "submit_eval", "summarize", "summary_of", "table_rows", "write_predictions"]


ENDED = ("completed", "stopped")  # evaluations whose results are read as results


def _index_of(evaluation: Evaluation, run_id: str) -> int | None:
    """Where the run (or one of its checkpoints) is among the evaluation's models."""
    from backend.runs.store import RUN_PREFIX

    return next((i for i, m in enumerate(evaluation.spec.models) if m == RUN_PREFIX + run_id
                 or m.startswith(f"{RUN_PREFIX}{run_id}@")), None)


def evaluations_of(store, run_id: str) -> list[tuple[Evaluation, Summary, int]]:
    """Ended evaluations that include the run (any of its checkpoints): (evaluation, summary, the model's index)."""
    out = []
    for e in list_evals(store, ENDED):
        if (idx := _index_of(e, run_id)) is not None:
            out.append((e, summary_of(store, e), idx))
    return out


def latest_evaluations(store, run_ids: list[str]) -> list[RunEvaluation | None]:
    """For each run, the newest ended evaluation that includes it, summarised once however many runs it holds;
    None for a run never evaluated."""
    ended, summaries, out = list_evals(store, ENDED), {}, []
    for run_id in run_ids:
        found = next(((e, i) for e in ended if (i := _index_of(e, run_id)) is not None), None)
        if found is None:
            out.append(None)
            continue
        e, idx = found
        if e.id not in summaries:
            summaries[e.id] = summary_of(store, e)
        out.append(RunEvaluation(e, summaries[e.id], idx))
    return out


def summary_of(store, evaluation: Evaluation, rows: list[Answer] | None = None) -> Summary:
    """The evaluation's summary, from `rows` when the caller has read its answers already."""
    from backend.evals.job import judge_info

    columns, judge, binary = judge_info(evaluation.spec)
    rows = answers(store, evaluation.id) if rows is None else rows
    return summarize(rows, evaluation.info.get("models", evaluation.spec.models), columns,
                     binary, judge, evaluation.spec.generation.samples)
