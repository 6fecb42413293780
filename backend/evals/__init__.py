"""Evaluation: does a run help? Models (the base, runs, checkpoints, exports) generate on an evaluation set,
scored by the reward sources and reference metrics, side by side, with intervals, win rates and the examples
that changed.

Modules: `spec` (what an evaluation asks for), `scorers`, `generate` (batched, adapter merged), `store` (its
tables), `job` (checks, queue, the detached process), `results` (summaries, examples, predictions). Importing
the package registers its tables and its share of the training slot with the run store.
"""
from backend.evals.job import (BASE, Plan, dispatch_evals, log_path, plan, restart_eval, stop_eval, submit_eval)
from backend.evals.results import (CATEGORIES, Summary, examples, format_table, summarize, table_rows,
                                   write_predictions)
from backend.evals.spec import (METRICS, SCORER_KINDS, EvalError, EvalSpec, Generation, ScorerConfig, build_spec,
                                parse_scorer)
from backend.evals.store import (ACTIVE, FINAL, Answer, Evaluation, answers, delete_eval, ended_stamp, get_eval,
                                 list_evals)

__all__ = ["ACTIVE", "BASE", "CATEGORIES", "FINAL", "METRICS", "SCORER_KINDS", "Answer", "EvalError", "EvalSpec",
           "Evaluation", "Generation", "Plan", "ScorerConfig", "Summary", "answers", "build_spec", "delete_eval",
           "dispatch_evals", "ended_stamp", "evaluations_of", "examples", "format_table", "get_eval", "list_evals", "log_path", "plan",
           "restart_eval", "stop_eval", "submit_eval", "summarize", "summary_of", "table_rows",
           "write_predictions"]


def evaluations_of(store, run_id: str) -> list[tuple[Evaluation, Summary, int]]:
    """Ended evaluations that include the run (any of its checkpoints): (evaluation, summary, the model's index)."""
    from backend.runs.store import RUN_PREFIX

    out = []
    for e in list_evals(store, ("completed", "stopped")):
        idx = next((i for i, m in enumerate(e.spec.models) if m == RUN_PREFIX + run_id
                    or m.startswith(f"{RUN_PREFIX}{run_id}@")), None)
        if idx is not None:
            out.append((e, summary_of(store, e), idx))
    return out


def summary_of(store, evaluation: Evaluation, rows: list[Answer] | None = None) -> Summary:
    """The evaluation's summary, from `rows` when the caller has read its answers already."""
    from backend.evals.job import judge_info

    columns, judge, binary = judge_info(evaluation.spec)
    rows = answers(store, evaluation.id) if rows is None else rows
    return summarize(rows, evaluation.info.get("models", evaluation.spec.models), columns,
                     binary, judge, evaluation.spec.generation.samples)
