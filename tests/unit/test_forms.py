"""The settings form is generated from the schema: one component per setting, values round-trip to a config."""
import gradio as gr
import pytest

from app import forms, reward_editor
from app.reward_editor import RewardSourcesEditor
from backend.config import ConfigError, RunConfig, build_config, choices, field_paths


def block_of(form, path):
    """What shows a setting on the page: its component, or an editor's container."""
    c = form.components[path]
    return c.container if isinstance(c, RewardSourcesEditor) else c


def inside_accordion(component) -> bool:
    parent = component.parent
    while parent is not None:
        if isinstance(parent, gr.Accordion):
            return True
        parent = parent.parent
    return False


def test_every_setting_of_the_schema_has_exactly_one_component(form):
    assert list(form.components) == [path for path, _ in field_paths()]


def test_a_form_missing_a_setting_is_refused():
    with gr.Blocks():
        components = {"model": forms.build_component("model")}
    with pytest.raises(ValueError, match="no component for"):
        forms.SettingsForm(components)


def test_components_follow_the_field_types_labels_and_help(form):
    for path, info in field_paths():
        comp = form.components[path]
        if forms.is_source_list(path):  # a list of reward sources: an editor with a row per source
            assert isinstance(comp, RewardSourcesEditor) and comp.container.elem_id == "reward-sources"
            continue
        assert comp.label == info.title and comp.info == info.description, path
        assert comp.elem_id == path.replace(".", "-")
        if choices(info):
            assert isinstance(comp, gr.Dropdown)
            assert [value for _, value in comp.choices] == choices(info)
        elif info.annotation is bool:
            assert isinstance(comp, gr.Checkbox)
        elif info.annotation in (int, float):
            assert isinstance(comp, gr.Number)
        elif suggested := (info.json_schema_extra or {}).get("suggestions"):  # named examples, anything typed
            assert isinstance(comp, gr.Dropdown) and comp.allow_custom_value, path
            assert [value for _, value in comp.choices] == list(suggested)
        else:
            assert isinstance(comp, gr.Textbox), path


def test_numbers_carry_the_schema_range(form):
    r = form.components["lora.r"]
    assert (r.minimum, r.maximum, r.precision) == (1, 1024, 0)
    lr = form.components["learning_rate"]
    assert (lr.minimum, lr.maximum, lr.precision) == (0, 1, None)
    assert lr.step < 2e-4  # the spinner moves a learning rate by a sensible amount


def test_advanced_settings_are_folded_away_and_basic_ones_are_not(form):
    for path, info in field_paths():
        expected = info.json_schema_extra["group"] != "basic"
        assert inside_accordion(block_of(form, path)) == expected, path
    accordions = {form.components[p].parent for p in ("seed", "precision")}
    assert all(a.open is False for a in accordions if isinstance(a, gr.Accordion))


def test_components_start_at_the_schema_defaults(form):
    defaults = forms.values_from_config(build_config({}))
    flat = [v for path, value in zip(forms.PATHS, defaults)
            for v in (reward_editor.values_for(value) if forms.is_source_list(path) else [value])]
    assert [c.value for c in form.inputs] == flat


def test_values_round_trip_through_a_config():
    config = build_config({"name": "trial", "max_steps": 40, "learning_rate": 1e-4, "gradient_checkpointing": True,
                           "lora": {"r": 16, "target_modules": ["q_proj", "k_proj", "v_proj"]},
                           "lr_scheduler_type": "cosine"})
    values = forms.values_from_config(config)
    assert values[forms.PATHS.index("lora.target_modules")] == "q_proj, k_proj, v_proj"
    assert forms.config_from_values(values) == config
    config = build_config({"data": {"columns": {"prompt": "question", "completion": "answer"}}})
    values = forms.values_from_config(config)
    assert values[forms.PATHS.index("data.columns")] == "prompt=question, completion=answer"
    assert forms.config_from_values(values) == config


def test_numbers_from_the_browser_become_the_schema_types():
    values = forms.values_from_config(RunConfig())
    values[forms.PATHS.index("max_steps")] = 40.0  # the browser sends floats
    config = forms.config_from_values(values)
    assert config.max_steps == 40 and isinstance(config.max_steps, int)


def test_bad_values_are_reported_per_field_and_all_at_once():
    values = forms.values_from_config(RunConfig())
    values[forms.PATHS.index("lora.r")] = 0
    values[forms.PATHS.index("max_steps")] = None
    values[forms.PATHS.index("lora.target_modules")] = " , "
    with pytest.raises(ConfigError) as exc:
        forms.config_from_values(values)
    errors = exc.value.errors
    assert any(e.startswith("lora.r:") for e in errors)
    assert any(e.startswith("max_steps: empty") for e in errors)
    assert any(e.startswith("lora.target_modules:") for e in errors)


def test_out_of_range_numbers_reach_the_schema_instead_of_a_nameless_gradio_error(form):
    # gr.Number would raise "Value 0 is less than minimum value 1" without naming the field
    assert form.components["lora.r"].preprocess(0) == 0


def test_mode_specific_settings_show_only_for_their_modes(form):
    mode_paths = [p for p, info in field_paths() if info.json_schema_extra.get("modes")]
    assert mode_paths, "the schema has settings for one mode only"
    outputs = form.mode_outputs()
    assert all(block_of(form, p) in outputs for p in mode_paths)
    assert form.components["lora.r"] not in outputs
    for mode in choices(forms.FIELDS["mode"]):
        updates = form.mode_updates(mode)
        assert set(updates) == set(outputs)
        for path in mode_paths:
            # a setting of ONLY_WITH (reward sources in SFT / DPO / KTO) waits for its switch, off by default
            waits = path in forms.ONLY_WITH and mode in forms.ONLY_WITH[path][0]
            expected = mode in forms.modes_of(path) and not waits
            assert updates[block_of(form, path)]["visible"] == expected, (mode, path)


def test_a_section_of_settings_for_other_modes_is_hidden_whole(form):
    by_section = {tuple(s.paths): s for s in form.sections}
    for paths, section in by_section.items():
        expected = any(forms.shown_for(p, "sft") for p in paths)
        assert section.container.visible == expected, paths
    assert all(p in {q for s in form.sections for q in s.paths} for p in forms.PATHS)


def test_tools_are_one_line_of_yaml_in_the_train_form():
    config = build_config({"mode": "grpo", "tools": [{"type": "calculator"}, {"type": "python", "timeout_s": 5}],
                           "reward_sources": [{"type": "tool_used"}]})
    values = forms.values_from_config(config)
    text = values[forms.PATHS.index("tools")]
    assert text == "[{type: calculator}, {type: python, timeout_s: 5.0}]"
    assert forms.config_from_values(values).tools == config.tools
    values[forms.PATHS.index("tools")] = "[{type: calculator"
    with pytest.raises(ConfigError, match="tools: not YAML"):
        forms.config_from_values(values)
    values[forms.PATHS.index("tools")] = ""
    assert forms.config_from_values(values).tools == []
