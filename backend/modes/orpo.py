"""Odds ratio preference optimisation: TRL's experimental ORPOTrainer on prompt + chosen + rejected.

SFT and preference in one stage: the loss is the chosen answers' negative log-likelihood plus λ (orpo.beta) times
an odds-ratio term that pushes the rejected answers below them. There is no reference model, so neither a second
copy (full fine-tuning) nor a second forward pass with the adapter switched off (LoRA).
"""
from trl.experimental.orpo import ORPOTrainer

from backend.models import load_causal_lm
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


def build_trainer(ctx: TrainContext) -> ORPOTrainer:
    c = ctx.config
    args = trainer_args(ctx, remove_unused_columns=False)  # its pair collator reads the columns (TRL sets it anyway)
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    return ORPOTrainer(model=model, args=args, train_dataset=ctx.dataset, eval_dataset=ctx.eval_dataset,
                       processing_class=tokenizer, peft_config=lora_config(c))
