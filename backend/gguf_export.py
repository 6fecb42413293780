"""GGUF export for llama.cpp, Ollama and LM Studio: a save_pretrained folder of a LLaMA-family causal LM
(`LlamaForCausalLM`, e.g. SmolLM2) written as one .gguf file, and an Ollama Modelfile to go with it.

The file follows llama.cpp's own conventions through its `gguf` package: the `llama` architecture's metadata keys
and tensor names (`gguf.get_tensor_name_map`), the q/k rows reordered for llama.cpp's rotary layout, no
output.weight when the embeddings are tied, a GPT-2-style byte-level BPE vocabulary (tokens, token types, merges,
`tokenizer.ggml.pre`, special token ids, the chat template) and 1-D tensors (norms) kept in float32. Only the
types `gguf.quants` writes in numpy are offered (`QUANT_TYPES`); `NOT_OFFERED` says why the others are not.

Tensors are converted and written one at a time into a temporary sibling that is renamed into place, so memory
stays at one tensor and a crash never leaves a .gguf that looks finished. No gradio here; torch loads only to
read the safetensors weights (bfloat16 included).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backend.models.specs import Progress

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)
DEFAULT_TEMPERATURE = 0.7  # the workbench chat's default (backend.chat.Sampling)

# Offered types: (tensor type for 2-D weights, general.file_type), both by gguf's enum names.
_OFFERED = {
    "f32": ("F32", "ALL_F32"),
    "f16": ("F16", "MOSTLY_F16"),
    "bf16": ("BF16", "MOSTLY_BF16"),
    "q8_0": ("Q8_0", "MOSTLY_Q8_0"),
    "q5_1": ("Q5_1", "MOSTLY_Q5_1"),
    "q5_0": ("Q5_0", "MOSTLY_Q5_0"),
    "q4_1": ("Q4_1", "MOSTLY_Q4_1"),
    "q4_0": ("Q4_0", "MOSTLY_Q4_0"),
}
QUANT_TYPES = tuple(_OFFERED)
# The 4- and 5-bit types keep the output head at q8_0, as llama.cpp's quantizer keeps it at a higher type.
_LOW_BIT = ("q5_1", "q5_0", "q4_1", "q4_0")

# family -> (pattern of its names, why it is not offered)
NOT_OFFERED = {
    "k-quants (q2_k ... q6_k, q4_k_m, ...)": (
        r"q\d_k(_[sml])?", "gguf-py cannot write them: they need llama.cpp's compiled llama-quantize"),
    "i-quants (iq1_s ... iq4_xs)": (
        r"iq\d_\w+", "no Python quantizer, and they need an importance matrix from llama.cpp's llama-imatrix"),
    "ternary (tq1_0, tq2_0)": (
        r"tq\d_0", "only for models trained with ternary weights (BitNet); ordinary weights would be destroyed"),
    "fp4 (mxfp4, nvfp4)": (
        r"(mx|nv)fp4(_moe)?", "llama.cpp applies mxfp4 to MoE expert weights trained in it (gpt-oss), which a "
                              "dense LLaMA has none of; nvfp4 has no Python quantizer"),
}

# tokenizer.json pre-tokenizer shapes -> llama.cpp's `tokenizer.ggml.pre` with the same splitting
_LLAMA3_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                 "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


class GGUFExportError(ValueError):
    """A folder or option the GGUF export cannot use; the message says what is supported instead."""


@dataclass
class GGUFInfo:
    """What write_gguf wrote; `notes` names tensors kept at another type than asked, and why."""

    path: Path
    quant: str
    size_bytes: int
    tensors: int
    parameters: int
    architecture: str
    block_count: int
    vocab_size: int
    tokenizer_pre: str
    chat_template: bool
    seconds: float
    notes: list[str] = field(default_factory=list)


def _noop(fraction: float, message: str) -> None:
    pass


def check_quant(quant: str) -> str:
    """The offered type's canonical name; GGUFExportError naming what is offered (and why not, when known)."""
    name = (quant or "").strip().lower()
    if name in _OFFERED:
        return name
    offered = ", ".join(QUANT_TYPES)
    for family, (pattern, reason) in NOT_OFFERED.items():
        if re.fullmatch(pattern, name):
            raise GGUFExportError(f"quant type '{quant}' is not offered: {family}: {reason}. Offered: {offered}")
    raise GGUFExportError(f"unknown quant type '{quant}'; offered: {offered}")


# ---- reading the folder ----

def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GGUFExportError(f"cannot read {path}: {e}") from None


def _config(model_dir: Path) -> dict:
    if not model_dir.is_dir():
        raise GGUFExportError(f"model folder {model_dir} does not exist")
    if not (model_dir / "config.json").is_file():
        if (model_dir / "adapter_config.json").is_file():
            raise GGUFExportError(f"{model_dir} holds a LoRA adapter; export the merged model to GGUF instead")
        raise GGUFExportError(f"{model_dir} has no config.json; expected a save_pretrained model folder")
    config = _read_json(model_dir / "config.json")
    architectures = config.get("architectures") or [config.get("model_type") or "unknown"]
    if architectures[0] not in SUPPORTED_ARCHITECTURES or config.get("model_type", "llama") != "llama":
        raise GGUFExportError(f"architecture {architectures[0]} is not supported by the GGUF export: it writes "
                              f"LLaMA-family models ({', '.join(SUPPORTED_ARCHITECTURES)}, such as SmolLM2) only")
    if config.get("quantization_config"):
        raise GGUFExportError(f"{model_dir} holds quantized weights "
                              f"({config['quantization_config'].get('quant_method', 'unknown method')}); "
                              "export from a float16/bfloat16/float32 model")
    if config.get("hidden_act", "silu") != "silu":
        raise GGUFExportError(f"hidden_act {config['hidden_act']}: llama.cpp's llama architecture needs silu")
    return config


def _rope(config: dict) -> tuple[float, dict]:
    """(rope theta, scaling) from transformers 5's rope_parameters or 4's rope_theta + rope_scaling."""
    params = dict(config.get("rope_parameters") or {})
    scaling = dict(config.get("rope_scaling") or params)
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    kind = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    if kind not in ("default", "linear"):
        raise GGUFExportError(f"rope scaling '{kind}' is not supported by the GGUF export (default and linear are)")
    return float(theta), ({"factor": float(scaling["factor"])} if kind == "linear" else {})


def _weight_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return [model_dir / name for name in sorted(set(_read_json(index).get("weight_map", {}).values()))]
    if (model_dir / "model.safetensors").is_file():
        return [model_dir / "model.safetensors"]
    files = sorted(p for p in model_dir.glob("*.safetensors") if not p.name.startswith("adapter_"))
    if not files:
        raise GGUFExportError(f"{model_dir} has no safetensors weights (save the model with save_pretrained)")
    return files


def _pre_tokenizer(tokenizer: dict, where: Path) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenization, read from its structure; refuses the unknown."""
    model = tokenizer.get("model") or {}
    if (model.get("type") != "BPE" or model.get("byte_fallback") or (tokenizer.get("decoder") or {}).get("type")
            != "ByteLevel"):
        raise GGUFExportError(f"{where}: only GPT-2-style byte-level BPE tokenizers are supported by the GGUF "
                              f"export; this one is {model.get('type')} (SentencePiece-style vocabularies are not)")
    if tokenizer.get("normalizer"):
        raise GGUFExportError(f"{where}: a tokenizer normalizer ({tokenizer['normalizer'].get('type')}) "
                              "has no llama.cpp equivalent here")
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    shape = []
    for step in steps:
        kind = step.get("type")
        if kind == "ByteLevel":
            if step.get("add_prefix_space"):
                break  # llama.cpp's BPE never adds a leading space
            shape.append("bytelevel+regex" if step.get("use_regex", True) else "bytelevel")
        elif kind == "Digits" and step.get("individual_digits"):
            shape.append("digits")
        elif kind == "Split" and step.get("behavior") == "Isolated" and not step.get("invert"):
            shape.append("split:" + ((step.get("pattern") or {}).get("Regex") or ""))
        else:
            shape.append(f"{kind}?")
    names = {("bytelevel+regex",): "gpt-2", ("digits", "bytelevel+regex"): "smollm",
             ("split:" + _LLAMA3_REGEX, "bytelevel"): "llama-bpe"}
    name = names.get(tuple(shape))
    if name is None:
        raise GGUFExportError(f"{where}: pre-tokenizer {json.dumps(pre)[:200]} has no known llama.cpp "
                              "equivalent (supported: GPT-2's, SmolLM's and Llama 3's splitting)")
    return name


def _looks_special(text: str) -> bool:
    return bool(re.fullmatch(r"<\|.*\|>|<｜.*｜>", text))


def _vocab(tokenizer: dict, n_vocab: int, where: Path) -> tuple[list[str], list[int]]:
    import gguf

    by_id = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    added = {a["id"]: a for a in tokenizer.get("added_tokens") or []}
    for i, a in added.items():
        by_id[i] = a["content"]
    if by_id and max(by_id) >= n_vocab:
        raise GGUFExportError(f"{where}: token id {max(by_id)} is past the model's vocab_size {n_vocab}")
    tokens, types = [], []
    for i in range(n_vocab):  # ids the tokenizer never uses are padding rows of the embedding
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            control = added[i].get("special") or _looks_special(by_id[i])
            types.append(gguf.TokenType.CONTROL if control else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def _adds_special(model_dir: Path, special_ids: dict[str, int]) -> dict[str, bool]:
    """Whether the saved tokenizer puts BOS/EOS around plain text, as transformers will when it encodes."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    plain, full = tok.encode("a", add_special_tokens=False).ids, tok.encode("a", add_special_tokens=True).ids
    extra = len(full) > len(plain)
    return {"bos": extra and "bos" in special_ids and full[0] == special_ids["bos"],
            "eos": extra and "eos" in special_ids and full[-1] == special_ids["eos"]}


def _interleave_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF keeps each head's rotary pairs as two halves; llama.cpp's llama rope wants them interleaved."""
    head = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- writing ----

@dataclass
class _Tensor:
    hf_name: str
    name: str
    kind: object  # gguf.MODEL_TENSOR
    file: Path
    shape: tuple[int, ...]
    qtype: object = None  # gguf.GGMLQuantizationType


def _plan(model_dir: Path, config: dict, quant: str, notes: list[str]) -> list[_Tensor]:
    import gguf
    from safetensors import safe_open

    arch = gguf.MODEL_ARCH.LLAMA
    names = gguf.get_tensor_name_map(arch, int(config["num_hidden_layers"]))
    skip = set(gguf.MODEL_TENSOR_SKIP.get(arch, []))
    tied = bool(config.get("tie_word_embeddings", False))  # LlamaConfig's default
    planned, unknown = [], []
    for file in _weight_files(model_dir):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                found = names.get_type_and_name(key, try_suffixes=(".weight", ".bias"))
                if found is None:
                    unknown.append(key)
                    continue
                kind, name = found
                if kind in skip or (tied and kind == gguf.MODEL_TENSOR.OUTPUT):
                    continue  # rotary caches; a tied head is token_embd itself
                planned.append(_Tensor(key, name, kind, file, tuple(f.get_slice(key).get_shape())))
    if unknown:
        raise GGUFExportError(f"{model_dir}: tensors with no llama.cpp name: {', '.join(unknown[:5])}"
                              f"{' ...' if len(unknown) > 5 else ''}")
    kinds = {t.kind for t in planned}
    if gguf.MODEL_TENSOR.TOKEN_EMBD not in kinds or (not tied and gguf.MODEL_TENSOR.OUTPUT not in kinds):
        raise GGUFExportError(f"{model_dir}: the embedding or output weights are missing")

    Q = gguf.GGMLQuantizationType
    main = Q[_OFFERED[quant][0]]
    head = gguf.MODEL_TENSOR.TOKEN_EMBD if tied else gguf.MODEL_TENSOR.OUTPUT
    for t in planned:
        if len(t.shape) < 2 or quant == "f32":
            t.qtype = Q.F32
        elif quant in _LOW_BIT and t.kind == head:
            t.qtype = Q.Q8_0
            notes.append(f"{t.name} written as q8_0: it is the output head")
        else:
            t.qtype = main
        block = gguf.GGML_QUANT_SIZES[t.qtype][0]
        if t.shape[-1] % block:  # as llama.cpp's converter does for rows a block does not divide
            notes.append(f"{t.name} written as f16: rows of {t.shape[-1]} are not whole {t.qtype.name} blocks")
            t.qtype = Q.F16
    return sorted(planned, key=_order)


def _order(t: _Tensor) -> tuple:
    m = re.match(r"blk\.(\d+)\.", t.name)
    if m:
        return (1, int(m.group(1)), t.name)
    return (0 if t.name.startswith("token_embd") else 2, 0, t.name)


def _encode(t: _Tensor, data: np.ndarray) -> np.ndarray:
    import gguf

    Q = gguf.GGMLQuantizationType
    if t.qtype == Q.F32:
        return data.astype(np.float32, copy=False)
    return gguf.quants.quantize(data, t.qtype)


def _byte_layout(t: _Tensor) -> tuple[tuple[int, ...], np.dtype, int]:
    """The shape, numpy dtype and size in bytes that _encode gives, known before any weight is read."""
    import gguf

    Q = gguf.GGMLQuantizationType
    n = int(np.prod(t.shape))
    if t.qtype == Q.F32:
        return t.shape, np.dtype(np.float32), 4 * n
    if t.qtype == Q.F16:
        return t.shape, np.dtype(np.float16), 2 * n
    shape = gguf.quants.quant_shape_to_byte_shape(t.shape, t.qtype)
    return shape, np.dtype(np.uint8), int(np.prod(shape))


def write_gguf(model_dir: Path, out_file: Path, quant: str = "f16", progress: Progress | None = None) -> GGUFInfo:
    """Convert a LlamaForCausalLM save_pretrained folder to one .gguf file of the given type (`QUANT_TYPES`)."""
    import gguf

    started = time.monotonic()
    report = progress or _noop
    quant = check_quant(quant)
    model_dir, out_file = Path(model_dir), Path(out_file)
    config = _config(model_dir)
    theta, linear = _rope(config)
    if not (model_dir / "tokenizer.json").is_file():
        raise GGUFExportError(f"{model_dir} has no tokenizer.json; save the tokenizer with the model")
    tokenizer = _read_json(model_dir / "tokenizer.json")
    pre = _pre_tokenizer(tokenizer, model_dir / "tokenizer.json")
    n_vocab = int(config["vocab_size"])
    n_layers, n_embd = int(config["num_hidden_layers"]), int(config["hidden_size"])
    n_head = int(config["num_attention_heads"])
    n_head_kv = int(config.get("num_key_value_heads") or n_head)
    head_dim = int(config.get("head_dim") or n_embd // n_head)

    report(0.0, "Reading the tokenizer")
    tokens, token_types = _vocab(tokenizer, n_vocab, model_dir / "tokenizer.json")
    special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=n_vocab)
    if not special.merges:
        raise GGUFExportError(f"{model_dir}: the tokenizer has no BPE merges")
    special.add_special_token.update(_adds_special(model_dir, special.special_token_ids))
    notes: list[str] = []
    tensors = _plan(model_dir, config, quant, notes)
    n_params = sum(int(np.prod(t.shape)) for t in tensors)

    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_name(f".{out_file.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
    writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    try:
        _add_metadata(writer, model_dir, n_params)
        writer.add_context_length(int(config.get("max_position_embeddings") or 2048))
        writer.add_embedding_length(n_embd)
        writer.add_block_count(n_layers)
        writer.add_feed_forward_length(int(config["intermediate_size"]))
        writer.add_head_count(n_head)
        writer.add_head_count_kv(n_head_kv)
        writer.add_rope_freq_base(theta)
        writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
        writer.add_vocab_size(n_vocab)
        writer.add_rope_dimension_count(head_dim)
        if head_dim != n_embd // n_head:  # llama.cpp assumes hidden/heads otherwise
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
        if linear:
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(linear["factor"])
        writer.add_file_type(gguf.LlamaFileType[_OFFERED[quant][1]])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(token_types)
        special.add_to_gguf(writer, quiet=True)
        for t in tensors:
            shape, dtype, nbytes = _byte_layout(t)
            writer.add_tensor_info(t.name, shape, dtype, nbytes, raw_dtype=t.qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        _write_tensors(writer, tensors, n_head, n_head_kv, report)
        writer.close()
        os.replace(tmp, out_file)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    report(1.0, f"Wrote {out_file}")
    return GGUFInfo(path=out_file, quant=quant, size_bytes=out_file.stat().st_size, tensors=len(tensors),
                    parameters=n_params, architecture="llama", block_count=n_layers, vocab_size=n_vocab,
                    tokenizer_pre=pre, chat_template=special.chat_template is not None,
                    seconds=time.monotonic() - started, notes=notes)


def _add_metadata(writer, model_dir: Path, n_params: int) -> None:
    """general.* as llama.cpp's converter fills it (model card, config, generation config), or just a name."""
    import gguf

    try:
        meta = gguf.Metadata.load(None, model_dir, None, n_params)
    except Exception:  # a model card that does not parse must not stop the export
        meta = gguf.Metadata()
    if meta.name is None:
        meta.name = model_dir.name
    writer.add_type(gguf.GGUFType.MODEL)
    meta.set_gguf_meta_model(writer)


def _write_tensors(writer, tensors: list[_Tensor], n_head: int, n_head_kv: int, report: Progress) -> None:
    import gguf
    import torch
    from safetensors import safe_open

    done, total = 0, sum(int(np.prod(t.shape)) for t in tensors) or 1
    with ExitStack() as stack:
        files: dict[Path, object] = {}
        for t in tensors:
            if t.file not in files:
                files[t.file] = stack.enter_context(safe_open(str(t.file), framework="pt"))
            data = files[t.file].get_tensor(t.hf_name).to(torch.float32).numpy()
            if t.kind == gguf.MODEL_TENSOR.ATTN_Q:
                data = _interleave_rotary(data, n_head)
            elif t.kind == gguf.MODEL_TENSOR.ATTN_K:
                data = _interleave_rotary(data, n_head_kv)
            writer.write_tensor_data(_encode(t, data))
            done += int(np.prod(t.shape))
            report(0.05 + 0.95 * done / total, f"Writing {t.name} ({t.qtype.name})")


# ---- Ollama ----

@dataclass
class ChatML:
    start: str  # e.g. <|im_start|>
    end: str  # e.g. <|im_end|>
    default_system: str | None  # the system turn the template adds when a conversation has none


def _special_text(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def chatml_markers(model_dir: Path) -> ChatML | None:
    """The turn markers when the folder's chat template writes ChatML (`<start>role\\ncontent<end>\\n` for every
    turn and `<start>assistant\\n` to prompt an answer) with markers that are special tokens; else None."""
    import gguf
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    model_dir = Path(model_dir)
    template = gguf.SpecialVocab(model_dir).chat_template
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if not template:
        return None
    config_path = model_dir / "tokenizer_config.json"
    config = _read_json(config_path) if config_path.is_file() else {}
    tokens = {k: _special_text(config.get(k)) or "" for k in ("bos_token", "eos_token", "pad_token", "unk_token")}

    def fail(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = fail
    sys_text, user_text, answer_text = "SYSTEM-PROBE-7", "USER-PROBE-8", "ANSWER-PROBE-9"

    def render(messages, generation):
        return env.from_string(template).render(messages=messages, add_generation_prompt=generation, **tokens)

    try:
        full = render([{"role": "system", "content": sys_text}, {"role": "user", "content": user_text},
                       {"role": "assistant", "content": answer_text}], False)
        alone = render([{"role": "user", "content": user_text}], False)
        prompt = render([{"role": "user", "content": user_text}], True)
    except Exception:  # a template this probe cannot render is not one it can translate
        return None
    turns = re.fullmatch(r"(?P<start>.+?)system\n" + re.escape(sys_text) + r"(?P<end>.+?)\n"
                         r"(?P=start)user\n" + re.escape(user_text) + r"(?P=end)\n"
                         r"(?P=start)assistant\n" + re.escape(answer_text) + r"(?P=end)\n", full, re.S)
    if turns is None:
        return None
    start, end = turns["start"], turns["end"]
    user_turn = f"{start}user\n{user_text}{end}\n"
    if prompt != alone + f"{start}assistant\n" or not alone.endswith(user_turn):
        return None
    default = alone[:-len(user_turn)]
    system = re.fullmatch(re.escape(f"{start}system\n") + "(.*)" + re.escape(f"{end}\n"), default, re.S)
    if default and system is None:
        return None
    if not {start, end} <= _special_tokens(model_dir):
        return None
    return ChatML(start, end, system[1] if system else None)


def _special_tokens(model_dir: Path) -> set[str]:
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return set()
    return {a["content"] for a in _read_json(path).get("added_tokens") or [] if a.get("special")}


def _temperature(model_dir: Path) -> float:
    path = model_dir / "generation_config.json"
    gen = _read_json(path) if path.is_file() else {}
    value = gen.get("temperature")
    return float(value) if gen.get("do_sample") and isinstance(value, (int, float)) and value > 0 \
        else DEFAULT_TEMPERATURE


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def modelfile(gguf_name: str, model_dir: Path) -> str:
    """An Ollama Modelfile for `gguf_name` (a .gguf next to it) converted from `model_dir`: ChatML turns as a Go
    TEMPLATE when the chat template writes them, the default system prompt, the end-of-turn stops and a
    temperature. Other templates get no TEMPLATE (a comment says why): Ollama then reads the GGUF's own."""
    model_dir = Path(model_dir)
    name = Path(gguf_name).name
    if not name.endswith(".gguf"):
        name += ".gguf"
    lines = [f"# Ollama Modelfile for {name}: ollama create {Path(name).stem.lower()} -f Modelfile",
             f"FROM ./{name}", ""]
    chat = chatml_markers(model_dir)
    config_path = model_dir / "tokenizer_config.json"
    eos = _special_text(_read_json(config_path).get("eos_token")) if config_path.is_file() else None
    stops = []
    if chat is None:
        lines += ["# No TEMPLATE: the chat template is not ChatML-style (<|im_start|>role ... <|im_end|>) or there",
                  "# is none, so Ollama uses the chat template stored in the GGUF, or a plain prompt without one.",
                  ""]
    else:
        s, e = chat.start, chat.end
        lines += ['TEMPLATE """{{- if .Messages }}',
                  f"{{{{- range .Messages }}}}{s}{{{{ .Role }}}}",
                  f"{{{{ .Content }}}}{e}",
                  f"{{{{ end }}}}{s}assistant",
                  "{{ else }}",
                  f"{{{{- if .System }}}}{s}system",
                  f"{{{{ .System }}}}{e}",
                  f"{{{{ end }}}}{{{{ if .Prompt }}}}{s}user",
                  f"{{{{ .Prompt }}}}{e}",
                  f"{{{{ end }}}}{s}assistant",
                  f'{{{{ end }}}}{{{{ .Response }}}}{{{{ if .Response }}}}{e}{{{{ end }}}}"""', ""]
        if chat.default_system is not None:
            if '"""' in chat.default_system:
                lines += ["# The template's default system prompt contains \"\"\" and is left out.", ""]
            else:
                lines += [f'SYSTEM """{chat.default_system}"""', ""]
        stops += [e, s]
    if eos and eos not in stops:
        stops.append(eos)
    lines += [f"PARAMETER stop {_quoted(stop)}" for stop in stops]
    lines.append(f"PARAMETER temperature {_temperature(model_dir):g}")
    return "\n".join(lines) + "\n"
