"""Where a run's trainer also reports its logs (the run config's `report_to`): TensorBoard event files in the run's
folder, a trackio project in the workspace, MLflow (the workspace's mlruns file store unless MLFLOW_TRACKING_URI
names a server) and Weights & Biases (offline into the run's folder unless WANDB_MODE says otherwise). Without those
variables nothing leaves this machine. MLflow and W&B are installed only by whoever chooses them.

The metrics the workbench itself plots come from the run store either way; these are for people who already
read their runs in TensorBoard or trackio. No torch here: the UI imports this for the paths it shows.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

REPORTERS = ("tensorboard", "trackio", "mlflow", "wandb")
TRACKIO_PROJECT = "workbench"  # trackio's project, MLflow's experiment and W&B's project unless the user names one
# mlflow-skinny: the tracking client alone (the full package brings a server, scikit-learn, …)
_PACKAGES = {"tensorboard": "tensorboard==2.21.0", "trackio": "trackio==0.43.0", "mlflow": "mlflow-skinny==3.18.0",
             "wandb": "wandb==0.31.0"}


def tensorboard_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "tensorboard"


def trackio_dir(workspace: Path) -> Path:
    """One trackio store for the workspace, so its dashboard compares every run of the project."""
    return Path(workspace) / "trackio"


def mlflow_uri(workspace: Path) -> str:
    """Where MLflow logs: MLFLOW_TRACKING_URI when set (a server, a database), else the workspace's file store."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"file:{Path(workspace).resolve() / 'mlruns'}"


def wandb_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "wandb"


def trackio_run_name(run_id: str, name: str = "") -> str:
    # trackio resumes a run of the same name: the id keeps two runs called "sft-demo" apart
    return f"{name}-{run_id}" if name else run_id


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def missing_packages(report_to: list[str]) -> list[str]:
    """Pip requirements of the chosen integrations that are not installed."""
    return [_PACKAGES[r] for r in report_to if not _installed(r)]


def trainer_settings(report_to: list[str], run_id: str, run_name: str, run_dir: Path, workspace: Path) -> dict:
    """TrainingArguments fields for the chosen integrations, and the environment their callbacks read.

    transformers' TensorBoardCallback takes its folder from TENSORBOARD_LOGGING_DIR (TrainingArguments has no
    logging_dir any more); trackio reads TRACKIO_DIR when imported, and logs locally unless a Space or server is
    named, so those variables are cleared and no Space is frozen after training."""
    if not report_to:
        return {"report_to": "none"}
    out: dict = {"report_to": list(report_to)}
    if "tensorboard" in report_to:
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(tensorboard_dir(run_dir))
    if "trackio" in report_to:
        os.environ["TRACKIO_DIR"] = str(trackio_dir(workspace))
        for var in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_DATASET_ID"):
            os.environ.pop(var, None)
        out.update(project=TRACKIO_PROJECT, run_name=trackio_run_name(run_id, run_name), trackio_space_id=None,
                   trackio_bucket_id=None, trackio_static_space_id=False)
    if "mlflow" in report_to:
        os.environ["MLFLOW_TRACKING_URI"] = mlflow_uri(workspace)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store otherwise
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", TRACKIO_PROJECT)
        out["run_name"] = trackio_run_name(run_id, run_name)
    if "wandb" in report_to:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_PROJECT", TRACKIO_PROJECT)
        os.environ["WANDB_DIR"] = str(run_dir)
        wandb_dir(run_dir).mkdir(parents=True, exist_ok=True)
        out["run_name"] = trackio_run_name(run_id, run_name)
    return out


def locations(report_to: list[str], run_dir: Path, workspace: Path) -> str | None:
    """One line for the Runs tab: where this run's TensorBoard / trackio logs are and how to open them."""
    parts = []
    if "tensorboard" in report_to:
        parts.append(f"TensorBoard: tensorboard --logdir {tensorboard_dir(run_dir)}")
    if "trackio" in report_to:
        parts.append(f"trackio: TRACKIO_DIR={trackio_dir(workspace)} trackio show --project {TRACKIO_PROJECT}")
    if "mlflow" in report_to:
        uri = mlflow_uri(workspace)
        parts.append(f"MLflow: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}"
                     if uri.startswith("file:") else f"MLflow: {uri}")
    if "wandb" in report_to:
        parts.append(f"W&B: wandb sync {wandb_dir(run_dir)}/offline-run-*" if os.environ.get("WANDB_MODE", "offline")
                     == "offline" else "W&B: your project online")
    return " · ".join(parts) or None
