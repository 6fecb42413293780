"""What the data says of a setting shows under that setting's own field in the Train tab (issue 28): the handler
that follows every form change writes "💡 suggested: …" into the field's help, in the session's language, and
takes it back once the value agrees or the settings do not validate."""
import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest

from app import i18n, train_tab
from app.tab_polls import TabPolls
from backend.config import build_config
from backend.doctor.defaults import SUGGESTED_PATHS
from backend.runs.store import RunStore
from tests.dataset_shapes import GSM8K

HINT = re.compile(r"\n💡 suggested: (\d+) \(the reference answers in `answer` are (\d+)–(\d+) tokens")


def gsm8k_rows(folder):
    """GSM8K-shaped rows (question, answer ending `#### N`) whose answers differ in length: the worked answer,
    and its last line alone."""
    path = folder / "gsm8k.jsonl"
    question, answer = GSM8K[0]["question"], GSM8K[0]["answer"]
    rows = [{"question": question.replace("48", str(40 + i)), "answer": answer if i % 2 else answer.split("\n")[-1]}
            for i in range(8)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tab(tmp_path_factory, tiny_model):
    """The Train tab in a Blocks; `memory(request, typed, **settings)` calls the handler the form's changes call
    (its outputs checked against the event's) on the form showing a GRPO run on GSM8K-shaped data with `settings`,
    then `typed` ({path: value}) typed into it, and returns the help under each field a suggestion may name."""
    workspace = tmp_path_factory.mktemp("ws")
    data = gsm8k_rows(workspace)
    with gr.Blocks() as demo:
        polls = TabPolls(1.5, ("train",))
        with gr.Tabs() as polls.tabs:
            with gr.Tab("Train"):
                built = train_tab.build(RunStore(workspace), polls, gr.State(None))
    on_memory = next(f for f in demo.fns.values() if f.name == "on_memory")
    fields = {built.form.components[p] for p in SUGGESTED_PATHS}
    polled = [f for f in demo.fns.values() if any(event == "tick" for _, event in f.targets)]
    assert polled and not any(fields & set(f.outputs) for f in polled)  # the poll costs nothing more

    def memory(request=None, typed=None, **settings):
        config = build_config({"mode": "grpo", "model": str(tiny_model), "dataset": str(data),
                               "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}],
                               **settings})
        shown = built.form.updates_from(config) | {built.form.components[p]: v for p, v in (typed or {}).items()}
        out = on_memory.fn(on_memory.fn.pack.text({c: shown[c] for c in built.form.inputs}), request=request)
        assert set(out) <= set(on_memory.outputs)
        return {path: out[built.form.components[path]]["info"] for path in SUGGESTED_PATHS}
    memory.form = built.form
    return memory


def help_of(path: str, lang: str = "en") -> str:
    return i18n.setting_text(path, lang)[1]


def test_answers_longer_than_the_completions_suggest_a_limit_under_its_field(tab):
    info = tab(rl={"max_completion_length": 64})
    found = HINT.search(info["rl.max_completion_length"])
    assert found, info["rl.max_completion_length"]
    value, shortest, longest = map(int, found.groups())
    assert shortest < longest and value >= 2 * longest > 64  # answers that reason first run about twice as long
    assert info["rl.max_completion_length"].startswith(help_of("rl.max_completion_length") + "\n💡")
    # the batch of 2 holds no group of 4, and RL rows are not cut at max_length: their help alone
    assert info["rl.num_generations"] == help_of("rl.num_generations")
    assert info["max_length"] == help_of("max_length")


def test_the_suggestion_goes_once_the_value_agrees_or_the_form_is_wrong(tab):
    value = int(HINT.search(tab(rl={"max_completion_length": 64})["rl.max_completion_length"]).group(1))
    assert tab(rl={"max_completion_length": value})["rl.max_completion_length"] == help_of("rl.max_completion_length")
    # settings that do not validate: no suggestion is left standing from before
    wrong = tab(rl={"max_completion_length": 64}, typed={"learning_rate": -1.0})
    assert wrong["rl.max_completion_length"] == help_of("rl.max_completion_length")


def test_a_batch_that_holds_groups_of_four_suggests_them(tab):
    info = tab(rl={"max_completion_length": 64}, per_device_train_batch_size=4)
    assert info["rl.num_generations"] == help_of("rl.num_generations") + (
        "\n💡 suggested: 4 (the batch of 4 completions holds groups of 4, and more completions per prompt give a "
        "group more reward spread)")


def test_the_suggestion_follows_the_sessions_language(tab):
    chinese = SimpleNamespace(session_hash="suggestions-zh")
    i18n.remember(chinese, "zh")
    info = tab(chinese, rl={"max_completion_length": 64})
    zh = info["rl.max_completion_length"]
    assert zh.startswith(help_of("rl.max_completion_length", "zh") + "\n💡 建议：") and "suggested" not in zh
    assert "`answer` 中的参考答案长" in zh
    # cleared, it is what the language switch writes under every setting (app/main.py runs this after the switch)
    box = tab.form.components["rl.max_completion_length"]
    switched = i18n.Translatable(settings={"rl.max_completion_length": box}).updates("zh")[box]["info"]
    assert tab(chinese, rl={"max_completion_length": 512})["rl.max_completion_length"] == switched
