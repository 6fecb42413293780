"""What the UI says about runs, errors and commands, checked without a browser."""
import shlex

import pytest
import yaml

from app.formatting import (changed_settings, cli_command, error_markdown, eta_seconds, fmt_duration, progress_html,
                            run_table_rows, status_line)
from app.choices import preset_choices
from app.train_render import format_text
from app.train_tab import save_preset
from backend.config import ConfigError, RunConfig, apply_overrides, build_config, load_config
from backend.data import FormatInfo
from backend.runs.store import Run

NOW = 1_000_000.0


def make_run(**kw):
    base = dict(id="20260101-000000-abcd", name="sft-demo", mode="sft", status="running", config=RunConfig(),
                created_at=NOW - 100, started_at=NOW - 90, train_started_at=NOW - 60, step=10, total_steps=40)
    return Run(**{**base, **kw})


def test_durations_read_naturally():
    assert [fmt_duration(s) for s in (None, 5, 65, 3725)] == ["-", "5 s", "1:05", "1:02:05"]


def test_eta_comes_from_the_pace_since_training_began():
    # 10 steps in 60 s -> 6 s/step, 30 steps left
    assert eta_seconds(make_run(), NOW) == 180
    assert eta_seconds(make_run(step=0), NOW) is None  # no pace yet
    assert eta_seconds(make_run(train_started_at=None), NOW) is None  # still loading the model
    assert eta_seconds(make_run(status="completed"), NOW) is None


def test_the_pace_holds_still_while_a_step_runs():
    # the 10th step ended 20 s ago (10 steps in 40 s: 4 s/step); the 11th has run 20 s of its time
    run = make_run(step_at=NOW - 20)
    assert status_line(run, NOW) == "running · step 10/40 · 4.00 s/step · ETA 1:40"  # 30 × 4 s − 20 s
    assert status_line(run, NOW + 10) == "running · step 10/40 · 4.00 s/step · ETA 1:30"
    assert eta_seconds(run, NOW + 500) == 0  # a step far slower than the pace: no negative time left


def test_status_line_starts_with_the_status_word():
    assert status_line(make_run(), NOW) == "running · step 10/40 · 6.00 s/step · ETA 3:00"
    assert status_line(make_run(step=0, train_started_at=None), NOW).startswith("running · loading the model")
    done = make_run(status="completed", step=40, finished_at=NOW)
    assert status_line(done, NOW).startswith("completed · step 40/40") and "took 1:30" in status_line(done, NOW)
    assert status_line(make_run(stop_requested=True), NOW).startswith("running · stop requested")


def test_progress_html_shows_the_bar_and_escapes_names():
    html = progress_html(make_run(name="<b>x</b>"), NOW)
    assert "width:25.0%" in html and "&lt;b&gt;x&lt;/b&gt;" in html and 'data-status="running"' in html
    assert "No run selected" in progress_html(None)


def test_run_table_rows_have_the_columns_of_the_runs_table():
    rows = run_table_rows([make_run(), make_run(id="b", status="queued", step=0, total_steps=None, started_at=None)],
                          NOW)
    assert rows[0][:4] == ["sft-demo", "sft", "running", "10/40 (25%)"] and rows[0][-1] == "20260101-000000-abcd"
    assert rows[1][2:4] == ["queued", "-"] and rows[1][5] == "-"


def test_errors_name_the_field_by_label_and_path():
    md = error_markdown(["lora.r: Input should be greater than or equal to 1 (got 0)",
                         "dataset: x.jsonl row 3: column `completion` is empty", "something else"])
    assert "- **LoRA rank** (`lora.r`): Input should be greater" in md
    assert "- **Dataset** (`dataset`): x.jsonl row 3" in md
    assert "- something else" in md


def test_cli_command_lists_only_changed_settings_and_its_flags_rebuild_the_same_config():
    config = build_config({"name": "my run", "max_steps": 40, "learning_rate": 1e-05,
                           "lora": {"r": 16, "target_modules": ["q_proj", "k_proj"]}, "packing": True})
    text = cli_command(config, "/tmp/ws")
    yaml_part = text.split("<<'EOF'\n")[1].split("\nEOF")[0]
    assert yaml.safe_load(yaml_part) == {"name": "my run", "lora": {"r": 16, "target_modules": ["q_proj", "k_proj"]},
                                         "learning_rate": 1e-05, "max_steps": 40, "packing": True}
    assert "python launch.py train run.yaml --workspace /tmp/ws" in text
    flags_line = [line for line in text.splitlines() if line.startswith("python") and "--set" in line][0]
    args = shlex.split(flags_line)
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert build_config(apply_overrides({}, overrides)) == config
    assert [p for p, _ in changed_settings(config)] == ["name", "lora.r", "lora.target_modules", "learning_rate",
                                                         "max_steps", "packing"]


def test_settings_of_other_modes_left_on_the_form_stay_out_of_the_command_and_saved_presets(tmp_path):
    """The form sends every setting, those hidden for the mode too; `launch.py train` refuses them when given."""
    config = build_config({"mode": "sft", "finetuning": "full", "max_steps": 9, "ppo": {"gamma": 0.9},
                           "lora": {"r": 16}, "rl": {"temperature": 0.5}})
    assert changed_settings(config) == [("finetuning", "full"), ("max_steps", 9)]
    text = cli_command(config)
    flags = shlex.split([line for line in text.splitlines() if line.startswith("python") and "--set" in line][0])
    assert load_config(None, [flags[i + 1] for i, a in enumerate(flags) if a == "--set"]).max_steps == 9
    assert load_config(save_preset(tmp_path, "hidden", config)).max_steps == 9


def test_cli_command_for_all_defaults_is_the_bare_command():
    assert "python launch.py train\n" in cli_command(RunConfig())


def test_dataset_format_text_says_ready_or_why_not():
    info = FormatInfo("messages", ["messages"], conversational=True, num_rows=201)
    assert format_text(info, None, "sft").startswith("**Ready:** messages format")
    assert "Converted" not in format_text(info, None, "sft")
    assert "row 3" in format_text(info, "x.jsonl row 3: column `messages` is empty", "sft")
    assert format_text(None, "file x not found", "sft") == "**Cannot train this dataset:** file x not found"


def test_dataset_format_text_says_what_the_data_settings_did():
    info = FormatInfo("prompt_only", ["prompt"], conversational=False, num_rows=2, mapped={"prompt": "question"},
                      applied=["columns mapped: `question` as `prompt`", "100 of 7473 rows (the first ones)"])
    assert format_text(info, None, "grpo").endswith("ready for GRPO\n\n**Data settings:** columns mapped: "
                                                    "`question` as `prompt`; 100 of 7473 rows (the first ones)")


def test_dataset_format_text_says_what_a_conversion_did():
    info = FormatInfo("messages", ["messages"], conversational=True, num_rows=2,
                      adapter="ShareGPT → messages; `from` human → user, gpt → assistant, system → system")
    assert format_text(info, None, "sft").endswith("ready for SFT\n\n**Converted:** ShareGPT → messages; `from` "
                                                   "human → user, gpt → assistant, system → system")


def test_presets_saved_from_the_ui_load_back_and_are_listed(tmp_path):
    config = build_config({"max_steps": 12, "lora": {"r": 4}})
    path = save_preset(tmp_path, "quick", config)
    assert path == tmp_path / "presets" / "quick.yaml"
    assert load_config(path) == config
    labels = dict(preset_choices(tmp_path))
    assert any(label == "quick (saved)" for label in labels)
    assert any(label.endswith("(built-in)") for label in labels)  # the repo's presets/*.yaml


def test_preset_names_cannot_escape_the_presets_folder(tmp_path):
    for bad in ("../evil", "a/b", "", " "):
        with pytest.raises(ConfigError):
            save_preset(tmp_path, bad, RunConfig())


def test_cli_command_gives_dataset_columns_as_name_column_pairs():
    config = build_config({"data": {"columns": {"prompt": "question", "completion": "answer"}}})
    line = cli_command(config).splitlines()[-1]
    assert line.endswith("--set data.columns=prompt=question,completion=answer")
    sets = [a for a in shlex.split(line) if a.startswith("data.")]
    assert load_config(None, sets) == config



def test_the_train_tabs_data_settings_become_data_options():
    from app.train_tab import DATA_PATHS, data_options
    from backend.data import DataOptions

    values = {"data.columns": "prompt=question", "data.system": "", "data.max_samples": None, "seed": 7}
    options = data_options([values.get(p) for p in DATA_PATHS])
    assert options == DataOptions(columns={"prompt": "question"}, seed=7)
    with pytest.raises(ConfigError, match="data.columns"):
        data_options([{"data.columns": "oops"}.get(p) for p in DATA_PATHS])


def test_a_requested_stop_counts_down_to_being_forced_and_says_where_it_was():
    from backend.runs.stall import forcing_in, overdue_stop

    grace = RunConfig().stop_grace_s
    asked = make_run(stop_requested=True, stop_requested_at=NOW - 18)
    assert forcing_in(asked, NOW) == grace - 18 and overdue_stop(asked, NOW) is None
    assert f"stop requested, saving the adapter · forcing in {grace - 18:.0f} s ·" in status_line(asked, NOW)
    assert "强制" in status_line(asked, NOW, lang="zh")
    late = NOW + grace
    assert forcing_in(asked, late) == 0 and "· forcing it now ·" in status_line(asked, late)
    assert "did not stop within" in overdue_stop(asked, late) and "after step 10" in overdue_stop(asked, late)
    loading = make_run(stop_requested=True, stop_requested_at=NOW - grace - 1, train_started_at=None, step=0)
    assert "while loading" in overdue_stop(loading, NOW)
    assert overdue_stop(make_run(status="completed", stop_requested=True, stop_requested_at=NOW - 999), NOW) is None
    assert forcing_in(make_run(), NOW) is None  # no stop asked
