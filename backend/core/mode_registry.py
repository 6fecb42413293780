"""What a training mode is, defined once: the schema, the data layer, sweeps, export, chat and labeling all
read these entries instead of testing mode names. Adding a mode means its module and one entry here.

Plain data, no torch: the run-config schema imports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Format = tuple[str, tuple[str, ...]]  # (format name, columns it needs)

_PREFERENCE: tuple[Format, ...] = (("preference", ("prompt", "chosen", "rejected")),)
_PROMPT_ONLY: tuple[Format, ...] = (("prompt_only", ("prompt",)),)
_RL_METRICS = ("reward", "reward_std", "kl", "entropy", "completions/mean_length", "frac_reward_zero_std")
# The charts a run's page leads with (fnmatch patterns, in order); the rest fold into groups by prefix.
_FIT_CHARTS = ("loss", "eval_loss")
# The run doctor's checks (backend/doctor/checks.py) each mode runs on its metrics
_COMMON_CHECKS = ("loss_nan", "grad_explosion", "warmup", "slowdown")  # step_time: TRL's, or StoreCallback's
_FIT_CHECKS = (*_COMMON_CHECKS, "loss_spike", "overfitting")
_RL_CHECKS = (*_COMMON_CHECKS, "truncation", "reward_trend", "reward_hacking", "kl_runaway", "entropy_collapse",
              "constraint_unmet")
_GROUP_CHECKS = ("zero_variance", *_RL_CHECKS)
_TOOL_CHECKS = ("tools_unused", "tool_failures")  # TRL's tools/* metrics, logged by GRPO runs with tools
# Online DPO logs no completion lengths and keeps no constraint; its truncation reading is
# val/contain_eos_token, its KL and entropy objective/kl and objective/entropy
_PAIR_RL_CHECKS = (*_COMMON_CHECKS, "truncation", "reward_trend", "kl_runaway", "entropy_collapse")
# What a preference trainer logs on its chosen / rejected pairs (DPO, ORPO, CPO, SimPO)
_PAIR_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                 "logps/rejected", "logits/chosen", "logits/rejected")
_PAIR_CHARTS = (*_FIT_CHARTS, "rewards/accuracies", "eval_rewards/accuracies", "rewards/margins", "eval_rouge_l",
                "eval_reward", "learning_rate")
_RL_CHARTS = ("reward", "rewards/*/mean", "eval_reward", "eval_rewards/*/mean", "cost/*/mean", "lambda/*",
              "constraint/violation_rate")


@dataclass(frozen=True)
class ModeSpec:
    name: str
    title: str
    module: str  # defines build_trainer(ctx)
    args_class: str  # its trainer's config dataclass ("module:Class"); the schema's settings of that name reach it
    formats: tuple[Format, ...]  # dataset formats it trains on, first match wins
    metrics: tuple[str, ...]  # what its trainer logs besides loss, grad_norm and learning_rate (TRL 1.16 names)
    sections: tuple[str, ...] = ()  # run-config sections it reads; each section's check() runs for it
    online_rl: bool = False  # samples completions and learns from the reward sources
    groups_completions: bool = False  # scores several completions of one prompt against each other
    evaluable: bool = False  # has a loss-based evaluation loop (RL would sample for every eval prompt)
    task: Literal["causal", "seq_cls"] = "causal"  # seq_cls: a scorer that writes no answers
    keeps_extra_columns: bool = True  # extra dataset columns reach the trainer (reward functions read them)
    label_format: Literal["sft", "dpo", "kto"] = "dpo"  # what it reads from a labeling session
    ddp_only: bool = False  # its own training loop shards with DDP only (no FSDP / DeepSpeed)
    vllm: bool = False  # its TRL trainer can generate with vLLM (use_vllm)
    answer_column: str = ""  # the column holding the answer its data asks for (what generated answers match)
    charts: tuple[str, ...] = ()  # what the run's page shows first (fnmatch patterns), the rest folded by prefix
    # memory: the trainer computes log-probs in tiles without the (batch, length, vocab) logits (TRL 1.16)
    fused_logits: bool = False
    reference_model: bool = False  # full fine-tuning keeps a frozen copy (LoRA: the adapter switched off)
    teacher_model: bool = False  # loads a frozen teacher beside the student (its section's `teacher`): distillation
    # online RL in TRL's own generation loop that samples two completions per prompt and trains on them as a
    # chosen / rejected pair, the reward sources judging which is which (no rl.num_generations, no merged generation)
    judges_pairs: bool = False
    # what the run doctor reads its metrics for (backend/doctor/checks.py); each must read a metric the mode logs
    checks: tuple[str, ...] = ()

    @property
    def writes_answers(self) -> bool:
        return self.task == "causal"

    @property
    def pairwise(self) -> bool:
        """Trains on chosen / rejected pairs only (single-answer labels cannot feed it)."""
        return all({"chosen", "rejected"} <= set(columns) for _, columns in self.formats)


MODES: dict[str, ModeSpec] = {m.name: m for m in (
    ModeSpec("sft", "supervised fine-tuning", "backend.modes.sft", "trl:SFTConfig",
             formats=(("messages", ("messages",)), ("prompt_completion", ("prompt", "completion")),
                      ("text", ("text",))),
             metrics=("entropy", "mean_token_accuracy", "num_tokens"),
             evaluable=True, keeps_extra_columns=False, label_format="sft", answer_column="completion",
             checks=_FIT_CHECKS,
             charts=(*_FIT_CHARTS, "mean_token_accuracy", "eval_mean_token_accuracy", "eval_rouge_l",
                     "learning_rate")),
    ModeSpec("rm", "reward modelling", "backend.modes.rm", "trl:RewardConfig",
             formats=(("preference", ("chosen", "rejected")),),
             metrics=("accuracy", "margin", "mean_reward"),
             evaluable=True, task="seq_cls", checks=_FIT_CHECKS,
             charts=(*_FIT_CHARTS, "accuracy", "eval_accuracy", "margin", "eval_margin", "learning_rate")),
    ModeSpec("dpo", "direct preference optimisation", "backend.modes.dpo", "trl:DPOConfig", formats=_PREFERENCE,
             metrics=_PAIR_METRICS, sections=("dpo",), evaluable=True, answer_column="chosen", fused_logits=True,
             reference_model=True, checks=_FIT_CHECKS, charts=_PAIR_CHARTS),
    ModeSpec("kto", "Kahneman-Tversky optimisation", "backend.modes.kto", "trl:KTOConfig",
             formats=(("unpaired_preference", ("prompt", "completion", "label")),),
             metrics=("kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
                      "logps/rejected"),
             sections=("kto",), evaluable=True, label_format="kto", answer_column="completion",
             reference_model=True, checks=_FIT_CHECKS,
             charts=(*_FIT_CHARTS, "kl", "rewards/chosen", "rewards/rejected", "eval_rouge_l", "eval_reward",
                     "learning_rate")),
    # Reference-free preference modes (TRL 1.16's experimental trainers): no frozen copy, the policy alone. SimPO
    # is CPO's trainer with loss_type "simpo" (backend/modes/simpo.py), a mode of its own so that it is found by name
    # and keeps its own defaults (beta 2, no SFT term) in its own section.
    ModeSpec("orpo", "odds ratio preference optimisation", "backend.modes.orpo", "trl.experimental.orpo:ORPOConfig",
             formats=_PREFERENCE, metrics=(*_PAIR_METRICS, "nll_loss", "log_odds_ratio", "log_odds_chosen"),
             sections=("orpo",), evaluable=True, answer_column="chosen", checks=_FIT_CHECKS,
             charts=(*_PAIR_CHARTS[:5], "nll_loss", "log_odds_ratio", *_PAIR_CHARTS[5:])),
    ModeSpec("cpo", "contrastive preference optimisation", "backend.modes.cpo", "trl.experimental.cpo:CPOConfig",
             formats=_PREFERENCE, metrics=(*_PAIR_METRICS, "nll_loss"), sections=("cpo",), evaluable=True,
             answer_column="chosen", checks=_FIT_CHECKS, charts=(*_PAIR_CHARTS[:5], "nll_loss", *_PAIR_CHARTS[5:])),
    ModeSpec("simpo", "simple preference optimisation", "backend.modes.simpo", "trl.experimental.cpo:CPOConfig",
             formats=_PREFERENCE, metrics=(*_PAIR_METRICS, "nll_loss"), sections=("simpo",), evaluable=True,
             answer_column="chosen", checks=_FIT_CHECKS, charts=_PAIR_CHARTS),
    # On-policy distillation (TRL 1.16's experimental GKDTrainer): SFT's data, the loss the generalised JSD between
    # the student's and a frozen teacher's next-token distributions, on the dataset's answers or (a share lmbda of
    # the steps) on answers the student samples itself. GKDTrainer logs the loss alone; the mode module adds
    # on_policy (the share of steps on the student's own samples).
    ModeSpec("gkd", "on-policy distillation (generalised knowledge distillation)", "backend.modes.gkd",
             "trl.experimental.gkd:GKDConfig",
             formats=(("messages", ("messages",)), ("prompt_completion", ("prompt", "completion"))),
             metrics=("on_policy",), sections=("gkd",), evaluable=True, keeps_extra_columns=False, label_format="sft",
             answer_column="completion", teacher_model=True, checks=_FIT_CHECKS,
             charts=(*_FIT_CHARTS, "on_policy", "eval_rouge_l", "eval_reward", "learning_rate")),
    ModeSpec("ppo", "proximal policy optimisation", "backend.modes.ppo", "backend.ppo.trainer:PPOConfig", formats=_PROMPT_ONLY,
             metrics=("reward", "objective/kl", "objective/rlhf_reward", "objective/scores", "policy/approxkl",
                      "policy/clipfrac", "policy/entropy", "loss/policy", "loss/value", "val/clipfrac",
                      "completions/mean_length"),
             sections=("rl", "ppo", "constraint"), online_rl=True, ddp_only=True, reference_model=True,
             checks=_RL_CHECKS,
             charts=(*_RL_CHARTS, "objective/kl", "completions/mean_length", "policy/entropy", "loss/value")),
    ModeSpec("grpo", "group relative policy optimisation", "backend.modes.grpo", "trl:GRPOConfig", formats=_PROMPT_ONLY,
             metrics=_RL_METRICS, sections=("rl", "constraint"), online_rl=True, groups_completions=True,
             vllm=True, fused_logits=True, reference_model=True, checks=(*_GROUP_CHECKS, *_TOOL_CHECKS),
             charts=(*_RL_CHARTS, "kl", "completions/mean_length", "entropy")),
    ModeSpec("rloo", "REINFORCE leave-one-out", "backend.modes.rloo", "trl:RLOOConfig", formats=_PROMPT_ONLY,
             metrics=_RL_METRICS, sections=("rl", "constraint"), online_rl=True, groups_completions=True,
             vllm=True, reference_model=True, checks=_GROUP_CHECKS,
             charts=(*_RL_CHARTS, "kl", "completions/mean_length", "entropy")),
    # Online DPO (TRL 1.16's experimental OnlineDPOTrainer): two completions per prompt, the run's reward sources'
    # weighted sum picks the chosen one, DPO's loss against the reference. TRL logs the weighted sum
    # (objective/scores), the mode module each source's rewards/<name>/mean as GRPO does; no completion lengths.
    ModeSpec("online_dpo", "online direct preference optimisation", "backend.modes.online_dpo",
             "trl.experimental.online_dpo:OnlineDPOConfig", formats=_PROMPT_ONLY,
             metrics=("objective/scores", "objective/scores_margin", "objective/rlhf_reward", "objective/kl",
                      "objective/entropy", "objective/non_score_reward", "rewards/chosen", "rewards/rejected",
                      "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected",
                      "val/contain_eos_token", "beta"),
             sections=("rl", "online_dpo"), online_rl=True, judges_pairs=True, reference_model=True,
             checks=_PAIR_RL_CHECKS,
             charts=("objective/scores", "rewards/*/mean", "eval_reward", "eval_rewards/*/mean",
                     "objective/scores_margin", "rewards/accuracies", "rewards/margins", "objective/kl",
                     "val/contain_eos_token")),
)}

ALL_MODES = tuple(MODES)
RL_MODES = tuple(m.name for m in MODES.values() if m.online_rl)
EVAL_MODES = tuple(m.name for m in MODES.values() if m.evaluable)
GROUP_MODES = tuple(m.name for m in MODES.values() if m.groups_completions)
VLLM_MODES = tuple(m.name for m in MODES.values() if m.vllm)
# Loss-evaluated modes that write answers: they may also generate at evaluation (eval.generate)
GENERATING_EVAL_MODES = tuple(m.name for m in MODES.values() if m.evaluable and m.writes_answers)


def mode_spec(name: str) -> ModeSpec:
    try:
        return MODES[name]
    except KeyError:
        raise KeyError(f"unknown training mode '{name}'; known: {', '.join(MODES)}") from None


def modes_where(**wanted) -> list[str]:
    """Names of the modes whose entries have the given field values, e.g. modes_where(online_rl=True)."""
    return [m.name for m in MODES.values() if all(getattr(m, k) == v for k, v in wanted.items())]
