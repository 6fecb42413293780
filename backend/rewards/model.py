"""Reward-model source: a one-output sequence classifier scores prompt + completion.

The model is a finished rm run of this workspace (its saved adapter), a local save_pretrained folder of a
sequence-classification model, or a Hub id. Texts are built the way TRL's RewardTrainer trained it: the chat
template over prompt + completion messages, or prompt + completion + eos for plain text. Each model is
loaded once per process and kept; torch is imported only when a model is loaded.
"""
from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

from backend.modes.registry import mode_spec
from backend.rewards.base import RewardFunction, RewardSourceError, as_messages, is_conversation

RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
FINISHED = ("completed", "stopped")  # both saved their adapter

_cache: dict[tuple, tuple] = {}
_lock = threading.Lock()


def locate_reward_model(spec: str, workspace: Path) -> str:
    """The folder (or Hub id) a reward-model spec points to; RewardSourceError says what is wrong."""
    spec = (spec or "").strip()
    workspace = Path(workspace)
    if spec and "/" not in spec and ((workspace / "runs" / spec).is_dir() or RUN_ID.match(spec)):
        return str(_finished_rm_run(spec, workspace))
    path = Path(spec).expanduser()
    if not path.is_absolute() and not path.exists() and (workspace / path).is_dir():
        path = workspace / path
    if path.is_dir():
        check_classifier_folder(path)
        return str(path.resolve())
    if path.exists():
        raise RewardSourceError(f"{spec} is a file; give a model folder, an rm run id or a Hub id")
    if spec.startswith(("/", ".", "~")) or not _HUB_ID.match(spec):
        raise RewardSourceError(f"model '{spec}' is neither an rm run of this workspace, nor a folder, nor a "
                                "Hub id (org/name)")
    return spec


def _finished_rm_run(run_id: str, workspace: Path) -> Path:
    adapter = workspace / "runs" / run_id / "adapter"
    if (workspace / "workbench.db").is_file():
        from backend.store import RunStore

        try:
            run = RunStore(workspace).get_run(run_id)
        except KeyError:
            raise RewardSourceError(f"no run '{run_id}' in this workspace") from None
        if mode_spec(run.mode).task != "seq_cls":
            raise RewardSourceError(f"run '{run_id}' is a {run.mode} run, not a reward-model (rm) "
                                    "run")
        if run.status not in FINISHED:
            raise RewardSourceError(f"rm run '{run_id}' is {run.status}; use a run that completed")
    elif not (workspace / "runs" / run_id).is_dir():
        raise RewardSourceError(f"no run '{run_id}' in this workspace")
    if not ((adapter / "adapter_config.json").is_file() or (adapter / "config.json").is_file()):
        raise RewardSourceError(f"run '{run_id}' has no saved model in {adapter}")
    check_classifier_folder(adapter)
    return adapter


def check_classifier_folder(path: Path) -> None:
    """Refuse folders that hold no one-output sequence classifier (a causal LM would get a random head)."""
    path = Path(path)
    if (path / "adapter_config.json").is_file():
        task = _read_json(path / "adapter_config.json").get("task_type")
        if task != "SEQ_CLS":
            raise RewardSourceError(f"{path} holds a {task or 'untyped'} adapter, not a reward model (a SEQ_CLS "
                                    "adapter from an rm run)")
    elif (path / "config.json").is_file():
        config = _read_json(path / "config.json")
        archs = config.get("architectures") or []
        if not any(a.endswith("ForSequenceClassification") for a in archs):
            raise RewardSourceError(f"{path} holds a {', '.join(archs) or 'model'} with no classifier head; give a "
                                    "reward model (train one with mode rm)")
        labels = len(config.get("id2label") or {0: ""})
        if labels != 1:
            raise RewardSourceError(f"{path} is a classifier with {labels} labels; a reward model has one output")
    else:
        raise RewardSourceError(f"{path} has no config.json or adapter_config.json")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RewardSourceError(f"cannot read {path}: {e}") from None


def device():
    """This process's accelerator (LOCAL_RANK's GPU under accelerate/torchrun), else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


def _load(location: str):
    if Path(location).is_dir():
        from backend.modes.rm import load_reward_model

        return load_reward_model(location)
    import torch
    from transformers import AutoModelForSequenceClassification

    from backend.models import load_tokenizer

    tokenizer = load_tokenizer(location)
    model = AutoModelForSequenceClassification.from_pretrained(location, dtype=torch.float32)
    if model.config.num_labels != 1:
        raise RewardSourceError(f"{location} has {model.config.num_labels} outputs; a reward model "
                                "has one")
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def load_cached(location: str):
    """(model, tokenizer) on this process's device, loaded once."""
    dev = device()
    key = (location, str(dev))
    with _lock:
        if key not in _cache:
            try:
                model, tokenizer = _load(location)
            except RewardSourceError:
                raise
            except Exception as e:  # noqa: BLE001 - the file names and reason matter more than the type
                raise RewardSourceError(f"could not load {location}: {type(e).__name__}: {e}") from e
            model.requires_grad_(False)
            _cache[key] = (model.to(dev), tokenizer)
        return _cache[key]


class RewardModelReward(RewardFunction):
    """The classifier's score (logit) of prompt + completion, in batches, without gradients."""

    def __init__(self, *args):
        super().__init__(*args)
        self.location = locate_reward_model(self.params.model, self.workspace)
        self.model, self.tokenizer = load_cached(self.location)  # fail before training starts

    def encode(self, prompt, completion) -> list[int]:
        tok = self.tokenizer
        if is_conversation(prompt) or is_conversation(completion):
            text = tok.apply_chat_template(as_messages(prompt, "user") + as_messages(completion, "assistant"),
                                           tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            text = f"{prompt or ''}{completion or ''}"
            if tok.eos_token and not text.endswith(tok.eos_token):
                text += tok.eos_token  # RewardTrainer appends eos to plain-text examples
            ids = tok(text)["input_ids"]
        return ids[-self.params.max_length:]  # keep the end: the score is read at the last token

    def score(self, prompts, completions, **kwargs):
        import torch

        encoded = [self.encode(p, c) for p, c in zip(prompts, completions)]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        dev = next(self.model.parameters()).device
        scores = []
        size = self.params.batch_size
        for start in range(0, len(encoded), size):
            batch = encoded[start:start + size]
            width = max(len(ids) for ids in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, ids in enumerate(batch):  # right padding: the classifier reads the last non-pad token
                input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
                mask[row, :len(ids)] = 1
            with torch.inference_mode():
                logits = self.model(input_ids=input_ids.to(dev), attention_mask=mask.to(dev)).logits
            scores += logits[:, 0].float().cpu().tolist()
        return scores
