"""The Export panel's GGUF export in the browser: a finished run written as a q8_0 GGUF with its Ollama Modelfile,
zipped for download."""
from backend.runs.store import RunStore
from tests.finished_runs import adapter_run

STATUS = "() => document.querySelector('#export-status')?.textContent ?? ''"


def test_export_a_finished_run_as_a_gguf_from_the_runs_tab(ui_server, page, tiny_model):
    workspace = ui_server["workspace"]
    run = adapter_run(RunStore(workspace), tiny_model)
    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_function("id => document.querySelector('#runs-select input')?.value.includes(id)", arg=run.id,
                           timeout=30_000)
    page.locator("#export").get_by_text("Export", exact=True).first.click()
    page.locator("#export-quant input").click()
    page.get_by_role("option", name="q8_0").click()
    page.click("#export-gguf")
    done = "s => ['GGUF exported', 'Cannot export', 'Export failed'].some(w => s.includes(w))"
    page.wait_for_function(f"() => ({done})(({STATUS})())", timeout=180_000)
    assert "GGUF exported" in page.evaluate(STATUS), page.evaluate(STATUS)
    folder = workspace / "exports" / f"{run.id}-gguf-q8_0"
    assert f"ollama create NAME -f {folder / 'Modelfile'}" in page.evaluate(STATUS)
    assert [p.name for p in folder.glob("*.gguf")] == [f"{run.name}.q8_0.gguf"]
    assert page.locator("#export-file").is_visible()
    page.screenshot(path="/tmp/export-gguf-ui.png", full_page=True)
