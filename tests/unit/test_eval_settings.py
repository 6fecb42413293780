"""Evaluation settings: the held-out split is deterministic per seed, an evaluation dataset is checked like a
training one, wrong combinations are refused with the field named, and sweeps may then optimise eval_*."""
import json

import datasets
import pytest

from backend.config import ConfigError, build_config
from backend.data import DatasetError, generation_rows, hold_out, prepare_eval_dataset
from backend.sweeps import objective_metrics, spec_from_data

SOURCES = [{"type": "regex", "params": {"pattern": "<answer>"}}]


def refusal(data) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        build_config(data)
    return exc.value.errors


def numbers(n=20):
    return datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(n)]})


def test_the_split_holds_out_the_same_rows_for_the_same_seed_and_never_trains_on_them():
    train, held = hold_out(numbers(), 0.1, seed=42)
    assert (len(train), len(held)) == (18, 2)
    assert not set(train["text"]) & set(held["text"])
    assert hold_out(numbers(), 0.1, seed=42)[1]["text"] == held["text"]
    assert hold_out(numbers(), 0.1, seed=7)[1]["text"] != held["text"]


def test_a_small_share_of_a_small_set_still_holds_out_one_row():
    train, held = hold_out(numbers(5), 0.01, seed=1)
    assert (len(train), len(held)) == (4, 1)
    with pytest.raises(DatasetError, match="the training set has 1 row"):
        hold_out(numbers(1), 0.5, seed=1)


def test_no_evaluation_leaves_the_training_set_whole():
    ds = numbers()
    assert prepare_eval_dataset("", 0.0, 42, "sft", ds) == (ds, None)


def test_an_evaluation_dataset_is_checked_with_the_modes_format(tmp_path):
    rows = [{"prompt": "a", "completion": "b", "label": True}, {"prompt": "c", "completion": "", "label": False}]
    (tmp_path / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DatasetError) as exc:
        prepare_eval_dataset("eval.jsonl", 0.0, 42, "kto", None, workspace=tmp_path)
    assert str(exc.value).startswith("eval.jsonl row 2: column `completion` is empty")
    with pytest.raises(DatasetError, match="no DPO format found"):
        prepare_eval_dataset("eval.jsonl", 0.0, 42, "dpo", None, workspace=tmp_path)
    train, held = prepare_eval_dataset("demo-preference", 0.0, 42, "dpo", numbers())
    assert len(train) == 20 and {"prompt", "chosen", "rejected"} <= set(held.column_names)


def test_evaluation_settings_are_checked_together():
    assert build_config({"eval": {"split": 0.1, "steps": 5}}).eval.enabled
    assert not build_config({}).eval.enabled
    assert refusal({"eval": {"steps": 5}}) == [
        "eval.steps: evaluation is off; give an eval.dataset or an eval.split (e.g. 0.1), or set eval.steps to 0"]
    (error,) = refusal({"eval": {"split": 0.1, "dataset": "demo-sft-instructions"}})
    assert error.startswith("eval.split: an evaluation dataset is given")
    (error,) = refusal({"eval": {"split": 0.9}})
    assert error.startswith("eval.split: Input should be less than or equal to 0.5")
    (error,) = refusal({"mode": "kto", "dataset": "demo-kto", "eval": {"split": 0.1, "batch_size": 1}})
    assert error.startswith("eval.batch_size: the kto loss")


@pytest.mark.parametrize("mode", ["grpo", "rloo", "ppo"])
def test_rl_modes_are_evaluated_by_answering_held_out_prompts(mode):
    config = build_config({"mode": mode, "dataset": "demo-math", "reward_sources": SOURCES,
                           "eval": {"split": 0.1, "steps": 5, "limit": 8}})
    assert config.eval.limit == 8
    assert {"eval_reward", "eval_rewards/regex/mean"} <= set(objective_metrics(config))
    assert "eval_loss" not in objective_metrics(config)  # no loss-based loop in an RL mode


def test_sweeps_may_optimise_eval_metrics_once_the_base_evaluates():
    space = [{"field": "learning_rate", "kind": "log_float", "low": 1e-5, "high": 1e-3}]
    base = {"mode": "dpo", "dataset": "demo-preference", "max_steps": 4, "eval": {"split": 0.1}}
    assert {"eval_loss", "eval_rewards/accuracies"} <= set(objective_metrics(build_config(base)))
    spec = spec_from_data({"base": base, "space": space, "objective": {"metric": "eval_loss"}})
    assert spec.objective.metric == "eval_loss" and spec.base["eval"]["split"] == 0.1
    with pytest.raises(ConfigError) as exc:
        spec_from_data({"base": {**base, "eval": {}}, "space": space, "objective": {"metric": "eval_loss"}})
    assert "without an evaluation split" in exc.value.errors[0]
    with pytest.raises(ConfigError) as exc:
        spec_from_data({"base": base, "space": [{"field": "eval.split", "kind": "float", "low": 0.1, "high": 0.2}],
                        "objective": {"metric": "eval_loss"}})
    assert exc.value.errors[0].startswith("space[0] (eval.split): not searchable")


# ---- generating at evaluation (sft, dpo, kto) ----

LENGTH = [{"type": "length", "params": {"target": 4}}]


def test_generating_at_evaluation_is_refused_where_it_cannot_be_and_sources_need_it():
    (error,) = refusal({"mode": "rm", "dataset": "demo-preference", "eval": {"split": 0.1, "generate": True}})
    assert error.startswith("eval.generate: a reward model writes no answers (it scores them)")
    (error,) = refusal({"eval": {"generate": True}})
    assert error.startswith("eval.generate: evaluation is off; give an eval.dataset or an eval.split")
    (error,) = refusal({"mode": "dpo", "dataset": "demo-preference", "reward_sources": LENGTH})
    assert error.startswith("reward_sources: DPO runs learn nothing from reward sources; they only score the answers "
                            "generated at evaluation: turn on eval.generate")
    config = build_config({"mode": "kto", "dataset": "demo-kto", "reward_sources": LENGTH,
                           "eval": {"split": 0.1, "generate": True}})
    assert {"eval_loss", "eval_rouge_l", "eval_reward", "eval_rewards/length/mean"} <= set(objective_metrics(config))
    assert "rewards/length/mean" not in objective_metrics(config)  # nothing is sampled in training


def test_generation_rows_split_off_the_answer_each_mode_asks_for():
    chat = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    rows = generation_rows(datasets.Dataset.from_dict({"messages": [chat]}), "sft")
    assert (rows.prompts, rows.references, rows.columns) == ([chat[:1]], ["Hello."], {"completion": ["Hello."]})
    kto = datasets.Dataset.from_dict({"prompt": ["a", "b"], "completion": [chat[1:], chat[1:]], "label": [True, False]})
    assert generation_rows(kto, "kto").references == ["Hello.", None]  # an answer labelled bad is not matched
    dpo = datasets.Dataset.from_dict({"prompt": ["a"], "chosen": ["yes"], "rejected": ["no"]})
    assert generation_rows(dpo, "dpo").references == ["yes"]
    assert generation_rows(datasets.Dataset.from_dict({"prompt": ["a"], "answer": ["1"]}), "grpo").references is None
    with pytest.raises(DatasetError, match="has no prompts to answer .columns: text.: a plain `text` set"):
        generation_rows(numbers(2), "sft")


def test_held_out_answers_are_scored_by_rouge_against_the_reference_and_by_the_sources(tmp_path):
    from backend.modes.generation_eval import GenerationEval
    from backend.modes.training import TrainContext
    from backend.runs.store import RunStore

    held = datasets.Dataset.from_dict({"prompt": ["p1", "p2", "p3"], "label": [True, True, False],
                                       "completion": ["the cat sat", "a dog ran", "go away"]})
    config = build_config({"mode": "kto", "dataset": "demo-kto", "reward_sources": LENGTH,
                           "eval": {"split": 0.1, "generate": True, "limit": 3}})
    ctx = TrainContext(config, "r", tmp_path, RunStore(tmp_path), "unused", held, held)
    values = GenerationEval(ctx, tokenizer=None).scores(["the cat sat", "no", "go away"])
    assert values["eval_rouge_l"] == pytest.approx(0.5)  # 1 and 0 on the good answers; the bad one is left out
    assert values["eval_reward"] == values["eval_rewards/length/mean"] > 0


def test_a_run_generating_at_evaluation_is_checked_before_it_starts(tiny_model, tmp_path):
    from backend.runs.preflight import preflight

    (tmp_path / "plain.jsonl").write_text("\n".join(json.dumps({"text": f"row {i}"}) for i in range(10)))
    base = {"mode": "sft", "model": str(tiny_model), "eval": {"split": 0.2, "generate": True}}
    with pytest.raises(ConfigError) as exc:
        preflight(build_config({**base, "dataset": "plain.jsonl"}), tmp_path)
    assert exc.value.errors[0].startswith("eval.generate: the evaluation set has no prompts to answer")
    wrong = [{"type": "numeric_match", "params": {"column": "answer"}}]
    with pytest.raises(ConfigError) as exc:
        preflight(build_config({**base, "dataset": "demo-sft-instructions", "reward_sources": wrong}), tmp_path)
    assert "answer" in exc.value.errors[0] and "completion" in exc.value.errors[0], exc.value.errors
