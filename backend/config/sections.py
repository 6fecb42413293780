"""The sections of the run config (LoRA, distributed, DPO, KTO, ORPO, CPO, SimPO, RL, PPO, GKD, Online DPO,
evaluation): every setting's label, help, range and group, once. A mode-specific section's `check` refuses
combinations with the rest of the run that TRL would refuse only after the model has loaded."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from backend.data.templates import TEMPLATE_NAMES  # plain data
from backend.core.mode_registry import (GENERATING_EVAL_MODES, GROUP_MODES, VLLM_MODES,  # no torch
                                        modes_where)

if TYPE_CHECKING:
    from backend.config.run_config import RunConfig


class ConfigError(ValueError):
    """Invalid run settings; `errors` holds one line per problem, each naming its field."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


# Where a top-level setting is laid out: "basic" in view, the others folded under Advanced; a group with a title
# here gets a titled block of its own there (a section's settings are laid out under the section's title).
GROUP_TITLES = {"compute": "Compute"}


def _meta(group: str = "basic", **extra: Any) -> dict:
    return {"group": group, **extra}


def _int_choices(ann) -> bool:
    args = get_args(ann)
    return get_origin(ann) is Literal and bool(args) and all(type(a) is int for a in args)


def _takes_numbers(ann) -> bool:
    """An int or float setting (or a choice of ints, zero_stage), which a YAML true / false must not fill."""
    return ann in (int, float) or _int_choices(ann)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _on_off(cls, v, info):
        # YAML (a preset, or `--set rl.merged_generation=off`) reads a bare on / off as a boolean
        ann = cls.model_fields[info.field_name].annotation
        if isinstance(v, bool):
            word = "on" if v else "off"
            if word in get_args(ann):  # rl.probe has an off, no on
                return word
        # pydantic reads true as 1: `--set max_steps=true` would train one step
        if isinstance(v, bool) and _takes_numbers(ann) or (
                isinstance(v, list) and get_origin(ann) is list and _takes_numbers(get_args(ann)[0])
                and any(isinstance(x, bool) for x in v)):
            kind = "whole number" if int in (ann, *get_args(ann)) or _int_choices(ann) else "number"
            raise ValueError(f"expected a {kind}, not true / false")
        return v

    def check(self, run: RunConfig) -> None:
        """Combinations with the rest of the run TRL would refuse only after the model has loaded; called for
        the sections the run's mode reads (its registry entry's `sections`)."""


class LoraSettings(_Section):
    r: int = Field(8, ge=1, le=1024, title="LoRA rank", description="Rank of the low-rank update matrices.",
                   json_schema_extra=_meta(aliases=("lora_r",)))
    alpha: int = Field(16, ge=1, le=4096, title="LoRA alpha",
                       description="Scaling of the update (alpha / r). Commonly 2 × r.",
                       json_schema_extra=_meta(aliases=("lora_alpha",)))
    dropout: float = Field(0.0, ge=0.0, le=0.9, title="LoRA dropout",
                           description="Dropout on the LoRA input. 0 (PEFT's default) lets RL runs generate with "
                                       "the adapter merged and read each prompt once in the update, both exact; "
                                       "0.05-0.1 can regularise a small SFT set.",
                           json_schema_extra=_meta("advanced", aliases=("lora_dropout",)))
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"], title="Target modules",
        description="Module names to adapt, comma-separated (e.g. q_proj,v_proj), or all-linear.",
        json_schema_extra=_meta("advanced", aliases=("lora_target_modules",)))
    use_dora: bool = Field(False, title="DoRA",
                           description="Weight-decomposed LoRA: learns each adapted weight's magnitude apart from its "
                                       "direction; often closer to full fine-tuning at the same rank, ~20-30% slower.",
                           json_schema_extra=_meta("advanced", aliases=("use_dora",)))
    use_rslora: bool = Field(False, title="rsLoRA",
                             description="Rank-stabilised LoRA: scale the update by alpha / √r instead of alpha / r, "
                                         "so high ranks (32 and up) keep learning.",
                             json_schema_extra=_meta("advanced", aliases=("use_rslora",)))

    @field_validator("target_modules", mode="before")
    @classmethod
    def _split(cls, v):
        if isinstance(v, str):
            v = [p.strip() for p in v.split(",")]
        if isinstance(v, list):
            v = [str(p).strip() for p in v if str(p).strip()]
            if not v:
                raise ValueError("name at least one module (e.g. q_proj,v_proj) or all-linear")
        return v


# TRL 1.16's DPO losses that need no setting beyond beta (exo_pair needs label smoothing; sft is not preference).
DPO_LOSSES = ("sigmoid", "ipo", "hinge", "sigmoid_norm", "nca_pair", "bco_pair", "sppo_hard", "aot", "aot_unpaired",
              "apo_zero", "apo_down", "discopop")
# TRL 1.16's GRPO losses that run with token-level importance sampling (luspo / vespo need other settings).
GRPO_LOSSES = ("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo")


class DistributedSettings(_Section):
    strategy: Literal["ddp", "fsdp", "deepspeed"] = Field(
        "ddp", title="Parallelism",
        description="ddp: a full model copy per process; fsdp: weights, gradients and optimizer state sharded "
                    "(FSDP2, GPUs); deepspeed: ZeRO (GPUs, `pip install deepspeed`).",
        json_schema_extra=_meta("advanced"))
    zero_stage: Literal[1, 2, 3] = Field(
        2, title="ZeRO stage",
        description="DeepSpeed: 1 shards optimizer state, 2 also gradients, 3 also the weights.",
        json_schema_extra=_meta("advanced"))
    offload: bool = Field(False, title="Offload to CPU",
                          description="fsdp / deepspeed: keep parameters and optimizer state in CPU memory between "
                                      "uses; fits larger models on the GPUs, costs speed.",
                          json_schema_extra=_meta("advanced"))
    num_machines: int = Field(1, ge=1, le=1024, title="Machines",
                              description="Machines (nodes) taking part; each runs the same run config with its "
                                          "own machine rank, and machine 0 records the metrics.",
                              json_schema_extra=_meta("advanced"))
    machine_rank: int = Field(0, ge=0, le=1023, title="Machine rank",
                              description="This machine's number, 0 to machines - 1; 0 is the main one.",
                              json_schema_extra=_meta("advanced"))
    main_process_ip: str = Field("", max_length=255, title="Main machine address",
                                 description="IP or host name of machine 0, reachable from every machine "
                                             "(several machines only).", json_schema_extra=_meta("advanced"))
    main_process_port: int = Field(29500, ge=1, le=65535, title="Main machine port",
                                   description="A free TCP port on machine 0 for the processes to meet.",
                                   json_schema_extra=_meta("advanced"))
    accelerate_config: str = Field(
        "", max_length=1000, title="accelerate config file",
        description="Optional: a YAML from `accelerate config` for anything else; it replaces the settings "
                    "above, and its process and machine counts must match this run's.",
        json_schema_extra=_meta("advanced"))

    @field_validator("main_process_ip", "accelerate_config", mode="before")
    @classmethod
    def _strip(cls, v):
        return v.strip() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _check(self):
        if self.machine_rank >= self.num_machines:
            raise ValueError(f"machine_rank {self.machine_rank} must be below num_machines ({self.num_machines}); "
                             "machines are numbered from 0")
        if self.num_machines > 1 and not self.main_process_ip and not self.accelerate_config:
            raise ValueError("main_process_ip: several machines need the address of machine 0 "
                             "(e.g. 10.0.0.5), the same on every machine")
        return self


class DPOSettings(_Section):
    beta: float = Field(0.1, gt=0, le=100, title="DPO beta",
                        description="How far the policy may move from the reference (the model without the "
                                    "adapter): higher stays closer. Typical 0.05 to 0.5.",
                        json_schema_extra=_meta(aliases=("beta",)))
    loss_type: Literal[DPO_LOSSES] = Field(
        "sigmoid", title="DPO loss",
        description="sigmoid: the original DPO; ipo: squared loss, robust to overfitting; hinge: SLiC; "
                    "apo_zero / apo_down: anchored to the chosen answers; the rest are TRL's variants.",
        json_schema_extra=_meta("advanced", aliases=("loss_type",)))


class KTOSettings(_Section):
    beta: float = Field(0.1, gt=0, le=100, title="KTO beta",
                        description="How far the policy may move from the reference: higher stays closer.",
                        json_schema_extra=_meta(aliases=("beta",)))
    desirable_weight: float = Field(1.0, gt=0, le=100, title="Desirable weight",
                                    description="Weight of the loss on good (label true) examples; raise it when "
                                                "they are fewer than the bad ones.",
                                    json_schema_extra=_meta("advanced"))
    undesirable_weight: float = Field(1.0, gt=0, le=100, title="Undesirable weight",
                                      description="Weight of the loss on bad (label false) examples.",
                                      json_schema_extra=_meta("advanced"))
    loss_type: Literal["kto", "apo_zero_unpaired"] = Field(
        "kto", title="KTO loss",
        description="kto: estimates a KL term from mismatched pairs in each batch (batch size ≥ 2); "
                    "apo_zero_unpaired: anchored, no KL term.",
        json_schema_extra=_meta("advanced", aliases=("loss_type",)))

    def check(self, run: RunConfig) -> None:
        if self.loss_type != "kto":
            return
        if run.per_device_train_batch_size < 2:
            raise ValueError("per_device_train_batch_size: the kto loss estimates its KL term from the other "
                             "examples of a batch, so the batch size must be at least 2 (or use "
                             "kto.loss_type apo_zero_unpaired)")
        if run.eval.enabled and run.eval.batch_size == 1:
            raise ValueError("eval.batch_size: the kto loss estimates its KL term from the other examples of a "
                             "batch, so the evaluation batch size must be at least 2 (or 0: the training one)")


class ORPOSettings(_Section):
    beta: float = Field(0.1, gt=0, le=100, title="ORPO lambda",
                        description="Weight of the odds-ratio preference term beside the SFT loss on the chosen "
                                    "answers (the paper's λ, TRL's beta): higher pushes the rejected answers down "
                                    "harder. Typical 0.05 to 0.5.",
                        json_schema_extra=_meta(aliases=("beta",)))


# TRL 1.16's CPO losses besides simpo, which is the simpo mode (CPOConfig's loss_type="simpo").
CPO_LOSSES = ("sigmoid", "hinge", "ipo")


class CPOSettings(_Section):
    beta: float = Field(0.1, gt=0, le=100, title="CPO beta",
                        description="Scale of the preference margin in the loss (there is no reference model): "
                                    "higher sharpens it. Typical 0.05 to 0.5.",
                        json_schema_extra=_meta(aliases=("beta",)))
    loss_type: Literal[CPO_LOSSES] = Field(
        "sigmoid", title="CPO loss",
        description="sigmoid: the CPO paper's (DPO's loss without a reference); hinge: SLiC; ipo: squared loss on "
                    "length-averaged log-probabilities. SimPO is a mode of its own.",
        json_schema_extra=_meta("advanced", aliases=("loss_type",)))
    cpo_alpha: float = Field(1.0, ge=0, le=100, title="SFT weight (alpha)",
                             description="Weight of the SFT (negative log-likelihood) loss on the chosen answers "
                                         "added to the preference loss; 0 trains on the preference alone.",
                             json_schema_extra=_meta("advanced", aliases=("cpo_alpha",)))
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, title="Label smoothing",
                                   description="The chance that a pair's preference is wrong (noisy labels): the "
                                               "sigmoid loss then also learns a little from the reversed pair. 0 "
                                               "trusts every pair; hinge and ipo ignore it.",
                                   json_schema_extra=_meta("advanced", aliases=("label_smoothing",)))

    def check(self, run: RunConfig) -> None:
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError(f"cpo.label_smoothing: the {self.loss_type} loss ignores it; set it to 0 or use "
                             "cpo.loss_type sigmoid")


class SimPOSettings(_Section):
    beta: float = Field(2.0, gt=0, le=100, title="SimPO beta",
                        description="Scale of the length-normalised reward (average log-probability of an answer); "
                                    "on another scale than DPO's beta: the SimPO paper uses 2 and above.",
                        json_schema_extra=_meta(aliases=("beta",)))
    simpo_gamma: float = Field(1.0, ge=0, le=100, title="Target margin (gamma)",
                               description="The reward margin the chosen answer must win by before the loss lets go; "
                                           "tune it with beta (the paper tunes the ratio gamma / beta).",
                               json_schema_extra=_meta(aliases=("simpo_gamma",)))
    cpo_alpha: float = Field(0.0, ge=0, le=100, title="SFT weight (alpha)",
                             description="Weight of an SFT (negative log-likelihood) loss on the chosen answers; 0 is "
                                         "SimPO as published, above 0 is CPO-SimPO.",
                             json_schema_extra=_meta("advanced", aliases=("cpo_alpha",)))


# The online RL modes that sample rl.num_generations completions per prompt in the workbench's generation path
# (Online DPO samples a pair in TRL's own loop)
_SAMPLING_MODES = modes_where(online_rl=True, judges_pairs=False)


class RLSettings(_Section):
    num_generations: int = Field(2, ge=1, le=1024, title="Completions per prompt",
                                 description="Completions sampled for each prompt (GRPO / RLOO: at least 2, scored "
                                             "against each other; PPO: 1 is enough). The batch size counts "
                                             "completions: batch size × gradient accumulation × processes must "
                                             "be a multiple of this.",
                                 json_schema_extra=_meta(modes=_SAMPLING_MODES, aliases=("num_generations",)))
    max_completion_length: int = Field(64, ge=1, le=1_000_000, title="Max completion length",
                                       description="Tokens generated per completion; generation dominates the "
                                                   "step time.",
                                       json_schema_extra=_meta(aliases=("max_completion_length",),
                                                               trainer={"online_dpo": "max_new_tokens"}))
    temperature: float = Field(1.0, gt=0, le=10, title="Temperature",
                               description="Sampling temperature: higher gives more varied completions.",
                               json_schema_extra=_meta("advanced", aliases=("temperature",)))
    top_p: float = Field(1.0, gt=0, le=1, title="Top-p",
                         description="Sample from the smallest set of tokens whose probability adds up to this; "
                                     "1 keeps all.", json_schema_extra=_meta("advanced", aliases=("top_p",)))
    probe: Literal["stop", "warn", "off"] = Field(
        "stop", title="Reward probe",
        description="Before the first step, sample one group of completions for a few prompts with these settings "
                    "and score them with the reward sources: the log and the Runs tab say what would keep the run "
                    "from learning (answers cut at the length limit, a source scoring all the same, groups without "
                    "reward spread). stop: a run whose every group has zero reward spread stops at once; warn: "
                    "it only warns; off: no probe.",
        json_schema_extra=_meta("advanced", trainer=False))
    max_tool_calling_iterations: int = Field(
        4, ge=1, le=100, title="Tool-calling turns",
        description="With tools: at most this many rounds of tool calls and results before the policy's final "
                    "answer; every round's tokens count toward the max completion length.",
        json_schema_extra=_meta("advanced", modes=["grpo"], aliases=("max_tool_calling_iterations",)))
    environment_timeout_s: float = Field(
        30.0, gt=0, le=3600, title="Environment time limit per call (s)",
        description="With an environment: a tool call still running after this long is answered with a tool error "
                    "and that episode's state is lost (reward 0); a reset this slow stops the run.",
        json_schema_extra=_meta("advanced", modes=["grpo"], trainer=False))
    beta: float = Field(0.0, ge=0, le=100, title="KL coefficient (beta)",
                        description="Penalty for moving away from the reference model. 0 skips the reference pass "
                                    "(faster); 0.01 to 0.05 keeps the policy close.",
                        json_schema_extra=_meta("advanced", modes=list(GROUP_MODES), aliases=("beta",)))
    loss_type: Literal[GRPO_LOSSES] = Field(
        "dapo", title="GRPO loss",
        description="How token losses are averaged. dapo: over the tokens of the whole batch (no length bias); "
                    "grpo: per sequence (favours short correct answers); dr_grpo: by a constant; "
                    "bnpo: over the local batch; cispo / sapo: softer clipping.",
        json_schema_extra=_meta("advanced", modes=["grpo"], aliases=("loss_type",)))

    epsilon: float = Field(0.2, gt=0, le=10, title="Clip range",
                           description="How far one update may move a token's probability ratio (PPO-style clipping; "
                                       "GSPO's sequence-level ratios want ~3e-4).",
                           json_schema_extra=_meta("advanced", modes=list(GROUP_MODES), aliases=("epsilon",)))
    epsilon_high: float = Field(0.0, ge=0, le=10, title="Upper clip range",
                                description="Clip-higher (DAPO: 0.28): a larger upper bound lets unlikely tokens that "
                                            "earned reward rise faster, keeping exploration up; 0: the clip range.",
                                json_schema_extra=_meta("advanced", modes=list(GROUP_MODES), unset=0.0,
                                                        aliases=("epsilon_high",)))
    delta: float = Field(0.0, ge=0, le=100, title="Two-sided clip (delta)",
                         description="Also bound the ratio of tokens with negative advantage from above (INTELLECT-2; "
                                     "above 1 + clip range, e.g. 4); 0: off.",
                         json_schema_extra=_meta("advanced", modes=["grpo"], unset=0.0, aliases=("delta",)))
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", title="Importance sampling level",
        description="token: one probability ratio per token (GRPO); sequence: one per completion, the mean of its "
                    "tokens' (GSPO), steadier for long completions.",
        json_schema_extra=_meta("advanced", modes=["grpo"], aliases=("importance_sampling_level",)))
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", title="Reward scaling",
        description="Advantages divided by the standard deviation of the group's rewards (GRPO), of the batch's, or "
                    "not at all (Dr. GRPO: no bias towards easy or hard questions).",
        json_schema_extra=_meta("advanced", modes=["grpo"], aliases=("scale_rewards",)))
    mask_truncated_completions: bool = Field(
        False, title="Leave cut-off answers out",
        description="Completions that hit the length limit add nothing to the loss (DAPO): an answer cut short is "
                    "not punished for what it had no room to say.",
        json_schema_extra=_meta("advanced", modes=list(GROUP_MODES), aliases=("mask_truncated_completions",)))
    top_entropy_quantile: float = Field(
        1.0, ge=0, le=1, title="Top-entropy tokens",
        description="Train only on this share of each completion's tokens, those the model was least sure of "
                    "(\"Beyond the 80/20 rule\": 0.2); 1: every token.",
        json_schema_extra=_meta("advanced", modes=["grpo"], aliases=("top_entropy_quantile",)))

    generation_backend: Literal["transformers", "vllm"] = Field(
        "transformers", title="Generation backend",
        description="transformers: generate with the training model (any machine); vllm: generate with vLLM (CUDA "
                    "GPUs, `pip install vllm`), much faster for long completions; vLLM has not yet run on hardware "
                    "in the workbench's own tests.",
        json_schema_extra=_meta("advanced", modes=list(VLLM_MODES), aliases={"use_vllm": "vllm"}, trainer=False))
    merged_generation: Literal["auto", "on", "off"] = Field(
        "auto", title="Merged-adapter generation",
        description="Generate with the LoRA adapter folded into the weights: one product per adapted layer instead "
                    "of three, while the update still trains the adapter on untouched weights. auto: where that is "
                    "exact (LoRA dropout 0, no DoRA, no 4-bit base, no FSDP / DeepSpeed); on: also with LoRA "
                    "dropout, which generation then leaves out; off: generate through the adapter.",
        json_schema_extra=_meta("advanced", modes=_SAMPLING_MODES, trainer=False))
    shared_prompts: bool = Field(
        True, title="Read each prompt once",
        description="Generation prefills each distinct prompt once, and the update runs it once for all its "
                    "completions (the same log-probs and gradients up to float rounding; 2-5x less update work "
                    "with short completions). Left out by itself where it would not be exact: dropout while "
                    "training, gradient checkpointing, FSDP / DeepSpeed, Liger. Off: TRL's own path.",
        json_schema_extra=_meta("advanced", modes=list(GROUP_MODES), trainer=False))
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate", title="vLLM placement",
        description="colocate: vLLM shares each training GPU with the trainer; server: a `trl vllm-serve` process "
                    "on GPUs of its own (rl.vllm_gpus), started and stopped with the run, the run training on the "
                    "others.",
        json_schema_extra=_meta("advanced", modes=list(VLLM_MODES), aliases=("vllm_mode",), trainer=False))
    vllm_gpus: int = Field(1, ge=1, le=64, title="vLLM server GPUs",
                           description="Server mode: GPUs the vLLM server takes (its tensor-parallel size; it must "
                                       "divide the model's attention heads). 1 inference + N training GPUs: 1 here "
                                       "and N processes.",
                           json_schema_extra=_meta("advanced", modes=list(VLLM_MODES), trainer=False))
    vllm_server_host: str = Field("", max_length=255, title="vLLM server address",
                                  description="Server mode: empty: the run starts the server itself (on machine 0 "
                                              "when there are several; the others reach it at the main machine "
                                              "address). Else the host of a `trl vllm-serve` already running, e.g. "
                                              "on another node; the run then takes no GPUs for it.",
                                  json_schema_extra=_meta("advanced", modes=list(VLLM_MODES), trainer=False))
    vllm_server_port: int = Field(8000, ge=1, le=65535, title="vLLM server port",
                                  description="Server mode: the server's HTTP port. A server the run starts on one "
                                              "machine takes the next free port from here, so runs side by side do "
                                              "not clash.",
                                  json_schema_extra=_meta("advanced", modes=list(VLLM_MODES), trainer=False))
    vllm_gpu_memory_utilization: float = Field(
        0.0, ge=0, le=0.95, title="vLLM GPU memory share",
        description="The share of each vLLM GPU's memory vLLM reserves for weights and KV cache; 0: 0.3 when "
                    "colocated (the trainer needs the rest), 0.9 on a server's own GPUs.",
        json_schema_extra=_meta("advanced", modes=list(VLLM_MODES), aliases=("vllm_gpu_memory_utilization",),
                                trainer=False))

    @field_validator("vllm_server_host", mode="before")
    @classmethod
    def _strip(cls, v):
        return v.strip() if isinstance(v, str) else v

    @property
    def starts_server(self) -> bool:
        """A run that starts (and stops) its own vLLM server."""
        return self.generation_backend == "vllm" and self.vllm_mode == "server" and not self.vllm_server_host

    def _check_vllm(self, run: RunConfig) -> None:
        if self.generation_backend != "vllm":
            return
        if not run.spec.vllm:
            raise ValueError(f"rl.generation_backend: {run.mode} generates in the workbench's own loop, without "
                             f"vLLM ({' / '.join(VLLM_MODES)} can use it); choose transformers")
        if self.vllm_mode == "colocate" and self.vllm_gpus != 1:
            raise ValueError(f"rl.vllm_gpus: {self.vllm_gpus} GPUs for a vLLM server, and vLLM is colocated with "
                             "the trainer on the training GPUs; set rl.vllm_mode to server or rl.vllm_gpus to 1")
        if self.vllm_mode == "colocate" and self.vllm_server_host:
            raise ValueError("rl.vllm_server_host: colocated vLLM runs inside the training processes and reaches no "
                             "server; set rl.vllm_mode to server or clear rl.vllm_server_host")

    def check(self, run: RunConfig) -> None:
        M = run.mode.upper()
        self._check_vllm(run)
        if not run.reward_sources:
            raise ValueError(f"reward_sources: {M} learns from rewards; add at least one source "
                             "(e.g. {type: regex, params: {pattern: '<answer>.*?</answer>'}})")
        if self.num_generations < 2 and any(s.type == "diversity" for s in run.reward_sources):
            raise ValueError("rl.num_generations: a diversity source compares the completions of the same prompt, "
                             "so it needs at least 2 per prompt")
        if not run.spec.groups_completions:
            return
        if self.num_generations < 2:
            raise ValueError(f"rl.num_generations: {M} compares completions of the same prompt, "
                             "so it needs at least 2 per prompt")
        per_step = run.per_device_train_batch_size * run.gradient_accumulation_steps * run.world_size
        if per_step % self.num_generations:
            # a vLLM server's GPUs only generate: the training processes alone share out the groups
            server = f"; the vLLM server's {self.vllm_gpus} GPU(s) are not training processes" \
                if self.generation_backend == "vllm" and self.vllm_mode == "server" else ""
            raise ValueError(
                f"rl.num_generations: {M} samples {self.num_generations} completions per "
                f"prompt, and each generation batch (batch size × gradient accumulation × processes = "
                f"{run.per_device_train_batch_size} × {run.gradient_accumulation_steps} × "
                f"{run.world_size} = {per_step} completions) must hold whole groups of them{server}; make that "
                f"product a multiple of {self.num_generations} (e.g. batch size "
                f"{self.num_generations}) or change rl.num_generations")


class ConstraintSettings(_Section):
    """The Lagrange multipliers of the cost sources (reward sources with role: cost); see
    backend/rewards/constraint.py for the update rule."""

    lambda_init: float = Field(0.0, ge=0, le=1e6, title="Initial λ",
                               description="Each cost's multiplier at the start: what one unit of cost takes off "
                                           "the reward before the run has measured anything.",
                               json_schema_extra=_meta("advanced"))
    lambda_lr: float = Field(0.1, ge=0, le=1e6, title="λ learning rate",
                             description="How fast λ moves each step: λ += rate × (mean cost − budget), never "
                                         "below 0. Larger reacts faster to a violation and oscillates more.",
                             json_schema_extra=_meta("advanced"))
    lambda_max: float = Field(10.0, gt=0, le=1e6, title="λ cap",
                              description="The most λ can reach, so a long violation cannot drown the reward.",
                              json_schema_extra=_meta("advanced"))
    patience: int = Field(10, ge=0, le=10_000_000, title="Over-budget patience",
                          description="Steps in a row a cost may stay over its budget before the log warns (or the "
                                      "run stops, below); 0: never.",
                          json_schema_extra=_meta("advanced"))
    stop: bool = Field(False, title="Stop when over budget",
                       description="Stop the run (as the Stop button does) once a cost has been over its budget for "
                                   "the patience's number of steps, instead of only warning.",
                       json_schema_extra=_meta("advanced"))

    def check(self, run: RunConfig) -> None:
        if self.lambda_init > self.lambda_max:
            raise ValueError(f"constraint.lambda_init: {self.lambda_init:g} is above the cap constraint.lambda_max "
                             f"({self.lambda_max:g}); start λ at or below the cap")
        if self.stop and not self.patience:
            raise ValueError("constraint.patience: stopping when over budget needs a number of steps to wait "
                             "(e.g. 10); set constraint.patience or turn constraint.stop off")


class PPOSettings(_Section):
    gamma: float = Field(1.0, ge=0, le=1, title="Discount (gamma)",
                         description="Discount of later rewards within a completion; 1 counts the final score fully "
                                     "at every token (usual for language).",
                         json_schema_extra=_meta("advanced", aliases=("gamma",)))
    lam: float = Field(0.95, ge=0, le=1, title="GAE lambda",
                       description="Generalised advantage estimation: 1 uses the actual returns (more variance), "
                                   "0 trusts the value model's estimate (more bias).",
                       json_schema_extra=_meta("advanced", aliases=("lam",)))
    cliprange: float = Field(0.2, gt=0, le=10, title="Policy clip range",
                             description="How far the probability ratio to the sampling policy may move before "
                                         "the loss stops rewarding it. Typical 0.1 to 0.3.",
                             json_schema_extra=_meta("advanced", aliases=("cliprange",)))
    cliprange_value: float = Field(0.2, gt=0, le=1000, title="Value clip range",
                                   description="How far a value estimate may move from the rollout's per update.",
                                   json_schema_extra=_meta("advanced"))
    vf_coef: float = Field(0.1, ge=0, le=100, title="Value loss weight",
                           description="Weight of the value model's loss next to the policy loss.",
                           json_schema_extra=_meta("advanced", aliases=("vf_coef",)))
    num_ppo_epochs: int = Field(4, ge=1, le=100, title="PPO epochs",
                                description="Passes over each rollout batch; one training step is one rollout and "
                                            "its PPO epochs.", json_schema_extra=_meta(aliases=("num_ppo_epochs",)))
    num_mini_batches: int = Field(1, ge=1, le=4096, title="Minibatches",
                                  description="Optimizer steps per PPO epoch. The rollout batch is batch size × "
                                              "gradient accumulation × minibatches completions per process.",
                                  json_schema_extra=_meta("advanced", aliases=("num_mini_batches",)))
    kl_coef: float = Field(0.05, ge=0, le=100, title="KL coefficient",
                           description="Penalty per token for moving away from the reference (the model without "
                                       "the adapter). 0.01 to 0.2; the starting value when adaptive.",
                           json_schema_extra=_meta(aliases=("kl_coef",)))
    adaptive_kl: bool = Field(False, title="Adaptive KL",
                              description="Raise or lower the KL coefficient after each rollout to keep the KL near "
                                          "the target (Ziegler et al. 2019).",
                              json_schema_extra=_meta("advanced"))
    target_kl: float = Field(6.0, gt=0, le=1000, title="Target KL",
                             description="With adaptive KL: the KL per completion (nats) to stay near.",
                             json_schema_extra=_meta("advanced"))
    horizon: int = Field(10000, ge=1, le=100_000_000, title="KL horizon",
                         description="With adaptive KL: completions over which the coefficient may change by at "
                                     "most 20%; smaller adapts faster.",
                         json_schema_extra=_meta("advanced"))
    whiten_rewards: bool = Field(False, title="Whiten rewards",
                                 description="Scale the per-token rewards of each rollout to unit variance (helps "
                                             "when scores are large or drift).",
                                 json_schema_extra=_meta("advanced"))
    value_model: Literal["separate", "shared"] = Field(
        "separate", title="Value model",
        description="separate: a second copy of the model with its own adapter and a value head (stabler, twice "
                    "the memory); shared: a value head on the policy's own backbone (less memory, the value loss "
                    "also trains the policy's adapter).",
        json_schema_extra=_meta("advanced", trainer=False))
    value_init_run: str = Field("", max_length=1000, title="Value model from reward model",
                                description="Empty: a fresh value head. Or the id of a finished rm run (or a reward "
                                            "model folder) on the same base model to start the value model from "
                                            "(separate value model only).",
                                json_schema_extra=_meta("advanced", trainer=False))
    missing_eos_penalty: float = Field(0.0, ge=0, le=1000, title="Missing-EOS penalty",
                                       description="Subtracted from the score of completions cut off at the max "
                                                   "completion length; 0 disables it.",
                                       json_schema_extra=_meta("advanced"))

    @field_validator("value_init_run", mode="before")
    @classmethod
    def _strip(cls, v):
        return v.strip() if isinstance(v, str) else v

    def check(self, run: RunConfig) -> None:
        rl = run.rl
        rollout = run.per_device_train_batch_size * run.gradient_accumulation_steps * self.num_mini_batches
        if rollout % rl.num_generations:
            raise ValueError(
                f"rl.num_generations: PPO samples {rl.num_generations} completions per prompt, and each rollout "
                f"batch (batch size × gradient accumulation × ppo.num_mini_batches = "
                f"{run.per_device_train_batch_size} × {run.gradient_accumulation_steps} × {self.num_mini_batches} = "
                f"{rollout} completions per process) must hold whole groups of them; make that product a multiple "
                f"of {rl.num_generations} or change rl.num_generations")
        if self.value_init_run and self.value_model == "shared":
            raise ValueError("ppo.value_init_run: a reward model brings its own backbone, so it can only start a "
                             "separate value model; set ppo.value_model to separate or clear ppo.value_init_run")
        if self.adaptive_kl and self.kl_coef == 0:
            raise ValueError("ppo.kl_coef: adaptive KL scales the coefficient up and down from its starting value, "
                             "which cannot be 0; start it above 0 (e.g. 0.05) or turn ppo.adaptive_kl off")



class GKDSettings(_Section):
    teacher: str = Field("", max_length=1000, title="Teacher model",
                         description="The model distilled into the one trained: anything `model` takes (a local "
                                     "save_pretrained folder, a Hub id, `run:<id>` of a finished run, merged once, "
                                     "or a merged export), usually a bigger model or an SFT run. It must share the "
                                     "student's tokenizer: the loss compares whole next-token distributions.",
                         json_schema_extra=_meta(trainer=False, aliases=("teacher_model_name_or_path",)))
    lmbda: float = Field(0.5, ge=0, le=1, title="On-policy share (lambda)",
                         description="The share of steps that train on answers the student samples itself (GKD's "
                                     "on-policy data) instead of the dataset's; 0 is plain distillation on the "
                                     "dataset, 1 fully on-policy.",
                         json_schema_extra=_meta(aliases=("lmbda",)))
    beta: float = Field(0.5, ge=0, le=1, title="JSD interpolation (beta)",
                        description="The divergence between the student's and the teacher's next-token "
                                    "distributions: 0 is forward KL (the student covers all the teacher's answers), "
                                    "1 reverse KL (it settles on the teacher's likeliest), between a generalised "
                                    "Jensen-Shannon divergence.",
                        json_schema_extra=_meta(aliases=("beta",)))
    temperature: float = Field(0.9, gt=0, le=10, title="Temperature",
                               description="Sampling temperature of the on-policy answers; both models' logits are "
                                           "also divided by it in the loss.",
                               json_schema_extra=_meta("advanced", aliases=("temperature",)))
    max_new_tokens: int = Field(128, ge=1, le=32768, title="On-policy answer length",
                                description="The most tokens per answer the student (or, with seq_kd, the teacher) "
                                            "samples.",
                                json_schema_extra=_meta("advanced", aliases=("max_new_tokens",)))
    seq_kd: bool = Field(False, title="Sequence-level KD",
                         description="On the steps that are not on-policy, train on answers the teacher samples "
                                     "instead of the dataset's (supervised fine-tuning on the teacher's outputs).",
                         json_schema_extra=_meta("advanced", aliases=("seq_kd",)))

    @field_validator("teacher", mode="before")
    @classmethod
    def _strip(cls, v):
        return v.strip() if isinstance(v, str) else v

    def check(self, run: RunConfig) -> None:
        if not self.teacher:
            raise ValueError("gkd.teacher: GKD distils a teacher model into the one trained; name the teacher (a "
                             "bigger model of the same family: a local folder, a Hub id, or run:<id> of a finished "
                             "run), sharing the model's tokenizer")
        if self.teacher == run.model.strip():
            raise ValueError(f"gkd.teacher: {self.teacher} is also the model trained, and a model distilled into "
                             "itself learns nothing; name a bigger or a fine-tuned model as the teacher")


# TRL 1.16's Online DPO losses
ONLINE_DPO_LOSSES = ("sigmoid", "ipo")


class OnlineDPOSettings(_Section):
    beta: float = Field(0.1, gt=0, le=100, title="Online DPO beta",
                        description="DPO's beta on the sampled pairs: how far the policy may move from the reference "
                                    "(higher keeps it closer). Typical 0.05 to 0.5.",
                        json_schema_extra=_meta(aliases=("beta",)))
    loss_type: Literal[ONLINE_DPO_LOSSES] = Field(
        "sigmoid", title="Online DPO loss",
        description="sigmoid: DPO's loss; ipo: IPO's squared loss (beta is its regularisation).",
        json_schema_extra=_meta("advanced", aliases=("loss_type",)))
    missing_eos_penalty: float = Field(0.0, ge=0, le=1000, title="Missing-EOS penalty",
                                       description="Subtracted from the score of a completion cut off at the max "
                                                   "completion length before the pair is judged, so unfinished "
                                                   "answers lose; 0: none.",
                                       json_schema_extra=_meta("advanced", unset=0.0,
                                                               aliases=("missing_eos_penalty",)))


class EvalSettings(_Section):
    dataset: str = Field("", max_length=1000, title="Evaluation dataset",
                         description="Empty: none (or a share of the training set, below). Else a dataset in the "
                                     "same forms and format as the training one: a built-in set, a file, a "
                                     "save_to_disk folder or labels:<session>. SFT, RM and the preference modes "
                                     "(DPO, KTO, ORPO, CPO, SimPO) report their loss on it; GRPO, RLOO and PPO "
                                     "answer its prompts greedily and log eval_reward (the reward sources' weighted "
                                     "sum) and eval_rewards/<source>/mean.",
                         json_schema_extra=_meta("advanced"))
    split: float = Field(0.0, ge=0, le=0.5, title="Held-out share",
                         description="With no evaluation dataset: the share of the training set held out for "
                                     "evaluation (e.g. 0.1), chosen with the run's seed; 0 evaluates nothing.",
                         json_schema_extra=_meta("advanced"))
    steps: int = Field(0, ge=0, le=10_000_000, title="Evaluation interval",
                       description="Evaluate every N steps and at the end (logged as eval_loss etc.); "
                                   "0 only at the end.",
                       json_schema_extra=_meta("advanced"))
    batch_size: int = Field(0, ge=0, le=4096, title="Evaluation batch size",
                            description="Examples per device per evaluation step; 0 uses the training batch size "
                                        "(RL modes: prompts answered together; 0: four times the training batch).",
                            json_schema_extra=_meta("advanced"))
    limit: int = Field(32, ge=0, le=1_000_000, title="Evaluation prompts (generation)",
                       description="GRPO, RLOO, PPO, and SFT and the preference modes generating at evaluation: the "
                                   "first N held-out prompts answered at each evaluation; 0: all of them (each "
                                   "evaluation generates for every one).",
                       json_schema_extra=_meta("advanced"))
    generate: bool = Field(False, title="Generate at evaluation",
                           description="SFT, GKD and the preference modes (DPO, KTO, ORPO, CPO, SimPO): at each "
                                       "evaluation also answer the held-out prompts greedily (the first eval.limit) "
                                       "and score the answers: ROUGE-L against the answer the set gives (SFT, GKD: "
                                       "the completion or last assistant turn; DPO, ORPO, CPO, SimPO: chosen; KTO: "
                                       "completions labelled "
                                       "good), logged as eval_rouge_l, and by the reward sources if any (eval_reward, "
                                       "eval_rewards/<source>/mean). GRPO, RLOO and PPO always do; an RM writes no "
                                       "answers (its evaluation scores held-out chosen above rejected: "
                                       "eval_accuracy).",
                           json_schema_extra=_meta("advanced", modes=list(GENERATING_EVAL_MODES)))
    max_new_tokens: int = Field(64, ge=1, le=32768, title="Evaluation answer length",
                                description="Generating at evaluation (SFT, GKD and the preference modes): the most tokens "
                                            "per answer. RL modes answer as long as they train "
                                            "(rl.max_completion_length).",
                                json_schema_extra=_meta("advanced", modes=list(GENERATING_EVAL_MODES)))

    @field_validator("dataset", mode="before")
    @classmethod
    def _strip(cls, v):
        return v.strip() if isinstance(v, str) else v

    @property
    def enabled(self) -> bool:
        return bool(self.dataset) or self.split > 0


class DataSettings(_Section):
    columns: dict[str, str] = Field(
        default_factory=dict, title="Dataset columns",
        description="Which dataset column is which, when its names are not TRL's: name=column pairs, e.g. "
                    "prompt=question, completion=answer (YAML: {prompt: question, completion: answer}). Applied "
                    "before the format is detected. Names are TRL's (prompt, completion, chosen, rejected, label, "
                    "messages, text) or what a reward source reads (answer). Empty: the dataset's own names.",
        json_schema_extra=_meta())
    system: str = Field("", max_length=100_000, title="System message",
                        description="Added as the system message of every conversation that has none of its own "
                                    "(chat datasets only). Empty: none added.", json_schema_extra=_meta())
    max_samples: int = Field(0, ge=0, le=1_000_000_000, title="Max samples",
                             description="Train on at most this many rows of the dataset (and of an evaluation "
                                         "dataset); 0: every row.", json_schema_extra=_meta("advanced"))
    shuffle: bool = Field(False, title="Shuffle before sampling",
                          description="Take the max-samples rows at random (with the run's seed) instead of the "
                                      "first ones. Training batches are shuffled either way.",
                          json_schema_extra=_meta("advanced"))

    max_row_chars: int = Field(
        1_000_000, ge=0, le=1_000_000_000, title="Max characters per row",
        description="A row whose text (every column together) is longer than this is refused with its row number "
                    "and size before anything loads, or cut down when long rows is truncate: tokenizing one "
                    "50 MB row takes minutes and gigabytes, and the model sees at most max length tokens anyway. "
                    "0: no limit.", json_schema_extra=_meta("advanced"))
    long_rows: Literal["refuse", "truncate"] = Field(
        "refuse", title="Long rows",
        description="A row over max characters per row: refuse names it (and every other one) so the file can be "
                    "fixed; truncate cuts the row to that many characters before tokenizing (the first texts, "
                    "the prompt, kept whole; the last cut).",
        json_schema_extra=_meta("advanced"))

    chat_template: Literal[TEMPLATE_NAMES] = Field(
        "model", title="Chat template",
        description="How conversations become text: model, the model's own; or chatml, qwen, llama-3, mistral, "
                    "gemma (that family's special tokens, for its base models) or plain (role: text lines, any "
                    "tokenizer) instead, e.g. for a base model without one. The trained adapter keeps it.",
        json_schema_extra=_meta("advanced"))
    mix: Literal["concat", "interleave"] = Field(
        "concat", title="Mixing",
        description="With several datasets (comma-separated in the dataset field): concat trains on them one "
                    "after another (batches are shuffled anyway); interleave alternates their rows by the weights "
                    "below until every one is used up.", json_schema_extra=_meta("advanced"))
    mix_weights: list[float] = Field(
        default_factory=list, title="Mixing weights",
        description="interleave: each dataset's share of the rows, in the order they are listed, e.g. 0.7, 0.3; "
                    "empty: equal shares.", json_schema_extra=_meta("advanced"))

    @field_validator("mix_weights", mode="before")
    @classmethod
    def _split_weights(cls, v):
        if isinstance(v, str):
            return [p.strip() for p in v.split(",") if p.strip()]
        return [] if v is None else v

    @field_validator("mix_weights")
    @classmethod
    def _check_weights(cls, v):
        if any(w < 0 for w in v) or (v and not sum(v) > 0):
            raise ValueError("give non-negative shares with a positive sum, e.g. 0.7, 0.3")
        return v

    @field_validator("columns", mode="before")
    @classmethod
    def _parse(cls, v):
        """`prompt=question, completion=answer` (the form's text, --set) or a mapping (YAML)."""
        if v is None or (isinstance(v, str) and not v.strip()):
            return {}
        if isinstance(v, str):
            pairs = [p.strip() for p in v.split(",") if p.strip()]
            if bad := [p for p in pairs if "=" not in p]:
                raise ValueError(f"{bad[0]!r} is not a name=column pair; write e.g. prompt=question, "
                                 "completion=answer")
            v = dict(p.split("=", 1) for p in pairs)
        if isinstance(v, dict):
            return {str(name).strip(): str(column).strip() if column is not None else "" for name, column in v.items()}
        return v

    @field_validator("columns")
    @classmethod
    def _check(cls, v):
        if empty := [f"{name}={column}" for name, column in v.items() if not name or not column]:
            raise ValueError(f"{empty[0]!r}: give both the name and the dataset column")
        seen: dict[str, str] = {}
        for name, column in v.items():
            if column in seen:
                raise ValueError(f"column `{column}` is given as both {seen[column]} and {name}; give it once")
            seen[column] = name
        return {name: column for name, column in v.items() if name != column}  # prompt=prompt changes nothing


def is_section(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
