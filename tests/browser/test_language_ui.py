"""The interface language: switched to 中文 in the header and back, remembered by the browser across a reload; the
messages handlers write follow it (the memory estimate, the dataset line, the reward sources' help), and Gradio's own
words from the next load."""

from pathlib import Path

SHOTS = Path("/tmp/shots-language")
LABEL = "(id) => document.querySelector(`#${id} label, #${id} .label-wrap, #${id} [data-testid=block-label]`)" \
        "?.textContent.trim() ?? ''"


def test_switch_to_chinese_and_back_remembered_across_a_reload(ui_server, page):
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    assert page.get_by_role("tab", name="Train").is_visible()
    page.locator("#language").get_by_text("中文").click()
    page.get_by_role("tab", name="训练").wait_for()
    assert page.get_by_role("tab", name="运行").is_visible()
    assert page.evaluate("() => document.documentElement.lang") == "zh-CN"  # CJK fonts go by it
    page.wait_for_function("() => document.querySelector('#start').textContent.includes('开始训练')")
    page.wait_for_function(f"() => ({LABEL})('learning_rate').includes('学习率')")
    # what handlers and the backend's structured parts write, in Chinese: the memory estimate, the dataset line
    page.wait_for_function("() => document.querySelector('#memory-estimate')?.textContent.includes('预计内存')")
    memory = page.locator("#memory-estimate").text_content()
    assert "Estimated" not in memory and "weights" not in memory and "权重" in memory, memory
    page.wait_for_function("() => document.querySelector('#dataset-format')?.textContent.includes('就绪')")
    assert "**" not in page.locator("#dataset-format").text_content()  # its bold renders (no literal asterisks)
    page.locator("#mode input").click()  # an RL mode: the reward sources' help, from their schema, in Chinese
    page.get_by_role("option", name="grpo", exact=True).click()
    page.wait_for_function("() => document.querySelector('#reward-help-0')?.textContent.includes('参数有效')")
    help_text = page.locator("#reward-help-0").text_content()
    assert "parameters valid" not in help_text and "Parameters:" not in help_text, help_text
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "train_zh.png"), full_page=True)
    page.locator("#stop").click()  # what a handler writes follows the language too
    page.wait_for_function("() => document.querySelector('#train-message')?.textContent.includes('没有排队中或运行中的任务可停止')")
    page.get_by_role("tab", name="评估").click()  # a tab mounted after the switch shows its words in Chinese too
    page.wait_for_function("() => document.querySelector('#eval-start')?.textContent.includes('开始评估')")
    page.wait_for_function("() => document.querySelector('#eval-progress')?.textContent.includes('未选择评估')")
    page.reload()  # the browser keeps its choice
    page.get_by_role("tab", name="训练").wait_for(timeout=30_000)
    page.wait_for_function(f"() => ({LABEL})('learning_rate').includes('学习率')")
    # Gradio's own words follow from the load after the choice (it translates them once, as its page starts)
    page.wait_for_function("() => document.body.innerText.includes('将文件拖放到此处')")
    assert "Drop File Here" not in page.evaluate("() => document.body.innerText")
    page.locator("#language").get_by_text("English").click()
    page.get_by_role("tab", name="Train").wait_for()
    page.wait_for_function(f"() => ({LABEL})('learning_rate').includes('Learning rate')")
    assert "Start training" in page.locator("#start").text_content()
