"""The run config: one training run's settings, made of the sections and the common settings."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from backend.config.sections import (ConstraintSettings, CPOSettings, DataSettings, DistributedSettings, DPOSettings,
                                     EvalSettings, GKDSettings, KTOSettings, LoraSettings, OnlineDPOSettings,
                                     ORPOSettings, PPOSettings, RLSettings, SimPOSettings, _meta, _Section, is_section)
from backend.core.mode_registry import (ALL_MODES, EVAL_MODES, GENERATING_EVAL_MODES, MODES, RL_MODES,  # no torch
                                        ModeSpec, mode_spec)
from backend.reporting import REPORTERS, missing_packages  # no torch
from backend.rewards.spec import RewardSourceList, gates  # pydantic only, no torch
from backend.tools.spec import BUILTIN_ENVIRONMENTS, ToolList, check_names, spec_problem  # pydantic only

TOOL_MODES = ("grpo",)  # TRL 1.16's tool loop: GRPOTrainer only

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_DATASET = "demo-sft-instructions"
AUTO_SAVE_RATIO = 0.1  # save_steps -1: a checkpoint every 10% of the run (transformers reads <1 as a ratio)


class RunConfig(_Section):
    name: str = Field("", max_length=80, title="Run name", description="Shown in the run list; empty: generated.",
                      json_schema_extra=_meta(trainer=False))
    mode: Literal[ALL_MODES] = Field("sft", title="Training mode",
                                     description="; ".join(f"{m.name}: {m.title}" for m in MODES.values()) + ".",
                                     json_schema_extra=_meta(trainer=False))
    model: str = Field(DEFAULT_MODEL, min_length=1, title="Model",
                       description=f"`{DEFAULT_MODEL}` (embedded, offline), a local save_pretrained folder, "
                                   "a Hugging Face Hub id, or `run:<id>` to train on from a finished run's model "
                                   "(its adapter merged into its base once), e.g. GRPO after an SFT warm-up.",
                       json_schema_extra=_meta(trainer=False))
    dataset: str = Field(DEFAULT_DATASET, min_length=1, title="Dataset",
                         description="A built-in demo set, a JSONL / JSON / CSV / Parquet file, a "
                                     "datasets.save_to_disk folder, a dataset of a LLaMA-Factory data folder "
                                     "(folder/name), or several of them, comma-separated (mixed as data.mix says).",
                         json_schema_extra=_meta(trainer=False))
    data: DataSettings = Field(default_factory=DataSettings, title="Data")
    finetuning: Literal["lora", "full"] = Field(
        "lora", title="Fine-tuning", description="lora: train a small adapter; full: update every weight.",
        json_schema_extra=_meta(trainer=False))
    lora: LoraSettings = Field(default_factory=LoraSettings, title="LoRA")

    learning_rate: float = Field(2e-4, gt=0, le=1, title="Learning rate",
                                 description="Peak learning rate (LoRA: 1e-4 to 5e-4; full: 1e-5 to 5e-5).",
                                 json_schema_extra=_meta())
    max_steps: int = Field(-1, ge=-1, le=10_000_000, title="Max steps",
                           description="Optimizer steps to train; -1 trains for the number of epochs.",
                           json_schema_extra=_meta())
    num_train_epochs: float = Field(1.0, gt=0, le=1000, title="Epochs",
                                    description="Passes over the dataset (used when max steps is -1).",
                                    json_schema_extra=_meta())
    per_device_train_batch_size: int = Field(2, ge=1, le=4096, title="Batch size",
                                             description="Examples per device per step.", json_schema_extra=_meta())
    gradient_accumulation_steps: int = Field(1, ge=1, le=4096, title="Gradient accumulation",
                                             description="Micro-batches summed before each optimizer step.",
                                             json_schema_extra=_meta())
    max_length: int = Field(512, ge=8, le=1_000_000, title="Max length",
                            description="Tokens per example; longer ones are truncated.",
                            json_schema_extra=_meta(aliases=("max_seq_length",),
                                                    # GRPO / RLOO keep whole prompts; PPO keeps their last tokens
                                                    trainer={"ppo": "max_prompt_length", "grpo": False,
                                                             "rloo": False}))
    seed: int = Field(42, ge=0, le=2**32 - 1, title="Seed", description="Random seed for data order and init.",
                      json_schema_extra=_meta("advanced"))
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", title="Precision",
        description="auto: fp32 on CPU (bf16 is ~12× slower there), bf16 on a GPU that supports it, else fp16. "
                    "fp16 needs a GPU; bf16 a GPU that has it (Ampere or newer) or a CPU.",
        json_schema_extra=_meta("compute", aliases={"bf16": "bf16", "fp16": "fp16"}, trainer=False))
    gradient_checkpointing: bool = Field(False, title="Gradient checkpointing",
                                         description="Activation checkpointing: recompute activations in the "
                                                     "backward pass; less memory, ~25% slower.",
                                         json_schema_extra=_meta("compute"))
    quantization: Literal["none", "4bit"] = Field(
        "none", title="4-bit base (QLoRA)",
        description="4bit: load the frozen base model in 4-bit NF4 with double quantization (bitsandbytes) and "
                    "train the LoRA adapter on top, in the precision above: about a quarter of the base's memory. "
                    "Needs a CUDA GPU, `pip install bitsandbytes` and LoRA.",
        json_schema_extra=_meta("compute", aliases={"load_in_4bit": "4bit"}, trainer=False))
    use_liger_kernel: bool = Field(False, title="Liger kernels",
                                   description="Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, fused linear "
                                               "cross-entropy): less GPU memory and faster steps. Needs a CUDA GPU "
                                               "and `pip install liger-kernel`.",
                                   json_schema_extra=_meta("compute"))
    packing: bool = Field(False, title="Packing",
                          description="Pack several short examples into each sequence (SFT).",
                          json_schema_extra=_meta("advanced", modes=["sft"]))
    padding_free: bool = Field(False, title="Padding-free",
                               description="Concatenate a batch without padding (needs flash attention on GPU).",
                               json_schema_extra=_meta("advanced", modes=["sft"]))
    group_by_length: bool = Field(False, title="Group by length",
                                  description="Batch examples of similar length together: less padding, faster "
                                              "on data of mixed lengths; the order is less random (SFT).",
                                  json_schema_extra=_meta("advanced", modes=["sft"], trainer=False))
    auto_find_batch_size: bool = Field(False, title="Find batch size",
                                       description="On a GPU out-of-memory error, halve the batch size and try "
                                                   "again instead of failing (gradient accumulation unchanged).",
                                       json_schema_extra=_meta("compute"))
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "linear", title="LR schedule", description="How the learning rate changes over training.",
        json_schema_extra=_meta("advanced"))
    warmup_steps: int = Field(0, ge=0, le=1_000_000, title="Warm-up steps",
                              description="Steps of linear learning-rate warm-up.", json_schema_extra=_meta("advanced"))
    weight_decay: float = Field(0.0, ge=0, le=1, title="Weight decay", description="AdamW weight decay.",
                                json_schema_extra=_meta("advanced"))
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, title="Max gradient norm",
                                 description="Gradient clipping; 0 disables it.", json_schema_extra=_meta("advanced"))
    logging_steps: int = Field(1, ge=1, le=100_000, title="Logging interval",
                               description="Log metrics every N steps (the live plots read these).",
                               json_schema_extra=_meta("advanced"))
    save_steps: int = Field(-1, ge=-1, le=10_000_000, title="Checkpoint interval",
                            description="Save a checkpoint (to resume from after a crash) every N steps; -1: "
                                        "about every 10% of the run; 0: none, only the final adapter.",
                            json_schema_extra=_meta("advanced"))
    save_total_limit: int = Field(2, ge=0, le=100_000, title="Checkpoints kept",
                                  description="Keep only the newest N checkpoints (older ones are deleted); "
                                              "0 keeps them all.", json_schema_extra=_meta("advanced"))
    save_minutes: float = Field(0.0, ge=0, le=10_000, title="Checkpoint every minutes",
                                description="Also save a checkpoint every N minutes of wall time (steps of "
                                            "uneven length, a machine that may be taken away); 0: only by steps.",
                                json_schema_extra=_meta("advanced", trainer=False))
    auto_resume: int = Field(0, ge=0, le=100, title="Auto-resume",
                             description="When the worker dies (killed, crashed; not a stop, nor refused settings "
                                         "or data) and a checkpoint exists, resume the run from it automatically, "
                                         "up to N times; 0: off.", json_schema_extra=_meta("advanced", trainer=False))
    stall_action: Literal["warn", "stop", "restart"] = Field(
        "warn", title="When the worker stalls",
        description="A worker that makes no progress (no step for 10× its own step time, at least 2 minutes, or a "
                    "frozen process: no heartbeat of its own for 30 s) is marked stalled. warn: only mark it; stop: "
                    "end the run (failed, saying why); restart: end the worker and resume from the last checkpoint "
                    "(from the start when none is saved yet).",
        json_schema_extra=_meta("advanced", trainer=False))
    stop_grace_s: int = Field(
        60, ge=5, le=3600, title="Stop grace period (s)",
        description="A stop asks the worker to save its adapter and end at the next step; if it has not ended this "
                    "many seconds later (stuck in a long step or in user code), its processes are killed: the run "
                    "is stopped without that save, its last checkpoint kept.",
                    json_schema_extra=_meta("advanced", trainer=False))
    report_to: list[Literal[REPORTERS]] = Field(
        default_factory=list, title="Also report to",
        description="Also write the trainer's logs for TensorBoard (event files in the run's folder), trackio (the "
                    "workspace's trackio folder), MLflow (the workspace's mlruns folder, or the server "
                    "MLFLOW_TRACKING_URI names) and / or Weights & Biases (offline, in the run's folder, unless "
                    "WANDB_MODE=online); MLflow and W&B are used once installed (`pip install mlflow-skinny`, `pip "
                    "install wandb`).",
        json_schema_extra=_meta("advanced"))
    num_processes: int = Field(1, ge=1, le=4096, title="Processes",
                               description="Training processes on this machine (one per GPU), via accelerate. On "
                                           "a GPU machine the run takes this many GPUs (plus a vLLM server's), the "
                                           "lowest free ones; it waits in the queue while fewer are free.",
                               json_schema_extra=_meta("compute", trainer=False))
    distributed: DistributedSettings = Field(default_factory=DistributedSettings, title="Distributed")
    dpo: DPOSettings = Field(default_factory=DPOSettings, title="DPO")
    kto: KTOSettings = Field(default_factory=KTOSettings, title="KTO")
    orpo: ORPOSettings = Field(default_factory=ORPOSettings, title="ORPO")
    cpo: CPOSettings = Field(default_factory=CPOSettings, title="CPO")
    simpo: SimPOSettings = Field(default_factory=SimPOSettings, title="SimPO")
    rl: RLSettings = Field(default_factory=RLSettings, title="Reinforcement learning")
    ppo: PPOSettings = Field(default_factory=PPOSettings, title="PPO")
    gkd: GKDSettings = Field(default_factory=GKDSettings, title="GKD")
    online_dpo: OnlineDPOSettings = Field(default_factory=OnlineDPOSettings, title="Online DPO")
    constraint: ConstraintSettings = Field(default_factory=ConstraintSettings, title="Cost constraint",
                                           json_schema_extra=_meta(trainer=False))
    eval: EvalSettings = Field(default_factory=EvalSettings, title="Evaluation")
    reward_sources: RewardSourceList = Field(
        default_factory=list, title="Reward sources",
        description="Where the RL reward comes from: a list of sources (rules, a reward model, embedding "
                    "similarity, diversity, a Python function from the workspace), each with a weight; the reward is "
                    "their weighted sum, minus λ × cost for each source with role: cost and a budget. YAML: "
                    "[{type: length, params: {target: 50}}, {type: regex, weight: 0.5, "
                    "params: {pattern: '<answer>.*?</answer>'}}]. SFT and the preference modes learn nothing from "
                    "them: they only score the answers generated at evaluation (eval.generate).",
        json_schema_extra=_meta("basic", modes=[*RL_MODES, *GENERATING_EVAL_MODES], trainer=False))

    tools: ToolList = Field(
        default_factory=list, title="Tools",
        description="Tools the policy may call while it answers (GRPO: TRL's tool loop; the reward judges the whole "
                    "exchange): a calculator, a Python sandbox, a search over documents in the workspace, or your "
                    "own function from a .py file. YAML: [{type: calculator}, {type: search, params: {folder: "
                    "docs}}]. The chat template must carry tool calls (data.chat_template: chatml-tools for "
                    "ChatML models without one).",
        json_schema_extra=_meta("basic", modes=list(TOOL_MODES), trainer=False))
    environment: str = Field(
        "", title="Environment",
        description="A class whose instance plays each episode: reset(**row) starts it from its dataset row, its "
                    "public methods are tools the policy may call, get_reward() scores the episode (reward source "
                    "kind: environment). Your own: envs/game.py:Game (a file in the workspace); shipped: "
                    "guess_number (data: demo-guess-number). It runs in a process of its own, each call "
                    "time-limited (rl.environment_timeout_s).",
        json_schema_extra=_meta("basic", modes=list(TOOL_MODES), trainer=False,
                                suggestions=sorted(BUILTIN_ENVIRONMENTS)))

    @property
    def spec(self) -> ModeSpec:
        """The run's mode as the registry defines it."""
        return mode_spec(self.mode)

    @property
    def teacher(self) -> str:
        """The teacher model a distilling mode loads beside the one trained (its section's `teacher`); "" for the
        other modes."""
        if not self.spec.teacher_model:
            return ""
        return next(getattr(self, s).teacher for s in self.spec.sections if hasattr(getattr(self, s), "teacher"))

    @field_validator("max_steps")
    @classmethod
    def _no_zero_steps(cls, v):
        if v == 0:
            raise ValueError("0 steps would train nothing; give a number of steps, or -1 (trains by epochs)")
        return v

    @field_validator("report_to", mode="before")
    @classmethod
    def _split_reporters(cls, v):
        if v is None:
            return []
        if isinstance(v, str):  # --set report_to=tensorboard,trackio
            v = [p.strip() for p in v.split(",")]
        if isinstance(v, list) and all(isinstance(p, str) for p in v):
            return [p for p in dict.fromkeys(v) if p]
        return v

    @field_validator("report_to")
    @classmethod
    def _check_installed(cls, v):
        if missing := missing_packages(v):
            raise ValueError(f"{', '.join(missing)} is not installed here; install it (`pip install "
                             f"{' '.join(missing)}`) or leave it out")
        return v

    def referenced_runs(self) -> set[str]:
        """Ids of the other runs this run loads when it starts: a reward model or the PPO value model's start
        (a run id, or a folder inside workspace/runs/<id>), or the base model or a distilling mode's teacher given
        as `run:<id>` or such a folder."""
        scorers = [self.ppo.value_init_run, *(s.params.get("model", "") for s in self.reward_sources
                                              if s.type == "reward_model")]
        ids = set()
        for spec, bare_is_run in [(self.model, False), (self.teacher, False), *((s, True) for s in scorers)]:
            spec = spec.strip()
            if spec.startswith("run:") or (bare_is_run and spec and len(Path(spec).parts) == 1):
                ids.add(spec.removeprefix("run:").partition("@")[0])  # run:<id>@<step>: the run <id>
            elif "runs" in (parts := Path(spec).parts)[:-1]:
                ids.add(parts[parts.index("runs") + 1])
        return ids

    def checkpoints_kept(self) -> int:
        """The most checkpoints the run's folder holds once a save has rotated: save_total_limit, or fewer when
        the run saves fewer; with no limit, every save (taken as one when their number is unknown: by epochs
        or by wall time)."""
        if not self.save_steps and not self.save_minutes:
            return 0
        saves = None
        if self.save_steps == -1 and not self.save_minutes:
            saves = round(1 / AUTO_SAVE_RATIO)
        elif self.save_steps > 0 and self.max_steps > 0 and not self.save_minutes:
            saves = -(-self.max_steps // self.save_steps)
        if self.save_total_limit:
            return min(self.save_total_limit, saves or self.save_total_limit)
        return saves or 1

    @property
    def world_size(self) -> int:
        """Training processes over all machines."""
        return self.num_processes * self.distributed.num_machines

    def reachable_rows(self) -> int | None:
        """The most training rows the run can read (max_steps × rows per optimizer step: batch × accumulation ×
        processes, × PPO's mini-batches per rollout; an RL row is a prompt, sampled rl.num_generations times, so
        fewer); None when unbounded (trained by epochs, or packed: a packed sequence holds any number of rows)."""
        if self.max_steps <= 0 or self.packing:
            return None
        per_step = self.per_device_train_batch_size * self.gradient_accumulation_steps * self.world_size
        rollouts = self.ppo.num_mini_batches if "ppo" in self.spec.sections else 1
        return self.max_steps * per_step * rollouts

    @model_validator(mode="after")
    def _check_mode_settings(self):
        sections = self.spec.sections
        for section in sections:
            getattr(self, section).check(self)
        self._check_quantization()
        self._check_eval()
        self._check_auto_resume()
        gates(self.reward_sources)  # here, not on the list: the message names the row, not the whole list
        if self.tools and self.mode not in TOOL_MODES:
            raise ValueError(f"tools: {self.mode.upper()} runs call no tools (TRL's tool loop is GRPO's); use mode: "
                             "grpo, or remove them")
        if problems := check_names(self.tools):
            raise ValueError(problems[0])
        self._check_environment()
        costs = [i for i, s in enumerate(self.reward_sources) if s.is_cost]
        if costs and "constraint" not in sections:
            raise ValueError(f"reward_sources.{costs[0]}.role: {self.mode.upper()} runs keep no cost constraint "
                             f"(PPO, GRPO and RLOO do); use role: reward or another mode")
        if self.reward_sources and self.mode in GENERATING_EVAL_MODES and not self.eval.generate:
            raise ValueError(f"reward_sources: {self.mode.upper()} runs learn nothing from reward sources; they "
                             "only score the answers generated at evaluation: turn on eval.generate, or remove them")
        return self

    def _check_environment(self) -> None:
        reads = [i for i, s in enumerate(self.reward_sources) if s.type == "environment"]
        if not self.environment.strip():
            if reads:
                raise ValueError(f"reward_sources.{reads[0]}: an environment source scores with the run's "
                                 "environment, and none is set: set environment, or use another kind")
            return
        if self.mode not in TOOL_MODES:
            raise ValueError(f"environment: {self.mode.upper()} runs play no environment (TRL's environments are "
                             "GRPO's); use mode: grpo, or clear it")
        if problem := spec_problem(self.environment):
            raise ValueError(problem)

    def _check_quantization(self) -> None:
        if self.quantization == "none":
            return
        if self.finetuning != "lora":
            raise ValueError("quantization: a 4-bit base is frozen, so only an adapter can train on it; set "
                             "finetuning to lora (QLoRA) or quantization to none")
        if self.spec.ddp_only:  # its own loop loads policy, reference and value models itself
            raise ValueError(f"quantization: {self.mode} loads its models in the workbench's own training loop, "
                             "which has no 4-bit loading; set quantization to none")

    def _check_auto_resume(self) -> None:
        if not self.auto_resume:
            return
        if not self.save_steps and not self.save_minutes:
            raise ValueError("auto_resume: the run saves no checkpoint to resume from (save_steps and save_minutes "
                             "are 0); set one of them, or auto_resume to 0")
        if self.distributed.num_machines > 1:
            raise ValueError("auto_resume: a supervisor restarts only its own machine's processes, and the other "
                             "machines' would be gone; set auto_resume to 0 for a run over several machines")

    def _check_eval(self) -> None:
        e = self.eval
        if e.enabled and self.mode not in EVAL_MODES and self.mode not in RL_MODES:
            field = "eval.dataset" if e.dataset else "eval.split"
            raise ValueError(f"{field}: {self.mode.upper()} runs are not evaluated; clear {field}")
        if e.dataset and e.split > 0:
            raise ValueError("eval.split: an evaluation dataset is given, so nothing is held out of the training "
                             "set; set eval.split to 0 or clear eval.dataset")
        if e.generate and self.spec.task == "seq_cls":
            raise ValueError("eval.generate: a reward model writes no answers (it scores them); its evaluation "
                             "already scores the held-out chosen above rejected (eval_accuracy, eval_margin); turn "
                             "eval.generate off")
        if e.generate and not e.enabled:
            raise ValueError("eval.generate: evaluation is off; give an eval.dataset or an eval.split (e.g. 0.1) "
                             "to generate on, or turn eval.generate off")
        if e.steps and not e.enabled:
            raise ValueError("eval.steps: evaluation is off; give an eval.dataset or an eval.split (e.g. 0.1), "
                             "or set eval.steps to 0")


def _section_modes() -> None:
    """A mode-specific section's settings apply to the modes whose registry entry reads the section, unless
    a setting names fewer itself."""
    for name, info in RunConfig.model_fields.items():
        users = [m.name for m in MODES.values() if name in m.sections]
        if users and is_section(info.annotation):
            for setting in info.annotation.model_fields.values():
                setting.json_schema_extra.setdefault("modes", users)


_section_modes()
