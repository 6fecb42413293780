"""GGUF export: the tiny SmolLM2 converts to f16 and q8_0 files that gguf's reader and transformers' own GGUF
loader read back as the same model (metadata, tokenizer, greedy tokens, logits); every offered type writes
weights within its format's error; the Ollama Modelfile speaks ChatML; bad folders and types are refused."""
import json
import re
import shutil

import gguf
import numpy as np
import pytest
import torch

from backend.gguf_export import QUANT_TYPES, GGUFExportError, check_quant, chatml_markers, modelfile, write_gguf

PROMPTS = ("The capital of France is", "def add(a, b):\n    return")
F16_LOGIT_ATOL = 2e-3
Q8_0_LOGIT_ATOL = 0.03
SHARP_LOGIT_ATOL = 0.05


@pytest.fixture(scope="module")
def exported(tiny_model, tmp_path_factory):
    """The tiny model as tiny-f16.gguf and tiny-q8_0.gguf in one folder, with the f16 run's progress calls."""
    folder = tmp_path_factory.mktemp("gguf")
    calls = []
    infos = {"f16": write_gguf(tiny_model, folder / "tiny-f16.gguf", "f16", progress=lambda f, m: calls.append(f)),
             "q8_0": write_gguf(tiny_model, folder / "tiny-q8_0.gguf", "q8_0")}
    return folder, infos, calls


@pytest.fixture(scope="module")
def original(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(tiny_model))


def _prompts(tokenizer):
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi! What is 12 + 30?"}], tokenize=False,
                                         add_generation_prompt=True)
    return [*PROMPTS, chat]


def _field(reader, key):
    return reader.fields[key].contents()


def _gguf_model(folder, name):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def _greedy(model, ids):
    out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=2)
    return out[0, len(ids):].tolist()


# ---- metadata ----

@pytest.mark.parametrize("quant", ["f16", "q8_0"])
def test_metadata_reads_back(exported, tiny_model, quant):
    folder, infos, _ = exported
    info = infos[quant]
    reader = gguf.GGUFReader(folder / f"tiny-{quant}.gguf")
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == 2 == info.block_count
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "tokenizer.chat_template") == (tiny_model / "chat_template.jinja").read_text()
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 49152 == info.vocab_size
    assert _field(reader, "tokenizer.ggml.model") == "gpt2" and _field(reader, "tokenizer.ggml.pre") == "gpt-2"
    assert (_field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")) == (1, 2)
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert "output.weight" not in types  # tied: the head is token_embd
    assert types["output_norm.weight"] == types["blk.0.attn_norm.weight"] == "F32"
    assert types["blk.1.attn_q.weight"] == types["token_embd.weight"] == quant.upper()
    assert info.path.stat().st_size == info.size_bytes and not list(folder.glob(".*tmp*"))


def test_progress_rises_to_one(exported):
    _, _, calls = exported
    assert calls == sorted(calls) and calls[0] == 0.0 and calls[-1] == 1.0


# ---- transformers' own GGUF loader ----

@pytest.fixture(scope="module")
def loaded_f16(exported):
    from transformers import AutoTokenizer

    folder, _, _ = exported
    return _gguf_model(folder, "tiny-f16.gguf"), AutoTokenizer.from_pretrained(folder, gguf_file="tiny-f16.gguf")


def test_transformers_reads_the_same_model(loaded_f16, original):
    """transformers rebuilds the tokenizer and un-permutes q/k by itself: the same token ids, chat template and
    greedy tokens as the folder on 3 prompts. Random tiny weights make greedy answers degenerate (they repeat a
    prompt token), so the logits are compared too: f16 rounding moved them by at most 3.3e-4 (their spread is
    ~0.16), while q/k left in HF's layout moves them by 6e-3, so F16_LOGIT_ATOL = 2e-3 tells the two apart."""
    loaded, loaded_tokenizer = loaded_f16
    model, tokenizer = original
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    assert loaded.config.tie_word_embeddings and loaded.config.num_hidden_layers == 2
    for prompt in _prompts(tokenizer):
        ids = tokenizer(prompt).input_ids
        assert loaded_tokenizer(prompt).input_ids == ids
        assert _greedy(loaded, ids) == _greedy(model, ids)
        assert (_logits(loaded, ids) - _logits(model, ids)).abs().max().item() < F16_LOGIT_ATOL


def test_rotary_layout_is_right_where_attention_matters(loaded_f16, original):
    """With random weights attention is nearly uniform, so q/k barely move the logits; scaled up 20x (on both
    sides: scaling commutes with the row reordering) they decide it. Measured so: the f16 export 0.007 from the
    folder's logits, q/k left in HF's layout 0.67, k reordered with the query head count 0.87; so
    SHARP_LOGIT_ATOL = 0.05 catches any wrong reordering."""
    (loaded, _), (model, tokenizer) = loaded_f16, original
    ids = tokenizer("The capital of France is a city with many old buildings").input_ids

    weights = [layer.self_attn.q_proj.weight for net in (model, loaded) for layer in net.model.layers]
    weights += [layer.self_attn.k_proj.weight for net in (model, loaded) for layer in net.model.layers]
    kept = [w.detach().clone() for w in weights]
    try:
        with torch.no_grad():
            for w in weights:
                w.mul_(20)
        assert (_logits(loaded, ids) - _logits(model, ids)).abs().max().item() < SHARP_LOGIT_ATOL
    finally:
        with torch.no_grad():
            for w, k in zip(weights, kept):
                w.copy_(k)


def test_q8_0_logits_are_close(exported, original):
    """q8_0 keeps each block of 32 weights as int8 times one f16 scale (error at most 1/254 of the block's
    largest weight): on the tiny model the logits moved by at most 0.0085 (their spread is ~0.16), so
    Q8_0_LOGIT_ATOL = 0.03 leaves 3.5x room while a wrong scale or layout moves them far more."""
    folder, _, _ = exported
    model, tokenizer = original
    loaded = _gguf_model(folder, "tiny-q8_0.gguf")
    for prompt in _prompts(tokenizer):
        ids = tokenizer(prompt).input_ids
        assert (_logits(loaded, ids) - _logits(model, ids)).abs().max().item() < Q8_0_LOGIT_ATOL


# ---- every offered type ----

# the largest error each format allows, as a share of the block's largest |weight|
FORMAT_ERROR = {"f32": 0, "f16": 1e-3, "bf16": 4e-3, "q8_0": 1 / 254 + 1e-3, "q5_1": 1 / 31 + 1e-3,
                "q5_0": 1 / 16 + 1e-3, "q4_1": 1 / 15 + 1e-3, "q4_0": 1 / 8 + 1e-3}
WEIGHTS = (("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"),
           ("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight"),
           ("model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"))


def _within_format(want, got, quant):
    blocks, err = np.abs(want).reshape(-1, 32).max(axis=1), np.abs(got - want).reshape(-1, 32).max(axis=1)
    return bool((err <= FORMAT_ERROR[quant] * blocks + 1e-7).all())


@pytest.mark.parametrize("quant", QUANT_TYPES)
def test_each_offered_type_encodes_within_its_format(tiny_model, quant):
    from safetensors.numpy import load_file

    from backend.gguf_export import _encode, _plan

    weights = load_file(tiny_model / "model.safetensors")
    plan = {t.name: t for t in _plan(tiny_model, json.loads((tiny_model / "config.json").read_text()), quant, [])}
    for hf, name in WEIGHTS:
        want = weights[hf].astype(np.float32)
        got = gguf.quants.dequantize(_encode(plan[name], want), plan[name].qtype).reshape(want.shape)
        assert _within_format(want, got, quant), name


def test_low_bit_types_keep_the_head_at_q8_0_and_norms_at_f32(tiny_model):
    """llama.cpp's quantizer keeps the output head (here the tied token_embd) at a higher type; the written file's
    types come from this plan, as the f16 and q8_0 files show."""
    from backend.gguf_export import _plan

    notes = []
    config = json.loads((tiny_model / "config.json").read_text())
    plan = {t.name: t.qtype.name for t in _plan(tiny_model, config, "q4_0", notes)}
    assert plan["token_embd.weight"] == "Q8_0"
    assert notes == ["token_embd.weight written as q8_0: it is the output head"]
    assert plan["blk.0.attn_q.weight"] == plan["blk.1.ffn_down.weight"] == "Q4_0"
    assert plan["blk.0.ffn_norm.weight"] == plan["output_norm.weight"] == "F32"


# ---- Ollama ----

def _modelfile_parts(text):
    lines = text.splitlines()
    params = [tuple(line.split(None, 2)[1:]) for line in lines if line.startswith("PARAMETER ")]
    return lines, params


def test_modelfile_speaks_chatml(tiny_model):
    text = modelfile("tiny-f16.gguf", tiny_model)
    lines, params = _modelfile_parts(text)
    assert "FROM ./tiny-f16.gguf" in lines
    template = re.search(r'^TEMPLATE """(.*?)"""$', text, re.S | re.M)
    assert template and "<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n" in template[1]
    assert "<|im_start|>assistant\n" in template[1]
    assert 'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""' in lines
    stops = [json.loads(v) for k, v in params if k == "stop"]
    assert stops[0] == "<|im_end|>" and "<|im_start|>" in stops
    assert float(dict(params)["temperature"]) == 0.7
    assert modelfile("tiny-f16", tiny_model).splitlines()[1] == "FROM ./tiny-f16.gguf"


def test_modelfile_without_chatml_leaves_the_template_to_ollama(tiny_model, tmp_path):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model / name, tmp_path / name)
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %}{{ m['content'] }}{% endif %}{% endfor %}")
    assert chatml_markers(tmp_path) is None
    text = modelfile("x.gguf", tmp_path)
    lines, params = _modelfile_parts(text)
    assert not any(line.startswith("TEMPLATE") for line in lines) and "not ChatML-style" in text
    assert ("stop", '"<|im_end|>"') in params  # the eos token still ends a reply


# ---- refusals ----

def test_unknown_and_unsupported_quant_types_are_refused():
    assert check_quant(" Q8_0 ") == "q8_0" and set(QUANT_TYPES) >= {"f16", "q8_0"}
    with pytest.raises(GGUFExportError, match="not offered: k-quants.*llama-quantize.*Offered: f32, f16"):
        check_quant("q4_k_m")
    with pytest.raises(GGUFExportError, match="importance matrix"):
        check_quant("iq2_xs")
    with pytest.raises(GGUFExportError, match=r"unknown quant type 'q3'; offered: f32, f16, bf16, q8_0"):
        check_quant("q3")


def test_other_architectures_are_refused(tiny_model, tmp_path):
    config = json.loads((tiny_model / "config.json").read_text())
    config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(GGUFExportError, match="architecture Qwen2ForCausalLM is not supported.*LlamaForCausalLM"):
        write_gguf(tmp_path, tmp_path / "out.gguf")
    with pytest.raises(GGUFExportError, match="does not exist"):
        write_gguf(tmp_path / "missing", tmp_path / "out.gguf")
    config.update(architectures=["LlamaForCausalLM"], model_type="llama",
                  rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0})
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(GGUFExportError, match="rope scaling 'llama3' is not supported"):
        write_gguf(tmp_path, tmp_path / "out.gguf")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    with pytest.raises(GGUFExportError, match="LoRA adapter"):
        write_gguf(tmp_path / "adapter", tmp_path / "out.gguf")
    assert not list(tmp_path.glob("*.gguf"))


def test_pre_tokenizers_map_to_llama_cpp_names_or_are_refused(tmp_path):
    from backend.gguf_export import _LLAMA3_REGEX, _pre_tokenizer

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}

    def tokenizer(pre):
        return {"model": {"type": "BPE"}, "decoder": {"type": "ByteLevel"}, "normalizer": None, "pre_tokenizer": pre}

    assert _pre_tokenizer(tokenizer(byte_level), tmp_path) == "gpt-2"
    digits = {"type": "Digits", "individual_digits": True}
    smollm = {"type": "Sequence", "pretokenizers": [digits, byte_level]}
    assert _pre_tokenizer(tokenizer(smollm), tmp_path) == "smollm"
    split = {"type": "Split", "pattern": {"Regex": _LLAMA3_REGEX}, "behavior": "Isolated", "invert": False}
    llama3 = {"type": "Sequence", "pretokenizers": [split, dict(byte_level, use_regex=False)]}
    assert _pre_tokenizer(tokenizer(llama3), tmp_path) == "llama-bpe"
    with pytest.raises(GGUFExportError, match="no known llama.cpp equivalent"):
        _pre_tokenizer(tokenizer({"type": "Whitespace"}), tmp_path)
    with pytest.raises(GGUFExportError, match="only GPT-2-style byte-level BPE.*Unigram"):
        _pre_tokenizer({"model": {"type": "Unigram"}, "decoder": {"type": "Metaspace"}}, tmp_path)


def test_a_failed_write_leaves_no_file(tiny_model, tmp_path, monkeypatch):
    import backend.gguf_export as export

    def broken(t, data):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export, "_encode", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        write_gguf(tiny_model, tmp_path / "out.gguf", "q8_0")
    assert list(tmp_path.iterdir()) == []
