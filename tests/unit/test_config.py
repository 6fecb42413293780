"""The run-config schema: defaults, validation messages that name the field, overrides, presets."""
from pathlib import Path

import pytest

from backend.config import (ConfigError, RunConfig, apply_overrides, build_config, field_paths, load_config,
                            parse_override, to_yaml)

REPO = Path(__file__).resolve().parents[2]


def errors_of(data):
    with pytest.raises(ConfigError) as exc:
        build_config(data)
    return exc.value.errors


def test_defaults_train_the_embedded_model_on_the_demo_set():
    c = build_config({})
    assert (c.mode, c.model, c.dataset, c.finetuning) == ("sft", "smollm2-135m-instruct", "demo-sft-instructions", "lora")
    assert c.lora.target_modules == ["q_proj", "v_proj"]


def test_every_leaf_setting_has_a_label_help_and_group():
    for path, info in field_paths():
        assert info.title and info.description, path
        assert info.json_schema_extra["group"] in ("basic", "advanced"), path


def test_out_of_range_values_are_refused_with_the_field_named():
    errs = errors_of({"lora": {"r": 0}, "learning_rate": 0, "per_device_train_batch_size": -2})
    assert any(e.startswith("lora.r:") and "greater than or equal to 1" in e for e in errs)
    assert any(e.startswith("learning_rate:") for e in errs)
    assert any(e.startswith("per_device_train_batch_size:") and "(got -2)" in e for e in errs)


def test_unknown_settings_suggest_the_right_name():
    assert errors_of({"lora": {"rank": 8}}) == ["lora.rank: unknown setting; did you mean 'lora.r'?"]
    assert errors_of({"learning_rat": 1e-4}) == ["learning_rat: unknown setting; did you mean 'learning_rate'?"]


def test_modes_not_built_yet_are_refused_with_the_available_ones():
    (err,) = errors_of({"mode": "ppo"})
    assert "mode 'ppo' is not available yet" in err and "sft" in err
    (err,) = errors_of({"mode": "magic"})
    assert err.startswith("mode:")


def test_set_overrides_follow_the_schema_types():
    data = apply_overrides({}, ["lora.r=16", "max_steps=20", "learning_rate=1e-4", "lora.target_modules=q_proj,k_proj",
                                "gradient_checkpointing=true", "name=007"])
    c = build_config(data)
    assert (c.lora.r, c.max_steps, c.learning_rate, c.gradient_checkpointing, c.name) == (16, 20, 1e-4, True, "007")
    assert c.lora.target_modules == ["q_proj", "k_proj"]


def test_bad_set_items_are_explained():
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_override("lora.r")
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        parse_override("max_step=3")


def test_yaml_round_trip_and_preset_files(tmp_path):
    c = build_config({"lora": {"r": 4}, "max_steps": 7})
    path = tmp_path / "run.yaml"
    path.write_text(to_yaml(c))
    assert load_config(path) == c
    assert to_yaml(c, only_changed=True).strip().splitlines() == ["lora:", "  r: 4", "max_steps: 7"]
    for preset in (REPO / "presets").glob("*.yaml"):
        assert isinstance(load_config(preset), RunConfig), preset


def test_config_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora:\n  r: zero\n")
    with pytest.raises(ConfigError) as exc:
        load_config(bad)
    assert exc.value.errors[0].startswith(f"{bad}: lora.r:")
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping of settings"):
        load_config(tmp_path / "list.yaml")
