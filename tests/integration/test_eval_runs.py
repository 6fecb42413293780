"""Evaluation during training, end to end through the real worker on the tiny model: an SFT run holding out
part of its data and evaluating every step, a DPO run on its own evaluation set evaluated at the end, and a
bad evaluation file refused before any process starts.
"""
import json
from pathlib import Path

import pytest
import torch

from backend.config import ConfigError, build_config
from backend.data import DATA_DIR
from backend.runs.jobs import submit_run
from backend.runs.preflight import preflight
from backend.runs.store import RunStore
from tests.waiting import wait_for

STEPS = 2


def tiny_config(model, mode, **settings):
    return build_config({"mode": mode, "model": str(model), "max_steps": STEPS, "max_length": 64,
                         "lora": {"r": 2}, "per_device_train_batch_size": 2, **settings})


@pytest.fixture(scope="module")
def finished(tiny_model, tmp_path_factory):
    """{mode: (store, run)} once both runs have ended (they queue one after the other)."""
    store = RunStore(tmp_path_factory.mktemp("eval"))
    pairs = (DATA_DIR / "preference.jsonl").read_text().splitlines()[-3:]  # a few rows keep evaluation quick
    (store.workspace / "held_out.jsonl").write_text("\n".join(pairs))
    configs = {
        "sft": tiny_config(tiny_model, "sft", eval={"split": 0.02, "steps": 1}),
        "dpo": tiny_config(tiny_model, "dpo", dataset="demo-preference",
                           eval={"dataset": "held_out.jsonl", "batch_size": 3}),
    }
    ids = {mode: submit_run(store, config).id for mode, config in configs.items()}
    wait_for(lambda: not any(store.get_run(i).active for i in ids.values()), timeout=240, every=1,
             what="the evaluated runs to end")
    return {mode: (store, store.get_run(run_id)) for mode, run_id in ids.items()}


def steps_of(store, run, name) -> list[int]:
    return sorted(m["step"] for m in store.metrics_since(run.id) if m["name"] == name)


def test_sft_with_a_held_out_split_logs_eval_loss_at_every_interval(finished):
    store, run = finished["sft"]
    assert run.status == "completed", run.error
    assert steps_of(store, run, "eval_loss") == [1, 2]  # evaluated every step; step 2 is not evaluated twice
    assert steps_of(store, run, "eval_mean_token_accuracy") == [1, 2]
    assert steps_of(store, run, "loss") == [1, 2]  # training metrics are unchanged beside them
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert "evaluation: 4 rows (0.02 of the training set, held out with seed 42), every 1 steps" in log
    assert "dataset: 197 rows" in log  # 201 demo rows less the 4 held out


def test_dpo_with_an_evaluation_dataset_is_evaluated_at_the_end(finished):
    store, run = finished["dpo"]
    assert run.status == "completed", run.error
    names = {m["name"] for m in store.metrics_since(run.id)}
    assert {"eval_loss", "eval_rewards/accuracies", "eval_rewards/margins"} <= names
    assert steps_of(store, run, "eval_loss") == [STEPS]
    assert "evaluation: 3 rows (held_out.jsonl), at the end" in (store.run_dir(run.id) / "train.log").read_text()
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert (args.eval_strategy, args.per_device_eval_batch_size) == ("no", 3)  # the end is evaluated by the worker


def test_a_bad_evaluation_file_is_refused_with_its_row_named(tiny_model, workspace):
    rows = [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}, {"prompt": "3+3?", "chosen": "6"}]
    (workspace / "held_out.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    config = tiny_config(tiny_model, "dpo", dataset="demo-preference", eval={"dataset": "held_out.jsonl"})
    with pytest.raises(ConfigError) as exc:
        preflight(config, workspace)
    (error,) = exc.value.errors
    assert error.startswith("eval.dataset: held_out.jsonl row 2: column `rejected` is missing"), error


def test_a_split_that_leaves_nothing_to_train_on_is_refused(tiny_model, workspace):
    (workspace / "one.jsonl").write_text(json.dumps({"text": "only row"}))
    config = tiny_config(tiny_model, "sft", dataset="one.jsonl", eval={"split": 0.5})
    with pytest.raises(ConfigError) as exc:
        preflight(config, workspace)
    assert exc.value.errors == ["eval.split: the training set has 1 row(s), too few to hold out 0.5 for "
                                "evaluation and still train on something; use a larger dataset or give an "
                                "eval.dataset"]
