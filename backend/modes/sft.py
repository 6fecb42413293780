"""Supervised fine-tuning: TRL's SFTTrainer on messages, prompt+completion or text."""
from trl import SFTTrainer

from backend.models import load_causal_lm
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


def build_trainer(ctx: TrainContext) -> SFTTrainer:
    c = ctx.config
    args = trainer_args(ctx, train_sampling_strategy="group_by_length" if c.group_by_length else "random")
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    return SFTTrainer(model=model, args=args, train_dataset=ctx.dataset, eval_dataset=ctx.eval_dataset,
                      processing_class=tokenizer, peft_config=lora_config(c))
