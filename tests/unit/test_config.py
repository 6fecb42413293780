"""The run-config schema: defaults, validation messages that name the field, overrides, presets."""
from pathlib import Path

import pytest

from backend.config import (GROUP_TITLES, ConfigError, RunConfig, apply_overrides, build_config, field_paths, load_config,
                            parse_override, read_yaml_mapping, to_yaml)

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
        assert info.json_schema_extra["group"] in ("basic", "advanced", *GROUP_TITLES), path


def test_out_of_range_values_are_refused_with_the_field_named():
    errs = errors_of({"lora": {"r": 0}, "learning_rate": 0, "per_device_train_batch_size": -2})
    assert any(e.startswith("lora.r:") and "greater than or equal to 1" in e for e in errs)
    assert any(e.startswith("learning_rate:") for e in errs)
    assert any(e.startswith("per_device_train_batch_size:") and "(got -2)" in e for e in errs)


def test_unknown_settings_suggest_the_right_name():
    assert errors_of({"lora": {"rank": 8}}) == ["lora.rank: unknown setting; did you mean 'lora.r'?"]
    assert errors_of({"learning_rat": 1e-4}) == ["learning_rat: unknown setting; did you mean 'learning_rate'?"]


def test_every_mode_of_the_schema_has_a_module_and_unknown_modes_are_refused():
    from backend.core.mode_registry import ALL_MODES
    from backend.modes import available_modes, mode_module

    assert set(available_modes()) == set(ALL_MODES)
    for mode in ALL_MODES:
        assert callable(mode_module(mode).build_trainer), mode
    (err,) = errors_of({"mode": "magic"})
    assert err.startswith("mode:") and "'sft'" in err


def test_set_overrides_follow_the_schema_types():
    data = apply_overrides({}, ["lora.r=16", "max_steps=20", "learning_rate=1e-4", "lora.target_modules=q_proj,k_proj",
                                "gradient_checkpointing=true", "name=007"])
    c = build_config(data)
    assert (c.lora.r, c.max_steps, c.learning_rate, c.gradient_checkpointing, c.name) == (16, 20, 1e-4, True, "007")
    assert c.lora.target_modules == ["q_proj", "k_proj"]
    # YAML reads a bare on / off as a boolean: a setting whose choices are the words takes either
    assert build_config(apply_overrides({}, ["rl.merged_generation=off"])).rl.merged_generation == "off"
    assert build_config({"rl": {"merged_generation": True}}).rl.merged_generation == "on"
    assert build_config(apply_overrides({}, ["rl.probe=off"])).rl.probe == "off"  # choices with an off and no on


@pytest.mark.parametrize("item, error", [
    ("max_steps=true", "--set max_steps=true: expected a whole number, not true / false (got True)"),
    ("learning_rate=no", "--set learning_rate=no: expected a number, not true / false (got False)"),
    ("distributed.zero_stage=yes", "--set distributed.zero_stage=yes: expected a whole number, not true / false"),
    ("data.mix_weights=[true, 1]", "--set data.mix_weights=[true, 1]: expected a number, not true / false"),
])
def test_true_or_false_is_no_number(item, error):
    """pydantic reads true as 1: max_steps=true would train one step."""
    with pytest.raises(ConfigError) as exc:
        load_config(None, [item])
    assert exc.value.errors[0].startswith(error)
    assert load_config(None, ["gradient_checkpointing=true", "packing=yes"]).packing is True  # bools stay bools
    assert build_config({"rl": {"probe": False}}).rl.probe == "off"  # YAML's bare off, a choice


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


def test_config_files_that_are_not_utf8_text_or_name_a_key_twice_are_refused_with_the_line(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"mode: sft\nname: caf\xe9\n")
    twice = tmp_path / "twice.yaml"
    twice.write_text("mode: sft\nlora:\n  r: 4\nmax_steps: 3\nmode: dpo\n")
    nested = tmp_path / "nested.yaml"
    nested.write_text("lora:\n  r: 4\n  r: 8\n")
    for path, error in [(latin1, f"{latin1} line 2: not UTF-8 text (byte 0xe9 at column 10); save the file as UTF-8"),
                        (twice, f"{twice} line 5: `mode` is given a second time (first on line 1); keep one of them"),
                        (nested, f"{nested} line 3: `r` is given a second time (first on line 2)"),
                        (Path("/bin/true"), "/bin/true: a binary file, not a YAML config file"),
                        (tmp_path, f"{tmp_path}: a folder; give the config file as a .yaml file")]:
        with pytest.raises(ConfigError) as exc:
            load_config(path)
        assert exc.value.errors[0].startswith(error)
    merged = tmp_path / "merged.yaml"  # a YAML merge key overriding what it merges is no repetition
    merged.write_text("base: &b {mode: sft}\nother:\n  <<: *b\n  mode: dpo\n")
    assert read_yaml_mapping(merged)["other"] == {"mode": "dpo"}


@pytest.mark.parametrize("given, error", [
    (["ppo.gamma=0.9"], "--set ppo.gamma=0.9: does not apply to sft runs (only to ppo); leave it out, or set mode "
                        "to ppo"),
    (["mode=dpo", "packing=true"], "--set packing=true: does not apply to dpo runs (only to sft)"),
    (["finetuning=full", "lora.r=16"], "--set lora.r=16: does not apply with finetuning: full"),
    (["finetuning=full", "lora_r=16"], "--set lora_r=16: does not apply with finetuning: full"),  # TRL's name
])
def test_settings_the_run_does_not_read_are_refused_when_given(given, error):
    with pytest.raises(ConfigError) as exc:
        load_config(None, given)
    assert exc.value.errors == [next(e for e in exc.value.errors if e.startswith(error))]


def test_a_config_file_with_another_modes_settings_is_refused_but_the_forms_whole_configs_are_not(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("mode: sft\nppo:\n  gamma: 0.9\nlora:\n  r: 4\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert exc.value.errors == [f"{path}: ppo.gamma: does not apply to sft runs (only to ppo); leave it out, or set "
                                "mode to ppo"]
    assert load_config(path, only_applicable=False).ppo.gamma == 0.9  # the UI's preset loading: hidden on the form
    # the form sends every setting, another mode's left as they were: built, and left out of what is saved
    form = build_config({"mode": "sft", "finetuning": "full", "ppo": {"gamma": 0.9}, "lora": {"r": 4},
                         "max_steps": 5})
    assert to_yaml(form, only_changed=True) == "finetuning: full\nmax_steps: 5\n"
    path.write_text(to_yaml(form, only_changed=True))
    assert load_config(path).max_steps == 5


# ---- mode sections (dpo, kto, rl) ----

REGEX_SOURCE = {"type": "regex", "params": {"pattern": "<answer>.*?</answer>"}}


def test_mode_settings_use_trl_names_and_apply_only_to_their_modes():
    c = build_config({})
    assert (c.dpo.beta, c.dpo.loss_type) == (0.1, "sigmoid")
    assert (c.kto.beta, c.kto.desirable_weight, c.kto.undesirable_weight, c.kto.loss_type) == (0.1, 1.0, 1.0, "kto")
    assert (c.rl.num_generations, c.rl.temperature, c.rl.top_p, c.rl.beta, c.rl.loss_type) == (2, 1.0, 1.0, 0.0, "dapo")
    modes = {path: info.json_schema_extra.get("modes") for path, info in field_paths()}
    assert all(modes[p] == ["dpo"] for p in modes if p.startswith("dpo."))
    assert all(modes[p] == ["kto"] for p in modes if p.startswith("kto."))
    assert modes["rl.num_generations"] == ["ppo", "grpo", "rloo"] and modes["rl.loss_type"] == ["grpo"]


def test_rl_generation_batch_must_hold_whole_groups():
    base = {"mode": "grpo", "reward_sources": [REGEX_SOURCE], "rl": {"num_generations": 4}}
    (err,) = errors_of({**base, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 3})
    assert err.startswith("rl.num_generations: GRPO samples 4 completions per prompt")
    assert "2 × 3 × 1 = 6 completions" in err and "multiple of 4" in err
    assert build_config({**base, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2})
    assert build_config({**base, "per_device_train_batch_size": 2, "num_processes": 2})
    (err,) = errors_of({**base, "mode": "rloo", "per_device_train_batch_size": 3, "rl": {"num_generations": 2}})
    assert err.startswith("rl.num_generations: RLOO")
    assert build_config({"per_device_train_batch_size": 3, "rl": {"num_generations": 2}})  # sft ignores rl


def test_rl_modes_need_a_reward_source():
    (err,) = errors_of({"mode": "grpo"})
    assert err.startswith("reward_sources: GRPO learns from rewards; add at least one source")
    assert build_config({"mode": "rloo", "reward_sources": [REGEX_SOURCE]}).mode == "rloo"


def test_kto_loss_needs_two_examples_per_batch():
    (err,) = errors_of({"mode": "kto", "per_device_train_batch_size": 1})
    assert err.startswith("per_device_train_batch_size:") and "at least 2" in err
    assert build_config({"mode": "kto", "per_device_train_batch_size": 1, "kto": {"loss_type": "apo_zero_unpaired"}})


def test_unknown_loss_types_are_refused_with_the_field_named():
    (err,) = errors_of({"mode": "dpo", "dpo": {"loss_type": "exo_pair"}})
    assert err.startswith("dpo.loss_type:") and "'sigmoid'" in err


# ---- ppo ----

def test_ppo_settings_have_the_published_defaults_and_apply_only_to_ppo():
    p = build_config({"mode": "ppo", "reward_sources": [REGEX_SOURCE]}).ppo
    assert (p.gamma, p.lam, p.cliprange, p.cliprange_value, p.vf_coef) == (1.0, 0.95, 0.2, 0.2, 0.1)
    assert (p.num_ppo_epochs, p.num_mini_batches, p.kl_coef, p.adaptive_kl, p.whiten_rewards) == (4, 1, 0.05, False,
                                                                                                  False)
    assert (p.value_model, p.value_init_run, p.missing_eos_penalty) == ("separate", "", 0.0)
    modes = {path: info.json_schema_extra.get("modes") for path, info in field_paths()}
    assert all(modes[p] == ["ppo"] for p in modes if p.startswith("ppo."))
    assert modes["rl.beta"] == ["grpo", "rloo"]  # PPO has its own KL coefficient, ppo.kl_coef


def test_ppo_rollout_batch_must_hold_whole_groups_and_one_completion_per_prompt_is_enough():
    base = {"mode": "ppo", "reward_sources": [REGEX_SOURCE]}
    assert build_config({**base, "per_device_train_batch_size": 3, "rl": {"num_generations": 1}})
    assert build_config({**base, "per_device_train_batch_size": 1, "rl": {"num_generations": 2},
                         "ppo": {"num_mini_batches": 2}})
    (err,) = errors_of({**base, "per_device_train_batch_size": 3, "rl": {"num_generations": 2}})
    assert err.startswith("rl.num_generations: PPO samples 2 completions per prompt")
    assert "3 × 1 × 1 = 3 completions per process" in err
    (err,) = errors_of({"mode": "grpo", "reward_sources": [REGEX_SOURCE], "rl": {"num_generations": 1}})
    assert err.startswith("rl.num_generations: GRPO compares completions") and "at least 2" in err


def test_ppo_cross_field_checks_name_the_setting_to_change():
    base = {"mode": "ppo", "reward_sources": [REGEX_SOURCE]}
    (err,) = errors_of({**base, "ppo": {"value_model": "shared", "value_init_run": "20260101-000000-abcd"}})
    assert err.startswith("ppo.value_init_run:") and "separate" in err
    (err,) = errors_of({**base, "ppo": {"adaptive_kl": True, "kl_coef": 0}})
    assert err.startswith("ppo.kl_coef:") and "adaptive" in err
    (err,) = errors_of({**base, "ppo": {"lam": 1.5}})
    assert err.startswith("ppo.lam:")
    c = build_config({**base, "ppo": {"value_init_run": "  20260101-000000-abcd "}})
    assert c.ppo.value_init_run == "20260101-000000-abcd"


def test_trl_names_map_to_the_schema_in_presets_and_set():
    c = build_config({"mode": "dpo", "beta": 0.3, "max_seq_length": 256, "bf16": True, "lora_r": 4})
    assert (c.dpo.beta, c.max_length, c.precision, c.lora.r) == (0.3, 256, "bf16", 4)
    grpo = {"mode": "grpo", "reward_sources": [{"type": "length", "params": {"target": 5}}]}
    c = build_config(apply_overrides(grpo, ["num_generations=4", "beta=0.02", "per_device_train_batch_size=4"]))
    assert (c.rl.num_generations, c.rl.beta) == (4, 0.02)
    c = build_config({"mode": "simpo", "beta": 2.5, "simpo_gamma": 1.2, "cpo_alpha": 0.1})
    assert (c.simpo.beta, c.simpo.simpo_gamma, c.simpo.cpo_alpha, c.cpo.cpo_alpha) == (2.5, 1.2, 0.1, 1.0)
    c = build_config(apply_overrides({"mode": "cpo"}, ["beta=0.2", "loss_type=ipo", "cpo_alpha=0"]))
    assert (c.cpo.beta, c.cpo.loss_type, c.cpo.cpo_alpha, c.dpo.beta) == (0.2, "ipo", 0.0, 0.1)
    assert build_config({"mode": "cpo", "label_smoothing": 0.1}).cpo.label_smoothing == 0.1
    with pytest.raises(ConfigError, match="cpo.label_smoothing: the hinge loss ignores it"):
        build_config({"mode": "cpo", "cpo": {"loss_type": "hinge", "label_smoothing": 0.1}})
    c = build_config({"mode": "gkd", "teacher_model_name_or_path": "run:sft1", "lmbda": 0.8, "beta": 0.1,
                      "seq_kd": True})
    assert (c.gkd.teacher, c.gkd.lmbda, c.gkd.beta, c.gkd.seq_kd, c.teacher) == ("run:sft1", 0.8, 0.1, True,
                                                                                 "run:sft1")
    online = {"mode": "online_dpo", "reward_sources": [{"type": "length", "params": {"target": 5}}]}
    c = build_config(apply_overrides(online, ["beta=0.3", "loss_type=ipo", "max_completion_length=32",
                                              "temperature=0.7"]))
    assert (c.online_dpo.beta, c.online_dpo.loss_type, c.rl.max_completion_length, c.rl.temperature, c.rl.beta) \
        == (0.3, "ipo", 32, 0.7, 0.0)
    assert build_config({"max_length": 128, "max_seq_length": 128}).max_length == 128  # the same value: fine
    assert "max_seq_length" not in to_yaml(build_config({"max_seq_length": 64}))  # stored under the schema's name


@pytest.mark.parametrize("data, error", [
    ({"max_seq_length": 256, "max_length": 128},
     "max_seq_length: TRL's name for max_length, which is also given as max_length (128 vs 256); give one of them"),
    ({"bf16": True, "fp16": True}, "fp16: TRL's name for precision, which is also given as bf16"),
    ({"bf16": True, "precision": "fp32"}, "bf16: TRL's name for precision, which is also given as precision"),
    ({"beta": 0.1}, "beta: sft runs have no such setting; it stands for dpo.beta (dpo), kto.beta (kto), orpo.beta "
                    "(orpo), cpo.beta (cpo), simpo.beta (simpo), rl.beta"),
    ({"mode": "simpo", "loss_type": "simpo"}, "loss_type: simpo runs have no such setting; it stands for "
                                              "dpo.loss_type (dpo), kto.loss_type (kto), cpo.loss_type (cpo)"),
])
def test_conflicting_or_foreign_trl_names_are_refused_naming_both(data, error):
    with pytest.raises(ConfigError) as e:
        build_config(data)
    assert e.value.errors[0].startswith(error)

@pytest.mark.parametrize("gkd, error", [
    ({}, "gkd.teacher: GKD distils a teacher model into the one trained; name the teacher"),
    ({"teacher": "  "}, "gkd.teacher: GKD distils a teacher model into the one trained; name the teacher"),
    ({"teacher": " smollm2-135m-instruct "}, "gkd.teacher: smollm2-135m-instruct is also the model trained, and a "
                                             "model distilled into itself learns nothing"),
])
def test_gkd_needs_a_teacher_other_than_the_student(gkd, error):
    with pytest.raises(ConfigError) as e:
        build_config({"mode": "gkd", "gkd": gkd})
    assert e.value.errors[0].startswith(error)
    assert build_config({"mode": "sft"}).teacher == ""  # a mode that distils nothing has no teacher


def test_dataset_columns_are_name_column_pairs_from_yaml_set_and_the_form(tmp_path):
    mapping = {"prompt": "question", "completion": "answer"}
    assert load_config(None, ["data.columns=prompt=question, completion=answer"]).data.columns == mapping
    assert load_config(None, ["data.columns={prompt: question, completion: answer}"]).data.columns == mapping
    c = build_config({"data": {"columns": mapping}})
    path = tmp_path / "run.yaml"
    path.write_text(to_yaml(c, only_changed=True))
    assert path.read_text() == "data:\n  columns:\n    prompt: question\n    completion: answer\n"
    assert load_config(path) == c
    assert build_config({"data": {"columns": "prompt=prompt"}}).data.columns == {}  # a column as its own name


@pytest.mark.parametrize("given, error", [
    ("prompt", "data.columns: 'prompt' is not a name=column pair; write e.g. prompt=question"),
    ("prompt=q, completion=q", "data.columns: column `q` is given as both prompt and completion; give it once"),
    ("prompt=", "data.columns: 'prompt=': give both the name and the dataset column"),
])
def test_bad_dataset_columns_are_explained(given, error):
    assert errors_of({"data": {"columns": given}})[0].startswith(error)
