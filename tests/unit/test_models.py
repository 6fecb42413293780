"""Model specs: the embedded model converts once and answers; bad specs fail fast with what to do."""
import json
import re
import threading
import time
from pathlib import Path

import pytest

from fake_hub import dead_hub, silent_hub  # noqa: F401 (fixtures)
from backend.models import (EMBEDDED_GGUF, EMBEDDED_MODEL, MARKER, ModelError, build_once, check_model,
                            is_complete, load_causal_lm, load_tokenizer, model_cache_dir, resolve_model)


@pytest.fixture(scope="module")
def embedded():
    """The converted embedded model (converted on the first run on a machine, then cached)."""
    calls = []
    path = resolve_model(EMBEDDED_MODEL, progress=lambda fraction, message: calls.append((fraction, message)))
    return path, calls


# ---- the embedded model ----

def test_embedded_model_is_a_plain_float32_folder(embedded):
    path, _ = embedded
    config = json.loads((model_cache_dir() / EMBEDDED_MODEL / "config.json").read_text())
    assert path == str(model_cache_dir() / EMBEDDED_MODEL)
    assert "quantization_config" not in config
    assert config["dtype"] == "float32" and config["tie_word_embeddings"] is True
    assert json.loads((model_cache_dir() / EMBEDDED_MODEL / MARKER).read_text())["source"] == EMBEDDED_GGUF


def test_embedded_conversion_reports_progress_or_is_cached(embedded):
    _, calls = embedded
    if calls:  # converted in this session
        fractions = [f for f, _ in calls]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0
        assert any("Dequantizing" in m for _, m in calls)


def test_embedded_model_answers_a_question(embedded):
    import torch

    path, _ = embedded
    tokenizer, model = load_tokenizer(path), load_causal_lm(path)
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.model_max_length == 8192
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def _mtimes(folder) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in Path(folder).iterdir()}


def test_a_second_resolve_reuses_the_converted_folder(embedded):
    before = _mtimes(embedded[0])
    assert resolve_model(EMBEDDED_MODEL) == embedded[0]
    assert resolve_model("SmolLM2-135M-Instruct") == embedded[0]
    assert _mtimes(embedded[0]) == before  # nothing converted or written again


def test_loaders_accept_the_embedded_name(embedded):
    assert load_tokenizer(EMBEDDED_MODEL).eos_token == "<|im_end|>"


def test_check_model_accepts_the_embedded_model_and_local_folders(embedded):
    check_model(EMBEDDED_MODEL)
    check_model(embedded[0])


# ---- building a cached folder once ----

def _fake_build(calls: list, delay: float = 0.0):
    def build(out):
        calls.append(out)
        time.sleep(delay)
        (out / "config.json").write_text("{}")
    return build


def test_build_once_builds_then_reuses(tmp_path):
    calls = []
    target = tmp_path / "m"
    assert build_once(target, _fake_build(calls), "v1") == target
    assert build_once(target, _fake_build(calls), "v1") == target
    assert len(calls) == 1 and is_complete(target, "v1")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".m.tmp")] == []


def test_a_changed_source_rebuilds(tmp_path):
    calls = []
    build_once(tmp_path / "m", _fake_build(calls), "v1")
    build_once(tmp_path / "m", _fake_build(calls), "v2")
    assert len(calls) == 2 and is_complete(tmp_path / "m", "v2")


def test_a_folder_without_marker_is_not_taken_as_done(tmp_path):
    target = tmp_path / "m"
    target.mkdir()
    (target / "config.json").write_text("{}")  # half-written by something else
    calls = []
    build_once(target, _fake_build(calls), "v1")
    assert len(calls) == 1 and (target / MARKER).is_file()


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    def broken(out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        build_once(tmp_path / "m", broken, "v1")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock"]


def test_stale_temporary_folders_are_cleaned(tmp_path):
    (tmp_path / ".m.tmp-999-abc").mkdir()
    build_once(tmp_path / "m", _fake_build([]), "v1")
    assert not (tmp_path / ".m.tmp-999-abc").exists()


def test_concurrent_callers_build_once_and_share_the_result(tmp_path):
    calls, results = [], []

    def caller():  # each thread opens the lock file itself, as separate processes do
        results.append(build_once(tmp_path / "m", _fake_build(calls, 0.3), "v1"))

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results == [tmp_path / "m"] * 3


def test_model_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_MODEL_CACHE", str(tmp_path / "cache"))
    assert model_cache_dir() == tmp_path / "cache"


# ---- bad specs ----

def test_a_missing_folder_is_named(tmp_path):
    missing = tmp_path / "no" / "such-model"
    for check in (resolve_model, check_model):
        with pytest.raises(ModelError, match="model folder .*such-model does not exist"):
            check(str(missing))
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model("./not-here")


def test_a_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ModelError, match="has no config.json; expected a save_pretrained model folder"):
        check_model(str(tmp_path))


def test_an_adapter_folder_names_its_base_model(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base-model"}))
    with pytest.raises(ModelError) as err:
        resolve_model(str(tmp_path))
    assert "LoRA adapter" in str(err.value) and "org/base-model" in str(err.value)


def test_a_hub_id_is_passed_through():
    assert resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"


def test_an_unreachable_hub_id_fails_fast_when_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelError) as err:
        check_model("nobody-here/no-such-model")
    assert time.perf_counter() - start < 2
    message = str(err.value)
    assert "Could not reach the Hugging Face Hub for model 'nobody-here/no-such-model'" in message
    assert f"`{EMBEDDED_MODEL}`" in message and "local save_pretrained folder" in message


def test_an_unreachable_hub_id_fails_within_the_timeout_when_online(silent_hub):
    start = time.perf_counter()
    with pytest.raises(ModelError, match="Could not reach the Hugging Face Hub for model 'nobody-here/x'"):
        check_model("nobody-here/x")
    assert time.perf_counter() - start < 3


def test_a_hub_that_takes_no_connection_is_said_once_at_once_without_retry_lines(dead_hub, capfd, caplog):
    """huggingface_hub would retry five times (~15 s), logging "Retrying in 1s" each time, before the message."""
    for _ in range(2):  # the second look-up reuses what the first found
        start = time.perf_counter()
        with pytest.raises(ModelError, match=r"Could not reach the Hugging Face Hub for model 'nobody-here/x' "
                                             r"\(offline or no network: cannot connect to 127.0.0.1: "):
            check_model("nobody-here/x")
        assert time.perf_counter() - start < 2
    out = capfd.readouterr()
    assert "Retrying" not in out.err + out.out + caplog.text


def test_loading_errors_name_the_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match=re.escape(str(tmp_path))):
        load_causal_lm(tmp_path)
    with pytest.raises(ModelError, match=re.escape(str(tmp_path))):
        load_tokenizer(tmp_path)


# ---- the tiny test model ----

def test_tiny_model_loads_and_trains_with_lora(tiny_model):
    import torch
    from peft import LoraConfig, get_peft_model

    tokenizer, model = load_tokenizer(tiny_model), load_causal_lm(tiny_model)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.tie_word_embeddings is True
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    batch = tokenizer(["a short example"], return_tensors="pt")
    model(**batch, labels=batch["input_ids"]).loss.backward()
    lora_grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert lora_grads and all(g is not None and torch.isfinite(g).all() for g in lora_grads)


def test_tiny_model_is_built_once(tiny_model):
    from backend.models import build_tiny_model

    before = _mtimes(tiny_model)
    assert build_tiny_model(tiny_model) == tiny_model
    assert _mtimes(tiny_model) == before


def test_lora_target_modules_are_checked_against_the_weights_before_anything_loads(tiny_model):
    from backend.models import unknown_modules

    assert unknown_modules(str(tiny_model), ["q_proj", "v_proj"]) is None
    why = unknown_modules(str(tiny_model), ["q_proj", "foo_proj"])
    assert why.startswith(f"{tiny_model} has no module named foo_proj; its layers are down_proj, gate_proj")
    assert unknown_modules(str(tiny_model), [r".*\.q_proj", "all-linear"]) is None  # patterns are PEFT's to match
    assert unknown_modules("org/not-downloaded", ["foo_proj"]) is None  # no local weights: nothing to check here
