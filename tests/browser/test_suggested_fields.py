"""What the data says of a setting shows under that setting's field (issue 28): a GRPO run on GSM8K-shaped data
with completions of 64 tokens reads "💡 suggested: …" under rl.max_completion_length, in English and in 中文, and
the line goes once the value agrees."""
import re

from tests.browser.test_grpo_ui import choose
from tests.browser.test_ui import set_text
from tests.unit.test_suggestions_ui import gsm8k_rows

INFO = "() => document.querySelector('#rl-max_completion_length .info-text')?.textContent ?? ''"


def test_the_suggestion_shows_under_the_field_the_data_contradicts(ui_server, page, tiny_model, tmp_path):
    data = gsm8k_rows(tmp_path)
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    choose(page, "mode", "grpo")
    set_text(page, "dataset", data)
    set_text(page, "model", tiny_model)
    assert page.locator("#rl-max_completion_length input").input_value() == "64"  # the default

    page.wait_for_function(f"() => ({INFO})().includes('💡 suggested:')", timeout=60_000)
    info = page.evaluate(INFO)
    assert "the reference answers in answer are" in info, info  # `answer` shows as code
    suggested = re.search(r"suggested: (\d+)", info).group(1)
    assert int(suggested) > 64
    # the line sits in the field's own help, under its label; nothing under Start repeats it
    assert info.startswith("Tokens generated per completion") and "suggested" not in page.evaluate(
        "() => document.querySelector('#memory-estimate').textContent")

    page.locator("#language").get_by_text("中文").click()  # the switch writes every help again: the line follows
    page.wait_for_function(f"() => ({INFO})().includes('💡 建议：{suggested}')", timeout=90_000)  # a loaded CI
    assert "suggested" not in page.evaluate(INFO)

    set_text(page, "rl-max_completion_length", suggested)  # the value agrees: the help alone, in the language
    page.wait_for_function(f"() => !({INFO})().includes('💡') && ({INFO})().includes('token')", timeout=90_000)
