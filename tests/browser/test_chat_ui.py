"""Chat and export as a person uses them: base and trained side by side on the tiny model, scored with reward
sources; then the run's adapter downloaded as a zip from the Runs tab."""
import zipfile
from pathlib import Path

from backend.chat import RUN_PREFIX, model_choices
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.browser.test_ui import set_text
from tests.integration.test_modes import tiny_config, wait_for

SHOTS = Path("/tmp/shots-chat")


def choose(page, elem_id, option):
    """Open a dropdown and click one of its own options (another dropdown's list may still be in the DOM)."""
    page.locator(f"#{elem_id} input").click()
    page.locator(f"#{elem_id}").get_by_role("option", name=option, exact=True).click()


BOT_TEXTS = "(id) => [...document.querySelectorAll(`#${id} [data-testid=bot]`)].map(e => e.textContent.trim())"


def test_base_and_trained_side_by_side_then_download_the_adapter_zip(ui_server, page, tiny_model, tmp_path):
    store = RunStore(ui_server["workspace"])
    page.goto(ui_server["url"])  # opened before the run exists: model B must follow the run once it finishes
    page.wait_for_selector("#model")
    run = submit_run(store, tiny_config(tiny_model, "sft", learning_rate=5e-3))
    wait_for(lambda: not store.get_run(run.id).active, timeout=120, every=1, what="the sft run")
    assert store.get_run(run.id).status == "completed"
    labels = {value: label for label, value in model_choices(store)}
    SHOTS.mkdir(exist_ok=True)

    page.get_by_role("tab", name="Chat").click()
    # opening the tab puts the run just finished on side B (the embedded base is on A): choose once it has
    page.wait_for_function("() => document.querySelector('#chat-model-b input')?.value.includes('(base + adapter)')")
    choose(page, "chat-model-a", labels[str(tiny_model)])
    choose(page, "chat-model-b", labels[RUN_PREFIX + run.id])
    page.locator("#chat-settings").get_by_text("System prompt and sampling").click()
    set_text(page, "chat-max-new-tokens", 16)
    set_text(page, "chat-temperature", 1)  # the tiny model's greedy answer is blank lines
    set_text(page, "chat-prompt", "Hello, who are you?")
    page.click("#chat-send")
    page.wait_for_function("() => /A done/.test(document.querySelector('#chat-status').textContent)"
                           " && /B done/.test(document.querySelector('#chat-status').textContent)", timeout=60_000)
    for side in ("chat-a", "chat-b"):
        answers = page.evaluate(BOT_TEXTS, side)
        assert len(answers) == 1 and answers[0] not in ("", "…"), (side, answers)
    assert "16 tokens" in page.locator("#chat-status").inner_text()

    page.click("#chat-score")
    page.wait_for_function("() => /total/.test(document.querySelector('#chat-scores').textContent)", timeout=30_000)
    table = page.locator("#chat-scores").inner_text()
    assert "length" in table and "repetition" in table and "sft" in table, table
    page.screenshot(path=str(SHOTS / "chat.png"), full_page=True)

    page.get_by_role("tab", name="Runs").click()
    choose(page, "runs-select", f"{run.name} · {run.id}")  # the page opened before the run: nothing selected
    page.wait_for_function(f"() => document.querySelector('#runs-select input').value.includes('{run.id}')")
    page.wait_for_function("() => document.querySelector('#runs-stop').disabled")  # a completed run: no Stop
    page.locator("#export").get_by_text("Export", exact=True).first.click()
    page.click("#export-zip")
    link = page.locator("#export-file a[download]")
    link.wait_for(timeout=60_000)
    assert "Adapter exported" in page.locator("#export-status").inner_text()
    with page.expect_download() as download:
        link.click()
    saved = tmp_path / "adapter.zip"
    download.value.save_as(saved)
    with zipfile.ZipFile(saved) as zf:
        names = {n.split("/", 1)[1] for n in zf.namelist()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json", "README.md"} <= names
    assert "training_args.bin" not in names
    page.screenshot(path=str(SHOTS / "export.png"), full_page=True)
