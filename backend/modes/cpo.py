"""Contrastive preference optimisation: TRL's experimental CPOTrainer on prompt + chosen + rejected.

DPO's loss without a reference model (the policy's own log-probabilities), plus an SFT term on the chosen answers
weighted by cpo_alpha. SimPO is the same trainer with loss_type "simpo" (backend/modes/simpo.py): length-averaged
log-probabilities and a target margin gamma, usually without the SFT term.
"""
from trl.experimental.cpo import CPOTrainer

from backend.models import load_causal_lm
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


def build_trainer(ctx: TrainContext, **mode_kwargs) -> CPOTrainer:
    """`mode_kwargs`: trainer arguments a mode built on this one fixes (SimPO: loss_type)."""
    c = ctx.config
    args = trainer_args(ctx, remove_unused_columns=False, **mode_kwargs)  # its pair collator reads the columns
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    return CPOTrainer(model=model, args=args, train_dataset=ctx.dataset, eval_dataset=ctx.eval_dataset,
                      processing_class=tokenizer, peft_config=lora_config(c))
