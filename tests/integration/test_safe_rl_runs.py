"""Cost sources under a Lagrangian constraint through the real worker on the tiny model: a GRPO run with a cost
and the diversity source logs cost, λ and the violation rate each step and raises λ while over budget; stopped by
constraint.stop once over budget for 2 steps, it resumes from its checkpoint with the λ it had. A PPO run logs
the same keys, keeps λ in its checkpoint and is stopped the same way; an RLOO run logs them too.

The tiny model writes noise, so the cost is a regex every completion matches (cost 1 against a budget of 0.1).
"""
import json
from pathlib import Path

import pytest

from backend.config import build_config
from backend.runs.jobs import resume_run, submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

ALWAYS = {"type": "regex", "name": "flagged", "role": "cost", "budget": 0.1, "params": {"pattern": "^"}}
DIVERSE = {"type": "diversity", "name": "diverse", "params": {"n": 1}}


def tiny(model, mode, **settings):
    return build_config({"mode": mode, "model": str(model), "dataset": "demo-math", "max_steps": 2, "max_length": 64,
                         "lora": {"r": 2}, "per_device_train_batch_size": 2,
                         # two completions are equally diverse from each other, and the tiny model's never end: the
                         # reward probe would rightly stop GRPO before it trains; these tests are about the cost
                         "rl": {"num_generations": 2, "max_completion_length": 8, "probe": "warn"},
                         "reward_sources": [DIVERSE, ALWAYS], **settings})


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("safe-rl"))
    grpo = submit_run(store, tiny(tiny_model, "grpo", max_steps=3, save_steps=1,
                                  constraint={"lambda_init": 0.0, "lambda_lr": 0.5, "patience": 2, "stop": True}))
    ppo = submit_run(store, tiny(tiny_model, "ppo", max_steps=50, save_steps=1, ppo={"num_ppo_epochs": 1},
                                 constraint={"patience": 1, "stop": True}))
    rloo = submit_run(store, tiny(tiny_model, "rloo", max_steps=1))
    wait_for(lambda: not any(store.get_run(r.id).active for r in (grpo, ppo, rloo)), timeout=240, every=1,
             what="the GRPO, PPO and RLOO runs to end")
    stopped = store.get_run(grpo.id)
    first_attempt = series(store, stopped, "lambda/flagged")
    resume_run(store, grpo.id)
    wait_for(lambda: not store.get_run(grpo.id).active, timeout=120, every=1, what="the resumed GRPO run to end")
    return store, stopped, first_attempt, store.get_run(grpo.id), store.get_run(ppo.id), store.get_run(rloo.id)


def series(store, run, name):
    return {m["step"]: m["value"] for m in store.metrics_since(run.id) if m["name"] == name}


def test_grpo_logs_cost_lambda_and_violations_and_lambda_rises_while_over_budget(runs):
    store, stopped, first_attempt, run, *_ = runs
    assert (stopped.status, stopped.step) == ("stopped", 2), stopped.error  # over budget for patience = 2 steps
    assert first_attempt == pytest.approx({1: 0.0, 2: 0.5 * (1.0 - 0.1)})
    assert series(store, run, "cost/flagged/mean") == {1: 1.0, 2: 1.0, 3: 1.0}
    assert series(store, run, "constraint/violation_rate") == {1: 1.0, 2: 1.0, 3: 1.0}
    assert series(store, run, "rewards/flagged/mean")[2] == pytest.approx(-0.45)  # the −λ·cost GRPO summed
    assert set(series(store, run, "rewards/diverse/mean")) == {1, 2, 3}


def test_a_resumed_run_continues_with_the_lambda_of_its_checkpoint(runs):
    store, _, _, run, *_ = runs
    assert run.attempt == 2 and run.step == 3, run.error
    saved = Path(store.run_dir(run.id)) / "checkpoints" / "checkpoint-2" / "constraint.json"
    assert json.loads(saved.read_text())["flagged"]["lam"] == pytest.approx(0.9)
    assert series(store, run, "lambda/flagged")[3] == pytest.approx(0.9)  # not back at lambda_init 0


def test_ppo_logs_the_same_keys_and_stops_once_the_cost_stays_over_budget(runs):
    store, *_, run, _ = runs
    assert run.status == "stopped", run.error
    assert run.step == 1
    assert series(store, run, "cost/flagged/mean") == {1: 1.0}
    assert series(store, run, "lambda/flagged") == {1: 0.0}
    assert series(store, run, "constraint/violation_rate") == {1: 1.0}
    saved = Path(store.run_dir(run.id)) / "checkpoints" / "checkpoint-1" / "constraint.json"
    assert json.loads(saved.read_text())["flagged"]["lam"] == pytest.approx(0.1 * (1.0 - 0.1))


def test_rloo_folds_the_cost_in_the_same_way(runs):
    store, *_, run = runs
    assert run.status == "completed", run.error
    assert series(store, run, "cost/flagged/mean") == {1: 1.0}
    assert series(store, run, "lambda/flagged") == {1: 0.0}
