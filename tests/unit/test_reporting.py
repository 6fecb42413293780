"""`report_to`: the run-config setting that also sends a trainer's logs to TensorBoard and / or trackio, kept on
this machine (the run's folder, the workspace)."""
import os

import pytest

from backend import reporting
from backend.config import ConfigError, apply_overrides, build_config, choices, field_info, to_yaml


def test_report_to_is_an_advanced_setting_off_by_default():
    info = field_info("report_to")
    assert build_config({}).report_to == []
    assert choices(info) == ["tensorboard", "trackio", "mlflow", "wandb"]
    assert info.title and "TensorBoard" in info.description and info.json_schema_extra["group"] == "advanced"


def test_yaml_lists_and_comma_separated_cli_values_give_the_same_setting():
    from_cli = build_config(apply_overrides({}, ["report_to=tensorboard,trackio"]))
    from_yaml = build_config({"report_to": ["tensorboard", "trackio", "tensorboard"]})
    assert from_cli.report_to == from_yaml.report_to == ["tensorboard", "trackio"]
    assert build_config(apply_overrides({}, ["report_to=tensorboard"])).report_to == ["tensorboard"]
    assert build_config(apply_overrides({}, ["report_to="])).report_to == []
    assert "report_to:\n- tensorboard\n- trackio" in to_yaml(from_cli, only_changed=True)


def test_an_unknown_reporter_is_refused_with_the_setting_named():
    with pytest.raises(ConfigError) as e:
        build_config({"report_to": ["tensorboard", "comet"]})
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith("report_to.1:")
    assert "'tensorboard', 'trackio', 'mlflow' or 'wandb'" in e.value.errors[0]


def test_a_reporter_that_is_not_installed_is_refused_before_a_run_starts(monkeypatch):
    monkeypatch.setattr(reporting, "_installed", lambda package: package != "trackio")
    with pytest.raises(ConfigError) as e:
        build_config({"report_to": ["tensorboard", "trackio"]})
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(
        "report_to: trackio==0.43.0 is not installed here; install it (`pip install trackio==0.43.0`) or leave it out")


def test_wandb_is_refused_until_installed_and_runs_offline_in_the_runs_folder(tmp_path, monkeypatch):
    for var in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(reporting, "_installed", lambda package: package != "wandb")
    with pytest.raises(ConfigError, match=r"wandb==0.31.0 is not installed here; install it \(`pip install "
                                          r"wandb==0.31.0`\)"):
        build_config({"report_to": ["wandb"]})
    run_dir = tmp_path / "runs" / "r1"
    settings = reporting.trainer_settings(["wandb", "mlflow"], "r1", "demo", run_dir, tmp_path)
    assert settings == {"report_to": ["wandb", "mlflow"], "run_name": "demo-r1"}
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["WANDB_DIR"] == str(run_dir)
    assert os.environ["MLFLOW_TRACKING_URI"] == f"file:{tmp_path.resolve() / 'mlruns'}"
    where = reporting.locations(["wandb", "mlflow"], run_dir, tmp_path)
    assert f"wandb sync {run_dir / 'wandb'}" in where and "mlflow ui --backend-store-uri file:" in where
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")  # a server the user runs
    reporting.trainer_settings(["mlflow"], "r1", "demo", run_dir, tmp_path)
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://mlflow.example:5000"


def test_without_reporters_the_trainer_reports_nowhere(tmp_path):
    assert reporting.trainer_settings([], "r1", "", tmp_path / "runs" / "r1", tmp_path) == {"report_to": "none"}
    assert reporting.locations([], tmp_path / "runs" / "r1", tmp_path) is None


def test_tensorboard_writes_into_the_runs_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # restored after the test
    run_dir = tmp_path / "runs" / "r1"
    settings = reporting.trainer_settings(["tensorboard"], "r1", "", run_dir, tmp_path)
    assert settings == {"report_to": ["tensorboard"]}
    assert os.environ["TENSORBOARD_LOGGING_DIR"] == str(run_dir / "tensorboard")
    assert str(run_dir / "tensorboard") in reporting.locations(["tensorboard"], run_dir, tmp_path)


def test_trackio_logs_into_the_workspace_and_never_to_a_space(tmp_path, monkeypatch):
    for var in ("TRACKIO_DIR", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_DATASET_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRACKIO_SPACE_ID", "someone/space")
    settings = reporting.trainer_settings(["trackio"], "r1", "sft-demo", tmp_path / "runs" / "r1", tmp_path)
    assert os.environ["TRACKIO_DIR"] == str(tmp_path / "trackio") and "TRACKIO_SPACE_ID" not in os.environ
    assert settings == {"report_to": ["trackio"], "project": "workbench", "run_name": "sft-demo-r1",
                        "trackio_space_id": None, "trackio_bucket_id": None, "trackio_static_space_id": False}
    assert reporting.trainer_settings(["trackio"], "r2", "", tmp_path, tmp_path)["run_name"] == "r2"


def test_the_form_offers_both_reporters_and_round_trips_them():
    import gradio as gr

    from app import forms
    from app.formatting import cli_command

    with gr.Blocks():
        component = forms.build_component("report_to")
    assert isinstance(component, gr.Dropdown) and component.multiselect and component.value == []
    config = build_config({"report_to": ["trackio"]})
    assert forms.config_from_values(forms.values_from_config(config)) == config
    assert "--set report_to=trackio" in cli_command(config)
