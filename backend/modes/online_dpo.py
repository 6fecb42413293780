"""Online DPO: TRL's experimental OnlineDPOTrainer samples two completions per prompt, the run's reward sources
judge them (their weighted sum: the higher one is chosen) and DPO's loss learns from the pair against the
reference (LoRA: the adapter switched off; full fine-tuning: a frozen copy).

The reward sources reach it as GRPO's do (backend/modes/rl_common.py: the same TRL reward functions, samples
recorded at logging steps), so a reward model trained from labels, rules or their fused sum drives preference
training on the policy's own answers. Cost sources are refused by the config (it keeps no constraint), and it
generates with transformers in TRL's own loop (no vLLM, no merged-adapter generation).
"""
import math
import statistics

import torch
from trl.experimental.online_dpo import OnlineDPOTrainer

from backend.models import load_causal_lm
from backend.modes.rl_common import reward_functions
from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args


class _OnlineDPOTrainer(OnlineDPOTrainer):
    """OnlineDPOTrainer that also logs each reward source's mean and spread over the sampled answers under
    GRPO's names (rewards/<source>/mean, rewards/<source>/std: the Runs tab, sweeps' objectives), which TRL's
    trainer does not (it logs their weighted sum, objective/scores)."""

    def score_sources(self) -> None:
        """Wrap the reward functions (not a reward model TRL runs itself) to add their scores to the stats."""
        self._source_keys = set()
        self.reward_funcs = [f if isinstance(f, torch.nn.Module) else self._scored(f) for f in self.reward_funcs]

    def _scored(self, func):
        mean, std = f"rewards/{func.__name__}/mean", f"rewards/{func.__name__}/std"
        self._source_keys |= {mean, std}

        def scored(prompts, completions, **kwargs):
            scores = func(prompts=prompts, completions=completions, **kwargs)
            given = [float(v) for v in scores if v is not None and math.isfinite(float(v))]
            if given:  # a source may score none of a batch (a gated one); its lists then stay as they are
                self.stats.setdefault(mean, []).append(statistics.fmean(given))
                self.stats.setdefault(std, []).append(statistics.pstdev(given))
            return scores

        scored.__name__ = scored.__qualname__ = func.__name__
        return scored

    def _maybe_log_save_evaluate(self, *args, **kwargs):
        # TRL averages every stats list at a logging step: a source that scored nothing since the last one has none
        self.stats = {k: v for k, v in self.stats.items() if v or k not in getattr(self, "_source_keys", ())}
        return super()._maybe_log_save_evaluate(*args, **kwargs)


def build_trainer(ctx: TrainContext) -> OnlineDPOTrainer:
    c = ctx.config
    reward_funcs, weights, callbacks = reward_functions(ctx)
    args = trainer_args(ctx, reward_weights=weights)
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    trainer = _OnlineDPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=ctx.dataset,
                                processing_class=tokenizer, peft_config=lora_config(c), callbacks=callbacks)
    trainer.score_sources()
    return trainer
