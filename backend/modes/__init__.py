"""Mode modules: each turns a run config into a TRL (or the project's own) trainer.

A mode module defines `build_trainer(ctx) -> Trainer`, where ctx is a `backend.training.TrainContext`.
The registry is a plain dict of names so the schema can check a mode without importing torch.
"""
from importlib import import_module

_MODULES = {
    "sft": "backend.modes.sft",
    "rm": "backend.modes.rm",
    "dpo": "backend.modes.dpo",
    "kto": "backend.modes.kto",
    "ppo": "backend.modes.ppo",
    "grpo": "backend.modes.grpo",
    "rloo": "backend.modes.rloo",
}


def available_modes() -> list[str]:
    return list(_MODULES)


def mode_module(mode: str):
    return import_module(_MODULES[mode])
