"""Trainer arguments come from the schema by TRL's names: a setting reaches its trainer's config dataclass without
a second list, and a setting the schema hands over that TRL lacks is caught here."""
import dataclasses

import pytest

from backend.config import build_config
from backend.config.build import field_paths, trainer_settings
from backend.core.mode_registry import MODES
from backend.modes.training import TrainContext, args_class, schema_args, trainer_args
from backend.runs.store import RunStore


@pytest.mark.parametrize("mode", list(MODES))
def test_every_setting_a_mode_reads_is_a_trainer_field_or_marked_as_the_workbench_own(mode):
    fields = {f.name for f in dataclasses.fields(args_class(mode))}
    missing = [(path, names) for path, names in trainer_settings(mode) if not set(names) & fields]
    assert not missing, f"{mode}: TRL's {args_class(mode).__name__} has no field for {missing} (mark the setting " \
                        "trainer=False if the workbench uses it itself)"


@pytest.mark.parametrize("mode", list(MODES))
def test_a_mode_hands_its_section_to_its_trainer(mode, tmp_path):
    changed = {"sft": {"packing": True, "max_length": 300}, "rm": {"max_length": 300},
               "dpo": {"dpo": {"beta": 0.3, "loss_type": "ipo"}},
               "kto": {"kto": {"beta": 0.2, "desirable_weight": 1.5, "loss_type": "apo_zero_unpaired"}},
               "orpo": {"orpo": {"beta": 0.25}},
               "cpo": {"cpo": {"beta": 0.2, "loss_type": "hinge", "cpo_alpha": 0.5}},
               "simpo": {"simpo": {"beta": 2.5, "simpo_gamma": 1.4, "cpo_alpha": 0.1}},
               "grpo": {"rl": {"beta": 0.04, "loss_type": "grpo", "temperature": 0.7, "epsilon_high": 0.28,
                               "importance_sampling_level": "sequence", "scale_rewards": "none",
                               "mask_truncated_completions": True, "top_entropy_quantile": 0.2}},
               "rloo": {"rl": {"num_generations": 4, "top_p": 0.9}, "per_device_train_batch_size": 4},
               "ppo": {"ppo": {"kl_coef": 0.2, "num_ppo_epochs": 2}, "rl": {"max_completion_length": 32}},
               "gkd": {"gkd": {"lmbda": 0.3, "beta": 0.2, "temperature": 0.7, "max_new_tokens": 32,
                               "seq_kd": True}},
               "online_dpo": {"online_dpo": {"beta": 0.2, "loss_type": "ipo", "missing_eos_penalty": 1.0},
                              "rl": {"temperature": 0.7, "top_p": 0.9}}}[mode]
    sources = [{"type": "length", "params": {"target": 10}}] if MODES[mode].online_rl else []
    given = {**changed, "gkd": {**changed["gkd"], "teacher": "teacher-model"}} if MODES[mode].teacher_model \
        else changed  # the teacher is the workbench's to load, not a trainer argument
    config = build_config({"mode": mode, "dataset": "demo-sft-instructions" if mode == "sft" else "x.jsonl",
                           "learning_rate": 3e-5, "weight_decay": 0.01, "reward_sources": sources, **given})
    ctx = TrainContext(config=config, run_id="r", run_dir=tmp_path, store=RunStore(tmp_path), model_path="m",
                       dataset=None)
    args = trainer_args(ctx, reward_weights=[1.0]) if MODES[mode].online_rl else trainer_args(ctx)
    assert isinstance(args, args_class(mode))
    assert (args.learning_rate, args.weight_decay) == (3e-5, 0.01)
    for section, values in changed.items():
        for key, value in (values.items() if isinstance(values, dict) else [(section, values)]):
            got = getattr(args, key)
            assert got == value or got == [value], (mode, key, got)
    handed = schema_args(config, args_class(mode))
    assert "name" not in handed and "reward_sources" not in handed  # the workbench's own settings stay here
    assert not any(path.startswith(("constraint.", "lora.", "data.", "eval.")) for path, _ in trainer_settings(mode))


@pytest.mark.parametrize("mode, loss_type", [("cpo", "hinge"), ("simpo", "simpo")])
def test_simpo_is_cpos_trainer_with_the_simpo_loss_and_its_own_defaults(mode, loss_type, tmp_path, monkeypatch):
    import backend.modes.cpo as cpo
    from backend.modes import mode_module

    built = {}
    monkeypatch.setattr(cpo, "load_causal_lm", lambda path, **kwargs: "model")
    monkeypatch.setattr(cpo, "CPOTrainer", lambda **kwargs: built.update(kwargs) or "trainer")
    config = build_config({"mode": mode, "dataset": "x.jsonl", "cpo": {"loss_type": "hinge"}} if mode == "cpo"
                          else {"mode": mode, "dataset": "x.jsonl"})
    ctx = TrainContext(config=config, run_id="r", run_dir=tmp_path, store=RunStore(tmp_path), model_path="m",
                       dataset=None)
    monkeypatch.setattr(TrainContext, "tokenizer", lambda self: "tokenizer")
    assert mode_module(mode).build_trainer(ctx) == "trainer"
    args = built["args"]
    assert type(args).__name__ == "CPOConfig" and args.loss_type == loss_type
    # SimPO as published: beta 2, a margin, no SFT term; CPO keeps TRL's beta 0.1 and its SFT term
    expected = (2.0, 1.0, 0.0) if mode == "simpo" else (0.1, 0.5, 1.0)
    assert (args.beta, args.simpo_gamma, args.cpo_alpha) == expected


def test_gkd_loads_the_teacher_in_the_students_dtype_and_trains_on_messages(tmp_path, monkeypatch):
    import datasets
    import torch

    import backend.models.from_run as from_run
    import backend.modes.gkd as gkd

    built, loaded = {}, []

    class Model:
        def requires_grad_(self, flag):
            loaded[-1] = (*loaded[-1], flag)

    monkeypatch.setattr(gkd, "load_causal_lm", lambda path, **kwargs: loaded.append((path, kwargs)) or Model())
    monkeypatch.setattr(from_run, "training_model", lambda spec, workspace, progress: f"merged {spec}")
    monkeypatch.setattr(gkd, "_GKDTrainer", lambda **kwargs: built.update(kwargs) or "trainer")
    monkeypatch.setattr(TrainContext, "tokenizer", lambda self: "tokenizer")
    rows = datasets.Dataset.from_dict({"prompt": ["2 + 2?"], "completion": ["4"]})
    config = build_config({"mode": "gkd", "dataset": "x.jsonl", "gkd": {"teacher": "run:sft1", "lmbda": 0.25}})
    ctx = TrainContext(config=config, run_id="r", run_dir=tmp_path, store=RunStore(tmp_path), model_path="m",
                       dataset=rows)
    assert gkd.build_trainer(ctx) == "trainer"
    assert loaded[0] == ("m", {"dtype": torch.float32})
    assert loaded[1] == ("merged run:sft1", {"dtype": torch.float32}, False)  # frozen, as the student's dtype
    assert built["args"].lmbda == 0.25 and not hasattr(built["args"], "teacher")
    assert built["train_dataset"].column_names == ["messages"] and built["eval_dataset"] is None
    assert built["train_dataset"][0]["messages"] == [{"role": "user", "content": "2 + 2?"},
                                                     {"role": "assistant", "content": "4"}]


def test_online_dpo_judges_with_the_reward_sources_and_samples_max_completion_length(tmp_path, monkeypatch):
    import backend.modes.online_dpo as online_dpo

    built = {}

    class Trainer:
        def __init__(self, **kwargs):
            built.update(kwargs)

        def score_sources(self):
            built["scored"] = True

    monkeypatch.setattr(online_dpo, "load_causal_lm", lambda path, **kwargs: "model")
    monkeypatch.setattr(online_dpo, "_OnlineDPOTrainer", Trainer)
    monkeypatch.setattr(TrainContext, "tokenizer", lambda self: "tokenizer")
    sources = [{"type": "length", "name": "brief", "params": {"target": 10}},
               {"type": "regex", "name": "digits", "weight": 0.5, "params": {"pattern": "[0-9]"}}]
    config = build_config({"mode": "online_dpo", "dataset": "x.jsonl", "reward_sources": sources,
                           "rl": {"max_completion_length": 24}})
    ctx = TrainContext(config=config, run_id="r", run_dir=tmp_path, store=RunStore(tmp_path), model_path="m",
                       dataset="prompts")
    assert isinstance(online_dpo.build_trainer(ctx), Trainer) and built["scored"]
    args = built["args"]
    assert type(args).__name__ == "OnlineDPOConfig" and args.max_new_tokens == 24
    assert args.reward_weights == [1.0, 0.5] and args.missing_eos_penalty is None and args.beta == 0.1
    assert [f.__name__ for f in built["reward_funcs"]] == ["brief", "digits"]  # wrapped to record samples
    assert "num_generations" not in schema_args(config, args_class("online_dpo"))  # always a pair


def test_online_dpo_logs_each_sources_scores_as_grpo_names_them(monkeypatch):
    from trl.experimental.online_dpo import OnlineDPOTrainer

    from backend.modes.online_dpo import _OnlineDPOTrainer

    trainer = _OnlineDPOTrainer.__new__(_OnlineDPOTrainer)  # the wrapping alone, no model

    def correct(prompts, completions, **kwargs):
        return [1.0, 0.0, None, 1.0]

    def gated(prompts, completions, **kwargs):
        return [None] * 4

    trainer.stats, trainer.reward_funcs = {"objective/scores": []}, [correct, gated]
    trainer.score_sources()
    assert [f.__name__ for f in trainer.reward_funcs] == ["correct", "gated"]
    assert trainer.reward_funcs[0](prompts=["p"] * 4, completions=["c"] * 4) == [1.0, 0.0, None, 1.0]
    trainer.reward_funcs[1](prompts=["p"] * 4, completions=["c"] * 4)
    assert trainer.stats["rewards/correct/mean"] == [pytest.approx(2 / 3)]
    assert "rewards/gated/mean" not in trainer.stats  # nothing scored: nothing to average at the logging step
    trainer.stats["rewards/gated/mean"] = []  # as TRL leaves a list after a logging step
    logged = {}
    monkeypatch.setattr(OnlineDPOTrainer, "_maybe_log_save_evaluate",
                        lambda self, *args, **kwargs: logged.update(self.stats))  # TRL's: averages every list
    trainer._maybe_log_save_evaluate()
    assert "rewards/gated/mean" not in logged and "objective/scores" in logged  # TRL's own stay


def test_a_setting_trl_lacks_is_named(monkeypatch):
    import backend.modes.training as training

    monkeypatch.setattr(training, "trainer_settings", lambda mode: [("rl.epsilon_shift", ("epsilon_shift",))])
    with pytest.raises(TypeError, match=r"rl.epsilon_shift: GRPOConfig has no field epsilon_shift"):
        schema_args(build_config({"mode": "grpo", "dataset": "x.jsonl",
                                  "reward_sources": [{"type": "length", "params": {"target": 10}}]}),
                    args_class("grpo"))


def test_only_known_settings_are_marked():
    known = {p for p, _ in field_paths()}
    assert all(p in known for m in MODES for p, _ in trainer_settings(m))


def test_an_option_left_off_is_trls_none():
    sources = [{"type": "length", "params": {"target": 10}}]
    off = schema_args(build_config({"mode": "grpo", "dataset": "x.jsonl", "reward_sources": sources}),
                      args_class("grpo"))
    assert off["epsilon_high"] is None and off["delta"] is None and off["epsilon"] == 0.2
    on = schema_args(build_config({"mode": "grpo", "dataset": "x.jsonl", "reward_sources": sources,
                                   "rl": {"epsilon_high": 0.28, "delta": 4}}), args_class("grpo"))
    assert (on["epsilon_high"], on["delta"]) == (0.28, 4)
    rloo = schema_args(build_config({"mode": "rloo", "dataset": "x.jsonl", "reward_sources": sources,
                                     "per_device_train_batch_size": 2}), args_class("rloo"))
    assert "delta" not in rloo and "importance_sampling_level" not in rloo  # GRPO's alone
