"""The reward sources in the UI: the editor's rows round-trip to the run config, its help comes from the
schema, and the playground's summary says which sources would teach nothing."""
import html

import gradio as gr
import pytest

from app import forms, reward_editor
from app.formatting import error_markdown, sample_step_choices, sample_table_rows
from app.reward_editor import MAX_SOURCES, RewardSourcesEditor
from app.choices import REPO_PRESETS
from app.playground_tab import summary_markdown
from backend import playground
from backend.config import ConfigError, build_config, load_config
from backend.playground import PromptRow, SourceStats, source_stats
from backend.rewards.spec import EXAMPLES, PARAM_MODELS, SOURCE_KINDS

SOURCES = [{"type": "numeric_match", "name": "correct", "weight": 1.0, "params": {"column": "answer"}},
           {"type": "length", "name": "", "weight": -0.5, "params": {"target": 12, "unit": "words"}}]


def grpo_values(sources):
    config = build_config({"mode": "grpo", "dataset": "demo-math", "reward_sources": sources})
    return config, forms.values_from_config(config)


# ---- the editor's rows <-> the run config ----

def test_the_form_edits_reward_sources_in_an_editor_not_a_textbox(form):
    editor = form.components["reward_sources"]
    assert isinstance(editor, RewardSourcesEditor)
    assert editor.container.elem_id == "reward-sources" and editor.add.elem_id == "reward-add"
    assert [k.elem_id for k in editor.kinds[:2]] == ["reward-type-0", "reward-type-1"]
    assert editor.params[0].elem_id == "reward-params-0" and editor.weights[0].elem_id == "reward-weight-0"
    assert all(editor.kinds[0].choices[i][1] == kind for i, kind in enumerate(SOURCE_KINDS))
    assert len(form.inputs) == len(forms.PATHS) - 1 + reward_editor.FIELDS_PER_ROW * MAX_SOURCES


def test_rows_round_trip_through_the_run_config(form):
    config, _ = grpo_values(SOURCES)
    values = reward_editor.values_for(config.reward_sources)
    assert values[:14] == ["numeric_match", "correct", 1.0, "{column: answer}", "reward", None, "",
                           "length", "", -0.5, "{target: 12, unit: words}", "reward", None, ""]
    assert values[14:] == reward_editor.empty_row() * (MAX_SOURCES - 2)
    # the whole form: flat values of every component -> the same config
    flat = [v for c, value in zip(form.components.values(), forms.values_from_config(config))
            for v in (reward_editor.values_for(value) if isinstance(c, RewardSourcesEditor) else [value])]
    assert form.config_from(flat) == config
    assert form.config_from(dict(zip(form.inputs, flat))) == config  # an event's values, by component


def test_a_cost_rows_role_and_budget_round_trip_and_a_stray_budget_is_refused_by_name(form):
    cost = {"type": "blocklist", "name": "unsafe", "role": "cost", "budget": 0.05, "params": {"keywords": ["x"]}}
    config, _ = grpo_values([cost])
    values = reward_editor.values_for(config.reward_sources)
    assert values[4:6] == ["cost", 0.05]
    flat = [v for c, value in zip(form.components.values(), forms.values_from_config(config))
            for v in (reward_editor.values_for(value) if isinstance(c, RewardSourcesEditor) else [value])]
    assert form.config_from(flat) == config
    (source,) = reward_editor.sources_from_values(values[:4] + ["reward", 0.05] + values[6:])
    with pytest.raises(ValueError, match="budget: only a cost source has a budget"):
        build_config({"mode": "grpo", "reward_sources": [{**source, "params": {"keywords": ["x"]}}]})
    # the 0 an empty number box mounted in a hidden tab sends back is no budget on a reward row
    (source,) = reward_editor.sources_from_values(values[:4] + ["reward", 0] + values[6:])
    assert "budget" not in source


def test_a_gated_rows_when_round_trips_and_a_gate_on_no_earlier_source_is_refused_by_name(form):
    brief = {"type": "length", "name": "brief", "when": "correct", "params": {"target": 1}}
    config, _ = grpo_values([SOURCES[0], brief])
    values = reward_editor.values_for(config.reward_sources)
    assert values[13] == "correct"
    flat = [v for c, value in zip(form.components.values(), forms.values_from_config(config))
            for v in (reward_editor.values_for(value) if isinstance(c, RewardSourcesEditor) else [value])]
    assert form.config_from(flat) == config
    configs, errors = reward_editor.configs_from_values(reward_editor.values_for([brief, SOURCES[0]]))
    assert not configs and any("reward_sources.0 (brief).when: 'correct' is not an earlier reward source" in e
                               for e in errors), errors


def test_params_left_at_their_defaults_are_not_shown_but_the_example_keys_are():
    assert reward_editor.params_text("numeric_match", {"column": "answer", "tolerance": 1e-6}) == "{column: answer}"
    assert reward_editor.params_text("numeric_match", {"column": "answer", "tolerance": 0.5}) == \
        "{column: answer, tolerance: 0.5}"
    assert reward_editor.params_text("repetition", {"n": 3}) == "{n: 3}"


def test_loading_the_grpo_preset_fills_the_editor(form):
    config = load_config(REPO_PRESETS / "grpo_demo.yaml")
    updates = form.updates_from(config)
    assert set(updates) == set(form.outputs)
    by_id = {c.elem_id: u for c, u in updates.items() if c.elem_id}
    assert by_id["reward-type-0"] == "numeric_match" and by_id["reward-name-0"] == "correct"
    assert by_id["reward-type-1"] == "regex" and "answer" in by_id["reward-params-1"]
    assert by_id["reward-row-1"]["visible"] is True and by_id["reward-row-2"]["visible"] is False
    assert "parameters valid" in by_id["reward-help-0"]


def test_params_are_yaml_in_either_flow_or_block_style():
    assert reward_editor.parse_params("{column: answer, tolerance: 0.1}") == {"column": "answer", "tolerance": 0.1}
    assert reward_editor.parse_params("column: answer") == {"column": "answer"}
    assert reward_editor.parse_params("  ") == {}
    with pytest.raises(ValueError, match="not valid YAML"):
        reward_editor.parse_params("{column: answer")
    with pytest.raises(ValueError, match="name: value pairs"):
        reward_editor.parse_params("answer")


def test_errors_name_the_row_and_give_the_schemas_message():
    sources = [dict(SOURCES[0]), {"type": "length", "name": "len", "weight": 1.0, "params": "{}"},
               {"type": "regex", "name": "", "weight": 1.0, "params": "{pattern: '('"}]
    _, values = grpo_values(SOURCES)
    values[forms.PATHS.index("reward_sources")] = sources
    with pytest.raises(ConfigError) as exc:
        forms.config_from_values(values)
    errors = exc.value.errors
    assert sorted(errors) == [
        "reward_sources.1: length source: params.target: missing — the length that scores 1, in the chosen unit",
        "reward_sources.2.params: regex source: not valid YAML (expected ',' or '}', but got '<stream end>' at "
        "column 14); write them like {column: answer, tolerance: 0.01}"]
    text = error_markdown(errors)
    assert "**Reward sources, row 2** (`reward_sources.1`)" in text
    assert "**Reward sources, row 3, params**" in text


def test_an_empty_weight_is_reported_once_with_its_row():
    _, values = grpo_values(SOURCES)
    values[forms.PATHS.index("reward_sources")] = [{**SOURCES[0], "weight": None}]
    with pytest.raises(ConfigError) as exc:
        forms.config_from_values(values)
    assert exc.value.errors == ["reward_sources.0.weight: empty; enter a number (default 1)"]


def test_an_rl_mode_without_sources_says_to_add_one():
    _, values = grpo_values(SOURCES)
    values[forms.PATHS.index("reward_sources")] = []
    with pytest.raises(ConfigError, match="reward_sources: GRPO learns from rewards"):
        forms.config_from_values(values)


def test_the_help_comes_from_the_schema_for_every_kind():
    for kind, model in PARAM_MODELS.items():
        text = reward_editor.kind_help(kind)
        for name, info in model.model_fields.items():
            assert f"<code>{name}</code>" in text and html.escape(info.title) in text, (kind, name)
    assert "params.target: missing" in reward_editor.row_help("length", "")
    assert "parameters valid" in reward_editor.row_help("length", "{target: 5}")


def test_picking_another_kind_offers_its_example_unless_the_params_already_fit():
    assert reward_editor.params_on_kind_change("regex", "{column: answer}") == \
        reward_editor.params_text("regex", EXAMPLES["regex"])
    assert reward_editor.params_on_kind_change("exact_match", "{column: answer}") is None


def test_an_editor_copies_another_editors_rows():
    with gr.Blocks():
        a = reward_editor.build(prefix="a", sources=SOURCES)
        b = reward_editor.build(prefix="b")
    updates = b.copy_from(reward_editor.values_for(SOURCES))
    configs, errors = reward_editor.configs_from_values(b.read(updates))
    assert errors == [] and [c.name for c in configs] == ["correct", ""]
    assert set(updates) == set(b.outputs) and a.kinds[0].value == "numeric_match"


# ---- the playground's summary and warnings ----

def stats(name, scores, weight=1.0) -> SourceStats:
    return source_stats(name, scores, weight)


def test_a_source_at_zero_for_every_completion_is_stuck():
    s = [stats("numeric_match", [0.0, 0.0, 0.0, 0.0]), stats("format", [1.0, 0.0, 1.0, 0.0])]
    assert playground.warnings(s) == ["numeric_match is 0 for every completion: rewards stuck at zero"]


def test_a_constant_nonzero_source_cannot_tell_completions_apart():
    w = playground.warnings([stats("format", [1.0, 1.0, 1.0])])
    assert w == ["format is 1 for every completion: it cannot tell completions apart, so it adds no learning "
                 "signal"]


def test_a_source_constant_within_each_prompt_gives_group_methods_nothing():
    w = playground.warnings([stats("easy", [1.0, 1.0, 0.0, 0.0])], groups=[0, 0, 1, 1])
    assert len(w) == 1 and w[0].startswith("easy gives every completion of a prompt the same score")
    assert playground.warnings([stats("easy", [1.0, 0.0, 0.0, 0.0])], groups=[0, 0, 1, 1]) == []


def test_a_source_whose_weighted_spread_dwarfs_the_others_dominates():
    s = [stats("length", [0.0, 10.0, 5.0, 0.0], weight=1.0), stats("correct", [0.0, 1.0, 0.0, 1.0], weight=1.0)]
    w = playground.warnings(s)
    assert len(w) == 1 and w[0].startswith("length dominates the total: 89%")
    s[0].weight = 0.1  # weighted, the two are comparable
    assert playground.warnings(s) == []


def test_sources_that_cancel_out_leave_the_total_constant():
    s = [stats("a", [0.0, 1.0]), stats("b", [1.0, 0.0])]
    w = playground.warnings(s, total=stats("total", [1.0, 1.0]))
    assert len(w) == 1 and w[0].startswith("the total is 1 for every completion although sources vary")


def test_a_source_that_scores_nothing_is_called_out():
    assert playground.warnings([stats("judge", [None, None])])[0].startswith("judge scored none of the completions")


def test_the_summary_line_gives_mean_and_spread_per_source():
    s = [stats("correct", [0.0, 1.0, 1.0, 0.0]), stats("format", [1.0, None, 1.0, 1.0])]
    assert playground.summary_line(s, stats("total", [1.0, 1.0, 2.0, 1.0])) == \
        "correct mean 0.5 ± 0.5 · format mean 1 ± 0 (3/4 scored) · total mean 1.25 ± 0.433"


def test_pasted_completions_are_lines_or_blocks_and_pair_with_prompts_in_order():
    assert playground.split_completions("a\n\nb\n") == ["a", "b"]
    assert playground.split_completions("line 1\nline 2\n---\nother\n---\n") == ["line 1\nline 2", "other"]
    assert playground.split_completions(playground.join_completions(["x\n---\ny", "z"])) == ["x\n- - -\ny", "z"]
    assert playground.assign_completions(4, 2) == [0, 0, 1, 1]
    assert playground.assign_completions(2, 2) == [0, 1]
    with pytest.raises(playground.PlaygroundError, match="3 completions for 2 prompts"):
        playground.assign_completions(3, 2)


def test_score_passes_dataset_columns_and_sums_weighted_scores(tmp_path):
    prompts = [PromptRow(1, [{"role": "user", "content": "2 + 2?"}], {"answer": "4"}),
               PromptRow(2, [{"role": "user", "content": "3 + 3?"}], {"answer": "6"})]
    result = playground.score(SOURCES, prompts, ["<answer>4</answer>", "5", "6", "<answer>7</answer>"], tmp_path)
    assert [r.scores["correct"] for r in result.rows] == [1.0, 0.0, 1.0, 0.0]
    assert [r.prompt for r in result.rows] == ["2 + 2?", "2 + 2?", "3 + 3?", "3 + 3?"]
    lengths = [r.scores["length"] for r in result.rows]
    assert [r.total for r in result.rows] == [c - 0.5 * n for c, n in zip([1.0, 0.0, 1.0, 0.0], lengths)]
    assert result.stats[0].mean == 0.5 and result.total.name == "total"


def test_a_cost_shows_its_cost_against_its_budget_outside_the_total_and_is_not_warned_about(tmp_path):
    cost = {"type": "blocklist", "name": "unsafe", "role": "cost", "budget": 0.25,
            "params": {"keywords": ["dumb"], "count": "any"}}
    prompts = [PromptRow(1, "Say hi")]
    result = playground.score([cost, {"type": "length", "params": {"target": 2}}], prompts,
                              ["hi there", "dumb hi", "hi friend", "hello you"], tmp_path)
    unsafe = result.stats[0]
    assert unsafe.scores == [0.0, 1.0, 0.0, 0.0] and unsafe.budget == 0.25 and unsafe.weight == 0.0
    assert [r.total for r in result.rows] == [1.0, 1.0, 1.0, 1.0]
    assert playground.summary_line([unsafe]) == "unsafe cost (budget 0.25) mean 0.25 ± 0.433"
    assert playground.score([cost], prompts, ["hi", "hello"], tmp_path).warnings == []  # a cost at 0 is the aim
    at_two = playground.score([cost], prompts, ["hi there", "dumb hi"], tmp_path, lam=2.0)
    assert [r.total for r in at_two.rows] == [0.0, -2.0] and at_two.penalty == 1.0
    assert "At λ = 2 the costs take 1 off the mean total" in summary_markdown(at_two)


def test_prompts_are_a_row_range_of_a_dataset_with_a_prompt_column(tmp_path):
    rows = playground.select_prompts("demo-math", tmp_path, first=3, count=2)
    assert [r.index for r in rows] == [3, 4] and "answer" in rows[0].columns
    with pytest.raises(playground.PlaygroundError, match="no `prompt` column"):
        playground.select_prompts("demo-sft-instructions", tmp_path)


# ---- live samples in the Runs tab ----

SAMPLES = [{"id": i, "step": step, "prompt": f"p{i}", "completion": f"c{i}", "rewards": {"correct": 1.0, "fmt": None},
            "total": 1.0} for i, step in enumerate([1, 1, 2, 2], 1)]


def test_the_samples_table_lists_newest_first_with_a_column_per_source():
    rows = sample_table_rows(SAMPLES, ["correct", "fmt"])
    assert rows[0] == [2, "p4", "c4", "1", "–", "1"] and [r[0] for r in rows] == [2, 2, 1, 1]
    assert [r[1] for r in sample_table_rows(SAMPLES, ["correct"], step="1")] == ["p2", "p1"]
    assert sample_step_choices(SAMPLES) == [("all steps (newest first)", "all"), ("step 2", "2"), ("step 1", "1")]


def test_preflight_errors_name_the_row_and_its_source():
    text = error_markdown(["reward_sources.0 (correct): the dataset has no column 'ans'"])
    assert "**Reward sources, row 1 (correct)** (`reward_sources.0`)" in text


def test_tags_in_messages_show_as_text_not_as_html():
    text = error_markdown(["reward_sources: add one (e.g. {pattern: '<answer>.*?</answer>'}) or `<keep>`"])
    assert "&lt;answer&gt;" in text and "`<keep>`" in text


def test_generation_yields_progress_and_keeps_the_model_until_another_is_asked_for(tiny_model, monkeypatch):
    import backend.models.load
    from backend.models import ModelCache

    loads = []
    real = backend.models.load.load_causal_lm
    monkeypatch.setattr(backend.models.load, "load_causal_lm",
                        lambda path, **kw: loads.append(path) or real(path, **kw))
    cache = playground.PlaygroundModel(ModelCache())
    prompts = [[{"role": "user", "content": "2 + 2?"}], "Plain text prompt"]
    steps = list(playground.generate_completions(prompts, str(tiny_model), num_completions=2, max_new_tokens=4,
                                                 temperature=1.0, seed=0, cache=cache))
    assert [s.done for s in steps] == [0, 2, 4] and steps[-1].total == 4
    assert len(steps[-1].completions) == 4 and all(isinstance(c, str) for c in steps[-1].completions)
    list(playground.generate_completions(prompts[:1], str(tiny_model), 1, 2, temperature=0, cache=cache))
    assert len(loads) == 1  # the second call reused the loaded model
    assert cache.release(keep=str(tiny_model)) is False and cache.spec == str(tiny_model)
    assert cache.release(keep="another-model") is True and cache.spec is None
