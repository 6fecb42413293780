"""Loading models: tokenizers, causal LMs, one-output sequence classifiers, and a ModelRef's base + adapter(s)
in one call. torch, transformers and peft are imported inside the functions: importing this costs nothing."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from backend.models.ref import ModelRef
from backend.models.specs import EMBEDDED_MODEL, ModelError, Progress, resolve_model


def default_device():
    """This process's accelerator (LOCAL_RANK's GPU under accelerate/torchrun), else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


def load_tokenizer(path: str | Path, chat_template: str | None = None):
    """AutoTokenizer for a resolved model (the embedded name is resolved too); pad falls back to eos;
    `chat_template` (Jinja text) replaces the model's own."""
    from transformers import AutoTokenizer

    path = resolve_model(str(path)) if str(path).lower() == EMBEDDED_MODEL else str(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"could not load a tokenizer from {path}: {e}") from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


def load_causal_lm(path: str | Path, dtype=None, **kwargs):
    """AutoModelForCausalLM for a resolved model; dtype defaults to float32 (bf16 is slow on CPU); `kwargs` go to
    from_pretrained (a quantization config and device map for QLoRA)."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model(str(path)) if str(path).lower() == EMBEDDED_MODEL else str(path)
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"could not load a causal language model from {path}: {e}") from e


def load_sequence_classifier(path: str | Path, tokenizer, dtype=None, num_labels: int | None = 1, **kwargs):
    """AutoModelForSequenceClassification with `num_labels` outputs (None: as the checkpoint has it); a head the
    checkpoint lacks is new and random, so seed first. `kwargs` go to from_pretrained (a quantization config)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    labels = {"num_labels": num_labels} if num_labels is not None else {}
    model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=dtype or torch.float32, **labels,
                                                               **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id  # the classifier scores the last non-pad token
    return model


@dataclass
class LoadedModel:
    ref: ModelRef | None
    model: object
    tokenizer: object
    device: str
    # a fast tokenizer mutates its padding/truncation state while encoding: one encode at a time
    encode_lock: threading.Lock = field(default_factory=threading.Lock)


def load_model(ref: ModelRef, *, task: str | None = None, device=None, dtype=None, adapters: dict | None = None,
               merge: bool = False, num_labels: int | None = 1, progress: Progress | None = None) -> LoadedModel:
    """The base model of `ref` with its adapter (or `adapters`, {name: folder}, several named PEFT adapters on one
    base) applied, in eval mode on `device` (default: where it loads, the CPU).

    task: "causal" (default), "seq_cls" (a `num_labels` classifier) or "encoder" (a plain AutoModel, e.g. for
    sentence embeddings); default the ref's own. merge: fold the adapter(s) into the weights. dtype: float32
    unless given. The tokenizer is the adapter's when it saved one, else the base's.
    """
    import torch

    report = progress or (lambda fraction, message: None)
    task = task or ref.task or "causal"
    path = ref.resolve(lambda f, m: report(0.5 * f, m))
    if adapters is None:
        adapters = {"default": ref.adapter} if ref.adapter else {}
    own = Path(ref.adapter) if ref.adapter else None
    tokenizer = load_tokenizer(own if own and (own / "tokenizer_config.json").is_file() else path)
    dtype = dtype or torch.float32
    if task == "seq_cls":
        model = load_sequence_classifier(path, tokenizer, dtype, num_labels)
    elif task == "encoder":
        from transformers import AutoModel

        model = AutoModel.from_pretrained(path, dtype=dtype)
    else:
        model = load_causal_lm(path, dtype=dtype)
    if adapters:
        from peft import PeftModel

        for name, folder in adapters.items():
            report(0.6, f"Loading the adapter {Path(folder).parent.name}")
            if isinstance(model, PeftModel):
                model.load_adapter(str(folder), adapter_name=name)
            else:
                model = PeftModel.from_pretrained(model, str(folder), adapter_name=name)
        if merge:
            report(0.8, "Merging the adapter into the weights (merge_and_unload)")
            model = model.merge_and_unload()
    if device is not None:
        model.to(device)
    model.eval()
    return LoadedModel(ref, model, tokenizer, str(device or "cpu"))


def load_reward_model(path: str | Path):
    """(model, tokenizer) from a finished rm run: its run folder, its adapter folder, or a fully fine-tuned
    model folder. A LoRA adapter is loaded on its base model and merged. The model returns one score per text:
    `model(**tokenizer(texts, padding=True, return_tensors="pt")).logits[:, 0]`."""
    path = Path(path)
    if (path / "adapter").is_dir():
        path = path / "adapter"
    if not ((path / "adapter_config.json").is_file() or (path / "config.json").is_file()):
        raise ModelError(f"{path} holds no reward model (no adapter_config.json or config.json); give the "
                         "folder of a finished rm run")
    loaded = load_model(ModelRef.of_folder(path.resolve()), task="seq_cls", merge=True)
    return loaded.model, loaded.tokenizer
