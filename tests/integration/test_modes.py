"""Every training mode end to end through the real worker, on the tiny model: a few steps each, the mode's
own metrics in the store, a saved adapter, live samples for the RL modes, and wrong data refused up front.

Each mode's run is submitted when a test first asks for it (so `-k orpo` trains ORPO alone) and the runs go one
after another through the queue (one worker at a time).
"""
from pathlib import Path

import pytest

from backend.config import ConfigError, build_config
from backend.core.mode_registry import MODES
from backend.runs.jobs import submit_run
from backend.runs.preflight import preflight
from backend.runs.store import RunStore
from tests.step_timing import assert_each_step_is_split
from tests.waiting import wait_for

STEPS = 2
SOURCES = [
    {"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
    {"type": "regex", "name": "format", "weight": 0.5, "params": {"pattern": "<answer>.*?</answer>"}},
]
RUNS = {
    "rm": {"dataset": "demo-preference"},
    "dpo": {"dataset": "demo-preference", "dpo": {"beta": 0.2, "loss_type": "ipo"}},
    "kto": {"dataset": "demo-kto", "kto": {"desirable_weight": 1.5}},
    "grpo": {"dataset": "demo-math", "reward_sources": SOURCES},  # generates merged, reads each prompt once
    "rloo": {"dataset": "demo-math", "reward_sources": SOURCES, "rl": {"beta": 0.05}, "lora": {"dropout": 0.05}},
    "orpo": {"dataset": "demo-preference", "orpo": {"beta": 0.2}},
    "cpo": {"dataset": "demo-preference", "cpo": {"loss_type": "hinge", "cpo_alpha": 0.5}},
    "simpo": {"dataset": "demo-preference", "simpo": {"simpo_gamma": 0.8}},
    # the teacher: the finished DPO run, merged once (_Finished fills it in); every step on the student's samples
    "gkd": {"dataset": "demo-sft-instructions", "max_length": 128,
            "gkd": {"lmbda": 1.0, "beta": 0.3, "max_new_tokens": 8}},
    "online_dpo": {"dataset": "demo-math", "reward_sources": SOURCES,
                   "online_dpo": {"beta": 0.2, "missing_eos_penalty": 0.5}},
}
# What each trainer logs that the others do not (TRL 1.16 names)
KEYS = {
    "rm": {"loss", "accuracy", "margin", "mean_reward"},
    "dpo": {"loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
            "logps/chosen"},
    "kto": {"loss", "kl", "rewards/chosen", "rewards/rejected", "logps/chosen"},
    "grpo": {"reward", "reward_std", "rewards/correct/mean", "rewards/format/mean", "completions/mean_length"},
    "rloo": {"reward", "reward_std", "rewards/correct/mean", "rewards/format/mean", "kl"},
    "orpo": {"loss", "rewards/chosen", "rewards/accuracies", "rewards/margins", "nll_loss", "log_odds_ratio"},
    "cpo": {"loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "nll_loss"},
    "simpo": {"loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen"},
    "gkd": {"loss", "on_policy"},
    "online_dpo": {"loss", "objective/scores", "objective/scores_margin", "objective/kl", "rewards/accuracies",
                   "rewards/margins", "val/contain_eos_token", "rewards/correct/mean", "rewards/format/mean"},
}


def tiny_config(model, mode, **settings):
    base = {"mode": mode, "model": str(model), "max_steps": STEPS, "max_length": 64, "lora": {"r": 2},
            "per_device_train_batch_size": 2,
            # the tiny model's answers all score alike: the reward probe would stop RL runs before they train
            "rl": {"num_generations": 2, "max_completion_length": 8, "probe": "warn"}}
    for key, value in settings.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return build_config(base)


class _Finished(dict):
    """{mode: (store, run)}: a mode's run is trained (RUNS) the first time it is asked for, and kept."""

    def __init__(self, store: RunStore, model):
        super().__init__()
        self.store, self.model = store, model

    def __missing__(self, mode):
        settings = RUNS[mode]
        if MODES[mode].teacher_model:  # a finished run as the teacher, merged once
            settings = {**settings, "gkd": {**settings["gkd"], "teacher": f"run:{self['dpo'][1].id}"}}
        run_id = submit_run(self.store, tiny_config(self.model, mode, **settings)).id
        run = wait_for(lambda: not (r := self.store.get_run(run_id)).active and r, timeout=120, every=1,
                       what=f"the {mode} run to end")
        self[mode] = (self.store, run)
        return self[mode]


@pytest.fixture(scope="module")
def finished(tiny_model, tmp_path_factory):
    return _Finished(RunStore(tmp_path_factory.mktemp("modes")), tiny_model)


@pytest.mark.parametrize("mode", list(RUNS))
def test_each_mode_trains_logs_its_metrics_and_saves_an_adapter(finished, mode):
    store, run = finished[mode]
    assert run.status == "completed", run.error
    metrics = store.metrics_since(run.id)
    names = {m["name"] for m in metrics}
    assert KEYS[mode] <= names, f"{mode} lacks {KEYS[mode] - names}"
    assert sorted({m["step"] for m in metrics if m["name"] in KEYS[mode]}) == list(range(1, STEPS + 1))
    adapter = Path(run.adapter_path)
    assert (adapter / "adapter_model.safetensors").exists() and (adapter / "tokenizer_config.json").exists()


@pytest.mark.parametrize("mode", list(RUNS))
def test_each_metric_is_stored_once_per_step(finished, mode):
    """The trainer logs its last step again with the run's totals, repeating epoch (and the memory was read
    again): each (step, metric) pair is one row."""
    store, run = finished[mode]
    pairs = [(m["step"], m["name"]) for m in store.metrics_since(run.id)]
    repeated = sorted({p for p in pairs if pairs.count(p) > 1})
    assert not repeated, f"{mode} stores these more than once: {repeated}"
    assert {"epoch", "memory/peak_rss_gb"} <= {name for step, name in pairs if step == STEPS}


def test_mode_settings_reach_the_trainer(finished):
    import torch

    store, run = finished["dpo"]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert (args.beta, args.loss_type) == (0.2, ["ipo"])
    store, run = finished["kto"]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert args.desirable_weight == 1.5
    store, run = finished["grpo"]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert (args.num_generations, args.max_completion_length, args.reward_weights) == (2, 8, [1.0, 0.5])


@pytest.mark.parametrize("mode, expected", [
    ("orpo", {"beta": 0.2}),
    ("cpo", {"loss_type": "hinge", "cpo_alpha": 0.5, "beta": 0.1}),
    ("simpo", {"loss_type": "simpo", "simpo_gamma": 0.8, "beta": 2.0, "cpo_alpha": 0.0}),
])
def test_reference_free_preference_settings_reach_the_trainer(finished, mode, expected):
    import torch

    store, run = finished[mode]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert {key: getattr(args, key) for key in expected} == expected


def test_gkd_distils_the_teacher_on_the_students_own_answers(finished):
    import torch

    store, dpo = finished["dpo"]
    store, run = finished["gkd"]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert (args.lmbda, args.beta, args.max_new_tokens, args.teacher_model_name_or_path) == (1.0, 0.3, 8, None)
    assert [m["value"] for m in store.metrics_since(run.id) if m["name"] == "on_policy"] == [1.0] * STEPS
    (merged,) = (store.workspace / "models").glob(f"{dpo.id}-*")  # the teacher run, merged once
    assert f"[teacher 100%] Ready: {merged}" in (store.run_dir(run.id) / "train.log").read_text()
    assert run.config.referenced_runs() == {dpo.id}  # the teacher's run is kept from deletion while it is needed


def test_online_dpo_judges_its_pairs_by_the_reward_sources(finished):
    import torch

    store, run = finished["online_dpo"]
    args = torch.load(Path(run.adapter_path) / "training_args.bin", weights_only=False)
    assert (args.beta, args.max_new_tokens, args.missing_eos_penalty, args.reward_weights) == (0.2, 8, 0.5,
                                                                                              [1.0, 0.5])
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert "reward probe: " in log and "× 2 completion(s)" in log  # a pair per prompt, as training samples


@pytest.mark.parametrize("mode", ["grpo", "rloo", "online_dpo"])
def test_rl_runs_store_samples_with_each_sources_score(finished, mode):
    store, run = finished[mode]
    samples = store.samples_since(run.id)
    assert {s["step"] for s in samples} == set(range(1, STEPS + 1))
    for s in samples:
        assert "What is" in s["prompt"] and isinstance(s["completion"], str)
        assert set(s["rewards"]) == {"correct", "format"}
        assert s["total"] == pytest.approx(s["rewards"]["correct"] + 0.5 * s["rewards"]["format"])


@pytest.mark.parametrize("mode", ["grpo", "rloo"])
def test_rl_steps_log_their_time_split_into_generate_score_and_update(finished, mode):
    store, run = finished[mode]
    assert_each_step_is_split(store.metrics_since(run.id), list(range(1, STEPS + 1)))


def test_an_rl_run_generates_merged_and_reads_each_prompt_once_where_that_is_exact(finished):
    store, run = finished["grpo"]
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert "generation: the adapter merged into the weights (4 layers)" in log  # q_proj, v_proj of 2 layers
    assert "update: each prompt read once for all its completions" in log
    store, run = finished["rloo"]
    log = (store.run_dir(run.id) / "train.log").read_text()
    assert "generation: through the adapter (LoRA dropout 0.05 applies while generating" in log
    assert "update: each completion reads its prompt again (LoRA dropout 0.05 draws a mask" in log


def test_a_finished_reward_model_run_loads_as_a_scorer(finished):
    import torch

    from backend.models import load_reward_model

    store, run = finished["rm"]
    model, tokenizer = load_reward_model(store.run_dir(run.id))
    texts = ["The capital of France is Paris.", "Look it up yourself.", "Seven."]
    with torch.no_grad():
        scores = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits[:, 0]
    assert scores.shape == (3,) and torch.isfinite(scores).all()


@pytest.mark.parametrize("mode, dataset, missing", [
    ("rm", "demo-kto", "`chosen`, `rejected`"),
    ("dpo", "demo-math", "`chosen`, `rejected`"),
    ("kto", "demo-math", "`completion`, `label`"),
    ("grpo", "demo-sft-instructions", "`prompt`"),
    ("rloo", "demo-sft-instructions", "`prompt`"),
    ("ppo", "demo-sft-instructions", "`prompt`"),
    ("online_dpo", "demo-sft-instructions", "`prompt`"),
])
def test_a_dataset_of_the_wrong_format_is_refused_before_any_process_starts(tiny_model, workspace, mode, dataset,
                                                                           missing):
    config = tiny_config(tiny_model, mode, dataset=dataset, **({"reward_sources": SOURCES[1:]}
                                                               if MODES[mode].online_rl else {}))
    with pytest.raises(ConfigError) as err:
        preflight(config, workspace)
    (line,) = err.value.errors
    assert line.startswith(f"dataset: {dataset}: no {mode.upper()} format found")
    assert f"missing {missing}" in line and f"{mode.upper()} needs " in line


def test_a_run_trains_on_from_another_runs_model_merged_once(finished, tiny_model):
    """`model: run:<id>`: an SFT warm-up before GRPO, DPO after SFT. The first run's adapter is merged into its
    base once; the second run's adapter then loads on that (chat, evaluation, export), also once the first run
    is deleted."""
    from backend.models import ModelRef, load_model

    store, grpo = finished["grpo"]
    on = submit_run(store, tiny_config(f"run:{grpo.id}", "dpo", dataset="demo-preference"))
    run = wait_for(lambda: not (r := store.get_run(on.id)).active and r, timeout=120, what="the run on from grpo")
    assert run.status == "completed", run.error
    (merged,) = (store.workspace / "models").glob(f"{grpo.id}-*")  # named by the adapter it was merged from
    assert f"Ready: {merged}" in (store.run_dir(run.id) / "train.log").read_text()
    loaded = load_model(ModelRef.parse(f"run:{run.id}", store))
    assert Path(loaded.model.config._name_or_path) == merged  # its adapter sits on the merged model
    assert store.deletion_problems([grpo.id]) == []  # the merged copy is the workspace's, not the run's
    with pytest.raises(ConfigError) as refused:  # the run's own saved tokenizer is what a template must fit
        preflight(tiny_config(f"run:{grpo.id}", "sft", data={"chat_template": "llama-3"}), store.workspace)
    assert [e.split(":")[0] for e in refused.value.errors] == ["data.chat_template"]
    queued = build_config({"model": f"run:{grpo.id}@2"})
    assert queued.referenced_runs() == {grpo.id}  # a checkpoint of the run keeps the run from deletion too
    _, rm = finished["rm"]
    with pytest.raises(ConfigError) as refused:
        preflight(tiny_config(f"run:{rm.id}", "sft"), store.workspace)
    assert refused.value.errors == [f"model: run:{rm.id} is a rm run's reward model (a classifier); a run trains on "
                                    "from a causal language model: name an sft, dpo, kto, orpo, cpo, simpo, gkd, "
                                    "ppo, grpo, rloo or online_dpo run"]
