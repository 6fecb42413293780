"""Reward modelling: TRL's RewardTrainer scores chosen above rejected with a one-output sequence classifier.

The score head is new and trained in full next to the LoRA update (PEFT's modules_to_save for SEQ_CLS), so
the saved adapter is a complete reward model: `backend.models.load_reward_model` turns a finished run back into
(model, tokenizer).
"""
from transformers import set_seed
from trl import RewardTrainer

from backend.models import load_sequence_classifier
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


def build_trainer(ctx: TrainContext) -> RewardTrainer:
    c = ctx.config
    args = trainer_args(ctx)
    tokenizer = ctx.tokenizer()
    set_seed(c.seed)  # the score head is initialised at random when the model loads
    model = load_sequence_classifier(ctx.model_path, tokenizer, **model_kwargs(c))
    # task_type SEQ_CLS makes PEFT train and save the score head in full (modules_to_save)
    return RewardTrainer(model=model, args=args, train_dataset=ctx.dataset, eval_dataset=ctx.eval_dataset,
                         processing_class=tokenizer, peft_config=lora_config(c, task_type="SEQ_CLS"))
