"""Labeling end to end on the tiny model: the background generator process fills answers ahead of the
labelers and resumes after it dies, base and adapter answer side by side, and DPO trains on the labels."""
import os
import signal
import time

import pytest

from backend.labeling import generator as G
from backend import labeling as L
from backend.config import build_config
from backend.evals.generate import prompt_text_for
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

PROMPTS = ["What is 2 + 2?", "Name a colour.", "Say hello.", "Why is the sky blue?", "Count to three.",
           "Write a haiku.", "What is a cat?", "Name a fruit."]


def new_session(store, model, prompts=PROMPTS, **settings):
    settings = {"max_new_tokens": 8, **settings}
    return L.create_session(store, list(prompts), model_a=str(model), prompt_source="test",
                            settings=L.GenerationSettings(**settings))


@pytest.fixture
def stop_generators():
    started = []
    yield started
    for store, session_id in started:
        G.stop_generator(store, session_id)


def test_the_generator_runs_ahead_of_the_labelers_in_its_own_process(workspace, tiny_model, stop_generators):
    store = RunStore(workspace)
    session = new_session(store, tiny_model, lookahead=3)
    stop_generators.append((store, session.id))
    assert G.ensure_generator(store, session.id) == "started"
    assert G.ensure_generator(store, session.id) == "running"  # a second UI or CLI re-attaches, starts nothing
    pid = wait_for(lambda: L.get_session(store, session.id).gen_pid, 30, what="the generator's pid")
    assert pid != os.getpid() and os.getpgid(pid) == pid  # detached: its own session, outlives the UI
    wait_for(lambda: (L.get_session(store, session.id).gen_message or "").startswith("Paused"), 180,
             what="the generator to pause 3 items ahead")
    assert L.progress(store, session.id).generated == 3
    for _ in range(2):
        item = L.claim_next(store, session.id, "ann")
        L.commit_label(store, session.id, item.id, "a", "ann")
    wait_for(lambda: L.progress(store, session.id).generated == 5, 60, what="two more items")
    while (item := L.claim_next(store, session.id, "ann")) or L.has_ungenerated(store, session.id):
        if item:
            L.commit_label(store, session.id, item.id, "b", "ann")
        else:
            time.sleep(0.2)
    wait_for(lambda: L.get_session(store, session.id).status == "ready", 30, what="the session to be ready")
    items = L.items(store, session.id)
    assert all(it.answer_a is not None and it.answer_b is not None for it in items)
    assert {it.source_a["candidate"] for it in items} == {1, 2}  # sides are shuffled per item, and recorded
    assert all({it.source_a["candidate"], it.source_b["candidate"]} == {1, 2} for it in items)
    assert all(it.swapped == (it.source_a["candidate"] == 2) for it in items)
    assert G.ensure_generator(store, session.id) == "done"


def test_generation_resumes_where_a_killed_generator_stopped(workspace, tiny_model, stop_generators):
    store = RunStore(workspace)
    session = new_session(store, tiny_model, prompts=[f"Tell me about the number {i}." for i in range(16)],
                          lookahead=0, max_new_tokens=12)
    stop_generators.append((store, session.id))
    G.ensure_generator(store, session.id)
    wait_for(lambda: L.progress(store, session.id).generated >= 1, 180, what="a first answer")
    pid = L.get_session(store, session.id).gen_pid
    os.killpg(pid, signal.SIGKILL)  # a crash: no chance to clean up
    wait_for(lambda: G.ensure_generator(store, session.id) == "started", 30, every=0.2,
             what="a new generator after the crash")
    before = {it.id: it.answer_a for it in L.items(store, session.id) if it.answer_a is not None}
    wait_for(lambda: L.get_session(store, session.id).status == "ready", 240, what="every answer")
    after = {it.id: it.answer_a for it in L.items(store, session.id)}
    assert all(after[i] == text for i, text in before.items())  # committed answers are kept, not redone
    assert L.progress(store, session.id).generated == 16


def _make_adapter(tiny_model, out_dir):
    import torch
    from peft import LoraConfig, get_peft_model

    from backend.models import load_causal_lm, load_tokenizer

    model = get_peft_model(load_causal_lm(tiny_model), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 2.0)  # a visibly different model
    model.save_pretrained(out_dir)
    load_tokenizer(tiny_model).save_pretrained(out_dir)
    return out_dir


def test_base_and_a_runs_adapter_answer_side_by_side(workspace, tiny_model):
    from backend.models import load_causal_lm, load_tokenizer

    store = RunStore(workspace)
    run = store.create_run(build_config({"mode": "dpo", "model": str(tiny_model), "name": "tuned"}))
    store.update_run(run.id, status="completed", adapter_path=str(_make_adapter(tiny_model, workspace / "adapter")))
    assert (f"tuned: dpo adapter on {tiny_model}", f"run:{run.id}") in L.adapter_choices(store)
    session = L.create_session(store, PROMPTS[:3], model_a=str(tiny_model), model_b=f"run:{run.id}",
                               settings=L.GenerationSettings(max_new_tokens=6, temperature_a=0, temperature_b=0))
    assert G.run_generator(store, session.id, idle_exit_s=0) == 0  # in this process: the same code path
    from peft import PeftModel

    model, tokenizer = load_causal_lm(tiny_model), load_tokenizer(tiny_model)
    tuned = PeftModel.from_pretrained(load_causal_lm(tiny_model), str(workspace / "adapter")).eval()
    differs = 0
    items = L.items(store, session.id)
    # the first item alone (the labelers see it at once), the rest in one left-padded batch
    assert [i.source_a["batch"] for i in items] == [1, 2, 2]
    for item in items:
        sources = {item.source_a["candidate"]: (item.answer_a, item.source_a),
                   2 if item.source_a["candidate"] == 1 else 1: (item.answer_b, item.source_b)}
        (base_answer, base_src), (tuned_answer, tuned_src) = sources[1], sources[2]
        assert base_src["adapter"] is None and tuned_src["adapter"] == str(workspace / "adapter")
        assert tuned_src["label"] == "tuned (adapter on tiny-test)" and base_src["label"] == "tiny-test"
        text, templated = prompt_text_for(tokenizer, item.prompt, chat_template=True)
        inputs = tokenizer(text, return_tensors="pt", add_special_tokens=not templated)
        ids = model.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        plain = tokenizer.decode(ids[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()
        assert base_answer == plain  # the base side runs with the adapter switched off
        ids = tuned.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        # generated with the adapter folded into the weights: the same tokens as the unmerged adapter's
        assert tuned_answer == tokenizer.decode(ids[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()
        differs += tuned_answer != base_answer
    assert differs  # and the adapter side is the tuned model


def test_a_session_with_a_run_trained_with_tools_answers_through_them(workspace, tiny_model):
    """Both sides answer with the run's tools and chat template (the tiny model calls none: its answers stay text)."""
    from backend.data.templates import template_text

    store = RunStore(workspace)
    run = store.create_run(build_config({"mode": "grpo", "model": str(tiny_model), "name": "calc",
                                         "dataset": "demo-calculator", "tools": [{"type": "calculator"}],
                                         "data": {"chat_template": "chatml-tools"},
                                         "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]}))
    store.update_run(run.id, status="completed", adapter_path=str(_make_adapter(tiny_model, workspace / "adapter")))
    session = L.create_session(store, PROMPTS[:2], model_a=str(tiny_model), model_b=f"run:{run.id}",
                               settings=L.GenerationSettings(max_new_tokens=4, temperature_a=0, temperature_b=0))
    cands = G.candidates(store, session)
    play = L.tool_play(store, [c.spec for c in cands])
    assert (play.run_name, [t.name for t in play.tools], play.chat_template) == ("calc", ["calculator"],
                                                                                   "chatml-tools")
    models = G.CandidateModels(cands, play=play, workspace=workspace)
    assert all(tok.chat_template == template_text("chatml-tools") and tok.response_template
               for _, tok in models.loaded.values())
    assert G.run_generator(store, session.id, idle_exit_s=0) == 0
    items = L.items(store, session.id)
    assert all(isinstance(i.answer_a, str) and i.source_a["tools"] == i.source_b["tools"] == ["calculator"]
               for i in items)
    assert L.tool_play(store, [str(tiny_model)]) is None  # no run, no tools
    with pytest.raises(L.LabelError, match="search"):  # its tools are tried when the session is made
        bad = store.create_run(build_config({"mode": "grpo", "model": str(tiny_model), "dataset": "demo-calculator",
                                             "tools": [{"type": "search", "params": {"folder": "gone"}}],
                                             "data": {"chat_template": "chatml-tools"},
                                             "reward_sources": [{"type": "tool_used"}]}))
        store.update_run(bad.id, status="completed", adapter_path=str(workspace / "adapter"))
        L.create_session(store, PROMPTS[:1], model_a=str(tiny_model), model_b=f"run:{bad.id}")


def test_dpo_trains_on_a_labeling_session(workspace, tiny_model):
    store = RunStore(workspace)
    session = new_session(store, tiny_model, prompts=PROMPTS[:6], lookahead=0, max_new_tokens=12)
    assert G.run_generator(store, session.id, idle_exit_s=0) == 0
    while (item := L.claim_next(store, session.id, "ann")) is not None:
        L.commit_label(store, session.id, item.id, "a" if item.idx % 2 else "b", "ann")
    config = build_config({"mode": "dpo", "model": str(tiny_model), "dataset": L.LABELS_PREFIX + session.id,
                           "max_steps": 2, "max_length": 64, "lora": {"r": 2}, "per_device_train_batch_size": 2})
    run = submit_run(store, config)
    wait_for(lambda: not store.get_run(run.id).active, 240, every=1, what="the DPO run to end")
    run = store.get_run(run.id)
    assert run.status == "completed", run.error
    names = {m["name"] for m in store.metrics_since(run.id)}
    assert {"loss", "rewards/chosen", "rewards/margins"} <= names
