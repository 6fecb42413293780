"""A LlamaBoard user's files as they are: an alpaca file and a ShareGPT file uploaded in the Train tab, the
conversion said next to the preview, and SFT started on each without touching the data."""
import json
from pathlib import Path

from backend.runs.store import RunStore
from tests.browser.test_ui import set_text
from tests.dataset_shapes import ALPACA, SHAREGPT
from tests.waiting import wait_for

FORMAT = "() => document.querySelector('#dataset-format').textContent"


def test_alpaca_and_sharegpt_uploads_train_without_an_edit(ui_server, page, tiny_model, tmp_path):
    store = RunStore(ui_server["workspace"])
    page.goto(ui_server["url"])
    page.wait_for_selector("#model")
    set_text(page, "model", tiny_model)
    set_text(page, "max_steps", 2)
    set_text(page, "max_length", 64)
    for name, rows, said in (("alpaca_en_demo.json", ALPACA, "alpaca → prompt + completion"),
                             ("glaive_toolcall_en_demo.json", SHAREGPT, "ShareGPT → messages")):
        path = tmp_path / name
        path.write_text(json.dumps(rows))
        page.locator("#upload input[type=file]").set_input_files(str(path))
        page.wait_for_function(f"() => ({FORMAT})().includes({json.dumps(said)})", timeout=60_000)
        assert "Ready:" in page.evaluate(FORMAT)
        assert name in page.locator("#dataset input").input_value()
        before = {r.id for r in store.list_runs()}
        page.click("#start")
        wait_for(lambda: {r.id for r in store.list_runs()} - before, timeout=60, what=f"a run on {name}")
        (run_id,) = {r.id for r in store.list_runs()} - before
        wait_for(lambda: not store.get_run(run_id).active, timeout=180, every=1, what=f"the run on {name}")
        run = store.get_run(run_id)
        assert run.status == "completed", (name, run.status, run.error)
        assert Path(run.config.dataset).name == name
        page.get_by_role("tab", name="Train").click()
