"""How much memory a run needs per training process, before it starts: weights, adapter, gradients, optimizer
states, activations, and the reference / value / reward / teacher models of the modes that keep them, for the run's
precision, device and sharding. The model's size comes from its config.json alone (no weights are read).

On a CPU the estimate is the worker's peak resident set (the process baseline below included); on a GPU it is
the memory the process takes on its GPU (CUDA context included). The activation coefficients were calibrated on
this project's worker: peak RSS of 3-step runs of the embedded model (SFT and DPO, LoRA and full, lengths 16
to 512) came within 5% of this model.

No torch at import, so a form can call it on every change.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from backend.models.specs import EMBEDDED_MODEL, ModelError, is_hub_id, local_folder

if TYPE_CHECKING:  # the estimate reads a run's settings; the model layer sits below the schema
    from backend.config import RunConfig

GiB = 2**30
# Peak RSS of the worker process itself (python, torch, transformers, TRL, peft, datasets, accelerate, the
# tokenizer and the dataset), measured as `memory/peak_rss_gb` of a 3-step SFT LoRA run of the 2-layer,
# 64-wide test model (13 MB of weights) with 8-token rows on this project's CPU machine: 0.57 GiB.
CPU_PROCESS_BASELINE = int(0.56 * GiB)
# A CUDA context with cuBLAS / cuDNN workspaces takes 0.3-0.6 GiB outside torch's allocator (torch 2.x on
# recent GPUs).
GPU_PROCESS_BASELINE = int(0.5 * GiB)

# Elements each token keeps for the backward pass, per decoder layer, in units of the layer's widths: the
# norms, attention inputs and outputs and the MLP's gate / up / activation (calibrated, see above). Full
# fine-tuning also keeps the inputs of the frozen-in-LoRA projections for their weight gradients.
_PER_LAYER_HIDDEN, _PER_LAYER_MLP, _PER_LAYER_KV = 20, 4, 2
_FULL_EXTRA_HIDDEN, _FULL_EXTRA_MLP = 1, 1
# Vocabulary-wide float32 tensors per token: logits and their log-softmax for the loss; a trainer that
# computes log-probs in tiles (ModeSpec.fused_logits) keeps a fraction of one.
_LOGIT_COPIES, _FUSED_LOGIT_COPIES = 2.0, 0.5
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes, as its config.json gives them (Llama, Mistral, Qwen, SmolLM, ...)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied_embeddings: bool = True
    attention_bias: bool = False
    mlp_bias: bool = False
    # the model_type of a config that names its sizes otherwise (GPT-2's n_embd, n_layer, n_head), read through
    # its transformers config's attribute_map and counted as a Llama-style model: an approximate size; "" when
    # the config names them as Llama does
    renamed_from: str = ""

    @classmethod
    def from_config(cls, config: dict, source: str = "config.json") -> ModelShape:
        config = config.get("text_config") or config  # a multimodal config nests the language model's
        config, renamed = _standard_names(config)
        need = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")
        if missing := [k for k in need if not isinstance(config.get(k), int)]:
            raise ModelError(f"{source} has no {', '.join(missing)}: the memory estimate reads a decoder-only "
                             "transformer's sizes (Llama-style configs, or names its transformers config maps "
                             "them to)", "no_shape", source)
        heads = config["num_attention_heads"]
        return cls(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                   num_layers=config["num_hidden_layers"], intermediate_size=config["intermediate_size"],
                   num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or config["hidden_size"] // heads,
                   tied_embeddings=bool(config.get("tie_word_embeddings", True)),
                   attention_bias=bool(config.get("attention_bias", False)),
                   mlp_bias=bool(config.get("mlp_bias", False)), renamed_from=renamed)

    def linears(self) -> dict[str, tuple[int, int]]:
        """(inputs, outputs) of each projection of one decoder layer."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @property
    def layer_linear_parameters(self) -> int:
        """Every decoder layer's projection weights (what 4-bit quantization shrinks)."""
        return self.num_layers * sum(a * b for a, b in self.linears().values())

    @property
    def parameters(self) -> int:
        lin = self.linears()
        biases = (sum(lin[n][1] for n in ("q_proj", "k_proj", "v_proj", "o_proj")) if self.attention_bias else 0) \
            + (sum(lin[n][1] for n in ("gate_proj", "up_proj", "down_proj")) if self.mlp_bias else 0)
        norms = 2 * self.hidden_size
        return self.embedding_parameters + self.layer_linear_parameters + self.num_layers * (norms + biases) \
            + self.hidden_size  # the final norm

    def lora_parameters(self, r: int, targets: list[str]) -> int:
        """The adapter's size: r × (inputs + outputs) for every targeted projection of every layer. all-linear
        adapts every projection; names the model lacks count nothing (preflight names them)."""
        names = _LINEARS if targets == ["all-linear"] else targets
        return self.num_layers * sum(r * sum(self.linears()[n]) for n in names if n in self.linears())


_STANDARD_NAMES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                   "head_dim", "intermediate_size", "tie_word_embeddings")


def _standard_names(config: dict) -> tuple[dict, str]:
    """(`config` with the standard size names its own names stand for added, the model_type when any was; else
    ""). The names come from the transformers config class's `attribute_map` (GPT2Config: hidden_size → n_embd,
    num_hidden_layers → n_layer, num_attention_heads → n_head), so any architecture that declares them there is
    read. A config without an MLP width then has GPT-2's `n_inner` or, as GPT-2 does without it, 4 × hidden_size.
    The class is looked up only when a standard size is missing: importing transformers' configs imports torch."""
    need = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")
    model_type = config.get("model_type")
    if all(isinstance(config.get(k), int) for k in need) or not isinstance(model_type, str):
        return config, ""
    aliases = _attribute_map(model_type)
    added = {name: config[own] for name, own in aliases.items()
             if name in _STANDARD_NAMES and config.get(name) is None and config.get(own) is not None}
    if not added:
        return config, ""
    config = {**config, **added}
    if config.get("intermediate_size") is None and isinstance(config.get("hidden_size"), int):
        inner = config.get("n_inner")
        config["intermediate_size"] = inner if isinstance(inner, int) else 4 * config["hidden_size"]
    return config, model_type


@lru_cache(maxsize=None)
def _attribute_map(model_type: str) -> dict[str, str]:
    """{standard name: this architecture's own name} from its transformers config class; {} for a model_type
    transformers does not know."""
    try:
        from transformers import CONFIG_MAPPING

        return dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", None) or {})
    except Exception:  # an unknown model_type (KeyError), remote code, a broken install: no names to map
        return {}


def read_shape(spec: str, workspace: Path | None = None) -> ModelShape:
    """The shape of the model a run config names, from its config.json on this machine (the embedded model's
    converted copy, a folder, a run's model, a Hub id's cached config); ModelError says why not. Nothing is
    downloaded or converted."""
    path = _config_file((spec or "").strip(), workspace)
    try:
        return ModelShape.from_config(json.loads(Path(path).read_text()), str(path))
    except ModelError:
        raise
    except (OSError, ValueError) as e:
        raise ModelError(f"could not read {path}: {e}", "bad_config", path) from None


def _config_file(spec: str, workspace: Path | None) -> Path:
    if spec.startswith("run:"):
        from backend.models.ref import ModelRef

        return Path(ModelRef.parse(spec, workspace).resolve()) / "config.json"
    if (folder := local_folder(spec)) is not None:
        if not (folder / "config.json").is_file():
            raise ModelError(f"folder {folder} has no config.json", "not_model", folder)
        return folder / "config.json"
    if spec.lower() == EMBEDDED_MODEL:
        raise ModelError(f"`{EMBEDDED_MODEL}` is converted when it is first used (~30 s)", "not_cached", spec)
    if is_hub_id(spec):
        from backend.hub import cached_hub_file

        if found := cached_hub_file(spec, "config.json"):
            return Path(found)
        raise ModelError(f"{spec}: its config.json is not on this machine yet (it downloads when the run "
                         "starts)", "not_cached", spec)
    raise ModelError(f"model folder {spec} does not exist", "missing", spec)


# The estimate in words: English templates by key, filled with its values (`summary`: the CLI, the run log). The
# UI passes the same keys in its own language (locales/zh.yaml's `memory`, each hashed against the English here):
# the backend gives the structure, never a language. A part's name is "name.<part>"; a part with no entry shows its
# key.
TEXTS = {
    "summary": "Estimated memory {per}: {total} GiB ({breakdown}) — {verdict}",
    "per.cpu": "per process",
    "per.gpu": "per process (GPU memory)",
    "per.processes": "{per}, {n} processes",
    "part": "{name} {size} GiB",
    "sep": ", ",
    "overlap.gradients": "{name} {size} GiB in the backward pass in their place",
    "overlap.generating": "{name} {size} GiB while generating in their place",
    "name.weights": "weights",
    "name.adapter": "adapter",
    "name.optimizer": "optimizer",
    "name.activations": "activations",
    "name.runtime": "runtime",
    "name.reference model": "reference model",
    "name.value model": "value model",
    "name.teacher model": "teacher model",
    "name.reward models": "reward models",
    "name.gradients": "gradients",
    "name.generation cache": "generation cache",
    "verdict.unknown": "free memory unknown here",
    "verdict.cpu_fits": "fits in the {free} GiB free here",
    "verdict.cpu_fits_together": "fits in the {free} GiB free here ({processes} processes need ≈ {need} GiB "
                                 "together)",
    "verdict.cpu_short": "does not fit: needs ≈ {need} GiB, this machine has {free} GiB free",
    "verdict.cpu_short_together": "does not fit: {processes} processes need ≈ {need} GiB together, this machine has "
                                  "{free} GiB free",
    "verdict.gpu_too_few": "does not fit: {processes} processes need one GPU each, this machine has {gpus}",
    "verdict.gpu_fits": "fits in the {smallest} GiB of each GPU here",
    "verdict.gpu_short": "does not fit: needs ≈ {need} GiB per GPU, the smallest here has {smallest} GiB",
    "note.teacher": "the teacher counted at the trained model's size",
    "note.reward_models": "reward models counted at the base model's size",
    "note.renamed": "{model}'s sizes counted as a Llama-style model's: approximate",
    "note.peak": "the peak is in the backward pass (gradients) or in generation, above the activations",
}


@dataclass
class MemoryEstimate:
    """Bytes per training process. `parts` add up to `total`; `overlap` names what the peak holds instead of
    (not beside) the activations: gradients, generation's cache."""

    device: str  # "cpu" or "cuda"
    processes: int  # on this machine: they share its RAM on a CPU, one GPU each on GPUs
    parts: dict[str, int]
    overlap: dict[str, int] = field(default_factory=dict)
    available: list[int] | None = None  # bytes: [available RAM] on a CPU, each GPU's memory on GPUs
    notes: list[tuple[str, dict]] = field(default_factory=list)  # (TEXTS key, its values)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool | None:
        """None when the free memory is unknown."""
        if not self.available:
            return None
        if self.device == "cpu":
            return self.total * self.processes <= self.available[0]
        return len(self.available) >= self.processes and \
            all(free >= self.total for free in self.available[:self.processes])

    def breakdown(self, texts: dict[str, str] | None = None) -> str:
        words = _words(texts)
        shown = [words("part", name=words(f"name.{name}", default=name), size=gb(size))
                 for name, size in self.parts.items() if size >= 0.005 * GiB]
        shown += [words("overlap.gradients" if name == "gradients" else "overlap.generating",
                        name=words(f"name.{name}", default=name), size=gb(size))
                  for name, size in self.overlap.items() if size >= 0.005 * GiB]
        return words("sep").join(shown)

    def verdict_key(self) -> tuple[str, dict]:
        """Whether it fits, as a TEXTS key and its values."""
        if self.fits is None:
            return "verdict.unknown", {}
        if self.device == "cpu":
            free, need = self.available[0], self.total * self.processes
            values = {"free": gb(free), "need": gb(need), "processes": self.processes}
            together = "_together" if self.processes > 1 else ""
            return ("verdict.cpu_fits" if self.fits else "verdict.cpu_short") + together, values
        if len(self.available) < self.processes:
            return "verdict.gpu_too_few", {"processes": self.processes, "gpus": len(self.available)}
        values = {"smallest": gb(min(self.available[:self.processes])), "need": gb(self.total)}
        return ("verdict.gpu_fits" if self.fits else "verdict.gpu_short"), values

    def verdict(self, texts: dict[str, str] | None = None) -> str:
        key, values = self.verdict_key()
        return _words(texts)(key, **values)

    def summary(self, texts: dict[str, str] | None = None) -> str:
        """The estimate in one line, in English or in `texts` (templates by TEXTS key; a key missing there is
        English)."""
        words = _words(texts)
        per = words("per.cpu" if self.device == "cpu" else "per.gpu")
        if self.processes > 1:
            per = words("per.processes", per=per, n=self.processes)
        text = words("summary", per=per, total=gb(self.total), breakdown=self.breakdown(texts),
                     verdict=self.verdict(texts))
        return text + "".join(f"; {words(key, **values)}" for key, values in self.notes)


def _words(texts: dict[str, str] | None):
    def words(key: str, default: str | None = None, **values) -> str:
        template = (texts or {}).get(key) or TEXTS.get(key)
        return default if template is None else template.format(**values)
    return words


def size_text(size: float) -> str:
    """A size in the unit a person reads it in: GiB, or MiB below one."""
    return f"{gb(size)} GiB" if size >= GiB else f"{size / 2**20:.0f} MiB"


def gb(size: float) -> str:
    value = size / GiB
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"


def estimate_memory(config: RunConfig, shape: ModelShape, device: str = "cpu", *,
                    available: list[int] | None = None, weight_bits: int | None = None,
                    teacher: ModelShape | None = None) -> MemoryEstimate:
    """The memory one training process of `config` needs on `device` ("cpu" or "cuda").

    weight_bits: 4 for QLoRA (the decoder layers' projections stored in 4 bits, embeddings and norms in the
    compute dtype); None takes it from the run's quantization setting.
    teacher: the shape of a distilling mode's teacher (ModeSpec.teacher_model); None counts it at the trained
    model's size, and says so.
    """
    spec, c = config.spec, config
    if weight_bits is None and c.quantization == "4bit":
        weight_bits = 4
    precision = _precision(c.precision, device)
    half = 2 if precision in ("bf16", "fp16") else 4  # bytes of the compute dtype
    lora = c.finetuning == "lora"
    weight_bytes = half if lora else 4  # full fine-tuning keeps float32 master weights (modes/training.py)
    n = shape.parameters
    weights = _weights(shape, weight_bytes, weight_bits if lora else None)
    trainable = shape.lora_parameters(c.lora.r, c.lora.target_modules) if lora else n
    notes = []

    parts: dict[str, int] = {"weights": weights}
    overlap: dict[str, int] = {}
    if lora:
        parts["adapter"] = trainable * 4 * 2  # float32 weights and their gradients
    else:
        overlap["gradients"] = n * 4
    parts["optimizer"] = trainable * 4 * 2  # AdamW: two float32 moments per trainable weight

    rl = spec.online_rl
    if spec.reference_model and not lora and not (spec.groups_completions and c.rl.beta == 0):
        parts["reference model"] = weights
    if "ppo" in spec.sections:
        if c.ppo.value_model == "separate":
            parts["value model"] = weights + (parts.get("adapter", 0) if lora else 0)
            if not lora:
                parts["optimizer"] *= 2
                overlap["gradients"] *= 2
        else:
            parts["value model"] = shape.hidden_size * 4 * 4
    teacher_logits = 0
    if spec.teacher_model:  # frozen, in the student's dtype, never quantized; its logits meet the student's in the loss
        parts["teacher model"] = _weights(teacher or shape, weight_bytes, None)
        teacher_logits = _LOGIT_COPIES * (teacher or shape).vocab_size * 4
        if teacher is None:
            notes.append(("note.teacher", {}))
    reward_models = sum(1 for s in c.reward_sources if s.type == "reward_model") if rl else 0
    if reward_models:
        parts["reward models"] = reward_models * n * 4  # loaded in float32; taken as the base's size
        notes.append(("note.reward_models", {}))

    sequences, length = _sequences(c, spec)
    tokens = sequences * length
    parts["activations"] = _activations(shape, tokens, half, full=not lora, fused=spec.fused_logits,
                                        checkpointing=c.gradient_checkpointing) + int(tokens * teacher_logits)
    if rl:  # the generation's key / value cache is freed before the training pass's activations
        overlap["generation cache"] = tokens * shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim * half
    if not lora and precision in ("bf16", "fp16"):  # autocast keeps half-precision copies of the weights
        parts["activations"] += n * half

    if shape.renamed_from:
        notes.append(("note.renamed", {"model": shape.renamed_from}))
    _shard(parts, overlap, c)
    parts["runtime"] = CPU_PROCESS_BASELINE if device == "cpu" else GPU_PROCESS_BASELINE
    # what the peak holds instead of activations, where it is larger
    extra = max(overlap.values(), default=0) - parts["activations"]
    if extra > 0:
        parts["activations"] += extra
        notes.append(("note.peak", {}))
    return MemoryEstimate(device, c.num_processes, parts, overlap, available, notes)


def _precision(precision: str, device: str) -> str:
    """What training.resolved_precision picks, without asking torch (the GPU is taken to have bf16)."""
    if precision != "auto":
        return precision
    return "fp32" if device == "cpu" else "bf16"


def _weights(shape: ModelShape, weight_bytes: int, weight_bits: int | None) -> int:
    if not weight_bits:
        return shape.parameters * weight_bytes
    quantized = shape.layer_linear_parameters
    # 4-bit blocks of 64 keep one scale each (double-quantized to about 8 bits)
    return int(quantized * (weight_bits / 8 + 1 / 64)) + (shape.parameters - quantized) * weight_bytes


def _sequences(c: RunConfig, spec) -> tuple[int, int]:
    """(sequences, tokens each) of one micro-batch, at the longest the settings allow."""
    if spec.online_rl:  # the batch counts completions, each a prompt (≤ max length) and its completion
        pairs = 2 if spec.judges_pairs else 1  # Online DPO's batch counts prompts, each sampled twice
        return c.per_device_train_batch_size * pairs, c.max_length + c.rl.max_completion_length
    return c.per_device_train_batch_size * (2 if spec.pairwise else 1), c.max_length


def _activations(shape: ModelShape, tokens: int, half: int, *, full: bool, fused: bool,
                 checkpointing: bool) -> int:
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.num_kv_heads * shape.head_dim
    per_layer = _PER_LAYER_HIDDEN * h + _PER_LAYER_MLP * i + _PER_LAYER_KV * kv
    if full:
        per_layer += _FULL_EXTRA_HIDDEN * h + _FULL_EXTRA_MLP * i
    # checkpointing keeps each layer's input and recomputes one layer at a time
    layers = shape.num_layers * h + per_layer if checkpointing else shape.num_layers * per_layer
    logits = (_FUSED_LOGIT_COPIES if fused else _LOGIT_COPIES) * shape.vocab_size * 4  # upcast to float32
    return int(tokens * (layers * half + logits))


def _shard(parts: dict[str, int], overlap: dict[str, int], c: RunConfig) -> None:
    """FSDP shards weights, gradients and optimizer states over the processes; ZeRO stage 1 the optimizer
    states, 2 also gradients, 3 also weights; offloading moves the optimizer (and ZeRO-3's weights) to the CPU."""
    d, world = c.distributed, c.world_size
    if world == 1 and d.strategy == "fsdp":
        return  # one process: accelerate runs it unsharded
    sharded = {"fsdp": ("weights", "gradients", "optimizer"),
               "deepspeed": ("optimizer", "gradients", "weights")[:d.zero_stage]}.get(d.strategy, ())
    for name in sharded:
        for table in (parts, overlap):
            if name in table:
                table[name] //= world
    if d.offload and d.strategy != "ddp":
        parts["optimizer"] = 0
        if d.strategy == "fsdp" or d.zero_stage == 3:
            parts["weights"] = 0


def disk_need(config: RunConfig, shape: ModelShape, tokenizer_bytes: int = 0) -> int:
    """Bytes the run's folder holds at most: its checkpoints (config.checkpoints_kept) and the final adapter
    (or, fully fine-tuned, model), each with a copy of the tokenizer's files. A checkpoint holds the trainable
    weights and AdamW's two moments, all float32: ≈ 3 × trainable × 4 bytes; PPO's also its value model's, and a
    second copy of both in its resume file. While a save rotates, one more checkpoint exists for a moment: not
    counted, the estimate refuses only what cannot fit."""
    c = config
    lora = c.finetuning == "lora"
    trainable = shape.lora_parameters(c.lora.r, c.lora.target_modules) if lora else shape.parameters
    copies = 3  # weights + two moments
    if "ppo" in c.spec.sections:
        value = shape.hidden_size + 1  # the score head; the separate model's LoRA (or backbone) besides
        if c.ppo.value_model == "separate":
            value += trainable
        trainable += value
        copies = 4  # the saved models, and the resume file's weights + moments
    small = 64 * 2**10 + tokenizer_bytes  # a saved folder's model card, configs, trainer state and tokenizer
    return c.checkpoints_kept() * (copies * trainable * 4 + small) + trainable * 4 + small


_TOKENIZER_FILES = ("tokenizer*", "vocab.*", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                    "chat_template.*", "*.model")


def run_disk_need(config: RunConfig, workspace: Path | None = None) -> int:
    """disk_need of a run whose model's config is on this machine, with its tokenizer's files as they are there;
    ModelError says why not."""
    folder = _config_file((config.model or "").strip(), workspace).parent
    files = {f for pattern in _TOKENIZER_FILES for f in folder.glob(pattern) if f.is_file()}
    return disk_need(config, read_shape(config.model, workspace), sum(f.stat().st_size for f in files))
