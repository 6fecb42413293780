"""Labeling in the browser as two people do it at once: keyboard labels, exact counts, no pair twice, a
reload that resumes on the same item, an export downloaded from the page, and one click to train on it."""
import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.browser.test_ui import set_text

# the prompt's text; null for the moment the card is swapped for the next one
PROMPT = "() => { const e = document.querySelector('#label-prompt'); return e ? e.innerText.trim() : null; }"
SHOTS = Path("/tmp/shots-label")


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def store(ui_server):
    """The UI's store; every labeling generator it started is stopped afterwards."""
    from backend import labeling
    from backend.labeling import generator as label_generator
    from backend.runs.store import RunStore

    s = RunStore(ui_server["workspace"])
    yield s
    for session in labeling.list_sessions(s):
        label_generator.stop_generator(s, session.id)


def open_labeling(browser, url):
    page = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True).new_page()
    page.set_default_timeout(90_000)  # a loaded CI machine: the generator and the UI share 2 cores
    page.goto(url)
    page.get_by_role("tab", name="Labeling").click()
    page.wait_for_selector("#label-start")
    return page


def prompt(page) -> str:
    page.wait_for_function(f"() => ({PROMPT})() !== null")
    return page.evaluate(PROMPT)


def counts(page) -> tuple[int, int]:
    page.wait_for_function("() => /\\d+ labeled \\/ \\d+ remaining/.test("
                           "document.querySelector('#label-count')?.innerText || '')", timeout=30_000)
    text = page.inner_text("#label-count")
    labeled, remaining = re.match(r"(\d+) labeled / (\d+) remaining", text).groups()
    return int(labeled), int(remaining)


def wait_for_count(page, labeled, remaining):
    page.wait_for_function(f"() => (document.querySelector('#label-count')?.innerText || '').trim()"
                           f" === '{labeled} labeled / {remaining} remaining'", timeout=90_000)


def wait_for_pair(page, timeout=180_000):
    """The prompt shown, read in the same look that found one (a tick may redraw the card right after)."""
    return page.wait_for_function(f"() => ({PROMPT})() || null", timeout=timeout).json_value()


def press_and_wait(page, key):
    """Press a label key and wait until the page moved on (a new pair, or nothing left for this labeler)."""
    before = prompt(page)
    page.keyboard.press(key)
    page.wait_for_function(f"() => ![null, {json.dumps(before)}].includes(({PROMPT})())", timeout=90_000)


# Failed both tries in one of three full runs on 2026-12-07 (alone: 59 s, passing); cause not found yet: two more
# tries, listed as RERUN at the end of the run, until it waits on what it watches
@pytest.mark.flaky(reruns=2, reruns_delay=5)
def test_two_labelers_label_one_session_with_the_keyboard(ui_server, store, browser, tiny_model):
    from backend import labeling

    SHOTS.mkdir(exist_ok=True)
    ann = open_labeling(browser, ui_server["url"])
    set_text(ann, "label-model-a", tiny_model)
    set_text(ann, "label-max-new-tokens", 8)
    set_text(ann, "label-limit", 6)
    set_text(ann, "label-annotator", "ann")
    ann.click("#label-start")
    first = wait_for_pair(ann)
    [session] = labeling.list_sessions(store)
    assert counts(ann) == (0, 6)
    ann.screenshot(path=str(SHOTS / "two-labelers-ann.png"), full_page=True)

    bob = open_labeling(browser, ui_server["url"])  # joins the newest session by itself
    assert wait_for_pair(bob) != first  # never the same pair as ann
    set_text(bob, "label-annotator", "bob")

    # typing in the note does not label: keys only act outside text boxes
    note = ann.locator("#label-note textarea, #label-note input").first
    note.fill("3 words 4 you")
    note.press("1")
    ann.wait_for_timeout(500)
    assert prompt(ann) == first and counts(ann) == (0, 6)

    for page in (ann, bob):
        page.locator("#label-progress").click()  # focus outside the text boxes
    shown = {"ann": prompt(ann), "bob": prompt(bob)}
    bob.keyboard.press("2")  # both at once
    ann.keyboard.press("1")  # saved with the note typed above
    for name, page in (("ann", ann), ("bob", bob)):
        page.wait_for_function(f"() => ![null, {json.dumps(shown[name])}].includes(({PROMPT})())", timeout=90_000)
    ann.wait_for_function("() => /^2 labeled/.test(document.querySelector('#label-count').innerText)")
    assert note.input_value() == ""  # cleared for the next pair

    # undo brings ann's last pair back; labeling it again keeps one label
    press_and_wait(ann, "u")
    assert prompt(ann) == first
    press_and_wait(ann, "3")

    # a reload resumes on the same item
    held = prompt(ann)
    ann.reload()
    ann.get_by_role("tab", name="Labeling").click()
    ann.wait_for_function(f"() => ({PROMPT})() === {json.dumps(held)}", timeout=90_000)
    assert ann.locator("#label-annotator textarea, #label-annotator input").first.input_value() == "ann"

    # a better answer edited before saving goes with the label
    ann.get_by_text("Edit the better answer before saving").click()
    [item] = [it for it in labeling.items(store, session.id) if it.prompt == held]
    ann.click("#label-edit-from-b")
    ann.wait_for_function("b => document.querySelector('#label-edit textarea').value === b", arg=item.answer_b)
    edit_box = ann.locator("#label-edit textarea")
    edit_box.fill("A corrected answer.")
    ann.click("#label-choice-b")
    ann.wait_for_function(f"() => ![null, {json.dumps(held)}].includes(({PROMPT})())", timeout=90_000)
    assert edit_box.input_value() == ""

    keys = {"ann": "1", "bob": "4"}
    for _ in range(10):  # label the rest, the two alternating
        for name, page in (("ann", ann), ("bob", bob)):
            if prompt(page):
                press_and_wait(page, keys[name])
        if not prompt(ann) and not prompt(bob):
            break
    for page in (ann, bob):
        wait_for_count(page, 6, 0)

    saved = labeling.labels(store, session.id)
    assert len(saved) == 6 and len({lab.item_id for lab in saved}) == 6  # exact: one label per pair
    by = {name: [lab for lab in saved if lab.annotator == name] for name in ("ann", "bob")}
    assert len(by["ann"]) + len(by["bob"]) == 6 and by["ann"] and by["bob"]
    assert len({lab.client for lab in saved}) == 2
    assert [(lab.choice, lab.annotator) for lab in saved if lab.edited_text == "A corrected answer."] == [("b", "ann")]
    assert sum(lab.undone for lab in labeling.labels(store, session.id, include_undone=True)) == 1
    # the note went with ann's label on the first pair, and came back with it on undo
    assert [(lab.note, lab.choice) for lab in saved if lab.note] == [("3 words 4 you1", "tie")]

    # the export downloads from the page
    ann.get_by_text("Export and train").click()
    ann.locator("#label-export-format").get_by_text("KTO", exact=False).click()
    ann.click("#label-export")
    link = ann.locator("#label-export-file a").first
    link.wait_for(timeout=90_000)
    with ann.expect_download() as info:
        link.click()
    rows = [json.loads(line) for line in Path(info.value.path()).read_text().splitlines()]
    decided = sum(lab.choice in ("a", "b") for lab in saved)
    assert len(rows) == 2 * decided and {r["label"] for r in rows} <= {True, False}
    assert re.search(rf"{2 * decided} KTO rows", ann.inner_text("#label-export-summary"))
    ann.screenshot(path=str(SHOTS / "export.png"), full_page=True)

    # the summary: counts, annotators, which side and which sample won
    ann.get_by_text("Summary", exact=True).click()
    ann.click("#label-summary-refresh")
    ann.wait_for_function("() => /6 labels on 6 items by 2 annotators/"
                          ".test(document.querySelector('#label-summary').innerText)")
    assert "sample 1" in ann.inner_text("#label-summary") and "sample 2" in ann.inner_text("#label-summary")
    ann.screenshot(path=str(SHOTS / "summary.png"), full_page=True)

    # one click fills the Train tab
    if decided:
        ann.click("#label-train-dpo")
        ann.wait_for_selector("#mode", state="visible")
        assert ann.input_value("#dataset input") == f"labels:{session.id}" or \
            session.name in ann.input_value("#dataset input")
        assert "dpo" in ann.input_value("#mode input").lower()
        ann.screenshot(path=str(SHOTS / "train-filled.png"), full_page=True)


def test_single_answers_get_thumbs_up_down_or_unsafe(ui_server, store, browser, tiny_model):
    from backend import labeling

    page = open_labeling(browser, ui_server["url"])
    page.locator("#label-mode").get_by_text("Rate one answer", exact=False).click()
    page.locator("#label-source").get_by_text("Typed prompts", exact=False).click()
    set_text(page, "label-typed", "Say yes.\nSay no.\nSay maybe.")
    set_text(page, "label-model-a", tiny_model)
    set_text(page, "label-max-new-tokens", 6)
    page.click("#label-start")
    wait_for_pair(page)
    assert not page.locator("#label-answer-b").is_visible()
    page.screenshot(path=str(SHOTS / "single.png"), full_page=True)
    for key in ("1", "2"):
        press_and_wait(page, key)
    wait_for_pair(page)  # the third answer may still be generating: a key with no answer shown does nothing
    page.keyboard.press("3")
    wait_for_count(page, 3, 0)
    [session] = labeling.list_sessions(store)
    assert session.mode == "single"
    assert sorted(lab.choice for lab in labeling.labels(store, session.id)) == ["down", "unsafe", "up"]


def test_the_defaults_label_the_embedded_model_on_built_in_prompts(ui_server, store, browser):
    from backend import labeling
    from backend.models import EMBEDDED_MODEL

    page = open_labeling(browser, ui_server["url"])
    page.click("#label-start")  # nothing else chosen
    wait_for_pair(page, timeout=300_000)
    [session] = labeling.list_sessions(store)
    assert (session.model_a, session.prompt_source, session.mode) == (EMBEDDED_MODEL, "demo-prompts:prompt", "pair")
    assert counts(page) == (0, 100)
    assert page.inner_text("#label-answer-a").strip() and page.inner_text("#label-answer-b").strip()
    page.screenshot(path=str(SHOTS / "defaults.png"), full_page=True)
    press_and_wait(page, "2")
    assert counts(page)[0] == 1


@pytest.fixture
def restartable_ui(tmp_path):
    """A UI process that a test can restart on the same port and workspace."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.browser.conftest import REPO, _free_port

    port, workspace = _free_port(), tmp_path / "ws"
    url = f"http://127.0.0.1:{port}/"
    procs = []

    def start():
        log = open(tmp_path / f"ui-{len(procs)}.log", "w")
        procs.append(subprocess.Popen([sys.executable, str(REPO / "launch.py"), "ui", "--port", str(port),
                                       "--workspace", str(workspace)], cwd=REPO, stdout=log,
                                      stderr=subprocess.STDOUT, env=dict(os.environ, HF_HUB_OFFLINE="1")))
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                return
            except OSError:
                assert procs[-1].poll() is None and time.time() < deadline, "UI did not start"
                time.sleep(0.5)

    def restart():
        procs[-1].terminate()
        procs[-1].wait(15)
        start()

    start()
    yield {"url": url, "workspace": workspace, "restart": restart}
    procs[-1].terminate()
    procs[-1].wait(15)
    from backend import labeling
    from backend.labeling import generator as label_generator
    from backend.runs.store import RunStore

    store = RunStore(workspace)
    for session in labeling.list_sessions(store):
        label_generator.stop_generator(store, session.id)


def test_a_restarted_ui_resumes_where_the_labeler_was(restartable_ui, browser, tiny_model):
    page = open_labeling(browser, restartable_ui["url"])
    page.locator("#label-source").get_by_text("Typed prompts", exact=False).click()
    set_text(page, "label-typed", "First prompt.\nSecond prompt.\nThird prompt.\nFourth prompt.")
    set_text(page, "label-model-a", tiny_model)
    set_text(page, "label-max-new-tokens", 6)
    page.click("#label-start")
    assert wait_for_pair(page) == "First prompt."
    press_and_wait(page, "1")
    held = wait_for_pair(page)
    restartable_ui["restart"]()
    # A fresh tab in the same browser profile (same local storage): the old tab reloads itself when the
    # server comes back, which would race a goto on it.
    context = page.context
    page.close()
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(restartable_ui["url"])
    page.get_by_role("tab", name="Labeling").click()
    assert wait_for_pair(page) == held
    assert counts(page) == (1, 3)
