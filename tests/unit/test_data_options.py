"""The run's data settings (data.system, data.max_samples, data.shuffle) applied to a dataset, and said."""
import json

import pytest

from backend.config import build_config
from backend.data import DataOptions, DatasetError, prepare_dataset, preview
from tests.dataset_shapes import ALPACA, IDENTITY

CHAT = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello!"}]
SYSTEM = {"role": "system", "content": "Be brief."}


def write(workspace, rows, name="data.jsonl"):
    path = workspace / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_the_system_message_goes_first_in_chats_without_one(workspace):
    rows = [{"messages": CHAT}, {"messages": [{"role": "system", "content": "Mine."}, *CHAT]}]
    ds, info = prepare_dataset(write(workspace, rows), "sft", options=DataOptions(system="Be brief."))
    assert ds[0]["messages"] == [SYSTEM, *CHAT] and ds[1]["messages"][0]["content"] == "Mine."
    assert info.applied == ["`data.system` as the system message (1 row keeping its own)"]


def test_the_system_message_reaches_converted_prompts(workspace):
    path = workspace / "identity.json"
    path.write_text(json.dumps(IDENTITY))
    ds, info = prepare_dataset(str(path), "sft", options=DataOptions(system="Be brief."))
    assert ds[0]["prompt"][0]["content"] == "You are a helpful assistant."  # the row's own system wins
    assert ds[1]["prompt"] == [SYSTEM, {"role": "user", "content": "What is your name?"}]


def test_a_system_message_for_plain_text_is_refused(workspace):
    with pytest.raises(DatasetError, match=r"data.system: data.jsonl is plain text \(`text`\), with no chat"):
        prepare_dataset(write(workspace, [{"text": "one"}]), "sft", options=DataOptions(system="x"))


def test_max_samples_takes_the_first_rows_or_a_shuffled_sample(workspace):
    rows = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(20)]
    spec = write(workspace, rows)
    ds, info = prepare_dataset(spec, "sft", options=DataOptions(max_samples=5))
    assert ds["prompt"] == ["q0", "q1", "q2", "q3", "q4"] and info.num_rows == 5
    assert info.applied == ["5 of 20 rows (the first ones)"]
    a, info = prepare_dataset(spec, "sft", options=DataOptions(max_samples=5, shuffle=True, seed=1))
    b, _ = prepare_dataset(spec, "sft", options=DataOptions(max_samples=5, shuffle=True, seed=1))
    assert a["prompt"] == b["prompt"] != ds["prompt"] and info.applied == ["5 of 20 rows (shuffled with seed 1)"]
    assert prepare_dataset(spec, "sft", options=DataOptions(max_samples=50))[1].applied == []


def test_a_bad_row_past_max_samples_does_not_stop_a_run_that_never_reads_it(workspace):
    spec = write(workspace, [{"text": "ok"}, {"text": ""}])
    assert len(prepare_dataset(spec, "sft", options=DataOptions(max_samples=1))[0]) == 1


def test_the_data_settings_come_from_the_run_config(workspace):
    config = build_config({"seed": 7, "data": {"columns": "prompt=q", "system": "S", "max_samples": 3,
                                               "shuffle": True}})
    assert DataOptions.of(config) == DataOptions(columns={"prompt": "q"}, system="S", max_samples=3, shuffle=True,
                                                 seed=7)


def test_the_preview_applies_the_data_settings(workspace):
    path = workspace / "alpaca.json"
    path.write_text(json.dumps(ALPACA))
    df, info, error = preview("alpaca.json", "sft", workspace, options=DataOptions(system="Be brief.",
                                                                                   max_samples=1))
    assert error is None and len(df) == 1 and df["prompt"][0].startswith("system: Be brief. / user: ")
    assert info.summary().startswith("1 row, prompt_completion format (prompt + completion, conversational); "
                                     "1 of 2 rows (the first ones); `data.system` as the system message; "
                                     "converted: alpaca")
