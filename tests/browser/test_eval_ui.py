"""Evaluate in the browser: "Evaluate" on a finished run opens the Evaluate tab filled in (its base against it,
on its training data, which the note next to the set says plainly), a bad form is refused in the page, and a
started evaluation shows what it is doing, the line under Start follows it to "completed", the results table with
both models and its win rate said what it is, and the examples side by side, readable at 1400 px without scrolling
sideways."""
from pathlib import Path

from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.browser.test_chat_ui import choose, tiny_config
from tests.browser.test_ui import set_text
from tests.waiting import wait_for

SHOTS = Path("/tmp/shots-eval")
STATUS = "() => document.querySelector('#eval-progress .wb-progress')?.dataset.status"
ROWS = "(id) => Number(document.querySelector(`#${id} [role=grid]`)?.getAttribute('aria-rowcount') || 1) - 1"
# records each status line the progress bar shows
WATCH = """() => { const seen = window.__evalProgress = [];
  const note = () => { const t = document.querySelector('#eval-progress .wb-status')?.textContent;
                       if (t && seen[seen.length - 1] !== t) seen.push(t); };
  new MutationObserver(note).observe(document.querySelector('#eval-progress'),
                                     {subtree: true, childList: true, characterData: true}); }"""
CARDS = "() => document.querySelectorAll('#eval-examples .wb-ex-card').length"
# every element of the examples whose content is wider than its box (it would scroll sideways or be cut off)
OVERFLOW = """() => [...document.querySelectorAll('#eval-examples, #eval-examples *')]
  .filter(el => el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
  .map(el => `${el.className} ${el.scrollWidth}>${el.clientWidth}`)"""


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
    # the run held nothing out: the set filled in is what it trained on, and the page says so next to it
    assert page.locator("#eval-dataset input").input_value().startswith(run.config.dataset)
    page.wait_for_selector("#eval-dataset-note #eval-dataset-training")
    assert f"This is the data {run.name} trained on" in page.locator("#eval-dataset-note").text_content()

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
    page.evaluate(WATCH)
    page.click("#eval-start")
    page.wait_for_function("() => document.querySelector('#eval-message').textContent.includes('Started')")
    page.wait_for_function(f"() => ({STATUS})() == 'completed'", timeout=120_000)
    # the line under Start follows the evaluation to its end
    page.wait_for_function("() => document.querySelector('#eval-message').textContent.includes(': completed.')")
    assert "running" not in page.locator("#eval-message").text_content()
    page.wait_for_function(f"() => ({ROWS})('eval-results') == 2")
    results = page.locator("#eval-results").text_content()
    assert "rouge_l" in results and "baseline" in results and "win rate vs baseline (win / tie / loss)" in results
    win_note = page.locator("#eval-win-note").text_content()
    assert "Win rate of a model over the baseline (base" in win_note and "a tie counting half" in win_note
    page.wait_for_function(f"() => ({CARDS})() == 3")
    assert page.locator("#eval-progress").text_content().count("6/6 answers") == 1
    # while it ran, the bar said what it was doing in the page's words, never the job's bare "Loading …"
    running = [t for t in page.evaluate("() => window.__evalProgress") if t.startswith("running")]
    assert all(("— loading" in t and "generating its first answers" in t) or "— generating answers with" in t
               or "— starting" in t for t in running), running
    first = page.locator("#eval-examples .wb-ex-card").first
    assert first.locator("[data-side=A]").is_visible() and first.locator("[data-side=B]").is_visible()
    assert f"{run.name} (sft)" in first.locator("[data-side=B]").text_content()
    # the answers and the scores are readable without scrolling sideways at 1400 px
    assert page.viewport_size["width"] == 1400
    assert page.evaluate(OVERFLOW) == []
    assert page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    box, right = first.locator("[data-side=B] .wb-ex-scores").bounding_box(), page.viewport_size["width"]
    assert box["x"] + box["width"] <= right, box
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "evaluate-completed.png"), full_page=True)
