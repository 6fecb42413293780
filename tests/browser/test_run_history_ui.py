"""Run history in the browser: a note written on a run is still there after a reload, and a run deleted with
Delete → Confirm leaves the table, the store, the disk and the Compare picker while the selection moves to the
next run."""
from backend.config import build_config
from backend.runs.store import RunStore
from tests.browser.test_chat_ui import choose
from tests.browser.test_compare_ui import TRACE_NAMES
from tests.waiting import wait_for

NOTE = "lr too high, diverged at step 40"
NOTE_VALUE = "() => { const b = document.querySelector('#run-note textarea, #run-note input'); return b && b.value; }"
TABLE_HAS = "(name) => document.querySelector('#runs-table').textContent.includes(name)"


def _finished_run(store, name, model):
    # finished at once; should the UI's dispatcher see it queued first, it is a 1-step run on the tiny model
    run = store.create_run(build_config({"name": name, "model": str(model), "max_steps": 1}))
    store.finish_run(run.id, "completed")
    store.add_metrics(run.id, 1, {"loss": 1.0})
    return run


def _open_runs(page, url):
    page.goto(url)
    page.get_by_role("tab", name="Runs").click()


def test_a_note_survives_a_reload_and_a_deleted_run_leaves_the_table(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    older = _finished_run(store, "older-run", tiny_model)
    newer = _finished_run(store, "newer-run", tiny_model)  # the newest: selected when the page opens

    _open_runs(page, ui_server["url"])
    page.wait_for_function(f"() => ({NOTE_VALUE})() !== null && "
                           "!document.querySelector('#run-note textarea, #run-note input').disabled")
    box = page.locator("#run-note textarea, #run-note input").first
    box.fill(NOTE)
    box.press("Enter")
    wait_for(lambda: store.get_run(newer.id).note == NOTE, timeout=20, what="the note in the store")
    page.get_by_text(f"Note saved for {newer.name}").first.wait_for()

    _open_runs(page, ui_server["url"])
    page.wait_for_function(f"(note) => ({NOTE_VALUE})() === note", arg=NOTE, timeout=30_000)

    page.locator("#compare").get_by_text("Compare runs").click()
    choose(page, "compare-select", f"older-run · {older.id}")
    choose(page, "compare-select", f"newer-run · {newer.id}")
    page.wait_for_function(f"() => ({TRACE_NAMES})().length == 2", timeout=30_000)
    page.keyboard.press("Escape")

    page.click("#runs-delete")
    page.locator("#runs-delete-confirm").get_by_text("Confirm: delete newer-run").wait_for()
    page.click("#runs-delete-confirm")
    page.wait_for_function(f"() => !({TABLE_HAS})('newer-run') && ({TABLE_HAS})('older-run')", timeout=30_000)
    page.get_by_text("Exports under workspace/exports are kept").first.wait_for()
    assert [r.id for r in store.list_runs()] == [older.id]
    assert not store.run_dir(newer.id).exists() and store.run_dir(older.id).is_dir()
    page.wait_for_function("(label) => document.querySelector('#runs-select input').value === label",
                           arg=f"older-run · {older.id}", timeout=15_000)
    assert not page.locator("#runs-delete-confirm").is_visible()
    page.wait_for_function(f"() => ({TRACE_NAMES})().length == 1", timeout=15_000)
    assert page.evaluate(TRACE_NAMES) == [f"older-run · {older.id}"]
    assert "newer-run" not in page.locator("#compare-select").text_content()
    page.screenshot(path=str(ui_server["workspace"] / "run-history.png"), full_page=True)
