"""REINFORCE leave-one-out: TRL's RLOOTrainer samples several completions per prompt and uses the mean
reward of the others as each one's baseline. Same reward sources and samples as GRPO.
"""
from trl import RLOOTrainer

from backend.models import load_causal_lm
from backend.modes.fast_generation import fast_generation
from backend.modes.rl_common import reward_functions, rl_args
from backend.core.step_timing import timed
from backend.modes.training import TrainContext, lora_config, model_kwargs


def build_trainer(ctx: TrainContext) -> RLOOTrainer:
    c = ctx.config
    reward_funcs, weights, callbacks = reward_functions(ctx)
    args = rl_args(ctx, weights)
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    trainer_cls = timed(fast_generation(RLOOTrainer, c, ctx.is_main))
    return trainer_cls(model=model, reward_funcs=reward_funcs, args=args, train_dataset=ctx.dataset,
                       processing_class=tokenizer, peft_config=lora_config(c), callbacks=callbacks)
