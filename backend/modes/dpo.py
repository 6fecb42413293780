"""Direct preference optimisation: TRL's DPOTrainer on prompt + chosen + rejected.

With LoRA there is no second model: the reference is the same weights with the adapter switched off.
"""
from trl import DPOTrainer

from backend.models import load_causal_lm
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


def build_trainer(ctx: TrainContext) -> DPOTrainer:
    c = ctx.config
    args = trainer_args(ctx)
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    return DPOTrainer(model=model, ref_model=None, args=args, train_dataset=ctx.dataset,
                      eval_dataset=ctx.eval_dataset, processing_class=tokenizer, peft_config=lora_config(c))
