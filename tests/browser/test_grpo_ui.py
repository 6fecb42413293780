"""GRPO through the UI as a person sets it up: the reward pre-filled from the dataset plus a second source in the
editor, Start, then per-source reward charts and live samples in the Runs tab, then Stop."""
from pathlib import Path

from tests.browser.test_ui import set_text

SUBPLOT_TITLES = "() => { const p = document.querySelector('#metrics-plot .js-plotly-plot');" \
                 " return p && p.layout && p.layout.annotations ? p.layout.annotations.map(a => a.text) : []; }"
SAMPLE_ROWS = "() => { const t = document.querySelector('#samples-table');" \
              " return t ? t.querySelectorAll('tbody tr').length : 0; }"


def choose(page, elem_id, option):
    """Pick an option of a Gradio dropdown the way a person does: open it, click the option."""
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option", name=option, exact=True).click()


def add_source(page, kind):
    choose(page, "reward-add-type", kind)
    page.click("#reward-add")


def test_grpo_with_two_reward_sources_shows_reward_charts_and_samples(ui_server, page, tiny_model):
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    choose(page, "mode", "grpo")
    page.wait_for_selector("#reward-sources", state="visible")
    # the built-in SFT set the page opens on is swapped for the one made for GRPO, with answers to reward
    page.wait_for_function("() => document.querySelector('#dataset input').value.startsWith('demo-math')")
    set_text(page, "model", tiny_model)

    # the dataset has an answer column: the reward starts as a numeric match against it, without a click
    page.wait_for_function("() => /Reward pre-filled: numeric_match against the `?answer`? column/"
                           ".test(document.querySelector('#dataset-format').textContent)")
    page.wait_for_selector("#reward-row-0", state="visible")
    assert page.locator("#reward-type-0 input").input_value() == "numeric_match"
    assert page.locator("#reward-params-0 textarea").input_value() == "{column: answer}"
    assert not page.locator("#reward-row-1").is_visible()
    add_source(page, "length")
    page.wait_for_selector("#reward-row-1", state="visible")
    set_text(page, "reward-name-1", "short")
    # in words: the tiny model's answers all run to the token limit, but their words vary (the probe wants spread)
    set_text(page, "reward-params-1", "{target: 4, unit: words}")
    set_text(page, "reward-weight-1", 0.5)
    page.wait_for_function("() => /parameters valid/.test(document.querySelector('#reward-help-1').textContent)")

    for elem_id, value in [("max_steps", 5000), ("per_device_train_batch_size", 2), ("max_length", 64),
                           ("rl-num_generations", 2), ("rl-max_completion_length", 8)]:
        set_text(page, elem_id, value)
    page.click("#start")

    page.wait_for_function("() => /running/i.test(document.querySelector('#run-status').textContent)",
                           timeout=60_000)
    if not page.locator("#metrics-plot").is_visible():
        page.get_by_role("tab", name="Runs").click()
    page.wait_for_function(f"() => ({SUBPLOT_TITLES})().some(t => t.startsWith('rewards/short/'))",
                           timeout=90_000)
    titles = page.evaluate(SUBPLOT_TITLES)
    assert any(t.startswith("rewards/numeric_match/") for t in titles), titles
    assert "loss" not in titles  # GRPO leads with its rewards; the rest is folded by prefix
    page.wait_for_selector("#metrics-group-0", state="visible")
    page.locator("#metrics-group-0").get_by_role("button").first.click()  # unfold the first group: drawn now
    page.wait_for_function("() => { const p = document.querySelector('#metrics-group-plot-0 .js-plotly-plot');"
                           " return p && p.layout && p.layout.annotations && p.layout.annotations.length > 0; }",
                           timeout=30_000)
    page.wait_for_function(f"() => ({SAMPLE_ROWS})() >= 1", timeout=30_000)
    headers = page.locator("#samples-table thead").inner_text()
    assert "numeric_match" in headers and "short" in headers and "total" in headers, headers
    page.screenshot(path=str(Path(ui_server["workspace"]) / "grpo-runs-tab.png"), full_page=True)

    page.wait_for_function("() => !document.querySelector('#runs-stop').disabled", timeout=30_000)  # a live run
    page.click("#runs-stop")
    page.wait_for_function("() => /stopped/i.test(document.querySelector('#progress').textContent)",
                           timeout=60_000)
