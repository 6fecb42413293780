"""Reward-model source: a sequence classifier scores prompt + completion.

The model is a finished rm run of this workspace (its saved adapter), a local save_pretrained folder of a
sequence-classification model, or a Hub id: a one-output reward model (its logit), or a classifier with several
labels read as the probability of one (`params.label`, e.g. a toxicity model's "toxic"). `negate` and
`threshold` turn the output into the cost a constraint needs (see RewardModelParams). Texts are built the way TRL's RewardTrainer trained it: the chat
template over prompt + completion messages, or prompt + completion + eos for plain text. Models load through
the process's bounded model cache (backend.models); torch is imported only when a model is loaded.
"""
from __future__ import annotations

import json
from pathlib import Path

from backend.models import ModelError, ModelRef, cached_model, default_device, is_hub_id, load_model, run_part
from backend.rewards.base import RewardFunction, RewardSourceError, as_messages, is_conversation

FINISHED = ("completed", "stopped")  # both saved their adapter


def reward_model_ref(spec: str, workspace: Path, label: str = "") -> ModelRef:
    """The reward model a spec names, as the folder (or Hub id) to load; RewardSourceError says what is wrong.
    `label`: the classifier label to score (checked against the folder's labels)."""
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
    check_classifier_folder(folder, label)
    return ModelRef.of_folder(folder, spec)  # a run's adapter too: on the base PEFT recorded, as load_reward_model


def locate_reward_model(spec: str, workspace: Path, label: str = "") -> str:
    """The folder (or Hub id) a reward-model spec points to; RewardSourceError says what is wrong."""
    ref = reward_model_ref(spec, workspace, label)
    return ref.adapter or ref.base


def _check_rm_run(run) -> None:
    if run.config.spec.task != "seq_cls":
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


def check_classifier_folder(path: Path, label: str = "") -> None:
    """Refuse folders that hold no sequence classifier (a causal LM would get a random head), a classifier of
    several labels without `label`, and a `label` the classifier does not have."""
    path = Path(path)
    if (path / "adapter_config.json").is_file():
        task = _read_json(path / "adapter_config.json").get("task_type")
        if task != "SEQ_CLS":
            raise RewardSourceError(f"{path} holds a {task or 'untyped'} adapter, not a reward model (a SEQ_CLS "
                                    "adapter from an rm run)")
        if label:
            raise RewardSourceError(f"params.label '{label}': {path} is a reward model with one output; leave "
                                    "label empty")
    elif (path / "config.json").is_file():
        config = _read_json(path / "config.json")
        archs = config.get("architectures") or []
        if not any(a.endswith("ForSequenceClassification") for a in archs):
            raise RewardSourceError(f"{path} holds a {', '.join(archs) or 'model'} with no classifier head; give a "
                                    "reward model (train one with mode rm)")
        label_index(config.get("id2label") or {0: ""}, label, path)
    else:
        raise RewardSourceError(f"{path} has no config.json or adapter_config.json")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RewardSourceError(f"cannot read {path}: {e}") from None


def label_index(id2label: dict, label: str, where) -> int | None:
    """The output a source reads: None for a one-output reward model's logit, else the index of `label`;
    RewardSourceError names the labels there are."""
    names = {int(k): str(v) for k, v in id2label.items()}
    if not label:
        if len(names) == 1:
            return None
        raise RewardSourceError(f"{where} is a classifier with {len(names)} labels ({', '.join(names.values())}); "
                                "a reward model has one output: set params.label to the label whose probability "
                                "to score")
    if len(names) == 1:
        raise RewardSourceError(f"params.label '{label}': {where} is a reward model with one output; leave label "
                                "empty")
    for index, name in names.items():
        if name.lower() == label.strip().lower() or label.strip() == str(index):
            return index
    raise RewardSourceError(f"params.label '{label}': {where} has the labels {', '.join(names.values())}")


def load_reward(ref: ModelRef, label: str = ""):
    """(model, tokenizer) on this process's device, frozen, loaded once (merged, when it is an adapter)."""
    try:
        loaded = cached_model(ref, "rewards", loader=_load_scorer, task="seq_cls", merge=True, device=default_device(),
                              num_labels=None if ref.kind == "hub" or label else 1)
    except RewardSourceError:
        raise
    except Exception as e:  # noqa: BLE001 - the file names and reason matter more than the type
        raise RewardSourceError(f"could not load {ref.adapter or ref.base}: {type(e).__name__}: {e}") from e
    return loaded.model, loaded.tokenizer


def _load_scorer(ref: ModelRef, **options):
    loaded = load_model(ref, **options)
    loaded.model.requires_grad_(False)
    return loaded


class RewardModelReward(RewardFunction):
    """The classifier's score of prompt + completion (the logit, or a label's probability; negated and
    thresholded as the params say), in batches, without gradients."""

    def __init__(self, *args):
        super().__init__(*args)
        label = self.params.label
        ref = reward_model_ref(self.params.model, self.workspace, label)
        self.location = ref.adapter or ref.base
        self.model, self.tokenizer = load_reward(ref, label)  # fail before training starts
        # a Hub classifier's labels are known only once loaded
        self.output = label_index(self.model.config.id2label or {0: ""}, label, self.location)

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
                logits = self.model(input_ids=input_ids.to(dev), attention_mask=mask.to(dev)).logits.float()
            out = logits[:, 0] if self.output is None else logits.softmax(-1)[:, self.output]
            scores += out.cpu().tolist()
        return [self.transform(s) for s in scores]

    def transform(self, score: float) -> float:
        score = -score if self.params.negate else score
        threshold = self.params.threshold
        return score if threshold is None else float(score > threshold)
