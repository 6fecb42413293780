"""Several datasets as one: each prepared (converted, checked) on its own, then concatenated or interleaved."""
import json

import pytest

from backend.config import ConfigError, build_config
from backend.data import DataOptions, DatasetError, prepare_dataset, preview
from tests.dataset_shapes import ALPACA, SHAREGPT


@pytest.fixture
def files(workspace):
    (workspace / "alpaca.json").write_text(json.dumps(ALPACA))
    (workspace / "more.json").write_text(json.dumps([{"instruction": f"q{i}", "output": f"a{i}"} for i in range(6)]))
    (workspace / "chat.json").write_text(json.dumps(SHAREGPT))
    (workspace / "plain.jsonl").write_text(json.dumps({"prompt": "2+2=", "completion": " 4"}) + "\n")
    return workspace


def test_datasets_listed_with_commas_are_concatenated_each_converted(files):
    ds, info = prepare_dataset("alpaca.json, more.json", "sft", files)
    assert len(ds) == 8 and info.num_rows == 8 and ds[2]["prompt"] == [{"role": "user", "content": "q0"}]
    assert info.adapter.startswith("alpaca.json: alpaca → prompt + completion")
    assert " | more.json: alpaca" in info.adapter
    assert info.applied == ["2 datasets mixed (2 + 6 rows), one after another; 8 rows"]


def test_interleaving_draws_by_weight_until_each_is_used_up(files):
    options = DataOptions(mix="interleave", mix_weights=(0.5, 0.5), seed=1)
    ds, info = prepare_dataset("alpaca.json,more.json", "sft", files, options)
    asked = {r[0]["content"] for r in ds["prompt"]}
    assert len(ds) >= 8 and asked >= {"q0", "q5", "Translate to French:\nGood morning"}
    assert "interleaved with weights 0.5, 0.5 until each is used up" in info.applied[-1]


def test_a_weight_count_that_does_not_match_is_refused_before_any_dataset_is_read(files, monkeypatch, capfd):
    """Reading (converting) them first printed their `Map:` progress bars above the message."""
    import backend.data.prepare as prepare

    read = []
    monkeypatch.setattr(prepare, "load", lambda spec, *a: read.append(spec))
    with pytest.raises(DatasetError, match=r"data.mix_weights: 3 weights for 2 datasets"):
        prepare_dataset("alpaca.json,more.json", "sft", files, DataOptions(mix="interleave", mix_weights=(1, 1, 1)))
    assert read == [] and "Map" not in capfd.readouterr().err


def test_datasets_of_different_formats_are_made_alike_where_nothing_is_lost(files):
    ds, info = prepare_dataset("alpaca.json, chat.json", "sft", files)
    assert (info.name, len(ds)) == ("messages", 4)
    assert ds[0]["messages"] == [{"role": "user", "content": "Describe a process of making crepes."},
                                 {"role": "assistant", "content": "Making crepes is easy."}]
    assert info.applied[0] == ("alpaca.json: prompt + completion as one messages list, trained as a conversation "
                               "like the messages ones")
    ds, info = prepare_dataset("alpaca.json, plain.jsonl", "sft", files)
    assert info.conversational and ds[-1] == {"prompt": [{"role": "user", "content": "2+2="}],
                                               "completion": [{"role": "assistant", "content": " 4"}]}
    assert info.applied[0] == "plain.jsonl: plain text as chat messages to mix with the conversational ones"
    (files / "text.jsonl").write_text(json.dumps({"text": "Once upon a time."}) + "\n")
    with pytest.raises(DatasetError) as err:  # plain text has no roles to recover
        prepare_dataset("alpaca.json, text.jsonl", "sft", files)
    assert str(err.value) == ("datasets alpaca.json and text.jsonl end in different formats, prompt_completion "
                              "(conversational) and text (plain text); mix datasets of one format")


def test_a_bad_row_is_named_by_its_own_file(files):
    (files / "bad.json").write_text(json.dumps([{"instruction": "q", "output": ""}]))
    with pytest.raises(DatasetError, match=r"^bad.json row 1: column `output` is empty"):
        prepare_dataset("alpaca.json, bad.json", "sft", files)


def test_the_preview_shows_the_mixed_rows(files):
    df, info, error = preview("alpaca.json, more.json", "sft", files)
    assert error is None and len(df) == 5 and info.num_rows == 8
    df, info, error = preview("alpaca.json, missing.json", "sft", files)
    assert info is None and "missing.json not found" in error


def test_mixing_settings_come_from_the_schema():
    config = build_config({"data": {"mix": "interleave", "mix_weights": "0.7, 0.3"}})
    assert DataOptions.of(config).mix_weights == (0.7, 0.3)
    with pytest.raises(ConfigError, match="data.mix_weights: give non-negative shares"):
        build_config({"data": {"mix_weights": [-1, 2]}})
