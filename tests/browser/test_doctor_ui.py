"""The run doctor in the browser: a run that learned nothing shows so in the runs table and in a banner with the
fix, in English and in 中文; "Fix and restart" opens the Train tab with the suggested settings, where "Check
rewards" runs the reward probe on them. Every kind of diagnosis reads in the banner in both languages, and the
Compare panel says the doctor's status words in Chinese too."""
from backend.config import build_config
from backend.doctor import NO_SIGNAL_VERDICT, describe, to_json
from backend.doctor.checks import Diagnosis
from backend.runs.store import RunStore
from tests.browser.test_chat_ui import choose
from tests.unit.test_doctor import every_diagnosis

BANNER = "() => document.querySelector('#run-diagnosis')?.textContent ?? ''"
TABLE = "() => document.querySelector('#runs-table')?.textContent ?? ''"
LIMIT = "() => document.querySelector('#rl-max_completion_length input')?.value"


def _finished_run(store, model, name, found=(), verdict=""):
    """A completed run whose worker stored `found` as the doctor's final diagnoses (written as the worker writes
    them: no training). Should the UI's dispatcher see it queued first, it is a 1-step run on the tiny model."""
    config = build_config({"name": name, "mode": "grpo", "model": str(model), "dataset": "demo-math",
                           "max_steps": 1, "rl": {"num_generations": 2, "max_completion_length": 8},
                           "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]})
    run = store.create_run(config)
    store.update_run(run.id, diagnoses=to_json(list(found)), verdict=verdict)
    store.finish_run(run.id, "completed")
    store.add_metrics(run.id, 1, {"reward": 0.0, "frac_reward_zero_std": 1.0})
    return run


def _run_without_signal(store, model):
    found = [Diagnosis("zero_variance", "error", {"share": 1.0, "num_generations": 2, "truncated": True,
                                                  "suggested": 32}, {"metric": "frac_reward_zero_std"},
                       {"rl.max_completion_length": 32}, no_signal=True),
             Diagnosis("truncation", "error", {"share": 1.0, "current": 8, "suggested": 32},
                       {"metric": "completions/clipped_ratio"}, {"rl.max_completion_length": 32})]
    return _finished_run(store, model, "flat-grpo", found, NO_SIGNAL_VERDICT)


def test_a_run_without_signal_shows_the_diagnosis_and_its_fix(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    _run_without_signal(store, tiny_model)
    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_function(f"() => ({TABLE})().includes('completed — no learning signal')", timeout=30_000)
    page.wait_for_function(f"() => ({BANNER})().includes('prompt groups got the same reward')", timeout=30_000)
    banner = page.evaluate(BANNER)
    assert "Run doctor — cannot learn" in banner and "raise rl.max_completion_length to ≥ 32" in banner
    assert "were cut at rl.max_completion_length=8" in banner  # the second diagnosis, under the first

    page.locator("#language").get_by_text("中文").click()
    page.wait_for_function(f"() => ({BANNER})().includes('运行诊断') && ({BANNER})().includes('得不到') "
                           f"|| ({BANNER})().includes('奖励都相同')", timeout=30_000)
    page.wait_for_function(f"() => ({TABLE})().includes('没有学习信号')", timeout=30_000)
    page.locator("#language").get_by_text("English").click()
    page.wait_for_function(f"() => ({BANNER})().includes('Run doctor')", timeout=30_000)

    page.click("#runs-fix")
    page.wait_for_function(f"() => ({LIMIT})() === '32'", timeout=30_000)
    page.wait_for_function("() => document.querySelector('#train-message')?.textContent"
                           ".includes('rl.max_completion_length=32')", timeout=15_000)

    page.click("#check-rewards")  # the probe on the fixed settings: the tiny model's answers, scored
    page.wait_for_function("() => document.querySelector('#reward-check')?.textContent.includes('reward probe:')",
                           timeout=120_000)
    text = page.locator("#reward-check").text_content()
    assert "cut at 32 tokens" in text, text


def _plain(text: str) -> str:
    """Text as the banner's Markdown shows it: `code` without its backticks, whitespace as single spaces."""
    return " ".join(text.replace("`", "").split())


def _shows_every_diagnosis(page, found, lang, title, severity):
    """The top diagnosis in the banner's first line, what it is and what to do; every other one in the list
    under it (the banner folds nothing away: the CLI's `doctor` lists the same)."""
    top = describe(found[0].check, found[0].params, lang)
    page.wait_for_function("(want) => (document.querySelector('#run-diagnosis')?.textContent ?? '')"
                           ".replace(/`/g, '').replace(/\\s+/g, ' ').includes(want)", arg=_plain(top[0]),
                           timeout=30_000)
    first = _plain(page.locator("#run-diagnosis p").first.text_content())
    assert first.startswith(f"✖ {title} — {severity}:") and _plain(top[0]) in first, first
    assert _plain(top[1]) in _plain(page.evaluate(BANNER))
    items = [_plain(t) for t in page.locator("#run-diagnosis li").all_text_contents()]
    assert len(items) == len(found) - 1, items
    for d, item in zip(found[1:], items):
        what, action = describe(d.check, d.params, lang)
        assert what != d.check and _plain(what) in item and _plain(action) in item, (d.check, lang, item)


def test_every_diagnosis_reads_in_the_banner_in_english_and_in_chinese(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    twin = _finished_run(store, tiny_model, "twin")  # the same settings, for the Compare panel
    found = every_diagnosis()
    run = _finished_run(store, tiny_model, "all-findings", found, NO_SIGNAL_VERDICT)  # the newest: shown first
    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    _shows_every_diagnosis(page, found, "en", "Run doctor", "cannot learn")

    page.locator("#language").get_by_text("中文").click()
    _shows_every_diagnosis(page, found, "zh", "运行诊断", "无法学习")

    # Compare on the Chinese page: the doctor's status words, the row and column names in Chinese
    page.locator("#compare").get_by_text("对比运行").click()
    choose(page, "compare-select", f"all-findings · {run.id}")
    choose(page, "compare-select", f"twin · {twin.id}")
    page.wait_for_function("() => (document.querySelector('#compare-settings')?.textContent ?? '')"
                           ".includes('设置相同')", timeout=30_000)
    settings = page.locator("#compare-settings").text_content()
    assert "已完成 — 没有学习信号" in settings and "状态" in settings, settings
    for english in ("completed", "no learning signal", "same settings", "setting", "status", "(none)"):
        assert english not in settings, (english, settings)
