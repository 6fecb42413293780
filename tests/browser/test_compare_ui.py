"""Comparing runs in the browser: two runs picked in the Compare accordion are overlaid on shared charts, with
the setting that differs and each run's final values; a third run's metrics arriving later show up live."""
from backend.config import build_config
from backend.runs.store import RunStore
from tests.browser.test_chat_ui import choose

TRACE_NAMES = ("() => { const p = document.querySelector('#compare-plot .js-plotly-plot');"
               " return p && p.data ? [...new Set(p.data.filter(t => t.showlegend).map(t => t.name))] : []; }")


def _config(name, lr, model):
    # finished at once; should the UI's dispatcher see it queued first, it is a 1-step run on the tiny model
    return build_config({"name": name, "learning_rate": lr, "model": str(model), "max_steps": 1})


def _finished_run(store, name, lr, losses, model):
    run = store.create_run(_config(name, lr, model))
    for step, loss in enumerate(losses, 1):
        store.add_metrics(run.id, step, {"loss": loss, "learning_rate": lr})
    store.finish_run(run.id, "completed")
    return run


def test_two_runs_overlaid_with_their_differences_and_a_live_third(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    slow = _finished_run(store, "slow-lr", 1e-5, [2.0, 1.9, 1.85], tiny_model)
    fast = _finished_run(store, "fast-lr", 1e-3, [2.0, 1.2, 0.7], tiny_model)

    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    page.locator("#compare").get_by_text("Compare runs").click()
    choose(page, "compare-select", f"slow-lr · {slow.id}")
    choose(page, "compare-select", f"fast-lr · {fast.id}")

    page.wait_for_function(f"() => ({TRACE_NAMES})().length == 2", timeout=30_000)
    assert page.evaluate(TRACE_NAMES) == [f"slow-lr · {slow.id}", f"fast-lr · {fast.id}"]
    page.wait_for_function("() => document.querySelector('#compare-settings').textContent"
                           ".includes('learning_rate')", timeout=10_000)
    settings = page.locator("#compare-settings").text_content()
    assert "1e-05" in settings and "0.001" in settings and "completed" in settings
    assert "0.7" in page.locator("#compare-final").text_content()
    page.locator("#compare").screenshot(path=str(ui_server["workspace"] / "compare.png"))

    # a run that starts logging after the page opened: listed, and once picked, its points arrive by polling
    late = store.create_run(_config("late", 3e-4, tiny_model))
    store.finish_run(late.id, "completed")
    store.add_metrics(late.id, 1, {"loss": 1.5})
    choose(page, "compare-select", f"late · {late.id}")
    page.wait_for_function(f"() => ({TRACE_NAMES})().length == 3", timeout=30_000)
    store.add_metrics(late.id, 2, {"loss": 0.25})
    page.wait_for_function("() => document.querySelector('#compare-final').textContent.includes('0.25')",
                           timeout=15_000)
