"""Reward modelling: TRL's RewardTrainer scores chosen above rejected with a one-output sequence classifier.

The score head is new and trained in full next to the LoRA update (PEFT's modules_to_save for SEQ_CLS), so
the saved adapter is a complete reward model: `load_reward_model` turns a finished run back into (model, tokenizer).
"""
from pathlib import Path

from transformers import set_seed
from trl import RewardConfig, RewardTrainer

from backend.models import ModelError, load_tokenizer
from backend.training import TrainContext, lora_config, model_dtype, trainer_args


def load_sequence_classifier(path, tokenizer, dtype=None):
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1,
                                                               dtype=dtype or torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id  # the classifier scores the last non-pad token
    return model


def build_trainer(ctx: TrainContext) -> RewardTrainer:
    c = ctx.config
    args = trainer_args(ctx, RewardConfig, max_length=c.max_length)
    tokenizer = load_tokenizer(ctx.model_path)
    set_seed(c.seed)  # the score head is initialised at random when the model loads
    model = load_sequence_classifier(ctx.model_path, tokenizer, dtype=model_dtype(c))
    # task_type SEQ_CLS makes PEFT train and save the score head in full (modules_to_save)
    return RewardTrainer(model=model, args=args, train_dataset=ctx.dataset, eval_dataset=ctx.eval_dataset,
                         processing_class=tokenizer, peft_config=lora_config(c, task_type="SEQ_CLS"))


def load_reward_model(path: str | Path):
    """(model, tokenizer) from a finished rm run: its run folder, its adapter folder, or a fully fine-tuned
    model folder. A LoRA adapter is loaded on its base model and merged. The model returns one score per text:
    `model(**tokenizer(texts, padding=True, return_tensors="pt")).logits[:, 0]`."""
    import json

    from peft import PeftModel

    path = Path(path)
    if (path / "adapter").is_dir():
        path = path / "adapter"
    adapter_config = path / "adapter_config.json"
    if adapter_config.is_file():
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        tokenizer = load_tokenizer(path if (path / "tokenizer_config.json").is_file() else base)
        model = PeftModel.from_pretrained(load_sequence_classifier(base, tokenizer), str(path))
        model = model.merge_and_unload()
    elif (path / "config.json").is_file():
        tokenizer = load_tokenizer(path)
        model = load_sequence_classifier(path, tokenizer)
    else:
        raise ModelError(f"{path} holds no reward model (no adapter_config.json or config.json); give the "
                                "folder of a finished rm run")
    return model.eval(), tokenizer
