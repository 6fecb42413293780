"""Reward-model source: a one-output sequence classifier scores prompt + completion.

The model is a finished rm run of this workspace (its saved adapter), a local save_pretrained folder of a
sequence-classification model, or a Hub id. Texts are built the way TRL's RewardTrainer trained it: the chat
template over prompt + completion messages, or prompt + completion + eos for plain text. Models load through
the process's bounded model cache (backend.models); torch is imported only when a model is loaded.
"""
from __future__ import annotations

import json
from pathlib import Path

from backend.models import ModelError, ModelRef, cached_model, default_device, is_hub_id, load_model, run_part
from backend.modes.registry import mode_spec
from backend.rewards.base import RewardFunction, RewardSourceError, as_messages, is_conversation

FINISHED = ("completed", "stopped")  # both saved their adapter


def reward_model_ref(spec: str, workspace: Path) -> ModelRef:
    """The reward model a spec names, as the folder (or Hub id) to load; RewardSourceError says what is wrong."""
    spec = (spec or "").strip()
    try:
        ref = ModelRef.parse(spec, Path(workspace))
    except ModelError as e:
        if e.run is not None:
            _check_rm_run(e.run)
        raise RewardSourceError(_problem(spec, e)) from None
    if ref.run is not None:
        _check_rm_run(ref.run)
    if ref.kind == "hub":
        if not is_hub_id(spec):
            raise RewardSourceError(_problem(spec, ModelError("", "missing")))
        return ref
    folder = Path(ref.adapter or ref.base)
    check_classifier_folder(folder)
    return ModelRef.of_folder(folder, spec)  # a run's adapter too: on the base PEFT recorded, as load_reward_model


def locate_reward_model(spec: str, workspace: Path) -> str:
    """The folder (or Hub id) a reward-model spec points to; RewardSourceError says what is wrong."""
    ref = reward_model_ref(spec, workspace)
    return ref.adapter or ref.base


def _check_rm_run(run) -> None:
    if mode_spec(run.mode).task != "seq_cls":
        raise RewardSourceError(f"run '{run.id}' is a {run.mode} run, not a reward-model (rm) "
                                "run")
    if run.status not in FINISHED:
        raise RewardSourceError(f"rm run '{run.id}' is {run.status}; use a run that completed")


def _problem(spec: str, e: ModelError) -> str:
    """What ModelRef.parse found, in this source's words."""
    run_id = (run_part(spec) or (spec, None))[0]
    if e.reason == "no_run":
        return f"no run '{run_id}' in this workspace"
    if e.reason == "unsaved":
        return f"run '{run_id}' has no saved model in {e.subject}"
    if e.reason == "file":
        return f"{spec} is a file; give a model folder, an rm run id or a Hub id"
    if e.reason == "missing":
        return (f"model '{spec}' is neither an rm run of this workspace, nor a folder, nor a "
                "Hub id (org/name)")
    if e.reason == "not_model":
        return f"{e.subject} has no config.json or adapter_config.json"
    return str(e)


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


def load_reward(ref: ModelRef):
    """(model, tokenizer) on this process's device, frozen, loaded once (merged, when it is an adapter)."""
    try:
        loaded = cached_model(ref, "rewards", loader=_load_scorer, task="seq_cls", merge=True, device=default_device(),
                              num_labels=None if ref.kind == "hub" else 1)
    except RewardSourceError:
        raise
    except Exception as e:  # noqa: BLE001 - the file names and reason matter more than the type
        raise RewardSourceError(f"could not load {ref.adapter or ref.base}: {type(e).__name__}: {e}") from e
    return loaded.model, loaded.tokenizer


def _load_scorer(ref: ModelRef, **options):
    loaded = load_model(ref, **options)
    if loaded.model.config.num_labels != 1:  # a Hub classifier keeps its own head
        raise RewardSourceError(f"{ref.base} has {loaded.model.config.num_labels} outputs; a reward model "
                                "has one")
    loaded.model.requires_grad_(False)
    return loaded


class RewardModelReward(RewardFunction):
    """The classifier's score (logit) of prompt + completion, in batches, without gradients."""

    def __init__(self, *args):
        super().__init__(*args)
        ref = reward_model_ref(self.params.model, self.workspace)
        self.location = ref.adapter or ref.base
        self.model, self.tokenizer = load_reward(ref)  # fail before training starts

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
