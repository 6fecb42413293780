"""A LLaMA-Factory data folder works as it is: `<folder>/<name>` reads the dataset its dataset_info.json
describes, with the entry's columns and tags applied, and the adapters convert it for the mode."""
import json

import pytest

from backend.data import DatasetError, prepare_dataset
from backend.data.llamafactory import dataset_names
from tests.dataset_shapes import ALPACA, IDENTITY, LF_DPO, LF_KTO, SHAREGPT

INFO = {  # the demo entries of LLaMA-Factory's data/dataset_info.json, as it ships them
    "identity": {"file_name": "identity.json"},
    "alpaca_en_demo": {"file_name": "alpaca_en_demo.json"},
    "glaive_toolcall_en_demo": {"file_name": "glaive_toolcall_en_demo.json", "formatting": "sharegpt",
                                "columns": {"messages": "conversations", "tools": "tools"}},
    "dpo_en_demo": {"file_name": "dpo_en_demo.json", "ranking": True, "formatting": "sharegpt",
                    "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}},
    "kto_en_demo": {"file_name": "kto_en_demo.json", "formatting": "sharegpt",
                    "columns": {"messages": "messages", "kto_tag": "label"},
                    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                             "assistant_tag": "assistant"}},
    "alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en", "ms_hub_url": "llamafactory/alpaca_en"},
    "mine": {"file_name": "mine.json", "columns": {"prompt": "question", "response": "reply"}},
}
FILES = {"identity.json": IDENTITY, "alpaca_en_demo.json": ALPACA, "glaive_toolcall_en_demo.json": SHAREGPT,
         "dpo_en_demo.json": LF_DPO, "kto_en_demo.json": LF_KTO,
         "mine.json": [{"question": "Capital of France?", "reply": "Paris."}]}


@pytest.fixture
def data_folder(workspace):
    folder = workspace / "data"
    folder.mkdir()
    (folder / "dataset_info.json").write_text(json.dumps(INFO))
    for name, rows in FILES.items():
        (folder / name).write_text(json.dumps(rows))
    return folder


@pytest.mark.parametrize("name, mode, fmt, adapter", [
    ("identity", "sft", "prompt_completion", "alpaca"),
    ("alpaca_en_demo", "sft", "prompt_completion", "alpaca"),
    ("glaive_toolcall_en_demo", "sft", "messages", "ShareGPT"),
    ("dpo_en_demo", "dpo", "preference", "LLaMA-Factory preference"),
    ("dpo_en_demo", "rm", "preference", "LLaMA-Factory preference"),
    ("kto_en_demo", "kto", "unpaired_preference", "ShareGPT KTO"),
])
def test_each_demo_dataset_of_the_folder_trains_its_mode(data_folder, workspace, name, mode, fmt, adapter):
    ds, info = prepare_dataset(f"data/{name}", mode, workspace)
    assert info.name == fmt and info.adapter.startswith(adapter) and len(ds) >= 2


def test_the_entrys_tags_become_the_usual_roles(data_folder, workspace):
    ds, _ = prepare_dataset("data/kto_en_demo", "kto", workspace)
    assert ds[0]["prompt"] == [{"role": "user", "content": "The FTC is going after spyware."}]
    assert ds["label"] == [True, False]


def test_the_entrys_columns_are_renamed(data_folder, workspace):
    ds, _ = prepare_dataset("data/mine", "sft", workspace)
    assert ds[0] == {"prompt": [{"role": "user", "content": "Capital of France?"}],
                     "completion": [{"role": "assistant", "content": "Paris."}]}


def test_the_folder_alone_lists_its_datasets(data_folder, workspace):
    with pytest.raises(DatasetError) as err:
        prepare_dataset("data", "sft", workspace)
    assert "data is a LLaMA-Factory data folder (dataset_info.json); name one of its datasets: data/identity, " \
           "data/alpaca_en_demo," in str(err.value)
    assert dataset_names(data_folder, "data")[-2:] == ["data/alpaca_en", "data/mine"]


def test_an_unknown_name_or_a_missing_column_is_named(data_folder, workspace):
    with pytest.raises(DatasetError, match=r"dataset_info.json has no dataset 'nope'; it has: identity, "):
        prepare_dataset("data/nope", "sft", workspace)
    info = dict(INFO, mine={"file_name": "mine.json", "columns": {"prompt": "q"}})
    (data_folder / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"dataset 'mine' takes prompt from column `q`, but mine.json has no such "
                                           r"column; its columns are \[question, reply\]"):
        prepare_dataset("data/mine", "sft", workspace)


def test_a_file_of_the_folder_read_directly_is_converted_the_same(data_folder, workspace):
    ds, info = prepare_dataset("data/dpo_en_demo.json", "dpo", workspace)
    assert info.adapter.startswith("LLaMA-Factory preference")


def test_the_workspaces_data_folders_are_offered_by_name(data_folder, workspace):
    from app.choices import dataset_choices
    from backend.runs.store import RunStore

    choices = dict(dataset_choices(RunStore(workspace), labels=False))
    assert choices["alpaca_en_demo (LLaMA-Factory, data/dataset_info.json)"] == f"{data_folder}/alpaca_en_demo"
    ds, info = prepare_dataset(f"{data_folder}/alpaca_en_demo", "sft")
    assert info.adapter.startswith("alpaca")


def test_a_folder_given_as_the_dataset_offers_its_datasets(data_folder, workspace):
    from backend.data.sources import data_folder_datasets

    assert data_folder_datasets("data", workspace)[:2] == ["data/identity", "data/alpaca_en_demo"]
    assert data_folder_datasets("data/identity", workspace) == data_folder_datasets("", workspace) == []
