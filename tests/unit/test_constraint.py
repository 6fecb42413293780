"""Cost sources and their Lagrangian constraint: the λ rule, how costs are declared and refused, what the cost term
hands the trainer and logs, the over-budget warning and stop, λ across a checkpoint; and the diversity source."""
import json
from types import SimpleNamespace

import pytest

from backend.config import ConfigError, build_config
from backend.config.sections import ConstraintSettings
from backend.rewards import build_reward_funcs, cost_budgets, score_completions
from backend.rewards.constraint import Multipliers, update_multiplier, violation_rate
from backend.rewards.spec import as_configs

BLOCK = {"type": "blocklist", "name": "unsafe", "params": {"keywords": ["stupid", "idiot"], "count": "any"}}
COST = {**BLOCK, "role": "cost", "budget": 0.25}


def errors_of(data):
    with pytest.raises(ConfigError) as exc:
        build_config(data)
    return exc.value.errors


# ---- the λ rule ----

def test_lambda_rises_while_the_cost_is_over_budget_falls_to_zero_under_it_and_stops_at_the_cap():
    lam, seen = 0.0, []
    for _ in range(5):  # cost 0.5 against a budget of 0.1
        lam = update_multiplier(lam, 0.5, 0.1, lr=1.0, cap=1.0)
        seen.append(lam)
    assert seen == pytest.approx([0.4, 0.8, 1.0, 1.0, 1.0])
    for _ in range(20):  # then no cost at all: back down, never below 0
        lam = update_multiplier(lam, 0.0, 0.1, lr=1.0, cap=1.0)
    assert lam == 0.0
    assert update_multiplier(0.3, 0.1, 0.1, lr=5.0, cap=1.0) == 0.3  # exactly on budget: unchanged


def test_multipliers_move_only_on_measured_costs_and_count_steps_over_budget():
    m = Multipliers({"a": 0.1, "b": 0.5}, init=0.2, lr=1.0, cap=10)
    m.update({"a": 0.6})
    assert (m.value("a"), m.value("b")) == pytest.approx((0.7, 0.2))
    m.update({"a": 0.6, "b": 0.0})
    assert m.over_budget(patience=2) == ["a"] and m.over_budget(patience=3) == [] and m.over_budget(0) == []
    m.update({"a": 0.0})
    assert m.constraints["a"].steps_over == 0
    restored = Multipliers({"a": 0.1, "b": 0.5, "new": 1.0}, init=0.2)
    restored.load_state_dict(m.state_dict())
    assert restored.state_dict() == {**m.state_dict(), "new": {"lam": 0.2, "steps_over": 0}}


def test_violation_rate_is_the_share_of_completions_with_any_positive_cost():
    assert violation_rate([[0, 1, 0, 0], [0, 0, 0, 2.5]]) == 0.5
    assert violation_rate([[0, None, 0.0]]) == 0.0
    assert violation_rate([]) == 0.0


# ---- declaring costs ----

def test_a_cost_needs_a_budget_and_a_budget_needs_a_cost():
    assert errors_of({"mode": "grpo", "reward_sources": [{**BLOCK, "role": "cost"}]}) == [
        "reward_sources.0: budget: a cost source needs a budget, the mean cost per completion the run must stay "
        "under (e.g. budget: 0.05)"]
    assert errors_of({"mode": "grpo", "reward_sources": [{**BLOCK, "budget": 0.1}]}) == [
        "reward_sources.0: budget: only a cost source has a budget; set role: cost, or remove budget"]
    (weighted,) = errors_of({"mode": "grpo", "reward_sources": [{**COST, "weight": 2}]})
    assert weighted.startswith("reward_sources.0: weight: a cost is weighed by its Lagrange multiplier")


def test_costs_are_refused_in_modes_without_a_constraint_and_the_lambda_settings_are_checked():
    (err,) = errors_of({"mode": "dpo", "dataset": "demo-preference", "reward_sources": [COST]})
    assert err.startswith("reward_sources.0.role: DPO runs keep no cost constraint")
    for mode in ("grpo", "rloo", "ppo"):
        assert build_config({"mode": mode, "reward_sources": [COST]}).reward_sources[0].is_cost
    (err,) = errors_of({"mode": "grpo", "reward_sources": [COST], "constraint": {"lambda_init": 5, "lambda_max": 1}})
    assert err.startswith("constraint.lambda_init: 5 is above the cap")
    (err,) = errors_of({"mode": "grpo", "reward_sources": [COST], "constraint": {"stop": True, "patience": 0}})
    assert err.startswith("constraint.patience:")


def test_cost_budgets_name_each_cost_as_its_metrics_do():
    assert cost_budgets([BLOCK, COST, {**COST, "name": ""}]) == {"unsafe_2": 0.25, "blocklist": 0.25}


def test_a_penalty_kind_costs_its_penalty_and_the_playground_keeps_costs_out_of_the_total(workspace):
    out = score_completions([COST, {"type": "length", "params": {"target": 2, "unit": "words"}}], ["p"],
                            ["you stupid idiot", "fine thanks"], workspace)
    assert out["sources"]["unsafe"] == [-1.0, 0.0]
    assert out["costs"] == {"unsafe": [1.0, 0.0]}
    assert out["total"] == pytest.approx([0.0, 1.0])  # the length reward only


# ---- the cost term and the callback ----

def constraint(settings=None, sources=(COST, {"type": "length", "params": {"target": 2}}), **kw):
    from backend.modes.rl_constraint import ConstraintCallback

    configs = as_configs(list(sources))
    cb = ConstraintCallback(configs, ConstraintSettings(**(settings or {})), **kw)
    return cb, configs


def test_the_trainer_sees_minus_lambda_times_cost_and_the_step_logs_cost_lambda_and_violations(workspace):
    cb, configs = constraint({"lambda_init": 0.5, "lambda_lr": 1.0})
    funcs = cb.wrap_all(build_reward_funcs(configs, workspace))
    logged = {}
    completions = ["you stupid idiot", "fine thanks", "idiot", "hello there"]
    scores = [f(prompts=["p"] * 4, completions=completions, log_metric=logged.__setitem__) for f in funcs]
    assert scores[0] == [-0.5, 0.0, -0.5, 0.0]  # λ 0.5 × cost 1 (count: any)
    assert scores[1] == [0.0, 1.0, 0.0, 1.0]  # rewards pass through untouched
    assert logged == {"cost/unsafe/mean": 0.5, "lambda/unsafe": 0.5, "constraint/violation_rate": 0.5}
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    cb.on_step_end(None, state, None)
    assert cb.multipliers.value("unsafe") == pytest.approx(0.5 + 1.0 * (0.5 - 0.25))


def test_a_cost_over_budget_for_the_patience_warns_once_or_requests_a_stop(workspace, capsys):
    stops = []
    cb, configs = constraint({"patience": 2, "stop": True}, request_stop=lambda: stops.append(1))
    (cost, _) = cb.wrap_all(build_reward_funcs(configs, workspace))
    for step in (1, 2, 3):
        cost(prompts=["p"] * 2, completions=["stupid", "idiot"])
        cb.on_step_end(None, SimpleNamespace(global_step=step), None)
    assert stops == [1]  # at step 2, not again at step 3
    assert "cost 'unsafe' has been over its budget 0.25 for 2 steps" in capsys.readouterr().out
    warn_only, _ = constraint({"patience": 1}, request_stop=lambda: stops.append(2))
    warn_only._step_sums["unsafe"] = [1.0, 1]
    warn_only.on_step_end(None, SimpleNamespace(global_step=1), None)
    assert stops == [1] and "warning: cost 'unsafe'" in capsys.readouterr().out


def test_lambda_is_saved_with_a_checkpoint_and_restored_on_resume(tmp_path):
    cb, _ = constraint({"lambda_lr": 1.0})
    cb._step_sums["unsafe"] = [3.0, 4]
    state = SimpleNamespace(global_step=7, is_world_process_zero=True)
    cb.on_step_end(None, state, None)
    (tmp_path / "checkpoint-7").mkdir()
    args = SimpleNamespace(output_dir=str(tmp_path))
    cb.on_save(args, state, None)
    assert json.loads((tmp_path / "checkpoint-7" / "constraint.json").read_text())["unsafe"]["lam"] == 0.5
    resumed, _ = constraint({"lambda_lr": 1.0})
    resumed.on_train_begin(args, state, None)
    assert resumed.multipliers.value("unsafe") == 0.5
    fresh, _ = constraint({"lambda_init": 0.1})
    fresh.on_train_begin(args, SimpleNamespace(global_step=0), None)
    assert fresh.multipliers.value("unsafe") == 0.1


# ---- diversity ----

def diversity(workspace, **params):
    (f,) = build_reward_funcs([{"type": "diversity", "params": params}], workspace)
    return f


def test_distinct_n_scores_each_completion_by_the_n_grams_no_other_of_its_prompt_has(workspace):
    f = diversity(workspace, n=2)
    same = f(prompts=["a"] * 3, completions=["the cat sat down"] * 3)
    assert same == [0.0, 0.0, 0.0]
    different = f(prompts=["a"] * 3, completions=["the cat sat down", "a dog ran off", "birds fly south today"])
    assert different == [1.0, 1.0, 1.0]
    # groups are the completions of one prompt: the copy under prompt b has no sibling there and is not scored
    mixed = f(prompts=["a", "a", "b"], completions=["the cat sat", "the cat ran", "the cat sat"])
    assert mixed == [0.5, 0.5, None]


def test_embedding_diversity_is_near_zero_for_copies_and_higher_for_different_answers(workspace):
    f = diversity(workspace, method="embedding")
    same = f(prompts=["q"] * 2, completions=["Paris is the capital of France."] * 2)
    different = f(prompts=["q"] * 2, completions=["Paris is the capital of France.",
                                                 "I like to play football with my friends on Sunday."])
    assert max(abs(s) for s in same) < 1e-5
    assert min(different) > 0.5


def test_diversity_cannot_be_a_cost_and_needs_several_completions_per_prompt():
    (err,) = errors_of({"mode": "grpo", "reward_sources": [{"type": "diversity", "role": "cost", "budget": 1}]})
    assert err.startswith("reward_sources.0: role: diversity is something to reward")
    (err,) = errors_of({"mode": "ppo", "rl": {"num_generations": 1}, "reward_sources": [{"type": "diversity"}]})
    assert err.startswith("rl.num_generations: a diversity source compares the completions of the same prompt")
