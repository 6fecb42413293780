"""The chat playground's backend: what can be picked, its models in the model cache, side-by-side streaming,
scoring."""
import json
import threading
import time

import pytest

from backend import chat
from backend.chat import ChatError, ChatModels, Sampling
from backend.config import build_config
from backend.models import LoadedModel, ModelCache, ModelRef
from backend.runs.store import RunStore


def fake_adapter_run(store, tiny_model, mode="sft"):
    run = store.create_run(build_config({"mode": mode, "model": str(tiny_model),
                                         **({"dataset": "demo-preference"} if mode == "rm" else {})}))
    adapter = store.run_dir(run.id) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"task_type": "SEQ_CLS" if mode == "rm" else "CAUSAL_LM"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    store.update_run(run.id, adapter_path=str(adapter))
    store.finish_run(run.id, "completed")
    return run


def test_choices_are_bases_finished_policy_runs_and_merged_exports(workspace, tiny_model):
    store = RunStore(workspace)
    sft = fake_adapter_run(store, tiny_model)
    rm = fake_adapter_run(store, tiny_model, "rm")
    failed = store.create_run(build_config({"model": str(tiny_model)}))
    store.finish_run(failed.id, "failed", error="boom")
    values = [v for _, v in chat.model_choices(store)]
    assert values[:2] == ["smollm2-135m-instruct", str(tiny_model)]
    assert chat.RUN_PREFIX + sft.id in values
    assert chat.RUN_PREFIX + rm.id not in values and chat.RUN_PREFIX + failed.id not in values

    spec = chat.chat_model(chat.RUN_PREFIX + sft.id, store)
    assert spec.key == (str(tiny_model), str(store.run_dir(sft.id) / "adapter"))
    assert chat.chat_model(str(tiny_model), store).key == (str(tiny_model.resolve()), None)
    with pytest.raises(ChatError, match="reward model"):
        chat.chat_model(chat.RUN_PREFIX + rm.id, store)
    with pytest.raises(ChatError, match="produced no adapter"):
        chat.chat_model(chat.RUN_PREFIX + failed.id, store)


def test_cache_loads_each_model_once_holds_two_and_releases_what_is_no_longer_selected():
    loads = []

    def loader(ref, **options):
        loads.append(ref.key)
        return LoadedModel(ref, object(), object(), "cpu")

    models = ChatModels(ModelCache(capacity=2, free=lambda: 1.0), loader=loader)
    base, tuned, other = ModelRef("hub", "m"), ModelRef("hub", "m", "adapter"), ModelRef("hub", "x")
    assert models.get(base) is models.get(base)
    models.get(tuned)
    assert loads == [base.key, tuned.key]
    models.get(other)  # a third one pushes out the least recently used
    assert models.loaded() == [tuned.key, other.key]
    assert models.keep_only([other, None]) == 1
    assert models.loaded() == [other.key]


def test_conversation_keeps_turns_in_order_after_the_system_prompt():
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert chat.conversation("  Be brief. ", history, "and?") == [
        {"role": "system", "content": "Be brief."}, *history, {"role": "user", "content": "and?"}]
    assert chat.conversation("", [], "q") == [{"role": "user", "content": "q"}]


def test_sampling_settings_are_checked():
    assert Sampling(16, 0, 1).generate_kwargs() == {"max_new_tokens": 16, "do_sample": False}
    for bad, field in ((Sampling(0), "max new tokens"), (Sampling(8, -1), "temperature"),
                       (Sampling(8, 1, 0), "top-p")):
        with pytest.raises(ChatError, match=field):
            bad.check()


def test_two_models_stream_side_by_side(tiny_model):
    a = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    messages = chat.conversation("", [], "Hello")
    snapshots = [[(r.text, r.done) if r else None for r in snap]
                 for snap in chat.stream_replies([(a, messages), None, (a, messages)], Sampling(12, 0),
                                                 min_interval=0)]
    assert len(snapshots) > 2  # text arrived in pieces, not at the end
    assert all(s[1] is None for s in snapshots)
    final = snapshots[-1]
    assert final[0][1] and final[2][1]
    assert final[0][0] == final[2][0]  # greedy: the same model gives the same answer on both sides
    lengths = [len(s[0][0]) for s in snapshots]
    assert lengths == sorted(lengths)


def test_a_failing_side_reports_its_error_and_the_other_side_finishes(tiny_model):
    good = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))

    class Broken:
        def generate(self, **kwargs):
            raise RuntimeError("CUDA out of memory")

    bad = LoadedModel(None, Broken(), good.tokenizer, "cpu")
    start = time.time()
    *_, final = chat.stream_replies([(bad, [{"role": "user", "content": "x"}]),
                                     (good, [{"role": "user", "content": "x"}])], Sampling(6, 0))
    assert final[0].done and "CUDA out of memory" in final[0].error
    assert final[1].done and final[1].error is None and final[1].tokens == 6
    assert time.time() - start < 30


def test_closing_the_stream_stops_generation(tiny_model):
    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    stream = chat.stream_replies([(loaded, [{"role": "user", "content": "x"}])], Sampling(4000, 1.0),
                                 min_interval=0)
    next(stream)
    stream.close()  # what Gradio does when the page goes away or Stop is pressed
    deadline = time.time() + 20
    while any(t.name.startswith("chat-generate") for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(t.name.startswith("chat-generate") for t in threading.enumerate())


def test_replies_are_scored_by_reward_sources_like_training(workspace):
    asked = [[{"role": "user", "content": "What is 6 × 7?"}]] * 2
    result = chat.score_replies([{"type": "numeric_match", "params": {"column": "answer"}},
                                 {"type": "length", "weight": 0.5, "params": {"target": 3}}],
                                asked, ["It is 42", "It is 41"], workspace, {"answer": 42})
    assert result["sources"]["numeric_match"] == [1.0, 0.0]
    assert result["total"] == [1.5, 0.5]
    with pytest.raises(ChatError, match="answer"):  # a column the source reads must be given
        chat.score_replies([{"type": "numeric_match"}], asked, ["42", "41"], workspace)
