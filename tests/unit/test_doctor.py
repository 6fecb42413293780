"""The run doctor reads a run's metrics and names what keeps it from learning, with the evidence and the fix."""
import json
import re
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from backend.config import build_config
from backend.doctor import (CHECKS, NO_SIGNAL_VERDICT, describe, diagnose, diagnose_run, fix_text, report_lines,
                            status_words, stored_diagnoses, to_json, verdict_of)
from backend.doctor.checks import Diagnosis
from backend.doctor.texts import DESCRIBED, LANGS
from backend.core.mode_registry import MODES
from backend.runs.stall import stall_reason
from backend.runs.store import RunStore

GRPO = {"mode": "grpo", "dataset": "demo-math", "rl": {"num_generations": 2, "max_completion_length": 64},
        "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]}
COST = {"type": "regex", "name": "unsafe", "params": {"pattern": "x"}, "role": "cost", "budget": 0.1}


def series(**metrics):
    """{name: [v1, v2, ...]} -> the doctor's series, steps 1, 2, ..."""
    return {name.replace("__", "/"): list(enumerate(values, 1)) for name, values in metrics.items()}


def checks_of(found):
    return [d.check for d in found]


def test_every_mode_names_only_checks_that_exist():
    for spec in MODES.values():
        assert spec.checks and set(spec.checks) <= set(CHECKS), spec.name


ROOT = Path(__file__).resolve().parents[2]
# What each mode's trainer logs that a check could read, by the file that logs it: every name is looked up there
# below, so the table cannot claim what a trainer never writes. All but PPO train in transformers' Trainer loop,
# which logs loss, grad_norm, learning_rate (and eval_loss where the mode evaluates).
_GROUP_LOGS = ("reward", "kl", "entropy", "frac_reward_zero_std", "completions/clipped_ratio",
               "completions/mean_length", "step_time")
_CONSTRAINT_LOGS = {"backend/modes/rl_constraint.py": ("cost/{name}/mean", "lambda/{name}")}
LOGGED = {
    "sft": {"trl/trainer/sft_trainer.py": ("entropy", "mean_token_accuracy")},
    "rm": {"trl/trainer/reward_trainer.py": ("accuracy", "margin")},
    "dpo": {"trl/trainer/dpo_trainer.py": ("rewards/accuracies", "rewards/margins")},
    "kto": {"trl/trainer/kto_trainer.py": ("kl", "rewards/chosen")},
    "orpo": {"trl/experimental/orpo/orpo_trainer.py": ("rewards/accuracies", "nll_loss", "log_odds_ratio")},
    "cpo": {"trl/experimental/cpo/cpo_trainer.py": ("rewards/accuracies", "nll_loss")},
    "simpo": {"trl/experimental/cpo/cpo_trainer.py": ("rewards/accuracies", "nll_loss")},  # CPO's loss_type simpo
    "gkd": {"backend/modes/gkd.py": ("on_policy",)},  # TRL's GKDTrainer logs its loss alone
    "ppo": {"backend/ppo/trainer.py": ("loss", "grad_norm", "learning_rate", "reward", "objective/scores",
                                       "objective/kl", "policy/entropy", "objective/entropy",
                                       "completions/clipped_ratio", "completions/mean_length", "step_time"),
            **_CONSTRAINT_LOGS},
    "grpo": {"trl/trainer/grpo_trainer.py": (*_GROUP_LOGS, "tools/call_frequency", "tools/failure_frequency"),
             **_CONSTRAINT_LOGS},
    "rloo": {"trl/trainer/rloo_trainer.py": _GROUP_LOGS, **_CONSTRAINT_LOGS},
    "online_dpo": {"trl/experimental/online_dpo/online_dpo_trainer.py": ("objective/scores", "objective/kl",
                                                                         "objective/entropy",
                                                                         "val/contain_eos_token")},
}
_TRAINER_LOOP = ("loss", "grad_norm", "learning_rate")


def _source(path: str) -> str:
    package, _, rest = path.partition("/")
    if package in ("trl", "transformers"):
        return (Path(find_spec(package).submodule_search_locations[0]) / rest).read_text()
    return (ROOT / path).read_text()


def _writes(source: str, name: str) -> bool:
    """`name` is a metric key in `source`: a string literal or an f-string's tail after a prefix (TRL's
    f"{prefix}nll_loss"), or transformers' evaluation key f"{metric_key_prefix}_loss" for eval_loss."""
    return bool(re.search(r'["}]' + re.escape(name) + '"', source)) or \
        (name.startswith("eval_") and '{metric_key_prefix}_' + name.removeprefix("eval_") + '"' in source)


def logged_by(mode: str) -> set[str]:
    """The metrics a mode's trainer logs that a check could read, each found in the source that logs it."""
    sources = dict(LOGGED[mode])
    if mode != "ppo":
        sources["transformers/trainer.py"] = (*_TRAINER_LOOP, *(("eval_loss",) if MODES[mode].evaluable else ()))
        sources["backend/modes/training.py"] = ("step_time",)  # the store callback's, where TRL logs none
    for path, names in sources.items():
        text = _source(path)
        assert [n for n in names if not _writes(text, n)] == [], (mode, path)
    return {n.format(name="unsafe") for names in sources.values() for n in names}


class Recorder(dict):
    """A run's series that holds a flat line for each metric its mode logs and remembers every name asked for."""

    def __init__(self, logged):
        super().__init__()
        self.logged, self.asked = logged, set()

    def get(self, name, default=None):
        self.asked.add(name)
        return [(step, 1.0) for step in range(1, 10)] if name in self.logged else default


def config_of(mode: str):
    """A valid config of `mode` (RL: a reward source, and a cost source named `unsafe` where it keeps a constraint)."""
    spec, data = MODES[mode], {"mode": mode}
    if spec.online_rl:
        data["reward_sources"] = [*GRPO["reward_sources"], *([COST] if "constraint" in spec.sections else [])]
    if spec.teacher_model:
        data[mode] = {"teacher": "a-teacher"}
    return build_config(data)


@pytest.mark.parametrize("mode", list(MODES))
def test_every_check_a_mode_declares_reads_a_metric_its_trainer_logs(mode):
    assert set(LOGGED) == set(MODES)  # a new mode is added to the table
    logged, config = logged_by(mode), config_of(mode)
    for check in MODES[mode].checks:
        series = Recorder(logged)
        CHECKS[check](series, config, True, {})
        assert series.asked & logged, (mode, check, sorted(series.asked))


def test_online_dpo_is_read_under_its_own_metric_names():
    config = config_of("online_dpo")
    cut = diagnose(series(val__contain_eos_token=[0.0] * 4), config, ended=True)
    assert checks_of(cut) == ["truncation"] and cut[0].severity == "error" and cut[0].params["share"] == 1.0
    assert cut[0].evidence["metric"] == "val/contain_eos_token" and cut[0].fix == {"rl.max_completion_length": 192}
    warned = diagnose(series(val__contain_eos_token=[0.3] * 4), config)  # 70% cut
    assert checks_of(warned) == ["truncation"] and warned[0].severity == "warning"
    assert diagnose(series(val__contain_eos_token=[0.6] * 4), config, ended=True) == []  # 40% cut
    runaway = diagnose(series(objective__kl=[0.5, 0.5, 1.0, 2.0, 4.0, 8.0]), config)
    assert checks_of(runaway) == ["kl_runaway"] and runaway[0].fix["online_dpo.beta"] == 0.2  # its own beta
    collapsed = diagnose(series(objective__entropy=[40.0, 38.0, 20.0, 9.0, 3.0, 2.0]), config)
    assert checks_of(collapsed) == ["entropy_collapse"]


def test_groups_without_reward_spread_at_every_step_are_no_learning_signal():
    config = build_config(GRPO)
    found = diagnose(series(frac_reward_zero_std=[1.0] * 5, reward=[0.0] * 5, grad_norm=[0.0] * 5), config,
                     ended=True)
    first = found[0]
    assert first.check == "zero_variance" and first.severity == "error" and first.no_signal
    assert first.fix == {"rl.num_generations": 4, "per_device_train_batch_size": 4}  # a batch of whole groups
    assert "grad_zero" not in checks_of(found)  # the consequence is not listed beside its cause
    assert verdict_of(found) == NO_SIGNAL_VERDICT
    assert first.evidence["metric"] == "frac_reward_zero_std" and first.evidence["steps"] == [1, 5]


def test_truncated_completions_name_the_setting_and_a_longer_limit():
    config = build_config(GRPO)
    found = diagnose(series(**{"completions__clipped_ratio": [1.0] * 4, "frac_reward_zero_std": [1.0] * 4}), config,
                     ended=True, hints={"reference_max": 120})
    by = {d.check: d for d in found}
    assert by["truncation"].fix == {"rl.max_completion_length": 256}  # 2 × the longest reference, in 32s
    assert by["zero_variance"].fix == {"rl.max_completion_length": 256}  # cut answers are why groups are flat
    what, action = describe("truncation", by["truncation"].params)
    assert "rl.max_completion_length=64" in what and "≥ 256" in action


def test_a_run_that_learns_draws_no_diagnosis():
    config = build_config(GRPO)
    rising = [0.1, 0.2, 0.25, 0.35, 0.4, 0.5, 0.55, 0.6]
    found = diagnose(series(reward=rising, frac_reward_zero_std=[0.2] * 8, grad_norm=[0.5, 0.6, 0.4, 0.5, 0.7, 0.4,
                                                                                     0.5, 0.6],
                            **{"completions__clipped_ratio": [0.1] * 8, "completions__mean_length": [30] * 8},
                            entropy=[1.0] * 8, kl=[0.01 * i for i in range(8)], loss=[0.1] * 8), config, ended=True)
    assert found == []


@pytest.mark.parametrize("metrics, check, fix_key", [
    ({"loss": [2.0, 1.8, None, None], "grad_norm": [1, 1, 1, 1]}, "loss_nan", "learning_rate"),
    ({"loss": [3.8, 9.9, 18.6, 17.3, 15.0, 34.8, 29.0, 28.8]}, "loss_rising", "learning_rate"),
    ({"loss": [2.0, 1.9, 1.8, 40.0, 1.7]}, "loss_spike", "learning_rate"),
    ({"grad_norm": [1.7, 45.0, 5.8e6, 451, 103, 3e4, 3.8e4, 5e3]}, "grad_explosion", "learning_rate"),
    ({"loss": [2.0, 1.8, 1.6, 1.4, 1.2, 1.0], "eval_loss": [1.5, 1.4, 1.6, 1.8]}, "overfitting", "max_steps"),
])
def test_fitting_runs_gone_wrong(metrics, check, fix_key):
    config = build_config({"mode": "sft", "learning_rate": 1.0})
    found = diagnose({k: list(enumerate(v, 1)) for k, v in metrics.items()}, config, ended=True)
    assert check in checks_of(found)
    d = next(d for d in found if d.check == check)
    assert fix_key in d.fix
    if fix_key == "learning_rate":
        assert d.fix["learning_rate"] <= 5e-4  # into the usual LoRA range, not 1/3 of a rate that diverged


def test_rl_runs_gone_wrong():
    config = build_config({**GRPO, "rl": {**GRPO["rl"], "beta": 0.0}})
    up = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    hacked = diagnose(series(reward=up, **{"completions__mean_length": [20, 22, 25, 40, 60, 80, 100, 120, 128]}),
                      config)
    assert checks_of(hacked) == ["reward_hacking"] and hacked[0].fix == {"rl.beta": 0.04}
    runaway = diagnose(series(kl=[0.01, 0.02, 0.05, 0.3, 0.9, 1.5, 2.0, 3.0, 4.0]), config)
    assert checks_of(runaway) == ["kl_runaway"]
    collapsed = diagnose(series(entropy=[2.0, 1.9, 1.5, 0.8, 0.3, 0.1, 0.05, 0.02, 0.01]), config)
    assert checks_of(collapsed) == ["entropy_collapse"] and "rl.temperature" in collapsed[0].fix
    falling = diagnose(series(reward=[0.8, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.2]), config)
    assert checks_of(falling) == ["reward_falling"]
    flat = diagnose(series(reward=[0.5] * 9), config, ended=True)
    assert checks_of(flat) == ["reward_flat"]
    assert diagnose(series(reward=[0.5] * 9), config, ended=False) == []  # flat so far: too early to say


def test_a_reward_that_rises_while_the_held_out_reward_falls_is_hacked():
    config = build_config({**GRPO, "rl": {**GRPO["rl"], "beta": 0.0}})
    up = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    hacked = diagnose(series(reward=up, eval_reward=[0.5, 0.6, 0.4]), config)
    assert checks_of(hacked) == ["reward_hacking"] and hacked[0].params["why"] == "held_out"
    assert hacked[0].evidence["metric"] == "eval_reward" and hacked[0].fix == {"rl.beta": 0.04}
    # within held_out_drop of its best, or still above where it started: noise, not hacking
    assert diagnose(series(reward=up, eval_reward=[0.5, 0.6, 0.56]), config) == []
    assert diagnose(series(reward=up, eval_reward=[0.5, 0.9, 0.55]), config) == []
    assert diagnose(series(reward=up, eval_reward=[0.6, 0.4]), config) == []  # too few evaluations
    assert diagnose(series(reward=[0.5] * 9, eval_reward=[0.5, 0.6, 0.4]), config) == []  # reward not rising


def test_steps_that_grew_slower_are_a_slowdown():
    config = build_config(GRPO)
    slow = diagnose(series(step_time=[30.0, 1.0, 1.0, 1.1, 1.0, 1.0, 4.0, 4.2, 4.1]), config)
    assert checks_of(slow) == ["slowdown"] and slow[0].params["factor"] == pytest.approx(4.1)
    assert diagnose(series(step_time=[30.0, 1.0, 1.0, 1.1, 1.0, 1.0, 2.0, 2.2, 2.1]), config) == []
    assert diagnose(series(step_time=[30.0] + [1.0] * 8), config) == []  # the first step compiles
    assert diagnose(series(step_time=[1.0, 1.0, 1.0, 4.0, 4.0]), config) == []  # too few steps for a trend


def test_a_policy_that_never_calls_its_tools_or_whose_calls_fail_is_said_so():
    config = build_config(GRPO)
    unused = diagnose(series(tools__call_frequency=[0.0] * 6), config)
    assert checks_of(unused) == ["tools_unused"] and unused[0].params["never"]
    assert "(never at any step)" in describe("tools_unused", unused[0].params)[0]
    assert diagnose(series(tools__call_frequency=[0.0] * 4), config) == []  # too early for a running run
    assert checks_of(diagnose(series(tools__call_frequency=[0.0] * 4), config, ended=True)) == ["tools_unused"]
    assert diagnose(series(tools__call_frequency=[0.0, 0.5, 1.0, 1.0, 1.0, 1.0]), config) == []  # learned to call
    failing = diagnose(series(tools__call_frequency=[1.0] * 6, tools__failure_frequency=[0.2, 0.6, 0.7, 0.8, 0.9, 0.9]),
                       config)
    assert checks_of(failing) == ["tool_failures"] and failing[0].params["share"] == pytest.approx(0.9)
    assert diagnose(series(tools__call_frequency=[1.0] * 6, tools__failure_frequency=[0.1] * 6), config) == []


def test_a_cost_over_its_budget_raises_lambda_or_its_cap():
    config = build_config({**GRPO, "reward_sources": [*GRPO["reward_sources"], COST]})
    over = [0.3] * 6
    rising = diagnose(series(cost__unsafe__mean=over, lambda__unsafe=[0.5, 1, 1.5, 2, 2.5, 3]), config)
    assert checks_of(rising) == ["constraint_unmet"] and rising[0].fix == {"constraint.lambda_lr": 0.2}
    assert rising[0].params["source"] == "unsafe" and not rising[0].params["at_cap"]
    capped = diagnose(series(cost__unsafe__mean=over, lambda__unsafe=[2, 4, 6, 8, 10, 10]), config)
    assert capped[0].params["at_cap"] and capped[0].fix == {"constraint.lambda_max": 20.0}
    assert diagnose(series(cost__unsafe__mean=[0.3, 0.3, 0.2, 0.1, 0.05, 0.05]), config) == []  # met by now
    assert diagnose(series(cost__unsafe__mean=[0.3] * 5), config) == []  # too few steps
    assert diagnose(series(cost__other__mean=over), config) == []  # no budget of that name


def test_warm_up_longer_than_the_run():
    found = diagnose({}, build_config({"mode": "sft", "max_steps": 20, "warmup_steps": 50}))
    assert checks_of(found) == ["warmup_never_ends"] and found[0].fix == {"warmup_steps": 2}


def every_diagnosis() -> list[Diagnosis]:
    """One diagnosis of each kind the doctor has (texts.DESCRIBED), with the params its check writes (the browser
    test shows them all too)."""
    return [
        Diagnosis("zero_variance", "error", {"share": 1.0, "num_generations": 2, "truncated": False, "suggested": 4},
                  {}),
        Diagnosis("truncation", "error", {"share": 1.0, "current": 8, "suggested": 32}, {}),
        Diagnosis("reward_flat", "warning", {"first": 0.1, "last": 0.1, "lr": 1e-4, "suggested": 3e-4}, {}),
        Diagnosis("reward_falling", "warning", {"first": 0.5, "last": 0.1, "lr": 1e-4, "suggested": 3e-5}, {}),
        Diagnosis("reward_hacking", "warning", {"first": 0.1, "last": 0.9, "length_first": 20, "length_last": 120,
                                                "beta": 0.0, "suggested": 0.04, "why": "length"}, {}),
        Diagnosis("kl_runaway", "warning", {"first": 0.1, "last": 4, "setting": "rl.beta", "current": 0.0,
                                            "suggested": 0.04}, {}),
        Diagnosis("entropy_collapse", "warning", {"first": 2, "last": 0.01, "temperature": 1.0, "suggested": 1.2},
                  {}),
        Diagnosis("loss_nan", "error", {"metric": "loss", "step": 3, "count": 2, "points": 4, "lr": 1,
                                        "suggested": 5e-4}, {}),
        Diagnosis("loss_rising", "warning", {"first": 3.8, "last": 29, "lr": 1, "suggested": 5e-4}, {}),
        Diagnosis("loss_spike", "warning", {"step": 4, "value": 40, "median": 1.9, "lr": 1, "suggested": 5e-4}, {}),
        Diagnosis("grad_explosion", "warning", {"step": 3, "value": 5e6, "early": 20, "lr": 1, "suggested": 5e-4},
                  {}),
        Diagnosis("grad_zero", "error", {"points": 5}, {}),
        Diagnosis("warmup_never_ends", "warning", {"warmup": 50, "steps": 20, "suggested": 2}, {}),
        Diagnosis("overfitting", "warning", {"best": 1.4, "best_step": 2, "last": 1.8, "last_step": 4,
                                             "suggested": 2}, {}),
        Diagnosis("slowdown", "warning", {"early": 1.0, "recent": 4.0, "factor": 4.0}, {}),
        Diagnosis("constraint_unmet", "warning", {"source": "unsafe", "cost": 0.3, "budget": 0.05, "at_cap": True,
                                                  "cap": 10}, {}),
        Diagnosis("stalled", "error", {"why": "no heartbeat"}, {}),
        Diagnosis("probe_truncation", "warning", {"clipped": 16, "n": 16, "current": 64, "suggested": 192,
                                                  "column": "answer", "ref_min": 18, "ref_max": 42}, {}),
        Diagnosis("probe_reference_longer", "warning", {"current": 32, "column": "answer", "ref_min": 18,
                                                        "ref_max": 42, "suggested": 96}, {}),
        Diagnosis("probe_constant", "warning", {"n": 16, "source": "numeric_match", "value": 0.0, "truncated": True},
                  {}),
        Diagnosis("probe_zero_variance", "error", {"groups": 4, "num_generations": 4, "suggested": 192,
                                                   "truncated": True, "stopped": True}, {}),
        Diagnosis("probe_zero_variance", "warning", {"groups": 4, "num_generations": 2, "suggested": 4,
                                                     "truncated": False, "stopped": False, "sparse": True}, {}),
        Diagnosis("probe_some_zero_variance", "warning", {"zero": 2, "groups": 4}, {}),
        Diagnosis("probe_slow", "warning", {"unfinished": 12, "n": 16, "seconds": 20.0, "tokens": 97,
                                            "current": 256}, {}),
        Diagnosis("tools_unused", "warning", {"calls": 0.0, "never": True}, {}),
        Diagnosis("tool_failures", "warning", {"share": 0.8}, {}),
        Diagnosis("probe_dominant", "warning", {"source": "length", "share": 0.92}, {}),
    ]


def test_every_diagnosis_reads_in_both_languages():
    made = every_diagnosis()
    assert {d.check for d in made} == set(DESCRIBED)
    for d in made:
        for lang in LANGS:
            what, action = describe(d.check, d.params, lang)
            assert what != d.check and "{" not in what + action, (d.check, lang, what, action)
            if lang == "zh":  # the Chinese, from the catalogue, not the English fallback
                assert (what, action) != describe(d.check, d.params, "en"), d.check
    assert "92%" in describe("probe_dominant", made[-1].params)[0]
    assert "rl.max_completion_length=64" in describe("probe_truncation", made[17].params, "zh")[0]
    sparse = next(d for d in made if d.params.get("sparse"))
    assert "a sparse reward may still be earned later" in describe(sparse.check, sparse.params)[0]


def test_fixes_read_as_set_arguments():
    assert fix_text({"rl.max_completion_length": 192, "learning_rate": 5e-05}) == \
        "rl.max_completion_length=192 learning_rate=5e-05"
    lines = report_lines([Diagnosis("grad_zero", "error", {"points": 5}, {})], "zh")
    assert lines[0].startswith("[无法学习]")


def test_a_stored_run_shows_its_verdict_and_diagnoses(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config(GRPO))
    store.update_run(run.id, status="running", started_at=time.time())
    for step in (1, 2, 3):
        store.add_metrics(run.id, step, {"frac_reward_zero_std": 1.0, "reward": 0.0})
    live = diagnose_run(store, store.get_run(run.id))
    assert checks_of(live) == ["zero_variance"]
    found = [Diagnosis("zero_variance", "error", {"share": 1.0, "num_generations": 2, "truncated": False,
                                                  "suggested": 4}, {"metric": "frac_reward_zero_std"},
                       {"rl.num_generations": 4}, no_signal=True)]
    store.update_run(run.id, diagnoses=to_json(found), verdict=verdict_of(found))
    store.finish_run(run.id, "completed")
    ended = store.get_run(run.id)
    assert stored_diagnoses(ended) == found and diagnose_run(store, ended) == found
    assert status_words(ended) == "completed — no learning signal"
    assert status_words(ended, "zh").endswith("没有学习信号")
    assert json.loads(ended.diagnoses)[0]["fix"] == {"rl.num_generations": 4}
    assert store.outcome_counts() == {"completed": 1}
    store.finish_run(run.id, "failed", only_if_active=False)  # an ended run corrected is not counted again
    assert store.outcome_counts() == {"completed": 1}


def test_the_stall_rule_reads_progress_and_the_worker_beat(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run(build_config({"mode": "sft"}))
    now = time.time()
    store.update_run(run.id, status="running", worker_pid=123, worker_beat_at=now - 1, started_at=now - 100)
    assert stall_reason(store.get_run(run.id), now) is None  # loading: its beat says it lives
    store.update_run(run.id, worker_beat_at=now - 45)
    assert "no heartbeat from the worker (pid 123) for 45 s" in stall_reason(store.get_run(run.id), now)
    # beating, but no step: 10 steps of 2 s would be 20 s; the floor is 120 s
    store.update_run(run.id, worker_beat_at=now, train_started_at=now - 200, step=5, step_at=now - 190)
    why = stall_reason(store.get_run(run.id), now)
    assert why.startswith("no training step for 190 s after step 5") and "2.0 s" in why
    store.update_run(run.id, step_at=now - 100)
    assert stall_reason(store.get_run(run.id), now) is None


def test_the_doctor_page_documents_every_check_and_threshold():
    from backend.doctor import THRESHOLDS

    page = (ROOT / "docs" / "doctor.md").read_text()
    missing = [name for name in [*THRESHOLDS, *CHECKS, *DESCRIBED] if f"`{name}`" not in page]
    assert not missing, missing
    wrong = [name for name, value in THRESHOLDS.items() if f"| `{name}` | {value} |" not in page]
    assert not wrong, wrong  # the table's values are the code's
    modes = page.split("\nModes")[1].split("\n\n")[0]
    assert [m for m in MODES if m not in re.findall(r"\w+", modes)] == []


def test_the_data_suggests_settings_it_contradicts():
    from backend.doctor.defaults import Lengths, suggestions

    rl = build_config({**GRPO, "per_device_train_batch_size": 4})
    found = suggestions(rl, Lengths({"answer": (18, 42, 30)}, ()))
    assert [(s.path, s.value) for s in found] == [("rl.max_completion_length", 96), ("rl.num_generations", 4)]
    assert suggestions(build_config(GRPO), Lengths({"answer": (10, 20)}, ())) == []  # 64 holds 2 × 20; batch 2
    sft = build_config({"mode": "sft", "max_length": 64})
    cut = suggestions(sft, Lengths({}, (30, 86, 50)))
    assert [(s.path, s.value) for s in cut] == [("max_length", 128)] and cut[0].params["cut"] == 1
    from backend.doctor.texts import suggestion_text

    assert "1 of the first 3 rows" in suggestion_text(cut[0].key, cut[0].value, cut[0].params)


def test_the_in_run_probe_is_skipped_where_the_main_process_cannot_generate_alone():
    from backend.runs.worker import sharded_weights

    # sharded weights over several processes: a forward needs every rank, the others wait at the probe
    assert sharded_weights("fsdp", None, 2) == "FSDP shards the weights over 2 processes"
    assert sharded_weights("DEEPSPEED", 3, 4) == "DeepSpeed ZeRO-3 shards the weights over 4 processes"
    # a whole copy of the weights on the main process: it generates alone
    for strategy, stage, processes in (("ddp", None, 8), ("MULTI_GPU", None, 2), ("deepspeed", 2, 4),
                                       ("fsdp", None, 1), ("deepspeed", 3, 1)):
        assert sharded_weights(strategy, stage, processes) is None


def test_a_recent_step_overrules_a_stale_worker_beat(tmp_path):
    from backend.runs.stall import WORKER_STALE_S

    store = RunStore(tmp_path)
    run = store.create_run(build_config({"mode": "sft"}))
    now = time.time()
    # the beat thread starved (a long call holding the GIL) while steps still finish: progress says it lives
    store.update_run(run.id, status="running", worker_pid=123, worker_beat_at=now - WORKER_STALE_S - 15,
                     train_started_at=now - 60, step=5, step_at=now - 1)
    assert stall_reason(store.get_run(run.id), now) is None
    store.update_run(run.id, step_at=now - WORKER_STALE_S - 10)  # neither moves: frozen
    assert "no heartbeat from the worker" in stall_reason(store.get_run(run.id), now)


def test_a_stalled_worker_restarted_before_its_first_checkpoint_starts_again_from_scratch(tmp_path):
    from backend.runs.supervisor import auto_resume_from

    store = RunStore(tmp_path)
    run = store.create_run(build_config({"mode": "sft", "stall_action": "restart"}))  # auto_resume 0
    store.update_run(run.id, status="running")
    store.finish_run(run.id, "failed", error="stalled: ...; the worker was ended to resume from its last checkpoint")
    ended = store.get_run(run.id)
    assert auto_resume_from(ended, 0, None, limit=3, from_scratch=True) == (
        0, "auto-resume 1/3 from scratch: no complete checkpoint yet")
    assert auto_resume_from(ended, 3, None, limit=3, from_scratch=True)[0] is None  # its restarts are counted
    assert auto_resume_from(ended, 0, (tmp_path / "checkpoint-4", 4), limit=3, from_scratch=True)[0] == 4
    # a worker that died by itself is not started again from nothing (auto_resume needs a checkpoint)
    assert auto_resume_from(ended, 0, None, limit=3)[0] is None


@pytest.mark.parametrize("mode", list(MODES))
def test_every_metric_a_mode_declares_is_one_its_trainer_logs(mode):
    """What a mode declares (spec.metrics) is what sweeps offer as objectives (backend.sweeps.spec.objective_metrics)
    and what Compare and the Runs tab chart first: each name must be written by the files that log the mode's
    metrics, so a new mode cannot offer an objective no run of it would ever record."""
    from backend.sweeps.spec import objective_metrics

    files = [*LOGGED[mode], "transformers/trainer.py", "backend/modes/training.py", f"backend/modes/{mode}.py"]
    text = "\n".join(_source(f) for f in files if f.startswith(("trl", "transformers")) or (ROOT / f).exists())
    missing = [n for n in MODES[mode].metrics if not _writes(text, n)]
    assert missing == [], (mode, missing)
    assert set(MODES[mode].metrics) <= set(objective_metrics(config_of(mode)))
