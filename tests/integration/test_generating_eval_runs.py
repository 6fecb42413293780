"""Generation at evaluation for a loss-evaluated mode, through the real worker on the tiny model: an SFT run with
eval.generate answers its held-out prompts whenever it evaluates its loss, and logs ROUGE-L against the held-out
answers and its reward sources' scores next to eval_loss."""
import pytest

from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.integration.test_eval_runs import tiny_config
from tests.waiting import wait_for

KEYS = ("eval_loss", "eval_rouge_l", "eval_reward", "eval_rewards/length/mean", "eval_completions/mean_length")


def test_an_sft_run_generating_at_evaluation_logs_rouge_and_rewards_at_each_evaluation(tiny_model, workspace):
    store = RunStore(workspace)
    config = tiny_config(tiny_model, "sft", reward_sources=[{"type": "length", "params": {"target": 4,
                                                                                         "tolerance": 10}}],
                         eval={"split": 0.02, "steps": 1, "limit": 2, "generate": True, "max_new_tokens": 6})
    run = submit_run(store, config)
    wait_for(lambda: not store.get_run(run.id).active, timeout=240, every=1, what="the SFT run to end")
    run = store.get_run(run.id)
    assert run.status == "completed", run.error
    rows = store.metrics_since(run.id)
    steps = {k: sorted(m["step"] for m in rows if m["name"] == k) for k in KEYS}
    assert steps == {k: [1, 2] for k in KEYS}  # with eval_loss, every step; the end is not evaluated twice
    value = {(m["step"], m["name"]): m["value"] for m in rows}
    for step in (1, 2):
        assert 0.0 <= value[step, "eval_rouge_l"] <= 1.0
        assert 0 <= value[step, "eval_completions/mean_length"] <= 6  # the random tiny model may stop at once
        assert value[step, "eval_reward"] == pytest.approx(value[step, "eval_rewards/length/mean"])
        assert value[step, "eval_reward"] > 0
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert "eval_rouge_l" in log and "on 2 held-out prompts" in log
