"""Proximal policy optimisation, the project's own (backend/ppo; TRL 1.16 has none): sample completions from
the LoRA policy, score them with the run's reward sources, penalise the KL from the base model, and train the
policy and a value model with clipped PPO losses. Same reward sources and live samples as GRPO.
"""
from transformers import set_seed

from backend.models import load_causal_lm
from backend.modes.fast_generation import said
from backend.modes.rl_common import reward_functions
from backend.ppo.trainer import PPOTrainer
from backend.ppo.value import build_value_model
from backend.modes.training import TrainContext, lora_config, model_dtype, trainer_args


def value_init_location(ctx: TrainContext) -> str:
    """The reward model `ppo.value_init_run` points to (an rm run id of this workspace, or a folder), or ""."""
    spec = ctx.config.ppo.value_init_run
    if not spec:
        return ""
    from backend.rewards.model import locate_reward_model

    return locate_reward_model(spec, ctx.store.workspace)


def build_trainer(ctx: TrainContext) -> PPOTrainer:
    c, p = ctx.config, ctx.config.ppo
    reward_funcs, weights, callbacks = reward_functions(ctx)
    args = trainer_args(ctx, reward_weights=weights)
    tokenizer = ctx.tokenizer()
    dtype = model_dtype(c)
    set_seed(c.seed)  # the LoRA and value-head initialisations are random
    policy = load_causal_lm(ctx.model_path, dtype=dtype)
    ref_model = None
    if c.finetuning == "lora":
        from peft import get_peft_model

        policy = get_peft_model(policy, lora_config(c))
    else:  # full fine-tuning: the reference is a frozen copy of the base
        ref_model = load_causal_lm(ctx.model_path, dtype=dtype)
    value = build_value_model(p.value_model, ctx.model_path, tokenizer, lora_config(c, task_type="SEQ_CLS"),
                              init_from=value_init_location(ctx), policy=policy, dtype=dtype)
    trainer = PPOTrainer(model=policy, value_model=value, reward_funcs=reward_funcs, args=args,
                         train_dataset=ctx.dataset, processing_class=tokenizer, ref_model=ref_model,
                         callbacks=callbacks)
    trainer.merge_generation = said(c, ctx.is_main, dropout_applies=False)  # it generates in eval mode
    return trainer
