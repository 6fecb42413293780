"""PPO's value model: V(s_t), one scalar per response token, from one of two layouts.

- separate (default): a second copy of the backbone with its own LoRA adapter and a linear head (a
  one-output sequence classifier read at every token). The policy and the critic do not share gradients, so
  the value loss cannot disturb the policy; it costs a second backbone in memory and one more forward pass.
  It can start from a finished reward-model run: the rm's adapter is merged into the copy and its score head
  kept, so the first values are the reward model's own estimates; a fresh LoRA adapter then trains on top.
- shared: a linear head on the policy's last hidden state. One backbone, one forward pass; the value loss
  (× vf_coef) also trains the policy's adapter.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from backend.models.shared_prefill import decoder_and_head


def hidden_states(model, input_ids, attention_mask, position_ids) -> torch.Tensor:
    trunk, _ = decoder_and_head(model)
    return trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                 use_cache=False).last_hidden_state


class SeparateValueModel(nn.Module):
    """A sequence classifier (its own trunk, LoRA and score head) read at every position."""

    kind = "separate"

    def __init__(self, classifier, init_from: str = ""):
        super().__init__()
        self.classifier = classifier
        self.init_from = init_from

    def forward(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        _, head = decoder_and_head(self.classifier)
        hidden = hidden_states(self.classifier, input_ids, attention_mask, position_ids)
        return head(hidden).squeeze(-1).float()

    def save(self, folder: Path) -> None:
        """The classifier (LoRA adapter + score head, or the full model) and a note on how it was made."""
        folder.mkdir(parents=True, exist_ok=True)
        self.classifier.save_pretrained(str(folder))
        _write_note(folder, {"kind": self.kind, "init_from": self.init_from,
                             "note": "per-token values = score head on the classifier's last hidden state"
                                     + ("; the adapter sits on the base with the reward model merged in"
                                        if self.init_from else "")})


class SharedValueHead(nn.Module):
    """A linear head on the policy's last hidden state (the trunk is the policy's)."""

    kind = "shared"

    def __init__(self, hidden_size: int, dtype=torch.float32, std: float = 0.02):
        super().__init__()
        self.head = nn.Linear(hidden_size, 1, dtype=dtype)
        nn.init.normal_(self.head.weight, std=std)
        nn.init.zeros_(self.head.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).squeeze(-1).float()

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                  str(folder / "value_head.safetensors"))
        _write_note(folder, {"kind": self.kind, "note": "value = value_head(policy's last hidden state)"})


def _write_note(folder: Path, note: dict) -> None:
    (folder / "value_model.json").write_text(json.dumps(note, indent=2) + "\n")


def classifier_from_reward_model(location: str, tokenizer, dtype=torch.float32):
    """A finished reward model (merged into its base) whose vocabulary must be the policy's: the value model
    reads the policy's tokens."""
    from backend.models import load_reward_model

    model, rm_tokenizer = load_reward_model(location)
    if rm_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"ppo.value_init_run: the reward model in {location} uses another tokenizer than the "
                         "policy; initialise the value model from an rm run trained on the same base model")
    return model.to(dtype)


def _without_output_layer(lora_config):
    """The policy's LoRA settings for the classifier, which has a score head where the policy has lm_head."""
    import copy

    targets = lora_config.target_modules
    if isinstance(targets, (list, set, tuple)) and "lm_head" in targets:
        lora_config = copy.deepcopy(lora_config)
        lora_config.target_modules = [t for t in targets if t != "lm_head"] or "all-linear"
    return lora_config


def build_value_model(kind: str, model_path: str, tokenizer, lora_config=None, init_from: str = "",
                      policy=None, dtype=torch.float32):
    """The value model of a run: kind "separate" (a classifier, from `init_from`'s reward model when given,
    with a fresh LoRA adapter when `lora_config` is given) or "shared" (a head sized for `policy`)."""
    if kind == "shared":
        if init_from:
            raise ValueError("ppo.value_init_run needs ppo.value_model: separate (a reward model brings its own "
                             "backbone)")
        return SharedValueHead(policy.config.hidden_size, dtype=dtype)
    if init_from:
        classifier = classifier_from_reward_model(init_from, tokenizer, dtype)
    else:
        from backend.models import load_sequence_classifier

        classifier = load_sequence_classifier(model_path, tokenizer, dtype)  # a new score head: seed first
    if lora_config is not None:
        from peft import get_peft_model

        classifier = get_peft_model(classifier, _without_output_layer(lora_config))  # SEQ_CLS: the head trains too
    return SeparateValueModel(classifier, init_from=init_from)
