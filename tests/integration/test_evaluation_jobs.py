"""Evaluation end to end through the detached job on the tiny model: it waits for the training slot, compares
the base with a trained run on a set, its numbers match a count made here from the stored answers, a stop keeps
the answers scored so far and a restart carries on without repeating them."""
import json
import re

import pytest

import launch
from backend import evals
from backend.config import build_config
from backend.evals.store import update_eval
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

ROWS = [{"question": f"Say a word about number {i}.", "answer": f"word {i}"} for i in range(6)]
SCORERS = [{"type": "regex", "name": "has_e", "params": {"pattern": "e"}}, {"type": "length", "params": {"target": 3}}]


def ended(store, eval_id, timeout=180):
    wait_for(lambda: not evals.get_eval(store, eval_id).active, timeout=timeout, every=0.5,
             what=f"evaluation {eval_id} to end")
    return evals.get_eval(store, eval_id)


@pytest.fixture(scope="module")
def trained(tiny_model, tmp_path_factory):
    """(store, run, the evaluation that queued behind it): a tiny SFT run, and an evaluation of the base model
    submitted while the run trains."""
    store = RunStore(tmp_path_factory.mktemp("evals"))
    (store.workspace / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run = submit_run(store, build_config({"mode": "sft", "model": str(tiny_model), "max_steps": 2,
                                          "max_length": 64, "lora": {"r": 2}, "per_device_train_batch_size": 2}))
    queued = evals.submit_eval(store, evals.build_spec({"models": [str(tiny_model)], "dataset": "qa.jsonl",
                                                        "scorers": SCORERS, "generation": {"max_new_tokens": 6}}))
    assert store.get_run(run.id).status == "running" and queued.status == "queued"
    wait_for(lambda: not store.get_run(run.id).active, timeout=240, every=1, what="the run to end")
    return store, store.get_run(run.id), queued


def test_an_evaluation_waits_for_the_training_slot(trained):
    store, run, queued = trained
    assert run.status == "completed", run.error
    e = ended(store, queued.id)
    assert e.status == "completed", e.error
    assert e.started_at >= run.finished_at - 1  # it started when the run gave the slot back
    assert e.done == e.total == len(ROWS)


def test_base_against_the_run_matches_a_hand_count(trained, capsys):
    store, run, _ = trained
    spec = evals.build_spec({"models": ["base", f"run:{run.id}"], "dataset": "qa.jsonl", "scorers": SCORERS,
                             "generation": {"max_new_tokens": 6, "batch_size": 4}})
    e = ended(store, evals.submit_eval(store, spec).id)
    assert e.status == "completed", e.error
    assert e.info["prompt_column"] == "question" and e.info["reference_column"] == "answer"
    rows = evals.answers(store, e.id)
    assert len(rows) == 2 * len(ROWS)
    summary = evals.summary_of(store, e)
    for m, result in enumerate(summary.models):
        texts = [a.answer for a in rows if a.model_idx == m]
        assert result.cells["has_e"].mean == pytest.approx(sum(bool(re.search("e", t)) for t in texts) / len(texts))
        lengths = [max(0.0, 1 - abs(len(t.split()) - 3) / 1.5) for t in texts]
        assert result.cells["length"].mean == pytest.approx(sum(lengths) / len(lengths))
    judge = {(a.model_idx, a.row_idx): a.scores["reward"] for a in rows}  # has_e + length, both weight 1
    wins = sum(judge[1, r] > judge[0, r] + 1e-9 for r in range(len(ROWS)))
    losses = sum(judge[1, r] < judge[0, r] - 1e-9 for r in range(len(ROWS)))
    tuned = summary.models[1]
    assert (tuned.wins, tuned.losses, tuned.ties) == (wins, losses, len(ROWS) - wins - losses)
    assert launch.main(["--workspace", str(store.workspace), "eval", "show", e.id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["label"] for m in shown["models"]][1].startswith(run.name)
    assert shown["models"][1]["wins"] == wins


def test_a_stopped_evaluation_keeps_its_answers_and_a_restart_carries_on(trained):
    store, _, queued = trained
    ended(store, queued.id)
    spec = evals.build_spec({"models": ["smollm2-135m-instruct"], "dataset": "qa.jsonl", "scorers": SCORERS[:1],
                             "generation": {"max_new_tokens": 4, "batch_size": 2}})
    e = evals.submit_eval(store, spec)
    update_eval(store, e.id, stop_requested=1)  # seen after the first batch is committed
    e = ended(store, e.id)
    assert e.status == "stopped" and e.done == 2
    first = {(a.row_idx, a.answer) for a in evals.answers(store, e.id)}
    e = ended(store, evals.restart_eval(store, e.id).id)
    assert e.status == "completed" and e.done == len(ROWS)
    rows = evals.answers(store, e.id)
    assert len({a.row_idx for a in rows}) == len(rows) == len(ROWS)
    assert first <= {(a.row_idx, a.answer) for a in rows}  # the kept answers were not generated again
