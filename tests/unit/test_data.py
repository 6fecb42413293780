"""Datasets: every supported source loads, formats are detected per mode, and bad rows are named."""
import json
import time

import datasets
import pandas as pd
import pytest

from fake_hub import silent_hub  # noqa: F401 (fixture)

from backend.data import (BUILTIN_DATASETS, DatasetError, FormatInfo, detect_format, load_dataset_spec,
                          prepare_dataset, preview, save_upload, validate_rows)
from backend.core.mode_registry import MODES

CHAT = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello!"}]
ROWS = {
    "messages": [{"messages": CHAT}, {"messages": CHAT}],
    "prompt_completion": [{"prompt": "2+2=", "completion": "4"}, {"prompt": "3+3=", "completion": "6"}],
    "text": [{"text": "one"}, {"text": "two"}],
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write(path, rows):
    """Write rows in the format the file extension names."""
    if path.suffix == ".jsonl":
        write_jsonl(path, rows)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        pd.DataFrame([{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in rows]
                     ).to_csv(path, index=False)
    elif path.suffix == ".parquet":
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    else:
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


# ---- loading and detection ----

@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet", ""])
@pytest.mark.parametrize("fmt", list(ROWS))
def test_each_sft_format_is_detected_from_each_source(workspace, suffix, fmt):
    path = write(workspace / f"data{suffix or '_saved'}", ROWS[fmt])
    ds, info = prepare_dataset(str(path), "sft")
    assert info == FormatInfo(fmt, list(dict(MODES["sft"].formats)[fmt]),
                              conversational=fmt == "messages", num_rows=2)
    assert ds[0] == ROWS[fmt][0]


def test_conversational_prompt_completion_is_detected(workspace):
    rows = [{"prompt": [CHAT[0]], "completion": [CHAT[1]]}]
    info = prepare_dataset(str(write_jsonl(workspace / "d.jsonl", rows)), "sft")[1]
    assert info.name == "prompt_completion" and info.conversational


BUILTIN_MODES = {"demo-preference": ["rm", "dpo"], "demo-kto": ["kto"], "demo-math": ["grpo", "rloo"],
                 "demo-prompts": ["grpo", "rloo"], "demo-safe-dialogue": ["grpo", "rloo", "ppo"],
                 "demo-arithmetic": ["grpo", "rloo", "ppo"], "demo-arithmetic-eval": ["grpo", "rloo", "ppo"],
                 "demo-calculator": ["grpo"], "demo-calculator-eval": ["grpo"], "demo-guess-number": ["grpo"]}


@pytest.mark.parametrize("name", list(BUILTIN_DATASETS))
def test_builtin_sets_load_and_validate(name):
    for mode in BUILTIN_MODES.get(name, ["sft"]):
        ds, info = prepare_dataset(name, mode)
        assert len(ds) >= (32 if name.endswith("-eval") else 64 if name == "demo-number-format" else 100)
        assert info.num_rows == len(ds)
    assert BUILTIN_DATASETS[name].stat().st_size < 100_000


def test_builtin_instructions_are_short_chats():
    ds, info = prepare_dataset("demo-sft-instructions", "sft")
    assert info.name == "messages" and len(ds) >= 190
    for messages in ds["messages"]:
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert len(messages[1]["content"].split()) <= 60


def test_relative_paths_resolve_in_the_workspace_first(workspace, tmp_path_factory, monkeypatch):
    elsewhere = tmp_path_factory.mktemp("cwd")
    write_jsonl(elsewhere / "d.jsonl", ROWS["text"][:1])
    write_jsonl(workspace / "d.jsonl", ROWS["text"])
    monkeypatch.chdir(elsewhere)
    assert len(load_dataset_spec("d.jsonl", workspace)) == 2
    assert len(load_dataset_spec("d.jsonl")) == 1


def test_other_modes_keep_extra_columns_but_sft_does_not(workspace):
    rows = [{"prompt": "What is 2+2?", "answer": "4"}]
    ds, info = prepare_dataset(str(write_jsonl(workspace / "math.jsonl", rows)), "grpo")
    assert info.name == "prompt_only" and ds.column_names == ["prompt", "answer"]
    rows = [{"prompt": "a", "completion": "b", "source": "web"}]
    ds, _ = prepare_dataset(str(write_jsonl(workspace / "sft.jsonl", rows)), "sft")
    assert ds.column_names == ["prompt", "completion"]


@pytest.mark.parametrize("mode, row, fmt", [
    ("rm", {"chosen": "good", "rejected": "bad"}, "preference"),
    ("dpo", {"prompt": "q", "chosen": "good", "rejected": "bad"}, "preference"),
    ("kto", {"prompt": "q", "completion": "a", "label": True}, "unpaired_preference"),
    ("ppo", {"prompt": "q"}, "prompt_only"),
    ("rloo", {"prompt": [CHAT[0]]}, "prompt_only"),
])
def test_each_mode_detects_its_format(workspace, mode, row, fmt):
    assert prepare_dataset(str(write_jsonl(workspace / "d.jsonl", [row])), mode)[1].name == fmt


def test_csv_labels_and_json_list_cells_are_parsed(workspace):
    path = workspace / "kto.csv"
    path.write_text('prompt,completion,label\nq,"[{""role"": ""assistant"", ""content"": ""yes""}]",true\n'
                    'q2,"[{""role"": ""assistant"", ""content"": ""no""}]",0\n')
    ds = load_dataset_spec(str(path))
    assert ds["label"] == [True, False] and ds[0]["completion"] == [{"role": "assistant", "content": "yes"}]


def test_csv_text_starting_with_a_bracket_stays_text(workspace):
    path = workspace / "t.csv"
    path.write_text('text\n[INST] hello\n"[1, 2] and more"\n')
    assert load_dataset_spec(str(path))["text"] == ["[INST] hello", "[1, 2] and more"]


def test_json_variants_load(workspace):
    (workspace / "wrapped.json").write_text(json.dumps({"data": ROWS["text"]}))
    (workspace / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in ROWS["text"]))
    assert len(load_dataset_spec("wrapped.json", workspace)) == 2
    assert len(load_dataset_spec("lines.json", workspace)) == 2


def test_rows_with_different_keys_keep_every_column(workspace):
    rows = [{"prompt": "a"}, {"prompt": "b", "answer": "2"}]
    ds = load_dataset_spec(str(write_jsonl(workspace / "d.jsonl", rows)))
    assert ds.column_names == ["prompt", "answer"] and ds["answer"] == [None, "2"]


def test_a_dataset_dict_folder_takes_train_or_its_only_split(workspace):
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS["text"]),
                          "test": datasets.Dataset.from_list(ROWS["text"][:1])}).save_to_disk(str(workspace / "a"))
    datasets.DatasetDict({"validation": datasets.Dataset.from_list(ROWS["text"])}).save_to_disk(str(workspace / "b"))
    datasets.DatasetDict({"x": datasets.Dataset.from_list(ROWS["text"]),
                          "y": datasets.Dataset.from_list(ROWS["text"])}).save_to_disk(str(workspace / "c"))
    assert len(load_dataset_spec("a", workspace)) == 2
    assert len(load_dataset_spec("b", workspace)) == 2
    with pytest.raises(DatasetError, match=r"splits \[x, y\].*'train'"):
        load_dataset_spec("c", workspace)


# ---- errors name the file, row and column ----

def test_a_missing_file_lists_the_builtin_sets(workspace):
    with pytest.raises(DatasetError) as err:
        load_dataset_spec("nowhere/data.jsonl", workspace)
    assert "nowhere/data.jsonl not found" in str(err.value)
    assert all(name in str(err.value) for name in BUILTIN_DATASETS)


def test_an_empty_completion_names_row_and_column(workspace):
    rows = ROWS["prompt_completion"] + [{"prompt": "4+4=", "completion": " "}]
    with pytest.raises(DatasetError) as err:
        prepare_dataset(str(write_jsonl(workspace / "demo.jsonl", rows)), "sft")
    message = str(err.value)
    assert message.startswith("demo.jsonl row 3: column `completion` is empty")
    assert "a non-empty string or a list of messages" in message


def test_a_missing_value_names_row_and_column(workspace):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "q", "chosen": "a"}]
    with pytest.raises(DatasetError, match=r"d.jsonl row 2: column `rejected` is missing"):
        prepare_dataset(str(write_jsonl(workspace / "d.jsonl", rows)), "dpo")


@pytest.mark.parametrize("messages, problem", [
    ([], "is an empty list of messages"),
    ([{"role": "user", "content": "only a question"}], "has no assistant message"),
    ([{"role": "robot", "content": "beep"}, CHAT[1]], "message 1 has role 'robot'"),
    ([{"role": "user"}, CHAT[1]], "message 1 (user) has content of type null"),
])
def test_bad_message_lists_are_explained(workspace, messages, problem):
    with pytest.raises(DatasetError) as err:
        prepare_dataset(str(write_jsonl(workspace / "chat.jsonl", [{"messages": CHAT}, {"messages": messages}])), "sft")
    assert f"chat.jsonl row 2: column `messages` {problem}" in str(err.value)


def test_mixed_string_and_message_columns_are_made_conversational(workspace):
    rows = [{"prompt": [CHAT[0]], "completion": "Hello!"}]
    ds, info = prepare_dataset(str(write_jsonl(workspace / "d.jsonl", rows)), "sft")
    assert ds[0] == {"prompt": [CHAT[0]], "completion": [CHAT[1]]} and info.conversational
    assert info.adapter == "mixed kinds → conversational; the string `completion` as an assistant message"


def test_mixed_kinds_left_in_a_row_are_still_refused():
    ds = datasets.Dataset.from_dict({"prompt": [[CHAT[0]]], "completion": ["Hello!"]})
    info = FormatInfo("prompt_completion", ["prompt", "completion"], True, 1)
    with pytest.raises(DatasetError, match=r"row 1: column `prompt` is a list of messages but `completion` is a plain"):
        validate_rows(ds, info, "sft")


def test_a_column_that_changes_kind_is_refused_with_both_rows(workspace):
    rows = [{"prompt": "q", "completion": "a"}, {"prompt": "q", "completion": ["a"]}]
    with pytest.raises(DatasetError, match=r"d.jsonl row 2: column `completion` is a list but row 1 has a string"):
        load_dataset_spec(str(write_jsonl(workspace / "d.jsonl", rows)))


def test_kto_labels_must_be_booleans(workspace):
    rows = [{"prompt": "q", "completion": "a", "label": 1}, {"prompt": "q", "completion": "a", "label": 2}]
    with pytest.raises(DatasetError, match=r"row 2: column `label` is 2; .* needs true/false \(or 1/0\)"):
        prepare_dataset(str(write_jsonl(workspace / "kto.jsonl", rows)), "kto")


def test_a_wrong_mode_dataset_lists_columns_and_accepted_formats(workspace):
    path = workspace / "dataset.csv"
    path.write_text("question,answer\nq,a\n")
    with pytest.raises(DatasetError) as err:
        prepare_dataset(str(path), "sft")
    assert str(err.value) == ("dataset.csv: no SFT format found; columns are [question, answer]. "
                              "SFT needs one of: messages | prompt + completion | text; these columns are "
                              "question / answer data (question), which is converted for PPO, GRPO, RLOO, ONLINE_DPO only")
    with pytest.raises(DatasetError, match=r"DPO needs prompt \+ chosen \+ rejected"):
        prepare_dataset("demo-sft-instructions", "dpo")


@pytest.mark.parametrize("mode, columns, expected", [
    ("rm", ["prompt", "completion", "label"],
     "missing `chosen`, `rejected`. RM needs chosen + rejected (+ optional prompt), "
     "e.g. {\"chosen\": \"...\", \"rejected\": \"...\"}"),
    ("dpo", ["prompt", "answer"], "missing `chosen`, `rejected`. DPO needs prompt + chosen + rejected, "
                                  "e.g. {\"prompt\": \"...\", \"chosen\": \"...\", \"rejected\": \"...\"}"),
    ("kto", ["prompt", "chosen", "rejected"],
     "missing `completion`, `label`. KTO needs prompt + completion + label, "
     "e.g. {\"prompt\": \"...\", \"completion\": \"...\", \"label\": true}"),
    ("grpo", ["question", "answer"], "missing `prompt`. GRPO needs prompt (other columns, such as an answer, are "
                                     "passed to the reward sources), e.g. {\"prompt\": \"...\"}"),
    ("rloo", ["messages"], "missing `prompt`. RLOO needs prompt"),
    ("sft", ["prompt", "answer"], "missing `completion` for prompt + completion. SFT needs one of: messages | "
                                  "prompt + completion | text"),
])
def test_each_mode_names_the_missing_columns_and_shows_its_format(mode, columns, expected):
    ds = datasets.Dataset.from_dict({c: ["x"] for c in columns})
    with pytest.raises(DatasetError) as err:
        detect_format(ds, mode, "mine.jsonl")
    found = f"mine.jsonl: no {mode.upper()} format found; columns are [{', '.join(columns)}], "
    assert str(err.value).startswith(found)
    assert expected in str(err.value)


def test_malformed_json_names_the_line(workspace):
    (workspace / "bad.jsonl").write_text('{"text": "ok"}\n\n{"text": "broken"\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl line 3: not valid JSON"):
        load_dataset_spec("bad.jsonl", workspace)
    (workspace / "bad.json").write_text('[\n {"text": "ok"},\n {"text": }\n]')
    with pytest.raises(DatasetError, match=r"bad.json line 3: not valid JSON"):
        load_dataset_spec("bad.json", workspace)


@pytest.mark.parametrize("name, content, problem", [
    ("empty.jsonl", "\n", "empty.jsonl: the dataset has no rows"),
    ("notes.txt", "hello", "notes.txt: unsupported file type '.txt'"),
    ("list.jsonl", "[1, 2]\n", "list.jsonl row 1: expected a JSON object"),
])
def test_unusable_files_are_explained(workspace, name, content, problem):
    (workspace / name).write_text(content)
    with pytest.raises(DatasetError) as err:
        load_dataset_spec(name, workspace)
    assert problem in str(err.value)


def test_a_folder_that_is_not_a_saved_dataset_is_explained(workspace):
    (workspace / "folder").mkdir()
    with pytest.raises(DatasetError, match="is not a datasets.save_to_disk folder"):
        load_dataset_spec("folder", workspace)


def test_an_unreachable_hub_dataset_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(DatasetError) as err:
        load_dataset_spec("nobody-here/no-such-set")
    assert time.perf_counter() - start < 3
    assert "could not load dataset 'nobody-here/no-such-set' from the Hub" in str(err.value)
    assert "demo-sft-instructions" in str(err.value)


def test_an_unreachable_hub_dataset_fails_within_the_timeout_when_online(silent_hub):
    start = time.perf_counter()
    with pytest.raises(DatasetError, match="dataset 'nobody-here/x' could not be loaded from the Hugging Face Hub"):
        load_dataset_spec("nobody-here/x")
    assert time.perf_counter() - start < 3


def test_validation_is_fast_on_large_datasets():
    ds = datasets.Dataset.from_list([{"messages": CHAT}] * 50_000)
    start = time.perf_counter()
    validate_rows(ds, detect_format(ds), "sft")
    assert time.perf_counter() - start < 3


# ---- preview and uploads ----

def test_preview_renders_messages_and_clips_long_text(workspace):
    rows = [{"messages": CHAT}, {"messages": [CHAT[0], {"role": "assistant", "content": "x" * 500}]}]
    df, info, error = preview(str(write_jsonl(workspace / "d.jsonl", rows)), n=5)
    assert error is None and info.name == "messages" and len(df) == 2
    assert df["messages"][0] == "user: Hi? / assistant: Hello!"
    assert len(df["messages"][1]) <= 200


def test_preview_returns_errors_instead_of_raising(workspace):
    df, info, error = preview("missing.jsonl", workspace=workspace)
    assert df.empty and info is None and "missing.jsonl not found" in error
    df, info, error = preview("demo-sft-instructions", mode="kto")
    assert len(df) == 5 and info is None and "KTO needs prompt + completion + label" in error


def test_uploads_are_copied_into_the_workspace_under_their_name(workspace, tmp_path_factory):
    src_dir = tmp_path_factory.mktemp("gradio")
    first = write_jsonl(src_dir / "my data.jsonl", ROWS["text"])
    saved = save_upload(first, workspace)
    assert saved == workspace.resolve() / "uploads" / "my data.jsonl" and saved.read_text() == first.read_text()
    assert save_upload(first, workspace) == saved  # the same file again: no second copy
    other = write_jsonl(tmp_path_factory.mktemp("gradio") / "my data.jsonl", ROWS["messages"])
    assert save_upload(other, workspace).name == "my data-1.jsonl"
    assert len(prepare_dataset(str(save_upload(other, workspace)), "sft")[0]) == 2


def test_a_fifo_or_device_is_refused_instead_of_read_forever(workspace):
    import os

    os.mkfifo(workspace / "pipe.jsonl")  # reading it would wait for a writer that never comes
    for spec, name in [("pipe.jsonl", "pipe.jsonl"), ("/dev/null", "null")]:
        with pytest.raises(DatasetError, match=rf"^{name}: not a regular file \(a FIFO, device or socket\)"):
            load_dataset_spec(spec, workspace)


def test_uploads_of_unsupported_files_are_refused(workspace, tmp_path_factory):
    src = tmp_path_factory.mktemp("gradio") / "model.bin"
    src.write_bytes(b"\0")
    with pytest.raises(DatasetError, match="unsupported file type"):
        save_upload(src, workspace)
    broken = tmp_path_factory.mktemp("gradio") / "broken.jsonl"
    broken.write_text('{"text": "fine"}\n{"text": \n')
    with pytest.raises(DatasetError, match="broken.jsonl line 2: not valid JSON"):
        save_upload(broken, workspace)
    assert not (workspace / "uploads" / "broken.jsonl").exists()  # never copied, so never offered


def test_long_rows_are_refused_by_number_or_cut_when_asked(workspace):
    from dataclasses import replace

    from backend.data import DataOptions

    rows = [{"prompt": "p", "completion": "short"}, {"prompt": "p" * 40, "completion": "c" * 80},
            {"prompt": [{"role": "user", "content": "u" * 200}], "completion": [{"role": "assistant", "content": "a"}]}]
    path = write_jsonl(workspace / "long.jsonl", rows[:2])
    options = replace(DataOptions(), max_row_chars=100)
    with pytest.raises(DatasetError, match=r"long.jsonl: 1 row longer than data.max_row_chars = 100 characters: "
                                           r"row 2 has 120"):
        prepare_dataset(str(path), "sft", options=options)
    ds, info = prepare_dataset(str(path), "sft", options=replace(options, long_rows="truncate"))
    assert (ds[0]["completion"], ds[1]["prompt"], ds[1]["completion"]) == ("short", "p" * 40, "c" * 60)
    assert "1 row over 100 characters cut to 100 (the last texts first)" in info.applied
    path = write_jsonl(workspace / "chat.jsonl", rows[2:])
    ds, _ = prepare_dataset(str(path), "sft", options=replace(options, long_rows="truncate"))
    assert ds[0]["prompt"][0] == {"role": "user", "content": "u" * 100}
    assert ds[0]["completion"][0] == {"role": "assistant", "content": ""}


def test_a_dataset_given_relative_to_the_current_folder_is_pinned_for_the_worker(workspace, tmp_path, monkeypatch):
    from backend.data import pinned_spec

    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "here.jsonl", ROWS["text"])
    write_jsonl(workspace / "there.jsonl", ROWS["text"]) if workspace != tmp_path else None
    assert pinned_spec("here.jsonl", tmp_path / "ws") == str(tmp_path / "here.jsonl")
    assert pinned_spec("demo-sft-instructions", tmp_path / "ws") == "demo-sft-instructions"
    assert pinned_spec("", tmp_path / "ws") == ""
    assert pinned_spec("here.jsonl, demo-sft-instructions", tmp_path / "ws") == \
        f"{tmp_path / 'here.jsonl'}, demo-sft-instructions"
    (tmp_path / "ws").mkdir()
    write_jsonl(tmp_path / "ws" / "here.jsonl", ROWS["text"])
    assert pinned_spec("here.jsonl", tmp_path / "ws") == "here.jsonl"  # the workspace's own file stays relative


def test_a_run_of_few_steps_prepares_only_the_rows_it_can_reach():
    from backend.config import build_config
    from backend.data import reachable

    rows = datasets.Dataset.from_dict({"prompt": [f"p{i}" for i in range(5000)], "completion": ["c"] * 5000})
    config = build_config({"max_steps": 2, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2})
    assert config.reachable_rows() == 16
    cut, note = reachable(rows, config.reachable_rows(), seed=3)
    assert len(cut) == 1000 and len(set(cut["prompt"])) == 1000 and cut["prompt"][:50] != rows["prompt"][:50]
    assert "at most 16 rows" in note and "1000 of the 5000 rows" in note and "seed 3" in note
    assert reachable(rows, config.reachable_rows(), seed=3)[0]["prompt"] == cut["prompt"]  # the seed's rows
    for unbounded in ({"max_steps": -1}, {"max_steps": 2, "packing": True}):
        assert build_config(unbounded).reachable_rows() is None
    assert reachable(rows, None, seed=3) == (rows, "")
    ppo = build_config({"mode": "ppo", "max_steps": 3, "dataset": "demo-math",
                        "reward_sources": [{"type": "length", "params": {"target": 5}}]})
    assert ppo.reachable_rows() == 3 * ppo.per_device_train_batch_size * ppo.gradient_accumulation_steps \
        * ppo.ppo.num_mini_batches
