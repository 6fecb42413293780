"""Chat with a run trained with tools: its side offers "Use the run's tools" (on, naming the tools), a base model's
side does not, and the answer goes through the tool loop (the status counts its calls). The tiny model calls
nothing; the calls shown inline are tested on the rendering (tests/unit/test_chat_tools.py)."""
import shutil

from backend.chat import RUN_PREFIX, model_choices
from backend.config import build_config
from backend.runs.store import RunStore
from tests.browser.test_chat_ui import choose
from tests.browser.test_ui import set_text

STATUS = "() => document.querySelector('#chat-status').textContent"


def test_a_run_with_tools_chats_through_the_tool_loop(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    run = store.create_run(build_config({
        "name": "calc-run", "mode": "grpo", "model": str(tiny_model), "dataset": "demo-calculator",
        "data": {"chat_template": "chatml-tools"}, "tools": [{"type": "calculator"}],
        "rl": {"max_tool_calling_iterations": 2}, "reward_sources": [{"type": "tool_used"}]}))
    saved = store.run_dir(run.id) / "model"
    shutil.copytree(tiny_model, saved)  # a full fine-tune's folder: the tiny model itself, nothing trained
    store.update_run(run.id, adapter_path=str(saved))
    store.finish_run(run.id, "completed")
    labels = {value: label for label, value in model_choices(store)}

    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Chat").click()
    # the newest run comes to side B with its tools, on
    page.wait_for_function("() => document.querySelector('#chat-model-b input')?.value.includes('calc-run')")
    box_b = page.locator("#chat-tools-b")
    box_b.wait_for(state="visible")
    assert "tools: calculator" in box_b.inner_text() and "at most 2 rounds" in box_b.inner_text()
    assert box_b.locator("input[type=checkbox]").is_checked()
    choose(page, "chat-model-a", labels[str(tiny_model)])
    assert page.locator("#chat-tools-a").is_hidden()  # a base model has no tools
    choose(page, "chat-model-b", labels[RUN_PREFIX + run.id])  # picked again: still offered
    box_b.wait_for(state="visible")

    page.locator("#chat-settings").get_by_text("System prompt and sampling").click()
    set_text(page, "chat-max-new-tokens", 8)
    set_text(page, "chat-temperature", 1)
    set_text(page, "chat-prompt", "What is 347 × 29?")
    page.click("#chat-send")
    page.wait_for_function(f"() => /A done/.test(({STATUS})()) && /B done/.test(({STATUS})())", timeout=90_000)
    status = page.evaluate(STATUS)
    assert "0 tool call(s)" in status.split("B done")[1] and "tool call" not in status.split("B done")[0], status
