"""Evaluation during RL runs through the real worker on the tiny model: GRPO and PPO answer held-out prompts at
every interval and at the end, logging eval_reward and each source's mean on the rows they never train on."""
import pytest

from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.integration.test_modes import tiny_config
from tests.waiting import wait_for

SOURCES = [{"type": "numeric_match", "params": {"column": "answer"}},
           {"type": "length", "params": {"target": 4, "tolerance": 10}}]  # never 0: the sum check below can fail


@pytest.fixture(scope="module")
def finished(tiny_model, tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("rl-eval"))
    settings = {"dataset": "demo-math", "reward_sources": SOURCES, "max_steps": 3,
                "eval": {"split": 0.05, "steps": 2, "limit": 3}}
    ids = {mode: submit_run(store, tiny_config(tiny_model, mode, **settings)).id for mode in ("grpo", "ppo")}
    wait_for(lambda: not any(store.get_run(i).active for i in ids.values()), timeout=300, every=1,
             what="the evaluated RL runs to end")
    return {mode: (store, store.get_run(run_id)) for mode, run_id in ids.items()}


@pytest.mark.parametrize("mode", ["grpo", "ppo"])
def test_an_rl_run_logs_eval_reward_at_the_interval_and_at_the_end(finished, mode):
    store, run = finished[mode]
    assert run.status == "completed", run.error
    rows = store.metrics_since(run.id)
    steps = {name: sorted(m["step"] for m in rows if m["name"] == name)
             for name in ("eval_reward", "eval_rewards/numeric_match/mean", "eval_rewards/length/mean")}
    assert steps == {name: [2, 3] for name in steps}  # every 2 steps, and the last (3) once
    by_step = {(m["step"], m["name"]): m["value"] for m in rows}
    assert all(by_step[step, "eval_rewards/length/mean"] > 0 for step in (2, 3))
    for step in (2, 3):  # the weighted sum of the two sources, as the training reward is
        assert by_step[step, "eval_reward"] == pytest.approx(by_step[step, "eval_rewards/numeric_match/mean"] +
                                                             by_step[step, "eval_rewards/length/mean"])
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert "eval_reward" in log and "on 3 held-out prompts" in log
