"""Mode modules: each turns a run config into a TRL (or the project's own) trainer.

A mode module defines `build_trainer(ctx) -> Trainer`, where ctx is a `backend.modes.training.TrainContext`.
What each mode is (formats, metrics, settings it reads) is its entry in `backend/core/mode_registry.py`; the
schema checks a mode from there without importing torch.
"""
from importlib import import_module

from backend.core.mode_registry import MODES


def available_modes() -> list[str]:
    return list(MODES)


def mode_module(mode: str):
    return import_module(MODES[mode].module)
