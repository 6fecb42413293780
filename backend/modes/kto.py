"""Kahneman-Tversky optimisation: TRL's KTOTrainer on prompt + completion + label (good or bad).

Unlike DPO it needs no pairs, only a thumbs up or down per answer. With LoRA the reference is the model
with the adapter switched off.
"""
from trl import KTOTrainer

from backend.models import load_causal_lm
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


def build_trainer(ctx: TrainContext) -> KTOTrainer:
    c = ctx.config
    args = trainer_args(ctx)
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    return KTOTrainer(model=model, ref_model=None, args=args, train_dataset=ctx.dataset,
                      eval_dataset=ctx.eval_dataset, processing_class=tokenizer, peft_config=lora_config(c))
