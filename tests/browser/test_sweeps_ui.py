"""The Sweeps tab as a person uses it: the Train tab's settings as the base, two settings to search, Start,
the trials fill in, and the best goes back to the Train tab."""
from pathlib import Path

from backend import sweeps
from backend.runs.store import RunStore
from tests.browser.test_ui import set_text

TRIALS_DONE = "() => (document.querySelector('#sweep-trials')?.textContent.match(/completed/g) || []).length"
HISTORY_POINTS = ("() => { const p = document.querySelector('#sweep-history .js-plotly-plot');"
                  " return p && p.data ? p.data.reduce((n, t) => n + (t.name === 'best so far' ? 0 : t.x.length), 0)"
                  " : 0; }")


def test_start_a_two_trial_sweep_and_watch_its_trials(ui_server, page, tiny_model):
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    set_text(page, "model", tiny_model)  # settings made in the Train tab become the sweep's base
    set_text(page, "max_steps", 2)
    set_text(page, "max_length", 64)
    page.get_by_role("tab", name="Sweeps").click()
    page.click("#sweep-base-from-train")
    page.wait_for_function(f"() => document.querySelector('#sweep-base .cm-content').textContent.includes("
                           f"'{tiny_model}')", timeout=30_000)
    assert "max_steps: 2" in page.locator("#sweep-base .cm-content").inner_text()
    # the first row searches the learning rate by default, on a log scale around the base's value
    assert page.locator("#sweep-param-0-kind input").input_value() == "log_float"
    # a second row: picking a setting fills its kind and range from the schema around the base's value
    page.click("#sweep-add-param")
    page.locator("#sweep-param-1-field input").fill("lora.r")
    page.get_by_role("option", name="lora.r", exact=True).click()
    page.wait_for_function("() => document.querySelector('#sweep-param-1-kind input').value === 'int'")
    assert page.locator("#sweep-param-1-low input").input_value() == "4"
    assert page.locator("#sweep-param-1-high input").input_value() == "16"
    box = page.locator("#sweep-n-trials input")
    box.fill("2")
    box.press("Tab")
    page.locator("#sweep-name input, #sweep-name textarea").first.fill("ui-sweep")
    page.click("#sweep-start")
    page.wait_for_function("() => /Started/.test(document.querySelector('#sweep-message').textContent)",
                           timeout=60_000)
    page.wait_for_function(f"() => ({TRIALS_DONE})() >= 2", timeout=300_000)
    page.wait_for_function("() => /completed/.test(document.querySelector('#sweep-status').textContent)",
                           timeout=30_000)
    table = page.locator("#sweep-trials").inner_text()
    assert "★" in table and "learning_rate" in table and "lora.r" in table
    page.wait_for_function(f"() => ({HISTORY_POINTS})() >= 2", timeout=30_000)
    assert "learning_rate" in page.locator("#sweep-best-config").inner_text()
    page.screenshot(path=str(Path(ui_server["workspace"]) / "sweeps-tab.png"), full_page=True)

    # a trial is an ordinary run: clicking its row opens it in the Runs tab
    page.locator("#sweep-trials").get_by_text("#1", exact=True).last.click()
    page.wait_for_function("() => /ui-sweep #1/.test(document.querySelector('#runs-select input')?.value || '')",
                           timeout=30_000)
    page.get_by_role("tab", name="Sweeps").click()

    # the best trial's settings go into the Train tab, to train it for longer from there
    store = RunStore(ui_server["workspace"])
    (sweep,) = sweeps.list_sweeps(store)
    best = sweeps.best_config(store, sweep.id)
    page.click("#sweep-best-to-train")
    page.wait_for_function(f"() => document.querySelector('#lora-r input')?.value === '{best.lora.r}'",
                           timeout=30_000)
    assert page.locator("#model input, #model textarea").first.input_value() == best.model


def test_a_sweep_preset_fills_the_form_and_mistakes_are_named(ui_server, page):
    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Sweeps").click()
    page.locator("#sweep-preset input").click()
    page.get_by_role("option", name="sft_lr_rank", exact=True).click()
    page.wait_for_function("() => document.querySelector('#sweep-param-1-field input')?.value === 'lora.r'")
    assert page.locator("#sweep-param-0-field input").input_value() == "learning_rate"
    assert page.locator("#sweep-param-1-choices textarea, #sweep-param-1-choices input").first.input_value() == \
        "4, 8, 16"
    assert page.locator("#sweep-n-trials input").input_value() == "8"
    assert page.locator("#sweep-prune input").is_checked()
    assert "max_steps: 12" in page.locator("#sweep-base .cm-content").inner_text()

    page.click("#sweep-param-0-remove")  # the rows below move up
    page.wait_for_function("() => document.querySelector('#sweep-param-0-field input')?.value === 'lora.r'")
    assert not page.locator("#sweep-param-1").is_visible()

    choices = page.locator("#sweep-param-0-choices textarea, #sweep-param-0-choices input").first
    choices.fill("4, 2000")
    choices.press("Tab")
    page.click("#sweep-start")
    page.wait_for_function("() => /choice 2000 is not allowed/.test("
                           "document.querySelector('#sweep-message').textContent)", timeout=30_000)
    assert "Cannot start the sweep" in page.locator("#sweep-message").inner_text()
    assert not sweeps.list_sweeps(RunStore(ui_server["workspace"]))
