"""The mode registry is the one definition of what a mode is: every entry is complete, the tables that used to
be written out per module derive from it, and no module outside it tests mode names."""
import ast
import dataclasses
from pathlib import Path

import pytest

from backend.config import ConfigError, RunConfig, build_config, choices, field_info
from backend.modes import mode_module
from backend.core.mode_registry import ALL_MODES, EVAL_MODES, MODES, RL_MODES, ModeSpec, mode_spec, modes_where

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(MODES))
def test_every_mode_has_every_field(name):
    spec = MODES[name]
    assert spec.name == name
    for f in dataclasses.fields(ModeSpec):
        value = getattr(spec, f.name)
        assert value is not None, (name, f.name)
        # a mode may read no section, and its rows may name no answer (RL prompts, an RM's pairs)
        if f.name not in ("sections", "answer_column") and not isinstance(value, bool):
            assert value, (name, f.name)  # titles, modules, formats and metrics are never empty
    for fmt, columns in spec.formats:
        assert fmt and columns and all(isinstance(c, str) for c in columns)
    for section in spec.sections:
        assert section in RunConfig.model_fields, (name, section)
    assert callable(mode_module(name).build_trainer)


def test_schema_and_derived_tables_follow_the_registry():
    assert choices(field_info("mode")) == list(ALL_MODES)
    assert set(RL_MODES) == set(modes_where(online_rl=True)) and set(RL_MODES) <= set(MODES)
    assert not set(RL_MODES) & set(EVAL_MODES)
    for m in MODES.values():  # a section's settings apply to exactly the modes reading it, unless narrowed
        for section in m.sections:
            for path in RunConfig.model_fields[section].annotation.model_fields:
                modes = field_info(f"{section}.{path}").json_schema_extra["modes"]
                assert set(modes) <= {n for n, s in MODES.items() if section in s.sections}
    assert field_info("ppo.kl_coef").json_schema_extra["modes"] == ["ppo"]
    assert field_info("rl.beta").json_schema_extra["modes"] == modes_where(groups_completions=True)


@pytest.mark.parametrize("name", ["orpo", "cpo", "simpo"])
def test_reference_free_preference_modes_read_pairs_keep_no_reference_and_take_labeled_pairs(name):
    spec = MODES[name]
    assert spec.pairwise and not spec.reference_model and spec.label_format == "dpo" and spec.evaluable
    assert spec.sections == (name,) and field_info(f"{name}.beta").json_schema_extra["modes"] == [name]
    assert "nll_loss" in spec.metrics and spec.answer_column == "chosen"


def test_gkd_distils_from_a_teacher_on_sft_data():
    spec = MODES["gkd"]
    assert spec.teacher_model and spec.label_format == "sft" and spec.evaluable and not spec.online_rl
    assert [f for f, _ in spec.formats] == ["messages", "prompt_completion"] and not spec.keeps_extra_columns
    assert field_info("gkd.teacher").json_schema_extra["trainer"] is False
    assert [m for m in MODES if MODES[m].teacher_model] == ["gkd"]


def test_online_dpo_is_online_rl_judging_pairs_with_the_reward_sources():
    spec = MODES["online_dpo"]
    assert spec.online_rl and spec.judges_pairs and not spec.groups_completions and spec.reference_model
    assert spec.formats == MODES["grpo"].formats and "objective/scores" in spec.metrics
    assert "online_dpo" in field_info("reward_sources").json_schema_extra["modes"]
    for path in ("rl.num_generations", "rl.merged_generation", "rl.beta", "rl.loss_type"):
        assert "online_dpo" not in field_info(path).json_schema_extra["modes"], path
    for path in ("rl.max_completion_length", "rl.temperature", "rl.top_p", "rl.probe", "online_dpo.beta"):
        assert "online_dpo" in field_info(path).json_schema_extra["modes"], path
    with pytest.raises(ConfigError, match="reward_sources: ONLINE_DPO learns from rewards"):
        build_config({"mode": "online_dpo"})
    cost = {"type": "length", "role": "cost", "budget": 1.0, "params": {"target": 5}}
    with pytest.raises(ConfigError, match="ONLINE_DPO runs keep no cost constraint"):
        build_config({"mode": "online_dpo", "reward_sources": [{"type": "length", "params": {"target": 5}}, cost]})


def test_unknown_mode_is_named():
    with pytest.raises(KeyError, match="unknown training mode 'magic'; known: sft"):
        mode_spec("magic")


def test_section_checks_run_for_the_modes_reading_them():
    from backend.config import ConfigError

    regex = {"type": "regex", "params": {"pattern": "x"}}
    with pytest.raises(ConfigError, match="reward_sources: PPO learns from rewards"):
        build_config({"mode": "ppo"})
    with pytest.raises(ConfigError, match="rl.num_generations: RLOO compares completions"):
        build_config({"mode": "rloo", "reward_sources": [regex], "rl": {"num_generations": 1}})
    assert build_config({"mode": "ppo", "reward_sources": [regex], "rl": {"num_generations": 1},
                         "per_device_train_batch_size": 1}).rl.num_generations == 1
    with pytest.raises(ConfigError, match="per_device_train_batch_size: the kto loss"):
        build_config({"mode": "kto", "per_device_train_batch_size": 1})
    # another mode's section is not checked: a KTO batch of 1 is fine for SFT
    assert build_config({"mode": "sft", "per_device_train_batch_size": 1}).mode == "sft"


def _literal_mode_checks(path: Path) -> list[str]:
    """`x.mode == "rm"`, `mode in ("grpo", "rloo")` and the like: a mode name compared with a mode."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [s for s in sides if isinstance(s, (ast.Name, ast.Attribute))
                 and (s.id if isinstance(s, ast.Name) else s.attr).endswith("mode")]
        consts = [c.value for s in sides for c in ([s] if isinstance(s, ast.Constant) else
                                                   s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [])
                  if isinstance(c, ast.Constant)]
        if names and any(c in MODES for c in consts):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_module_tests_mode_names():
    files = [p for d in ("backend", "app", "cli") if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py")]
    files += [ROOT / "launch.py"]
    found = [hit for p in files if p != ROOT / "backend/core/mode_registry.py" for hit in _literal_mode_checks(p)]
    assert not found, "ask the mode registry (backend/core/mode_registry.py) instead: " + ", ".join(found)
