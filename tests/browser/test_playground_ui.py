"""The Reward playground in the browser: its own sources score pasted completions (its budget boxes, mounted in a
hidden tab, come back as 0 and are no budget), and an exchange with a tool call is scored and shown as one."""
from tests.browser.test_ui import set_text


def test_pasted_completions_and_an_exchange_are_scored_with_the_default_sources(ui_server, page):
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    page.get_by_role("tab", name="Reward playground").click()
    set_text(page, "playground-count", 1)
    exchange = "→ calculator(expression='2 * 3')\n← calculator: 6\n<answer>6</answer>"
    page.locator("#playground-completions textarea").fill(f"{exchange}\n---\n<answer>7</answer>")
    page.locator("#playground-score").click()
    page.wait_for_function("() => /2 completions scored/.test(document.querySelector('#playground-summary').textContent)",
                           timeout=60_000)
    table = page.locator("#playground-table").inner_text()
    assert "→ calculator(expression='2 * 3')" in table and "← calculator: 6" in table, table
