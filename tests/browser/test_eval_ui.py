"""Evaluate in the browser: "Evaluate" on a finished run opens the Evaluate tab filled in (its base against it),
a bad form is refused in the page, and a started evaluation shows its progress, the results table with both
models and the examples side by side."""
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.browser.test_chat_ui import choose, tiny_config
from tests.browser.test_ui import set_text
from tests.waiting import wait_for

STATUS = "() => document.querySelector('#eval-progress .wb-progress')?.dataset.status"
ROWS = "(id) => Number(document.querySelector(`#${id} [role=grid]`)?.getAttribute('aria-rowcount') || 1) - 1"


def test_evaluate_a_finished_run_against_its_base(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    run = submit_run(store, tiny_config(tiny_model, "sft"))
    wait_for(lambda: not store.get_run(run.id).active, timeout=120, every=1, what="the sft run")
    run = store.get_run(run.id)
    assert run.status == "completed", run.error

    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    choose(page, "runs-select", f"{run.name} · {run.id}")
    page.wait_for_selector("#runs-evaluate:not([disabled])")
    page.click("#runs-evaluate")
    page.wait_for_selector("#eval-start", state="visible")
    models = page.locator("#eval-models").text_content()
    assert "base (of the other models)" in models and f"{run.name}: sft adapter" in models
    assert page.locator("#eval-scorers textarea").input_value() == "rouge_l"

    # opened well before its boxes are typed into: a box filled as the accordion mounts is reset to its default
    page.locator("#tab-evaluate").get_by_text("Generation").click()

    set_text(page, "eval-scorers", "rouge_l:no_such_column")
    page.click("#eval-start")
    page.wait_for_function("() => document.querySelector('#eval-message').textContent.includes('no_such_column')")
    assert "the evaluation set has no column 'no_such_column'" in page.locator("#eval-message").text_content()

    set_text(page, "eval-scorers", "rouge_l\nlength:4")
    set_text(page, "eval-limit", 3)
    set_text(page, "eval-max-new-tokens", 4)
    assert page.locator("#eval-limit input").input_value() == "3"
    page.click("#eval-start")
    page.wait_for_function(f"() => ({STATUS})() == 'completed'", timeout=120_000)
    page.wait_for_function(f"() => ({ROWS})('eval-results') == 2")
    results = page.locator("#eval-results").text_content()
    assert "rouge_l" in results and "baseline" in results and "win / tie / loss" in results
    page.wait_for_function(f"() => ({ROWS})('eval-examples') == 3")
    assert page.locator("#eval-progress").text_content().count("6/6 answers") == 1
