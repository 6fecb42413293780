"""Each format users already have trains two steps in its mode, as converted by the data layer, on the tiny
model (in this process: the worker's path from the dataset on is the same)."""
import json

import pytest

from backend.config import build_config
from backend.data import DataOptions, prepare_dataset
from backend.data.templates import template_text
from backend.modes import mode_module
from backend.modes.training import TrainContext
from backend.runs.store import RunStore
from tests.dataset_shapes import ALPACA, GSM8K, HH, IDENTITY, LF_DPO, LF_KTO, SHAREGPT, ULTRAFEEDBACK

EXACT = [{"type": "exact_match", "name": "exact", "params": {"column": "final_answer"}}]
CASES = {  # name: (rows, mode, settings)
    "alpaca-sft": (ALPACA, "sft", {}),
    "alpaca-sft-plain-template": (ALPACA, "sft", {"data": {"chat_template": "plain"}}),
    "identity-sft": (IDENTITY, "sft", {}),
    "sharegpt-tools-sft": (SHAREGPT, "sft", {}),
    "llamafactory-dpo": (LF_DPO, "dpo", {}),
    "llamafactory-rm": (LF_DPO, "rm", {}),
    "llamafactory-kto": (LF_KTO, "kto", {}),
    "hh-dpo": (HH * 2, "dpo", {}),
    "ultrafeedback-kto": (ULTRAFEEDBACK, "kto", {}),
    "gsm8k-grpo": (GSM8K * 2, "grpo", {"reward_sources": EXACT}),
    "gsm8k-rloo": (GSM8K * 2, "rloo", {"reward_sources": EXACT}),
    "mapped-grpo": ([{"q": r["question"], "answer": r["answer"]} for r in GSM8K * 2], "grpo",
                    {"reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}],
                     "data": {"columns": {"prompt": "q"}}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_dataset_as_users_have_it_trains_two_steps(tiny_model, tmp_path, case):
    rows, mode, settings = CASES[case]
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(rows))
    config = build_config({"mode": mode, "model": str(tiny_model), "dataset": str(path), "max_steps": 2,
                           "max_length": 64, "lora": {"r": 2}, "per_device_train_batch_size": 2,
                           "rl": {"num_generations": 2, "max_completion_length": 8}, **settings})
    dataset, info = prepare_dataset(config.dataset, mode, options=DataOptions.of(config))
    assert info.adapter or info.mapped
    store = RunStore(tmp_path / "ws")
    run = store.create_run(config)
    ctx = TrainContext(config=config, run_id=run.id, run_dir=store.run_dir(run.id), store=store,
                       model_path=str(tiny_model), dataset=dataset)
    trainer = mode_module(mode).build_trainer(ctx)
    if (name := config.data.chat_template) != "model":
        assert trainer.processing_class.chat_template == template_text(name)
    trainer.train()
    assert trainer.state.global_step == 2
