"""A base model without a chat template and conversational data are refused before the run starts, pointing at
data.chat_template, instead of failing in the worker with transformers' error."""
import json
import shutil

import pytest

from backend.config import build_config
from backend.data import FormatInfo, prepare_dataset
from backend.data.templates import chat_template_problem, has_chat_template

CHAT = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello!"}]
MESSAGES = FormatInfo(name="messages", columns=["messages"], conversational=True, num_rows=2)


@pytest.fixture
def base_model(tiny_model, tmp_path):
    """The tiny model's folder with its chat template removed, as a base model's tokenizer has none."""
    folder = tmp_path / "base"
    shutil.copytree(tiny_model, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_the_files_tell_what_transformers_loads(tiny_model, base_model):
    from backend.models.load import load_tokenizer

    assert has_chat_template(tiny_model) and load_tokenizer(tiny_model).chat_template
    assert has_chat_template(base_model) is False and load_tokenizer(base_model).chat_template is None
    config = json.loads((base_model / "tokenizer_config.json").read_text())
    (base_model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": "{{ messages }}"}))
    assert has_chat_template(base_model) and load_tokenizer(base_model).chat_template == "{{ messages }}"
    assert has_chat_template(base_model.parent) is None  # no tokenizer there: not judged


@pytest.mark.parametrize("mode, rows", [
    ("sft", [{"messages": CHAT}] * 2),
    ("grpo", [{"prompt": CHAT[:1], "answer": "4"}] * 2),  # prompts as messages
])
def test_conversations_for_a_model_without_a_template_name_the_model_and_the_setting(base_model, tmp_path, mode,
                                                                                      rows):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = prepare_dataset(str(data), mode)[1]
    settings = {"mode": mode, "model": str(base_model), "dataset": str(data)}
    if mode == "grpo":
        settings["reward_sources"] = [{"type": "regex", "name": "format", "params": {"pattern": "4"}}]
    why = chat_template_problem(build_config(settings), base_model, info)
    assert str(base_model) in why and "no chat template" in why and "data.chat_template" in why
    assert "plain" in why and "chatml" in why
    chosen = build_config({**settings, "data": {"chat_template": "plain"}})
    assert chat_template_problem(chosen, base_model, info) is None


def test_plain_text_rows_and_models_with_a_template_pass(tiny_model, base_model):
    text = FormatInfo(name="text", columns=["text"], conversational=False, num_rows=2)
    assert chat_template_problem(build_config({"model": str(base_model)}), base_model, text) is None
    assert chat_template_problem(build_config({"model": str(tiny_model)}), tiny_model, MESSAGES) is None
    assert chat_template_problem(build_config({"model": str(base_model)}), base_model, None) is None  # no data


def test_a_hub_model_is_judged_only_from_what_its_cache_tells(base_model, monkeypatch):
    import huggingface_hub

    cached = {"tokenizer_config.json": str(base_model / "tokenizer_config.json")}
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name, **_: cached.get(name))
    config = build_config({"model": "org/base-model"})
    assert chat_template_problem(config, None, MESSAGES) is None  # chat_template.jinja may just not be cached
    cached["chat_template.jinja"] = huggingface_hub._CACHED_NO_EXIST  # the Hub said it has none
    assert "org/base-model" in chat_template_problem(config, None, MESSAGES)
    cached.pop("tokenizer_config.json")  # its tokenizer not downloaded yet
    assert chat_template_problem(config, None, MESSAGES) is None


def test_the_run_is_refused_before_it_starts(base_model, tmp_path):
    from backend.config import ConfigError
    from backend.runs.preflight import preflight

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"messages": CHAT}) + "\n" for _ in range(2)))
    with pytest.raises(ConfigError, match=r"data.chat_template: the model .*base: its tokenizer has no chat template"):
        preflight(build_config({"model": str(base_model), "dataset": str(data)}), tmp_path)
    preflight(build_config({"model": str(base_model), "dataset": str(data), "data": {"chat_template": "plain"}}),
              tmp_path)
