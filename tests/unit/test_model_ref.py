"""Model references, the loader and the model cache: every way of naming a model parses to what to load (base,
adapter, task) or fails saying why; base + adapter loads in one call; the cache stays within its size and the
memory it may use, least recently used out first."""
import gc
import json
import threading
import time
import weakref

import pytest

from backend.config import build_config
from backend.models import EMBEDDED_MODEL, ModelCache, ModelError, ModelRef, cached_model, load_model, model_key
from backend.runs.store import RunStore, is_run_id, new_run_id


def adapter_folder(folder, base, task="CAUSAL_LM"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "task_type": task}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def finished_run(store, tiny_model, mode="sft", status="completed"):
    run = store.create_run(build_config({"mode": mode, "model": str(tiny_model),
                                         **({"dataset": "demo-preference"} if mode == "rm" else {})}))
    adapter_folder(store.run_dir(run.id) / "adapter", tiny_model, "SEQ_CLS" if mode == "rm" else "CAUSAL_LM")
    if status in ("completed", "stopped", "failed"):
        store.finish_run(run.id, status)
    else:
        store.update_run(run.id, status=status)
    return run


def error(text, where=None) -> ModelError:
    with pytest.raises(ModelError) as exc:
        ModelRef.parse(text, where)
    return exc.value


# ---- parsing ----

def test_the_embedded_model_and_hub_ids_need_nothing_on_disk():
    ref = ModelRef.parse(" SmolLM2-135M-Instruct ")
    assert (ref.kind, ref.base, ref.adapter, ref.task) == ("embedded", EMBEDDED_MODEL, None, "causal")
    hub = ModelRef.parse("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert (hub.kind, hub.base, hub.adapter, hub.task) == ("hub", "HuggingFaceTB/SmolLM2-360M-Instruct", None, None)


def test_a_local_model_folder_is_its_own_base(tiny_model):
    ref = ModelRef.parse(str(tiny_model))
    assert (ref.kind, ref.base, ref.adapter, ref.task) == ("folder", str(tiny_model.resolve()), None, "causal")
    assert ref.label == tiny_model.name


def test_an_adapter_folder_loads_on_the_base_its_config_names(tmp_path, tiny_model):
    ref = ModelRef.parse(str(adapter_folder(tmp_path / "rm-adapter", tiny_model, "SEQ_CLS")))
    assert (ref.base, ref.adapter, ref.task) == (str(tiny_model), str(tmp_path / "rm-adapter"), "seq_cls")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "adapter_config.json").write_text("{}")
    assert error(str(tmp_path / "bare")).reason == "no_base"


def test_an_export_is_told_apart_by_its_model_card(tmp_path, tiny_model):
    folder = adapter_folder(tmp_path / "export", tiny_model)
    (folder / "README.md").write_text("---\ntags:\n- rl-workbench\n---\n# a run\n")
    assert ModelRef.parse(str(folder)).kind == "export"


def test_a_classifier_folder_is_a_seq_cls_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"]}))
    assert ModelRef.parse(str(tmp_path)).task == "seq_cls"


def test_a_relative_folder_is_also_looked_up_in_the_workspace(workspace, tiny_model):
    adapter_folder(workspace / "models" / "mine", tiny_model)
    assert ModelRef.parse("models/mine", workspace).adapter == str((workspace / "models" / "mine").resolve())


def test_a_run_is_its_base_model_plus_the_adapter_it_saved(workspace, tiny_model):
    store = RunStore(workspace)
    run = finished_run(store, tiny_model)
    for text in (f"run:{run.id}", run.id):
        ref = ModelRef.parse(text, store)
        assert (ref.kind, ref.base, ref.adapter, ref.task) == ("run", str(tiny_model),
                                                               str(store.run_dir(run.id) / "adapter"), "causal")
        assert ref.run.id == run.id and ref.label == f"{run.name} (sft)"
    assert ModelRef.parse(f"run:{run.id}", workspace).key == ref.key  # a workspace folder finds its store
    rm = finished_run(store, tiny_model, "rm")
    assert ModelRef.parse(f"run:{rm.id}", store).task == "seq_cls"


def test_a_full_fine_tune_run_is_its_saved_model(workspace, tiny_model):
    import shutil

    store = RunStore(workspace)
    run = store.create_run(build_config({"mode": "sft", "model": str(tiny_model), "finetuning": "full"}))
    shutil.copytree(tiny_model, store.run_dir(run.id) / "adapter")
    store.finish_run(run.id, "completed")
    ref = ModelRef.parse(f"run:{run.id}", store)
    assert (ref.base, ref.adapter) == (str(store.run_dir(run.id) / "adapter"), None)


def test_a_checkpoint_of_a_run_even_while_it_trains(workspace, tiny_model):
    store = RunStore(workspace)
    run = finished_run(store, tiny_model, status="running")
    adapter_folder(store.run_dir(run.id) / "checkpoints" / "checkpoint-20", tiny_model)
    ref = ModelRef.parse(f"run:{run.id}@20", store)
    assert ref.adapter == str(store.run_dir(run.id) / "checkpoints" / "checkpoint-20")
    assert "no checkpoint at step 30" in str(error(f"run:{run.id}@30", store))
    assert "whole number" in str(error(f"run:{run.id}@last", store))


def test_run_references_that_cannot_be_used_say_why(workspace, tiny_model):
    store = RunStore(workspace)
    missing = error("run:20990101-000000-abcd", store)
    assert missing.reason == "no_run" and "no run with id '20990101-000000-abcd'" in str(missing)
    running = finished_run(store, tiny_model, status="running")
    active = error(f"run:{running.id}", store)
    assert active.reason == "active" and "still running" in str(active) and active.run.id == running.id
    failed = store.create_run(build_config({"model": str(tiny_model)}))
    store.finish_run(failed.id, "failed", error="CUDA out of memory\ntraceback")
    unsaved = error(f"run:{failed.id}", store)
    assert unsaved.reason == "unsaved" and "failed before saving one (CUDA out of memory)" in str(unsaved)
    assert "no workspace was given" in str(error(f"run:{running.id}"))


def test_a_workspace_without_its_database_still_finds_a_runs_folder(tmp_path, tiny_model):
    adapter_folder(tmp_path / "runs" / "copied-run" / "adapter", tiny_model)
    (tmp_path / "runs" / "empty-run").mkdir()
    ref = ModelRef.parse("copied-run", tmp_path)
    assert (ref.kind, ref.adapter) == ("run", str((tmp_path / "runs" / "copied-run" / "adapter").resolve()))
    assert error("empty-run", tmp_path).reason == "unsaved"
    assert error("run:gone", tmp_path).reason == "no_run"


def test_names_that_are_no_model_say_what_to_give(tmp_path):
    assert "no model given" in str(error("  "))
    assert error(str(tmp_path / "nowhere")).reason == "missing"
    assert "does not exist" in str(error("./not-here"))
    (tmp_path / "weights.bin").write_bytes(b"")
    assert "is a file" in str(error(str(tmp_path / "weights.bin")))
    assert "has no config.json" in str(error(str(tmp_path)))


def test_one_run_id_format_is_shared_with_the_store():
    assert is_run_id(new_run_id())
    assert not is_run_id("20990101-000000-ABCD") and not is_run_id("org/model")


# ---- loading ----

@pytest.fixture(scope="module")
def tiny_adapter(tiny_model, tmp_path_factory):
    """A LoRA adapter on the tiny model with visible weights, saved as a run saves it (tokenizer included)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from backend.models import load_causal_lm, load_tokenizer

    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    model = get_peft_model(load_causal_lm(tiny_model), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 1.0)
    model.save_pretrained(folder)
    load_tokenizer(tiny_model).save_pretrained(folder)
    return folder


def test_base_and_adapter_load_in_one_call_merged_or_not(tiny_adapter):
    import torch
    from peft import PeftModel

    ref = ModelRef.parse(str(tiny_adapter))
    plain = load_model(ref)
    merged = load_model(ref, merge=True)
    assert isinstance(plain.model, PeftModel) and not isinstance(merged.model, PeftModel)
    assert not plain.model.training and plain.device == "cpu"
    ids = plain.tokenizer("Hello there", return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(plain.model(**ids).logits, merged.model(**ids).logits, atol=1e-4)


def test_a_sequence_classifier_has_one_output_and_scores_the_last_non_pad_token(tiny_model):
    loaded = load_model(ModelRef.parse(str(tiny_model)), task="seq_cls")
    assert loaded.model.config.num_labels == 1
    assert loaded.model.config.pad_token_id == loaded.tokenizer.pad_token_id


# ---- the cache ----

class Weights:
    """Stands for a loaded model: alive while someone holds it."""


def test_the_cache_holds_n_models_and_evicts_the_least_recently_used():
    cache = ModelCache(capacity=2, free=lambda: 1.0)
    loads = []

    def load(name):
        return lambda: loads.append(name) or name

    assert cache.get("a", load("a")) == "a"
    cache.get("b", load("b"))
    cache.get("a", load("a"))  # a hit: a is now the most recently used
    cache.get("c", load("c"))
    assert loads == ["a", "b", "c"] and cache.loaded() == ["a", "c"]
    cache.get("b", load("b"))
    assert loads[-1] == "b" and cache.loaded() == ["c", "b"]


def test_memory_pressure_evicts_older_models_before_and_after_a_load():
    alive = weakref.WeakSet()

    def free():  # each live model takes 40% of the memory
        gc.collect()
        return 1.0 - 0.4 * len(alive)

    def load():
        w = Weights()
        alive.add(w)
        return w

    cache = ModelCache(capacity=10, min_free=0.15, free=free)
    a, b = cache.get("a", load), cache.get("b", load)
    del a, b
    assert cache.loaded() == ["a", "b"]  # 20% free: enough
    cache.get("c", load)  # 3 × 40% does not fit: a goes once c has loaded
    assert cache.loaded() == ["b", "c"] and len(alive) == 2
    cache.get("d", load)
    assert cache.loaded() == ["c", "d"]


def test_the_last_model_stays_however_short_memory_is():
    cache = ModelCache(capacity=3, min_free=0.5, free=lambda: 0.1)
    cache.get("a", Weights)
    cache.get("b", Weights)
    assert cache.loaded() == ["b"]


def test_eviction_releases_memory(monkeypatch):
    import backend.models.cache as cache_module

    released = []
    monkeypatch.setattr(cache_module, "_release_memory", lambda: released.append(1))
    cache = ModelCache(capacity=1, free=lambda: 1.0)
    cache.get("a", Weights)
    cache.get("b", Weights)
    assert len(released) == 1


def test_a_holder_lets_go_without_dropping_what_another_still_uses():
    cache = ModelCache(capacity=4, free=lambda: 1.0)
    cache.get("shared", Weights, holder="chat")
    cache.get("shared", Weights, holder="playground")
    cache.get("side-b", Weights, holder="chat")
    assert cache.keep_only([], "chat") == 2
    assert cache.loaded() == ["shared"] and cache.loaded("chat") == []
    assert cache.release("playground") == 1 and cache.loaded() == []


def test_concurrent_requests_for_one_model_load_it_once():
    cache = ModelCache(capacity=2, free=lambda: 1.0)
    loads, got = [], []

    def slow():
        loads.append(1)
        time.sleep(0.2)
        return Weights()

    threads = [threading.Thread(target=lambda: got.append(cache.get("m", slow))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len({id(g) for g in got}) == 1


def test_the_size_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_CACHE_SIZE", "1")
    assert ModelCache().capacity == 1
    monkeypatch.setenv("WORKBENCH_MODEL_CACHE_SIZE", "none")
    assert ModelCache().capacity == 4
    monkeypatch.delenv("WORKBENCH_MODEL_CACHE_SIZE")
    assert ModelCache().capacity == 4 and ModelCache().min_free == 0.15


def test_equal_loads_share_one_entry_and_different_ones_do_not(tiny_model):
    ref = ModelRef.parse(str(tiny_model))
    assert model_key(ref) == model_key(ref, device="cpu", dtype=None, progress=print)
    assert model_key(ref) != model_key(ref, task="seq_cls") != model_key(ref, task="seq_cls", merge=True)
    cache = ModelCache(capacity=2, free=lambda: 1.0)
    first = cached_model(ref, "chat", cache=cache)
    assert cached_model(ref, "playground", cache=cache) is first
