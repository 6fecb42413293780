"""Settings given the way TRL's and transformers' CLIs take them (`--max_steps 3`), as `--set max_steps=3`, and
dotted paths into mapping settings (`--set data.columns.prompt=question`). Nothing is trained: the parser and the
config-building functions are called directly, and a start is stubbed."""
from pathlib import Path

import pytest
import yaml

import launch
from backend.config import ConfigError, apply_overrides, load_config, parse_override
from cli.common import settings_as_sets

REPO = Path(__file__).resolve().parents[2]
SFT = str(REPO / "presets" / "sft_demo.yaml")


def parsed(*argv):
    parser = launch.build_parser()
    return parser.parse_args(settings_as_sets(parser, list(argv)))


# ---- --KEY VALUE ----

@pytest.mark.parametrize("words, sets", [
    (["--max_steps", "3"], ["max_steps=3"]),
    (["--max_steps=3"], ["max_steps=3"]),
    (["--max-steps", "3"], ["max_steps=3"]),  # transformers' dashed spelling
    (["--lora.r", "16", "--set", "seed=1", "--lora_r", "8"], ["lora.r=16", "seed=1", "lora_r=8"]),  # in order
    (["--learning_rate", "-1e-5"], ["learning_rate=-1e-5"]),  # a negative number is a value, not an option
    (["--bf16"], ["bf16=true"]),  # a flag alone is true, as in TRL
    (["--packing", "false"], ["packing=false"]),
    (["--data.columns.prompt", "question"], ["data.columns.prompt=question"]),
])
def test_trl_style_options_are_sets(words, sets):
    for argv in (["train", "p.yaml", *words], ["train", *words, "p.yaml"]):  # before or after the config file
        args = parsed(*argv)
        assert (args.set, args.config) == (sets, "p.yaml"), argv


def test_a_flag_followed_by_the_config_file_leaves_the_file_alone():
    args = parsed("train", "--packing", "p.yaml", "--gradient_checkpointing", "--detach")
    assert (args.set, args.config, args.detach) == (["packing=true", "gradient_checkpointing=true"], "p.yaml", True)


def test_the_config_has_what_the_options_give():
    args = parsed("train", SFT, "--max_steps", "3", "--lora_r", "16", "--bf16", "--data.columns.prompt", "question")
    config = load_config(args.config, args.set)
    assert (config.max_steps, config.lora.r, config.precision) == (3, 16, "bf16")
    assert config.data.columns == {"prompt": "question"}


def test_train_with_a_trl_option_starts_the_run_with_it(tmp_path, monkeypatch, capsys):
    """The issue's command: `launch.py train preset.yaml --max_steps 3` (the start stubbed: nothing trains)."""
    from backend.data import FormatInfo
    from backend.runs import jobs, preflight

    started = []
    info = FormatInfo("messages", ["messages"], True, 2)
    monkeypatch.setattr(preflight, "preflight", lambda config, workspace, **_: info)
    monkeypatch.setattr(jobs, "submit_run", lambda store, config, check=True: started.append(config) or
                        type("Run", (), {"id": "20260101-000000-abcd"})())
    assert launch.main(["train", SFT, "--max_steps", "3", "--detach", "--workspace", str(tmp_path)]) == 0
    assert started[0].max_steps == 3 and "run id: 20260101-000000-abcd" in capsys.readouterr().out


def test_a_trl_name_overrides_the_file_as_any_set_does_but_not_another_set(tmp_path):
    config = load_config(SFT, ["lora_r=16", "bf16=true"])  # the preset gives lora.r: 8
    assert (config.lora.r, config.precision) == (16, "bf16")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"mode": "dpo", "dpo": {"beta": 0.5}, "precision": "fp16"}))
    config = load_config(path, ["beta=0.2", "bf16=false"])  # beta: the mode's; a flag turned off changes nothing
    assert (config.dpo.beta, config.precision) == (0.2, "fp16")
    with pytest.raises(ConfigError, match=r"--set lora_r=16: TRL's name for lora.r, which is also given as lora.r "
                                          r"\(4 vs 16\)"):
        load_config(SFT, ["lora.r=4", "lora_r=16"])


def test_sweep_start_takes_them_too_and_its_own_options_win():
    args = parsed("sweep", "start", "--preset", "p.yaml", "--max_steps", "3", "--seed", "7", "--name", "s")
    assert (args.set, args.seed, args.name) == (["max_steps=3"], 7, "s")  # --seed: the sampler's, as documented


def test_own_options_and_their_abbreviations_still_work():
    args = parsed("train", "p.yaml", "--det", "--dry-run", "--set", "max_steps=2")
    assert (args.detach, args.dry_run, args.set) == (True, True, ["max_steps=2"])


@pytest.mark.parametrize("words, said", [
    (["--max_stepz", "3"], "--max_stepz: launch.py train has no such option, and no run setting is named "
                           "'max_stepz'; did you mean --max_steps? (`launch.py settings` lists the settings"),
    (["--detatch"], "did you mean --detach?"),  # a typo of the command's own option
    (["--frobnicate", "1"], "no run setting is named 'frobnicate' (`launch.py settings`"),
    (["--max_steps"], "--max_steps: give a value (--max_steps VALUE or --max_steps=VALUE)"),
    (["--max_steps", "--detach"], "--max_steps: give a value"),
    (["--data.system.x", "1"], "--data.system.x: data.system is a setting of kind str, not a mapping"),
])
def test_an_unknown_option_is_refused_naming_it_and_the_nearest_setting(words, said, capsys):
    with pytest.raises(SystemExit) as done:
        parsed("train", "p.yaml", *words)
    err = capsys.readouterr().err
    assert done.value.code == 2 and said in err, err
    if words[0] == "--frobnicate":
        assert "did you mean" not in err


def test_commands_without_set_keep_argparse_s_answer(capsys):
    argv = ["eval", "list", "--max_steps", "3"]
    assert settings_as_sets(launch.build_parser(), argv) == argv
    with pytest.raises(SystemExit):
        parsed(*argv)
    assert "unrecognized arguments: --max_steps 3" in capsys.readouterr().err


# ---- dotted paths into mappings ----

def test_a_dotted_path_sets_one_entry_of_a_mapping():
    assert parse_override("data.columns.prompt=007") == ("data.columns.prompt", "007")  # a column name as typed
    config = load_config(None, ["data.columns.prompt=question", "data.columns.completion=answer"])
    assert config.data.columns == {"prompt": "question", "completion": "answer"}
    # the entries the file (or an earlier --set) gave are kept, whether a mapping or `name=column, ...` text
    assert apply_overrides({"data": {"columns": {"completion": "answer"}}}, ["data.columns.prompt=q"]) == \
        {"data": {"columns": {"completion": "answer", "prompt": "q"}}}
    assert apply_overrides({}, ["data.columns=completion=answer", "data.columns.prompt=q"]) == \
        {"data": {"columns": {"completion": "answer", "prompt": "q"}}}


def test_a_dotted_path_merges_into_the_file_s_mapping(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"data": {"columns": {"completion": "answer"}, "system": "Be brief."}}))
    config = load_config(path, ["data.columns.prompt=question"])
    assert config.data.columns == {"completion": "answer", "prompt": "question"}
    assert config.data.system == "Be brief."


@pytest.mark.parametrize("overrides, said", [
    (["data.system.x=1"], "--set data.system.x: data.system is a setting of kind str, not a mapping; give it whole "
                          "(data.system=VALUE)"),
    (["lora.r.x=1"], "--set lora.r.x: lora.r is a setting of kind int, not a mapping"),
    (["data.columns.prompt.x=1"], "--set data.columns.prompt.x: data.columns.prompt is one entry of the mapping "
                                  "data.columns, not a mapping itself"),
    (["data.colums.prompt=q"], "--set data.colums.prompt: unknown setting; did you mean 'data.columns'? "
                               "(`launch.py settings` lists them)"),
    (["data.columns.prompt="], "--set data.columns.prompt=: 'prompt=': give both the name and the dataset column"),
    (["data.columns=completion", "data.columns.prompt=q"],
     "--set data.columns.prompt=q: data.columns: 'completion' is not a name=column pair"),
])
def test_a_bad_dotted_path_is_named(overrides, said):
    with pytest.raises(ConfigError) as exc:
        load_config(None, overrides)
    assert exc.value.errors[0].startswith(said), exc.value.errors


def test_a_section_the_file_gives_as_no_mapping_is_named():
    with pytest.raises(ConfigError) as exc:
        apply_overrides({"lora": 5}, ["lora.r=3"])
    assert exc.value.errors == ["--set lora.r=3: lora is not a mapping in the config it overrides (got 5)"]


def test_a_sweep_s_set_takes_dotted_paths_too():
    from backend.sweeps import spec_from_cli

    spec = spec_from_cli(preset=SFT, sets=["data.columns.prompt=question"],
                         params=["learning_rate=log_float:1e-5:1e-3"])
    assert spec.base["data"]["columns"] == {"prompt": "question"}
