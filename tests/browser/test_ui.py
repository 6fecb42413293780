"""The UI as a person uses it: start a run, watch the metrics plot fill, stop it."""
from pathlib import Path

PLOT_POINTS = "() => { const p = document.querySelector('#metrics-plot .js-plotly-plot');" \
              " return p && p.data && p.data.length ? p.data[0].x.length : 0; }"


def set_text(page, elem_id, value):
    """Type into a box; typed again when a component mounting just then (an accordion opening) reset it. A
    dropdown shows the label of the choice typed (`demo-math (built-in)`)."""
    box, value = page.locator(f"#{elem_id} input, #{elem_id} textarea").first, str(value)
    for _ in range(3):
        box.fill(value)
        box.press("Tab")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        if (read := box.input_value()) == value or read.startswith(f"{value} ("):
            return
    raise AssertionError(f"#{elem_id} does not keep {value!r}: it reads {box.input_value()!r}")


def choose(page, elem_id, option):
    """Pick an option of a Gradio dropdown the way a person does: open it, click the option."""
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option", name=option, exact=True).click()


def check_mode_switch(page, shots: Path):
    """GRPO pre-fills a reward source, and the memory line says so at once (not "add at least one source" beside
    it); SFT without eval.generate shows no reward sources; a preview row clicked shows in full."""
    dataset = page.locator("#dataset input").input_value()
    assert not page.locator("#reward-sources").is_visible()  # SFT scores no generated answers by default
    choose(page, "mode", "grpo")
    page.wait_for_selector("#reward-row-0", state="visible")
    assert "add at least one source" not in page.locator("#memory-estimate").inner_text()
    page.wait_for_function("() => /Estimated memory per process/"
                           ".test(document.querySelector('#memory-estimate').textContent)", timeout=30_000)
    page.locator("#dataset-preview").get_by_text("What is").locator("visible=true").first.click()
    page.wait_for_function("() => /Row \\d, in full\\s*prompt\\s*\\[user\\] What is/"
                           ".test(document.querySelector('#dataset-row').innerText)", timeout=30_000)
    page.screenshot(path=str(shots / "train-grpo.png"), full_page=True)
    choose(page, "mode", "sft")
    page.wait_for_selector("#reward-sources", state="hidden")
    page.wait_for_function(f"() => document.querySelector('#dataset input').value === {dataset!r}")


def test_start_watch_metrics_and_stop(ui_server, page, tiny_model):
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    check_mode_switch(page, Path(ui_server["workspace"]))
    set_text(page, "model", tiny_model)
    set_text(page, "max_steps", 3000)
    set_text(page, "max_length", 64)
    # the memory line under Start follows the settings: the tiny model at 64 tokens needs under 1 GiB
    page.wait_for_function("() => /Estimated memory per process: 0\\.\\d+ GiB \\(weights .*\\) — fits in the /"
                           ".test(document.querySelector('#memory-estimate').textContent)", timeout=30_000)
    page.click("#start")

    page.wait_for_function("() => /running/i.test(document.querySelector('#run-status').textContent)",
                           timeout=90_000)
    if not page.locator("#metrics-plot").is_visible():
        page.get_by_role("tab", name="Runs").click()
    page.wait_for_function(f"() => ({PLOT_POINTS})() >= 3", timeout=120_000)
    page.screenshot(path=str(Path(ui_server["workspace"]) / "runs-tab.png"), full_page=True)

    page.wait_for_function("() => !document.querySelector('#runs-stop').disabled", timeout=30_000)  # a live run
    page.click("#runs-stop")
    page.wait_for_function("() => /\\bstopped\\b/i.test(document.querySelector('#runs-table').textContent)",
                           timeout=90_000)
    # the Train tab is not polled while hidden: opening it polls it at once, so it never shows a stale status
    page.get_by_role("tab", name="Train").click()
    page.wait_for_function("() => /stopped/i.test(document.querySelector('#run-status').textContent)",
                           timeout=10_000)
