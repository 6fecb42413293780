"""Batching settings reach the trainer: grouping by length picks transformers' length-grouped sampler, and the
OOM batch-size search is switched on in the trainer's arguments."""
from backend.config import build_config
from backend.data import prepare_dataset
from backend.modes import mode_module
from backend.runs.store import RunStore
from backend.modes.training import TrainContext


def _trainer(tiny_model, tmp_path, **settings):
    config = build_config({"model": str(tiny_model), "max_steps": 1, "max_length": 64, "lora": {"r": 2}, **settings})
    store = RunStore(tmp_path)
    run = store.create_run(config)
    dataset, _ = prepare_dataset(config.dataset, config.mode)
    ctx = TrainContext(config=config, run_id=run.id, run_dir=store.run_dir(run.id), store=store,
                       model_path=str(tiny_model), dataset=dataset)
    return mode_module(config.mode).build_trainer(ctx)


def test_group_by_length_uses_the_length_grouped_sampler(tiny_model, tmp_path):
    grouped = _trainer(tiny_model, tmp_path, group_by_length=True, auto_find_batch_size=True)
    assert type(grouped._get_train_sampler()).__name__ == "LengthGroupedSampler"
    assert grouped.args.auto_find_batch_size
    plain = _trainer(tiny_model, tmp_path)
    assert type(plain._get_train_sampler()).__name__ == "RandomSampler"
