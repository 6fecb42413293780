"""The run doctor in the browser: a run that learned nothing shows so in the runs table and in a banner with the
fix, in English and in 中文; "Fix and restart" opens the Train tab with the suggested settings, where "Check
rewards" runs the reward probe on them."""
from backend.config import build_config
from backend.doctor import to_json
from backend.doctor.checks import Diagnosis
from backend.runs.store import RunStore

BANNER = "() => document.querySelector('#run-diagnosis')?.textContent ?? ''"
TABLE = "() => document.querySelector('#runs-table')?.textContent ?? ''"
LIMIT = "() => document.querySelector('#rl-max_completion_length input')?.value"


def _run_without_signal(store, model):
    config = build_config({"name": "flat-grpo", "mode": "grpo", "model": str(model), "dataset": "demo-math",
                           "max_steps": 1, "rl": {"num_generations": 2, "max_completion_length": 8},
                           "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]})
    run = store.create_run(config)
    found = [Diagnosis("zero_variance", "error", {"share": 1.0, "num_generations": 2, "truncated": True,
                                                  "suggested": 32}, {"metric": "frac_reward_zero_std"},
                       {"rl.max_completion_length": 32}, no_signal=True),
             Diagnosis("truncation", "error", {"share": 1.0, "current": 8, "suggested": 32},
                       {"metric": "completions/clipped_ratio"}, {"rl.max_completion_length": 32})]
    store.update_run(run.id, diagnoses=to_json(found), verdict="no_signal")
    store.finish_run(run.id, "completed")
    store.add_metrics(run.id, 1, {"reward": 0.0, "frac_reward_zero_std": 1.0})
    return run


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
