"""The Runs tab's Full log in the browser: opened, it shows the run's whole log with a library warning repeated at
every step collapsed into one line with its count and the log file's path; a search keeps the matching lines with
their count; and it follows lines the run writes later."""
from backend.config import build_config
from backend.runs.logs import log_path
from backend.runs.store import RunStore
from tests.unit.test_run_logs import FUTURE, TRAINING

TEXT = "() => document.querySelector('#full-log-text').textContent"
INFO = "() => document.querySelector('#full-log-info').textContent"


def test_the_full_log_collapses_warnings_searches_and_follows_the_log(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    run = store.create_run(build_config({"name": "logged", "model": str(tiny_model), "max_steps": 1}))
    store.finish_run(run.id, "completed")  # never dispatched: the test writes its log
    path = log_path(store, run.id)
    path.write_text("".join(f"{line}\n" for line in TRAINING))

    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_function("(id) => document.querySelector('#runs-select input').value.includes(id)", arg=run.id)
    page.locator("#full-log").get_by_text("Full log").click()
    page.wait_for_function(f"() => ({TEXT})().includes('(repeated 3 times)')", timeout=20_000)
    assert page.evaluate(TEXT).count("is_gradient_checkpointing") == 1
    assert page.locator("#full-log-path input, #full-log-path textarea").first.input_value() == str(path)

    search = page.locator("#full-log-search input, #full-log-search textarea").first
    search.fill("STEP 2")
    search.press("Enter")
    page.wait_for_function(f"() => ({INFO})().includes('1 of 9 lines contain')", timeout=20_000)
    assert "step 1/3" not in page.evaluate(TEXT) and page.locator("#full-log-text mark").count() == 1

    search.fill("")
    search.press("Enter")
    page.wait_for_function(f"() => ({TEXT})().includes('step 1/3')", timeout=20_000)
    with open(path, "a") as f:
        f.write(f"{FUTURE}\n  warnings.warn(\nlate line from the run\n")
    store.set_note(run.id, "touched")  # the store changes, as a live run's heartbeat does every 2 s
    page.wait_for_function(f"() => ({TEXT})().includes('late line from the run')", timeout=20_000)
    assert "(repeated 4 times)" in page.evaluate(TEXT)
