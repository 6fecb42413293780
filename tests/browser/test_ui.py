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


def test_start_watch_metrics_and_stop(ui_server, page, tiny_model):
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
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
