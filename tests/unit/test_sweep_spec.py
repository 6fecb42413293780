"""Sweep specs are checked against the run-config schema before anything starts, each problem with its key."""
import math
from pathlib import Path

import pytest
import yaml

from backend.config import ConfigError
from backend.sweeps import (Objective, SweepSpec, Trial, best_trial, build_sweep_spec, default_direction,
                            load_sweep_spec, parse_objective, parse_param, reduce_series, spec_from_cli,
                            spec_from_data, trial_config)

REPO = Path(__file__).resolve().parents[2]
SFT = {"mode": "sft", "max_steps": 4}


def errors_of(data) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        spec_from_data(data)
    return exc.value.errors


def test_the_preset_spec_loads_with_its_base_resolved_and_overridden():
    spec = load_sweep_spec(REPO / "presets" / "sweeps" / "sft_lr_rank.yaml")
    assert spec.name == "sft-lr-rank" and spec.n_trials == 8
    assert spec.base["mode"] == "sft" and spec.base["max_steps"] == 12  # `set` applied on presets/sft_demo.yaml
    assert spec.base["lora"]["alpha"] == 16 and "per_device_train_batch_size" in spec.base  # a full run config
    assert [p.field for p in spec.space] == ["learning_rate", "lora.r"]
    assert spec.objective.reduce == "mean_last" and spec.pruning.enabled


def test_unknown_settings_are_named_with_a_suggestion():
    errors = errors_of({"base": SFT, "space": [{"field": "lora.rank", "kind": "int", "low": 2, "high": 8},
                                               {"field": "lr", "kind": "log_float", "low": 1e-5, "high": 1e-3}]})
    assert errors == ["space[0].field: unknown setting 'lora.rank'; did you mean 'lora.r'?",
                      "space[1].field: unknown setting 'lr'; did you mean 'learning_rate'?"]


def test_bounds_must_lie_inside_the_schema_range():
    errors = errors_of({"base": SFT, "space": [
        {"field": "learning_rate", "kind": "float", "low": 1e-5, "high": 2},
        {"field": "lora.r", "kind": "int", "low": 2, "high": 4096},
        {"field": "lora.dropout", "kind": "float", "low": 0.5, "high": 0.1}]})
    assert any(e.startswith("space[0] (learning_rate): high 2 is outside the setting's range") and "1" in e
               for e in errors)
    assert any(e.startswith("space[1] (lora.r): high 4096 is outside") and "1024" in e for e in errors)
    assert "space[2] (lora.dropout): low (0.5) must be below high (0.1)" in errors


def test_kinds_must_fit_the_setting():
    errors = errors_of({"base": SFT, "space": [
        {"field": "lora.r", "kind": "float", "low": 2, "high": 8},
        {"field": "learning_rate", "kind": "log_float", "low": 0, "high": 1e-3},
        {"field": "gradient_checkpointing", "kind": "int", "low": 0, "high": 1},
        {"field": "warmup_steps", "kind": "int", "low": 0.5, "high": 4},
        {"field": "max_length", "kind": "categorical", "choices": [64]}]})
    assert "space[0] (lora.r): a whole-number setting: use kind int (or categorical)" in errors
    assert "space[1] (learning_rate): log_float needs low > 0 (a log scale has no 0)" in errors
    assert "space[2] (gradient_checkpointing): an on/off setting is searched with kind categorical" in errors
    assert "space[3] (warmup_steps): int needs whole-number low and high" in errors
    assert "space[4] (max_length): list at least two choices" in errors


def test_categorical_choices_must_be_allowed_by_the_schema():
    errors = errors_of({"base": SFT, "space": [
        {"field": "lr_scheduler_type", "kind": "categorical", "choices": ["linear", "cosin"]},
        {"field": "lora.r", "kind": "categorical", "choices": [4, 0]}]})
    assert errors[0].startswith("space[0] (lr_scheduler_type): choice 'cosin' is not allowed; choose from linear, "
                                "cosine")
    assert errors[1].startswith("space[1] (lora.r): choice 0 is not allowed: Input should be greater than or equal")


def test_a_setting_of_another_mode_or_one_not_searched_is_refused():
    errors = errors_of({"base": SFT, "space": [{"field": "dpo.beta", "kind": "float", "low": 0.1, "high": 0.5},
                                               {"field": "mode", "kind": "categorical", "choices": ["sft", "dpo"]},
                                               {"field": "learning_rate", "kind": "float", "low": 1e-5, "high": 1e-4},
                                               {"field": "learning_rate", "kind": "float", "low": 1e-5, "high": 1e-4}
                                               ]})
    assert "space[0] (dpo.beta): only used by dpo runs, and the base config trains sft" in errors
    assert any(e.startswith("space[1] (mode): not searchable") for e in errors)
    assert "space[3] (learning_rate): searched twice; keep one entry per setting" in errors


def test_the_objective_must_be_a_metric_the_mode_logs():
    space = [{"field": "learning_rate", "kind": "log_float", "low": 1e-5, "high": 1e-3}]
    (error,) = errors_of({"base": SFT, "space": space, "objective": {"metric": "los"}})
    assert error.startswith("objective.metric: sft runs do not log 'los'; did you mean 'loss'?")
    (error,) = errors_of({"base": SFT, "space": space, "objective": {"metric": "eval_loss"}})
    assert "without an evaluation split" in error
    grpo = {"mode": "grpo", "dataset": "demo-math", "reward_sources": [
        {"type": "numeric_match", "name": "correct", "params": {"column": "answer"}}]}
    spec = spec_from_data({"base": grpo, "space": [{"field": "rl.temperature", "kind": "float", "low": 0.5,
                                                    "high": 1.5}],
                           "objective": {"metric": "rewards/correct/mean", "direction": "maximize"}})
    assert spec.objective.metric == "rewards/correct/mean"


def test_structure_errors_name_the_key_and_base_errors_are_prefixed():
    errors = errors_of({"base": {"lora": {"rank": 3}}, "space": [], "n_trails": 3})
    assert "base: lora.rank: unknown setting; did you mean 'lora.r'?" in errors
    assert "space: list at least one setting to search" in errors
    assert "n_trails: unknown key; did you mean 'n_trials'?" in errors
    assert errors_of({"space": []}) == ["base: missing; give a run-config YAML path (e.g. presets/sft_demo.yaml) "
                                        "or a mapping"]
    assert errors_of({"base": "presets/nope.yaml", "space": []}) == ["base: run config presets/nope.yaml not found"]


def test_cli_flags_build_or_amend_a_spec(tmp_path):
    spec = spec_from_cli(preset=str(REPO / "presets" / "sft_demo.yaml"), sets=["max_steps=3"],
                         params=["learning_rate=log_float:1e-5:1e-3", "lora.r=categorical:4,8"],
                         objective="loss:min:best", trials=5)
    assert spec.base["max_steps"] == 3 and spec.n_trials == 5 and spec.objective.reduce == "best"
    assert spec.space[1].choices == [4, 8]
    file = tmp_path / "spec.yaml"
    file.write_text(yaml.safe_dump({"base": str(REPO / "presets" / "sft_demo.yaml"), "space": [
        {"field": "lora.r", "kind": "int", "low": 2, "high": 8}], "n_trials": 3}))
    amended = spec_from_cli(str(file), params=["lora.r=int:4:16"], prune=True)
    assert [(p.field, p.low, p.high) for p in amended.space] == [("lora.r", 4, 16)]  # replaced, not added
    assert amended.pruning.enabled and amended.n_trials == 3
    with pytest.raises(ConfigError, match="expected FIELD=KIND:LOW:HIGH"):
        parse_param("learning_rate")
    with pytest.raises(ConfigError, match="METRIC"):
        parse_objective("loss:smallest")
    assert parse_objective("reward") == {"metric": "reward", "direction": "maximize"}
    assert default_direction("rewards/accuracies") == "maximize" and default_direction("train_loss") == "minimize"


def test_series_are_reduced_as_the_objective_says():
    series = [3.0, None, 1.0, float("nan"), 2.0]
    assert reduce_series(series, Objective(reduce="last")) == 2.0
    assert reduce_series(series, Objective(reduce="mean_last", last_k=2)) == 1.5
    assert reduce_series(series, Objective(reduce="best")) == 1.0
    assert reduce_series(series, Objective(reduce="best", direction="maximize")) == 3.0
    assert reduce_series([None, math.inf], Objective()) is None


def test_best_trial_and_trial_configs():
    spec = build_sweep_spec({"name": "lr", "base": SFT, "space": [
        {"field": "learning_rate", "kind": "log_float", "low": 1e-5, "high": 1e-3}]})
    trials = [Trial("s", 0, "r0", "completed", {}, 2.0), Trial("s", 1, "r1", "pruned", {}, 0.5),
              Trial("s", 2, "r2", "completed", {}, 1.0), Trial("s", 3, "r3", "failed", {}, None)]
    assert best_trial(spec, trials).number == 2
    maximize = spec.model_copy(update={"objective": Objective(direction="maximize")})
    assert best_trial(maximize, trials).number == 0
    config = trial_config(spec, {"learning_rate": 3e-4}, 2)
    assert config.name == "lr #3" and config.learning_rate == 3e-4 and config.max_steps == 4
    assert isinstance(spec, SweepSpec)
