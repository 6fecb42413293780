"""Group relative policy optimisation: TRL's GRPOTrainer samples several completions per prompt, scores
them with the run's reward sources and pushes up the ones that beat their group's average.

Generation runs through transformers' generate, so it works on a CPU (slowly: it dominates the step).
"""
from trl import GRPOTrainer

from backend.models import load_causal_lm
from backend.modes.fast_generation import fast_generation
from backend.modes.rl_common import reward_functions, rl_args
from backend.core.step_timing import timed
from backend.modes.training import TrainContext, lora_config, model_kwargs


def build_trainer(ctx: TrainContext) -> GRPOTrainer:
    c = ctx.config
    reward_funcs, weights, callbacks = reward_functions(ctx)
    args = rl_args(ctx, weights)
    tokenizer = ctx.tokenizer()
    tools = {}
    if c.tools or c.environment:  # TRL's tool loop: calls parsed from each answer, run, their results appended,
        from backend.data.templates import use_tool_parser  # generation goes on
        from backend.tools import build_tools

        use_tool_parser(tokenizer, c.data.chat_template)
        tools = {"tools": build_tools(c.tools, ctx.store.workspace)}
    if c.environment:  # an instance per episode, each in a process of its own
        import os

        from backend.tools.environment import environment_factory

        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # said once in docs/agentic.md, not every run
        tools["environment_factory"] = environment_factory(c.environment, ctx.store.workspace,
                                                           c.rl.environment_timeout_s)
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    trainer_cls = timed(fast_generation(GRPOTrainer, c, ctx.is_main))
    return trainer_cls(model=model, reward_funcs=reward_funcs, args=args, train_dataset=ctx.dataset,
                       processing_class=tokenizer, peft_config=lora_config(c), callbacks=callbacks, **tools)
