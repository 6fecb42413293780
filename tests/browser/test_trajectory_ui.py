"""A run with tools shows each sampled trajectory turn by turn in the Runs tab's samples: the call with its
arguments, the tool's result and the final answer, beside the rewards that judged it."""
from backend.config import build_config
from backend.modes.rl_common import SampleRecorder
from backend.runs.store import RunStore

SAMPLES = "() => document.querySelector('#samples-table')?.textContent ?? ''"


def test_the_samples_table_shows_a_trajectory_turn_by_turn(ui_server, page, tiny_model):
    store = RunStore(ui_server["workspace"])
    config = build_config({"name": "calc-run", "mode": "grpo", "model": str(tiny_model), "dataset": "demo-calculator",
                           "max_steps": 1, "data": {"chat_template": "chatml-tools"}, "tools": [{"type": "calculator"}],
                           "reward_sources": [{"type": "numeric_match", "name": "correct",
                                               "params": {"column": "answer"}},
                                              {"type": "tool_used", "name": "used"}]})
    run = store.create_run(config)
    store.finish_run(run.id, "completed")
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "347 * 29"}}}
    trajectory = [{"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "name": "calculator", "content": "10063"},
                  {"role": "assistant", "content": "10063"}]
    recorder = SampleRecorder(store, run.id, logging_steps=1, is_main=True)  # as the run's reward wrapper writes
    recorder.names, recorder.weights = ["correct", "used"], {"correct": 1.0, "used": 1.0}
    prompt = [{"role": "user", "content": "What is 347 × 29? Reply with the number only."}]
    recorder.record("correct", [prompt], [trajectory], [1.0], None)
    recorder.record("used", [prompt], [trajectory], [1.0], None)

    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_function(f"() => ({SAMPLES})().includes('← calculator: 10063')", timeout=60_000)
    text = page.evaluate(SAMPLES)
    assert "→ calculator(expression='347 * 29')" in text and "What is 347 × 29?" in text
    headers = page.locator("#samples-table thead").inner_text()
    assert "correct" in headers and "used" in headers and "total" in headers, headers
