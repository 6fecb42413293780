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
               "ppo": {"ppo": {"kl_coef": 0.2, "num_ppo_epochs": 2}, "rl": {"max_completion_length": 32}}}[mode]
    sources = [{"type": "length", "params": {"target": 10}}] if MODES[mode].online_rl else []
    config = build_config({"mode": mode, "dataset": "demo-sft-instructions" if mode == "sft" else "x.jsonl",
                           "learning_rate": 3e-5, "weight_decay": 0.01, "reward_sources": sources, **changed})
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
