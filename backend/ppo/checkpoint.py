"""What resuming the PPO loop needs beyond the saved models: per rank, the trainable weights (policy adapter and
value model), optimizer, schedule, KL controller, random state and progress; and the checkpoint rotation."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch


def _resume_file(trainer, folder) -> Path:
    return Path(folder) / f"ppo_resume_rank{trainer.accelerator.process_index}.pt"


def save_resume_state(trainer, folder: str) -> None:
    """What `train(resume_from_checkpoint=folder)` needs besides the saved models: the trainable weights
    (policy adapter + value model, as one state dict), optimizer, schedule, KL coefficient, RNG; per rank."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    state = {"step": trainer.state.global_step, "kl": vars(trainer.kl_ctl), "shuffle": trainer._shuffle.get_state(),
             "torch_rng": torch.get_rng_state(), "total_loss": trainer._total_loss,
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    if trainer.accelerator.is_main_process:
        state |= {"trainable": {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad},
                  "optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.lr_scheduler.state_dict()}
    torch.save(state, _resume_file(trainer, folder))


def load_resume_state(trainer, folder: str) -> dict:
    path = _resume_file(trainer, folder)
    if not path.exists():  # e.g. resumed with more processes than it was saved with
        raise ValueError(f"{path.name} is missing from {folder}: resume with the processes it was saved with")
    state = torch.load(path, weights_only=False)
    main = torch.load(Path(folder) / "ppo_resume_rank0.pt", weights_only=False) if "trainable" not in state \
        else state
    missing = set(main["trainable"]) - {n for n, _ in trainer.model.named_parameters()}
    if missing:
        raise ValueError(f"the checkpoint's weights do not fit this model ({sorted(missing)[:3]} ...)")
    trainer.model.load_state_dict(main["trainable"], strict=False)
    trainer.optimizer.load_state_dict(main["optimizer"])
    trainer.lr_scheduler.load_state_dict(main["scheduler"])
    vars(trainer.kl_ctl).update(state["kl"])
    trainer._shuffle.set_state(state["shuffle"])
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state


def drop_old_checkpoints(output_dir: str, limit: int) -> None:
    """Keep the newest `limit` checkpoint folders (0: all), as the Trainer's own rotation does: each one holds a
    value model too."""
    if not limit:
        return
    folders = sorted(Path(output_dir).glob("checkpoint-*"),
                     key=lambda p: int(p.name.rsplit("-", 1)[1]) if p.name.rsplit("-", 1)[1].isdigit() else -1)
    for old in folders[:-limit]:
        shutil.rmtree(old, ignore_errors=True)
