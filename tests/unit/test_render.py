"""The first example as its trainer sees it: the model's chat template applied as TRL applies it, the text the
loss is taken on told apart from the rest, tokens counted (the tiny model's real SmolLM2 tokenizer)."""
import json

import pytest

from app.formatting import example_html
from backend.data import prepare_dataset
from backend.data.render import Rendered, render_first
from backend.data.templates import CHAT_TEMPLATES, template_text
from tests.dataset_shapes import ALPACA, LF_DPO


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from backend.models import load_tokenizer

    return load_tokenizer(tiny_model)


def first(workspace, rows, mode, tokenizer):
    path = workspace / "data.json"
    path.write_text(json.dumps(rows))
    ds, info = prepare_dataset(str(path), mode)
    return render_first(ds, info, mode, tokenizer)


def test_a_completion_is_learned_and_its_templated_prompt_is_not(workspace, tokenizer):
    (r,) = first(workspace, ALPACA, "sft", tokenizer)
    (asked, masked), (answer, learned) = r.segments
    assert not masked and learned and asked.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nDescribe a process of making crepes.<|im_end|>" in asked
    assert answer == "Making crepes is easy.<|im_end|>\n"
    assert 0 < r.learned_tokens < r.tokens == len(tokenizer(asked + answer, add_special_tokens=False)["input_ids"])


def test_messages_are_learned_whole(workspace, tokenizer):
    rows = [{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}]
    (r,) = first(workspace, rows, "sft", tokenizer)
    assert len(r.segments) == 1 and r.segments[0][1] and r.learned_tokens == r.tokens


def test_preference_pairs_show_both_answers_and_a_reward_model_scores_them_whole(workspace, tokenizer):
    chosen, rejected = first(workspace, LF_DPO, "dpo", tokenizer)
    assert (chosen.title, rejected.title) == ("chosen", "rejected")
    assert chosen.segments[1] == ("Paris.<|im_end|>\n", True) and rejected.segments[1][0].startswith("Lyon.")
    chosen, _ = first(workspace, LF_DPO, "rm", tokenizer)
    assert chosen.title == "chosen (scored whole)" and chosen.learned_tokens == chosen.tokens


def test_online_rl_shows_the_prompt_with_the_generation_prompt(workspace, tokenizer):
    (r,) = first(workspace, [{"question": "Why?"}], "grpo", tokenizer)
    assert r.learned_tokens == 0 and r.segments[0][0].endswith("<|im_start|>assistant\n")


def test_plain_text_gets_the_eos_trl_appends(workspace, tokenizer):
    (r,) = first(workspace, [{"prompt": "2+2=", "completion": " 4"}], "sft", tokenizer)
    assert r.segments == [("2+2=", False), (" 4" + tokenizer.eos_token, True)]


def test_the_html_greys_what_is_not_learned_and_escapes_the_template():
    html = example_html([Rendered("chosen", [("<|im_start|>user\nHi", False), ("Yo", True)], 9, 2)])
    assert '<span class="wb-masked">&lt;|im_start|&gt;user\nHi</span><span class="wb-learned">Yo</span>' in html
    assert "9 tokens, 2 learned from · chosen" in html
    assert example_html([], error="no <model>") == "<p><b>Cannot show the first example:</b> no &lt;model&gt;</p>"


@pytest.mark.parametrize("name", list(CHAT_TEMPLATES))
def test_each_chat_template_renders_a_prompt_as_the_beginning_of_its_answered_form(tokenizer, name):
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "A"}]
    template = template_text(name)
    asked = tokenizer.apply_chat_template(chat[:2], tokenize=False, add_generation_prompt=True,
                                          chat_template=template)
    whole = tokenizer.apply_chat_template(chat, tokenize=False, chat_template=template)
    assert whole.startswith(asked) and "Q" in asked and whole[len(asked):].startswith("A")


def test_a_chosen_template_replaces_the_models_own(workspace, tiny_model):
    from backend.models import load_tokenizer

    plain = load_tokenizer(tiny_model, chat_template=template_text("plain"))
    (r,) = first(workspace, ALPACA, "sft", plain)
    assert r.segments == [("user: Describe a process of making crepes.\nassistant: ", False),
                          ("Making crepes is easy." + plain.eos_token + "\n", True)]
    assert template_text("model") is None


def test_a_family_template_whose_special_tokens_the_model_lacks_is_refused_before_the_run(tiny_model, tmp_path):
    from backend.config import ConfigError, build_config
    from backend.data.templates import template_problem
    from backend.runs.preflight import preflight

    assert template_problem("chatml", tiny_model) is None  # SmolLM2's vocabulary has <|im_start|> and <|im_end|>
    assert template_problem("plain", tiny_model) is None and template_problem("mistral", tiny_model) is None
    why = template_problem("llama-3", tiny_model)
    assert why.startswith("llama-3 writes <|start_header_id|>, <|end_header_id|>, <|eot_id|>, and "
                          "<|start_header_id|>, <|end_header_id|>, <|eot_id|> are not tokens of this model's")
    with pytest.raises(ConfigError) as refused:
        preflight(build_config({"model": str(tiny_model), "max_steps": 1, "data": {"chat_template": "gemma"}}),
                  tmp_path)
    assert any(e.startswith("data.chat_template: gemma writes <start_of_turn>, <end_of_turn>")
               for e in refused.value.errors), refused.value.errors


def test_a_unigram_vocabulary_is_read_as_its_pieces(tmp_path):
    from backend.data.templates import template_problem

    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": [
        ["<start_of_turn>", 0.0], ["▁hello", -1.5]]}, "added_tokens": [{"content": "<end_of_turn>"}]}))
    assert template_problem("gemma", tmp_path) is None
    assert "<|im_start|>, <|im_end|> are not tokens" in template_problem("chatml", tmp_path)
