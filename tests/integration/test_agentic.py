"""Tools in a real run: the tiny model, taught one calculator demonstration by heart (a short SFT), then GRPO with
the calculator on that question through the real worker: its answers go through TRL's tool loop, the tool metrics
are stored per step and the samples show each call and its result."""
import json

from backend.config import build_config
from backend.data import BUILTIN_DATASETS
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

TEMPLATE = {"chat_template": "chatml-tools"}


def ended(store, run_id, timeout=300):
    return wait_for(lambda: (r := store.get_run(run_id)).status not in ("queued", "running") and r, timeout=timeout,
                    what=f"run {run_id} to end")


def test_grpo_with_the_calculator_calls_it_and_stores_trajectories_and_tool_metrics(tiny_model, workspace):
    store = RunStore(workspace)
    shown = json.loads(BUILTIN_DATASETS["demo-calculator-sft"].read_text().splitlines()[0])
    question, answer = shown["messages"][0]["content"], shown["messages"][-1]["content"]
    (workspace / "shown.jsonl").write_text(json.dumps(shown) + "\n")
    asked = json.dumps({"prompt": [{"role": "user", "content": question}], "answer": answer})
    (workspace / "asked.jsonl").write_text((asked + "\n") * 4)
    # one demonstration learned by heart (~75 s): the random 2-layer model then writes the call itself
    warm = build_config({"mode": "sft", "model": str(tiny_model), "dataset": str(workspace / "shown.jsonl"),
                         "data": TEMPLATE, "finetuning": "full", "learning_rate": 3e-2, "max_steps": 200,
                         "per_device_train_batch_size": 1, "save_steps": 0, "logging_steps": 50})
    warmed = ended(store, submit_run(store, warm).id)
    assert warmed.status == "completed", warmed.error
    grpo = build_config({"mode": "grpo", "model": f"run:{warmed.id}", "dataset": str(workspace / "asked.jsonl"),
                         "data": TEMPLATE, "tools": [{"type": "calculator"}], "max_steps": 2,
                         "per_device_train_batch_size": 4, "save_steps": 0, "lora": {"r": 4}, "logging_steps": 1,
                         # a tiny step and a cool sampler: the call learned by heart must survive the first update
                         "learning_rate": 1e-6,
                         "rl": {"num_generations": 2, "max_completion_length": 64, "temperature": 0.1,
                                "max_tool_calling_iterations": 1, "probe": "warn"},
                         "reward_sources": [{"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
                                            {"type": "tool_used", "name": "used", "weight": 0.2}]})
    run = ended(store, submit_run(store, grpo).id)
    assert run.status == "completed", run.error
    metrics = {(m["step"], m["name"]): m["value"] for m in store.metrics_since(run.id)}
    assert metrics[(1, "tools/call_frequency")] > 0  # TRL's own count of calls
    for step in (1, 2):
        for name in ("tools/calls_per_episode", "tools/error_rate", "tools/turns_per_episode",
                     "tools/episodes_using/calculator", "rewards/used/mean"):
            assert (step, name) in metrics, name
    samples = store.samples_since(run.id)
    called = [s["completion"] for s in samples if "→ calculator(expression=" in s["completion"]]
    assert called and all("← calculator: " in c for c in called), samples[0]["completion"]


def test_the_guess_number_preset_plays_its_environment_for_two_steps(tiny_model, workspace):
    """The shipped environment through the real worker: one game per episode in processes of their own, scored by
    its get_reward (the random model never wins: every score 0, the source logged) and the run completes."""
    import yaml

    from backend.data.sources import REPO_ROOT

    preset = yaml.safe_load((REPO_ROOT / "presets" / "grpo_guess_number.yaml").read_text())
    preset.update(model=str(tiny_model), max_steps=2, per_device_train_batch_size=4, save_steps=0,
                  lora={"r": 4}, rl={**preset["rl"], "num_generations": 2, "max_completion_length": 24,
                                     "probe": "off"})
    store = RunStore(workspace)
    run = ended(store, submit_run(store, build_config(preset)).id)
    assert run.status == "completed", run.error
    metrics = {(m["step"], m["name"]): m["value"] for m in store.metrics_since(run.id)}
    assert metrics[(2, "rewards/won/mean")] == 0.0 and (2, "tools/call_frequency") in metrics  # TRL: the guess tool
    samples = store.samples_since(run.id)
    assert samples and "I am thinking of a whole number" in samples[0]["prompt"]
    assert samples[0]["rewards"]["won"] == 0.0, samples[0]
