"""Live samples of the RL modes: every reward source's score per completion, written at logging steps."""
import asyncio
from types import SimpleNamespace

import pytest

from backend.modes.rl_common import SampleRecorder
from backend.runs.store import RunStore

PROMPTS = [[{"role": "user", "content": "What is 2 + 2?"}]] * 4
COMPLETIONS = [[{"role": "assistant", "content": text}] for text in
               ["<answer>4</answer>", "4", "<answer>5</answer>", "five"]]


def correct(prompts, completions, answer, **kwargs):
    return [1.0 if c[0]["content"] in ("<answer>4</answer>", "4") else 0.0 for c in completions]


def formatted(prompts, completions, **kwargs):
    return [1.0 if "<answer>" in c[0]["content"] else None for c in completions]


@pytest.fixture
def store_and_run(tmp_path):
    from backend.config import build_config

    store = RunStore(tmp_path)
    return store, store.create_run(build_config({})).id


def score_batch(funcs, step, completions=COMPLETIONS):
    """What TRL does: each reward function in turn, on the same lists, with the trainer state."""
    kwargs = dict(completion_ids=None, trainer_state=SimpleNamespace(global_step=step), answer=["4"] * 4,
                  log_extra=None, log_metric=None)
    out = []
    for f in funcs:
        result = f(prompts=PROMPTS, completions=completions, **kwargs)
        out.append(asyncio.run(result) if asyncio.iscoroutine(result) else result)
    return out


def test_each_source_is_scored_and_the_weighted_total_skips_none(store_and_run):
    store, run_id = store_and_run
    recorder = SampleRecorder(store, run_id, logging_steps=1, is_main=True, per_log=3)
    funcs = recorder.wrap_all([correct, formatted], [1.0, 0.5])
    assert [f.__name__ for f in funcs] == ["correct", "formatted"]  # TRL's rewards/<name>/mean
    assert score_batch(funcs, step=0) == [[1.0, 1.0, 0.0, 0.0], [1.0, None, 1.0, None]]
    rows = store.samples_since(run_id)
    assert [r["step"] for r in rows] == [1, 1, 1]  # scored before optimizer step 1, which logs it
    assert rows[0] | {"id": 0, "time": 0} == {"id": 0, "time": 0, "step": 1, "prompt": "What is 2 + 2?",
                                             "completion": "<answer>4</answer>",
                                             "rewards": {"correct": 1.0, "formatted": 1.0}, "total": 1.5}
    assert rows[1]["rewards"] == {"correct": 1.0, "formatted": None} and rows[1]["total"] == 1.0


def test_samples_are_written_once_per_logging_interval_and_only_by_the_main_process(store_and_run):
    store, run_id = store_and_run
    recorder = SampleRecorder(store, run_id, logging_steps=5, is_main=True)
    funcs = recorder.wrap_all([correct, formatted], [1.0, 1.0])
    for step in range(12):
        score_batch(funcs, step, completions=list(COMPLETIONS))  # a new batch each step
    assert sorted({r["step"] for r in store.samples_since(run_id)}) == [1, 5, 10]

    other = SampleRecorder(store, run_id, logging_steps=1, is_main=False)
    score_batch(other.wrap_all([correct], [1.0]), 20)
    assert 21 not in {r["step"] for r in store.samples_since(run_id)}


def test_async_sources_stay_async_and_are_recorded(store_and_run):
    from trl.trainer.utils import is_async_callable

    store, run_id = store_and_run

    async def judged(prompts, completions, **kwargs):
        return [0.25] * len(completions)

    recorder = SampleRecorder(store, run_id, logging_steps=1, is_main=True)
    funcs = recorder.wrap_all([correct, judged], [1.0, 2.0])
    assert is_async_callable(funcs[1]) and not is_async_callable(funcs[0])
    score_batch(funcs, step=0)
    assert store.samples_since(run_id)[0]["rewards"] == {"correct": 1.0, "judged": 0.25}
    assert store.samples_since(run_id)[0]["total"] == 1.5
