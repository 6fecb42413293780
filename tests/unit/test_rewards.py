"""Reward sources: the schema and its messages, each rule's behaviour, fusion, custom Python files,
the reward model and the embedding similarity, all through TRL's reward-function calling convention."""
import inspect
import json
import math
import re

import pytest

from backend.config import ConfigError, apply_overrides, build_config
from backend.rewards import (RewardSourceConfig, RewardSourceError, build_reward_funcs, example_source,
                             reward_weights, score_completions, source_names, validate_sources)
from backend.rewards.custom import RewardFunctionError
from backend.rewards.spec import PARAM_MODELS, SOURCE_KINDS


def one(kind, workspace, params=None, **extra):
    (f,) = build_reward_funcs([{"type": kind, "params": params or {}, **extra}], workspace)
    return f


def call(f, completions, prompts=None, **columns):
    """Call like TRL 1.16's GRPOTrainer does: keywords only, with its own extras next to the columns."""
    prompts = prompts if prompts is not None else ["p"] * len(completions)
    return f(prompts=prompts, completions=completions, completion_ids=None, trainer_state=None,
             log_extra=lambda *a: None, log_metric=lambda *a: None, **columns)


def chat(text):
    return [{"role": "assistant", "content": text}]


# ---- schema ----

def test_param_errors_name_the_source_the_parameter_and_what_it_is_for():
    with pytest.raises(ConfigError) as exc:
        build_config({"reward_sources": [{"type": "length", "params": {"target": 5}}, {"type": "regex"}]})
    assert exc.value.errors == ["reward_sources.1: regex source: params.pattern: missing — a regular expression "
                                "the completion must match, e.g. <answer>.*?</answer>"]


def test_param_typos_out_of_range_values_and_bad_patterns_are_explained():
    def error(source):
        with pytest.raises(ValueError) as exc:
            RewardSourceConfig.model_validate(source)
        return str(exc.value)

    assert "params.targt: unknown parameter; did you mean 'target'?" in error(
        {"type": "length", "params": {"target": 5, "targt": 5}})
    assert "params.tolerance: Input should be greater than 0 (got -1)" in error(
        {"type": "length", "params": {"target": 5, "tolerance": -1}})
    assert "params.pattern: not a valid regular expression" in error({"type": "regex", "params": {"pattern": "("}})
    assert "unknown key 'wieght'; did you mean 'weight'?" in error({"type": "repetition", "wieght": 2})
    assert "finite" in error({"type": "repetition", "weight": float("inf")})
    assert "params.function: String should match pattern" in error(
        {"type": "python", "params": {"file": "r.py", "function": "os.system"}})


def test_every_param_has_a_title_and_help_and_every_kind_has_a_valid_example():
    assert set(PARAM_MODELS) == set(SOURCE_KINDS)
    for kind, model in PARAM_MODELS.items():
        for name, info in model.model_fields.items():
            assert info.title and info.description, (kind, name)
        RewardSourceConfig.model_validate(example_source(kind))


def test_params_are_stored_with_their_defaults_and_lists_may_be_typed_as_text():
    s = RewardSourceConfig(type="blocklist", params={"keywords": "foo, bar baz"})
    assert s.params == {"keywords": ["foo", "bar baz"], "penalty": 1.0, "count": "each"}
    assert RewardSourceConfig(type="regex", params={"pattern": "x", "flags": "dotall, ignorecase"}).params["flags"] \
        == ["dotall", "ignorecase"]


def test_set_takes_a_yaml_list_of_sources():
    data = apply_overrides({"mode": "grpo", "per_device_train_batch_size": 2},
                           ["reward_sources=[{type: length, params: {target: 50}}, {type: regex, weight: -0.5, "
                            "params: {pattern: '<answer>.*?</answer>'}}]"])
    c = build_config(data)
    assert [(s.type, s.weight) for s in c.reward_sources] == [("length", 1.0), ("regex", -0.5)]
    assert c.reward_sources[0].params["target"] == 50
    assert build_config({}).reward_sources == [] and build_config({"reward_sources": ""}).reward_sources == []


def test_names_are_unique_and_weights_follow_the_sources():
    sources = [{"type": "length", "params": {"target": 3}}, {"type": "length", "params": {"target": 9}},
               {"type": "regex", "name": "format", "weight": 0.5, "params": {"pattern": "x"}},
               {"type": "repetition", "name": "length_2", "weight": 0}]
    assert source_names(sources) == ["length", "length_3", "format", "length_2"]
    assert reward_weights(sources) == [1.0, 1.0, 0.5, 0.0]
    funcs = build_reward_funcs(sources, "/nonexistent")
    assert [f.__name__ for f in funcs] == source_names(sources)


def test_functions_take_trls_arguments():
    from trl.trainer.utils import get_callable_name, is_async_callable

    f = one("length", "/tmp", {"target": 2})
    params = inspect.signature(f).parameters
    assert list(params)[:4] == ["prompts", "completions", "completion_ids", "trainer_state"]
    assert get_callable_name(f) == "length" and not is_async_callable(f)


# ---- rules ----

def test_length_scores_one_at_the_target_falling_linearly_to_zero(workspace):
    f = one("length", workspace, {"target": 4, "tolerance": 0.5})
    assert call(f, ["a b c d", "a b c", "a b", "", "a b c d e f g"]) == [1.0, 0.5, 0.0, 0.0, 0.0]
    assert call(f, [chat("a b c d")]) == [1.0]
    chars = one("length", workspace, {"target": 10, "unit": "characters", "tolerance": 1})
    assert call(chars, ["x" * 10, "x" * 15]) == [1.0, 0.5]
    tokens = one("length", workspace, {"target": 4, "unit": "tokens"})
    assert call(tokens, ["x" * 16]) == [1.0]  # ≈ 4 characters per token without ids
    assert tokens(prompts=["p"], completions=["x"], completion_ids=[[1, 2, 3, 4]]) == [1.0]


def test_regex_search_and_fullmatch(workspace):
    f = one("regex", workspace, {"pattern": "<answer>.*?</answer>", "flags": ["dotall"]})
    assert call(f, ["so <answer>\n4</answer>", "4", "", chat("<answer>4</answer>")]) == [1.0, 0.0, 0.0, 1.0]
    full = one("regex", workspace, {"pattern": r"<answer>\d+</answer>", "match": "fullmatch"})
    assert call(full, [" <answer>42</answer>\n", "x <answer>42</answer>"]) == [1.0, 0.0]
    case = one("regex", workspace, {"pattern": "yes", "flags": "ignorecase"})
    assert call(case, ["YES"]) == [1.0]


def test_exact_match_normalises_and_reads_the_answer_tag(workspace):
    f = one("exact_match", workspace, {"column": "answer"})
    got = call(f, ["  Paris ", "The answer: <answer>PARIS</answer>", "London", "", chat("paris"), "x"],
               answer=["paris", "Paris", "Paris", "Paris", "Paris", None])
    assert got == [1.0, 1.0, 0.0, 0.0, 1.0, None]
    strict = one("exact_match", workspace, {"ignore_case": False, "normalize_whitespace": False})
    assert call(strict, ["Paris", "paris", "Paris "], answer=["Paris"] * 3) == [1.0, 0.0, 0.0]


def test_a_missing_column_is_named_with_the_columns_available_at_the_first_call(workspace):
    f = one("exact_match", workspace, {"column": "solution"}, name="correct")
    with pytest.raises(RewardSourceError) as exc:
        call(f, ["x"], answer=["x"], question=["q"])
    msg = str(exc.value)
    assert "reward source 'correct' (exact_match)" in msg and "no column 'solution'" in msg
    assert "columns available: answer, question" in msg and "log_metric" not in msg
    with pytest.raises(RewardSourceError, match="no column 'answer'"):
        call(one("numeric_match", workspace), ["1"], answer=None)


def test_numeric_match_reads_commas_negatives_decimals_and_answer_tags(workspace):
    f = one("numeric_match", workspace, {"column": "answer"})
    completions = ["It is 1,234.", "so -7.5", "<answer>−3</answer> not 9", "about .5", "2 + 2 is four",
                   "", chat("<answer>$1,000,000</answer>"), "10-3 = 7", "12 apples"]
    answers = ["1234", -7.5, "-3", 0.5, "4", "1", "The total is #### 1000000", 7, None]
    assert call(f, completions, answer=answers) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, None]
    loose = one("numeric_match", workspace, {"tolerance": 0.01})
    assert call(loose, ["3.14159", "3.2"], answer=[3.14, 3.14]) == [1.0, 0.0]
    first = one("numeric_match", workspace, {"position": "first"})
    assert call(first, ["22, because 18 + 4 = 22", "18 + 4 = 22", "<answer>22</answer> from 18 + 4"],
                answer=[22] * 3) == [1.0, 0.0, 1.0]


def test_blocklist_matches_whole_words_case_insensitively(workspace):
    f = one("blocklist", workspace, {"keywords": ["bad", "very bad", "c++"], "penalty": 0.5})
    got = call(f, ["Bad, BAD and very   bad", "badly, a badge", "", "I like C++.", chat("bad")])
    assert got == [-1.5, 0.0, 0.0, -0.5, -0.5]
    any_hit = one("blocklist", workspace, {"keywords": "bad", "count": "any"})
    assert call(any_hit, ["bad bad bad", "good"]) == [-1.0, 0.0]


def test_repetition_penalises_a_loop_not_normal_text(workspace):
    f = one("repetition", workspace, {"n": 3})
    loop = "I think that I think that " * 10
    normal = "The quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire."
    s_loop, s_normal, s_empty, s_short = call(f, [loop, normal, "", "two words"])
    assert s_loop < -0.8 and s_normal == 0.0 and s_empty == 0.0 and s_short == 0.0
    assert call(f, [chat(loop)]) == [s_loop]


# ---- fusion (the playground) ----

def test_score_completions_sums_weighted_scores_and_counts_none_as_zero(workspace):
    sources = [{"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
               {"type": "regex", "name": "format", "weight": 0.5, "params": {"pattern": "<answer>.*?</answer>"}},
               {"type": "blocklist", "weight": 2, "params": {"keywords": ["dumb"]}},
               {"type": "length", "weight": 0, "params": {"target": 1}}]
    out = score_completions(sources, ["What is 2+2?"], ["<answer>4</answer>", "4, dumb", "five"], workspace,
                            answer=["4", "4", None])
    assert out["sources"] == {"correct": [1.0, 1.0, None], "format": [1.0, 0.0, 0.0],
                              "blocklist": [0.0, -1.0, 0.0], "length": [1.0, 0.0, 1.0]}
    assert out["total"] == [1.5, -1.0, 0.0]


def test_a_gated_source_scores_only_where_its_gate_scores_above_zero_and_reuses_the_gates_scores(workspace):
    sources = [{"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
               {"type": "length", "name": "brief", "when": "correct", "params": {"target": 1, "tolerance": 10}}]
    out = score_completions(sources, ["What is 7 + 9?"], ["16", "7 + 9 = 16", "15", "The sum is sixteen."],
                            workspace, answer=["16"] * 4)
    assert out["sources"]["brief"] == [1.0, pytest.approx(0.6), 0.0, 0.0]  # only the correct answers
    correct, brief = build_reward_funcs(sources, workspace)
    calls = []
    score = correct.score
    correct.score = lambda *a, **k: calls.append(1) or score(*a, **k)
    completions = ["16", "15"]
    assert correct(["p", "p"], completions, answer=["16", "16"]) == [1.0, 0.0]
    assert brief(["p", "p"], completions, answer=["16", "16"]) == [1.0, 0.0]
    assert len(calls) == 1  # a training step scores each source once: the gate's scores of that step are reused
    assert brief(["p"], ["16"], answer=["16"]) == [1.0] and len(calls) == 2  # other completions: scored anew


@pytest.mark.parametrize("sources, message", [
    ([{"type": "length", "when": "correct", "params": {"target": 1}},
      {"type": "numeric_match", "name": "correct", "params": {"column": "answer"}}],
     "reward_sources.0 (length).when: 'correct' is not an earlier reward source; name a reward source listed "
     "before it"),
    ([{"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
      {"type": "length", "when": "corect", "params": {"target": 1}}],
     "reward_sources.1 (length).when: 'corect' is not an earlier reward source; name one of: correct"),
    ([{"type": "numeric_match", "name": "correct", "params": {"column": "answer"}},
      {"type": "blocklist", "role": "cost", "budget": 0.1, "when": "correct", "params": {"keywords": ["x"]}}],
     "when: a cost counts on every completion"),
])
def test_a_gate_must_name_an_earlier_reward_source(sources, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config({"mode": "grpo", "dataset": "demo-math", "reward_sources": sources})


# ---- custom python ----

def test_a_python_file_in_the_workspace_is_called_with_trls_arguments(workspace):
    (workspace / "rewards").mkdir()
    (workspace / "rewards" / "mine.py").write_text(
        "def reward(prompts, completions, answer, trainer_state=None, log_metric=None, **kwargs):\n"
        "    assert callable(log_metric)\n"
        "    return [float(a in c) for c, a in zip(completions, answer)]\n"
        "def shout(completions, **kw):\n"
        "    return [1 if c.isupper() else None for c in completions]\n")
    f = one("python", workspace, {"file": "rewards/mine.py"})
    assert call(f, ["the answer is 4", "no"], answer=["4", "4"]) == [1.0, 0.0]
    g = one("python", workspace, {"file": str(workspace / "rewards/mine.py"), "function": "shout"})
    assert call(g, ["HI", "hi"]) == [1.0, None]
    # an environment run's live instances (of a class made at run time, in processes of their own) stay behind
    live = type("Game", (), {})
    assert call(g, ["HI", "hi"], environments=[live(), live()]) == [1.0, None]


def test_python_files_outside_the_workspace_are_refused_symlinks_included(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "evil.py"
    outside.write_text("def reward(completions, **kw):\n    return [1.0] * len(completions)\n")
    (workspace / "link.py").symlink_to(outside)
    for file in (str(outside), "../evil.py", "link.py"):
        with pytest.raises(RewardSourceError, match="outside the workspace"):
            one("python", workspace, {"file": file})
    with pytest.raises(RewardSourceError, match=r"^reward source 'mine' \(python\): python reward file"):
        one("python", workspace, {"file": "link.py"}, name="mine")
    with pytest.raises(RewardSourceError, match="not found"):
        one("python", workspace, {"file": "missing.py"})


def test_python_function_missing_raising_or_returning_the_wrong_length_is_explained(workspace):
    (workspace / "r.py").write_text(
        "def helper(x):\n    return x\n"
        "def boom(completions, **kw):\n    raise KeyError('label')\n"
        "def short(completions, **kw):\n    return [1.0]\n"
        "def text(completions, **kw):\n    return ['good'] * len(completions)\n")
    with pytest.raises(RewardSourceError, match=r"defines no function 'reward' \(it defines: helper, boom"):
        one("python", workspace, {"file": "r.py"})
    with pytest.raises(RewardFunctionError) as exc:
        call(one("python", workspace, {"file": "r.py", "function": "boom"}), ["a", "b"])
    assert f"boom() in {workspace / 'r.py'} raised KeyError: 'label' (line 4)" in str(exc.value)
    with pytest.raises(RewardFunctionError, match="returned 1 scores for 2 completions"):
        call(one("python", workspace, {"file": "r.py", "function": "short"}), ["a", "b"])
    with pytest.raises(RewardFunctionError, match="returned 'good' for completion 0"):
        call(one("python", workspace, {"file": "r.py", "function": "text"}), ["a"])
    (workspace / "bad.py").write_text("import no_such_module_here\n")
    with pytest.raises(RewardSourceError, match="loading .*bad.py failed: ModuleNotFoundError"):
        one("python", workspace, {"file": "bad.py"})


# ---- the pre-launch check ----

def test_validate_sources_lists_every_problem_without_running_code(workspace):
    (workspace / "r.py").write_text("import os\nos.remove('nothing-here')\ndef other(**kw):\n    return []\n")
    (workspace / "syntax.py").write_text("def reward(:\n")
    sources = [{"type": "exact_match", "params": {"column": "solution"}},
               {"type": "numeric_match", "params": {"column": "answer"}},
               {"type": "python", "params": {"file": "r.py"}},
               {"type": "python", "params": {"file": "syntax.py"}},
               {"type": "python", "params": {"file": "/etc/passwd.py"}},
               {"type": "reward_model", "params": {"model": "20990101-000000-abcd"}}]
    errors = validate_sources(sources, ["prompt", "answer"], workspace)
    assert errors[0] == "reward_sources.0 (exact_match): the dataset has no column 'solution' (columns: prompt, answer)"
    assert errors[1] == "reward_sources.2 (python): r.py defines no function 'reward'"
    assert errors[2].startswith("reward_sources.3 (python_2): syntax.py has a syntax error at line 1")
    assert "reward_sources.4 (python_3)" in errors[3] and "outside the workspace" in errors[3]
    assert "no run '20990101-000000-abcd'" in errors[4]
    assert len(errors) == 5
    assert validate_sources([{"type": "length", "params": {"target": 3}}], [], workspace) == []


# ---- reward model ----

@pytest.fixture(scope="module")
def tiny_rm(tiny_model, tmp_path_factory):
    """A LoRA SEQ_CLS adapter on the tiny model, saved the way a finished rm run saves it, and the merged
    classifier as a plain folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    root = tmp_path_factory.mktemp("rm")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    peft = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=2, target_modules=["q_proj", "v_proj"],
                                            modules_to_save=["score"]))
    peft.save_pretrained(root / "adapter")
    tokenizer.save_pretrained(root / "adapter")
    merged = peft.merge_and_unload()
    merged.save_pretrained(root / "classifier")
    tokenizer.save_pretrained(root / "classifier")
    return root


def _finished_rm_run(workspace, tiny_rm, mode="rm", status="completed"):
    import shutil

    from backend.runs.store import RunStore

    store = RunStore(workspace)
    run = store.create_run(build_config({"mode": mode}))
    shutil.copytree(tiny_rm / "adapter", store.run_dir(run.id) / "adapter")
    store.finish_run(run.id, status) if status != "queued" else None
    return run.id


def test_reward_model_scores_a_finished_rm_run_like_its_classifier_folder(workspace, tiny_rm):
    run_id = _finished_rm_run(workspace, tiny_rm)
    prompts = [[{"role": "user", "content": "Hi?"}]] * 3
    completions = [chat("Hello there."), chat("Go away."), chat("")]
    by_run = call(one("reward_model", workspace, {"model": run_id, "batch_size": 2}), completions, prompts)
    by_folder = call(one("reward_model", workspace, {"model": str(tiny_rm / "classifier")}), completions, prompts)
    assert all(isinstance(s, float) and math.isfinite(s) for s in by_run)
    assert by_run == pytest.approx(by_folder, abs=1e-4) and len(set(by_run)) == 3
    plain = call(one("reward_model", workspace, {"model": run_id}), ["Hello there.", "Go away."], ["Hi? ", "Hi? "])
    assert len(set(plain)) == 2
    assert validate_sources([{"type": "reward_model", "params": {"model": run_id}}], [], workspace) == []


def test_reward_model_errors_say_what_is_wrong(workspace, tiny_rm, tiny_model):
    def error(model):
        with pytest.raises(RewardSourceError) as exc:
            one("reward_model", workspace, {"model": model})
        return str(exc.value)

    assert "no run '20990101-000000-abcd'" in error("20990101-000000-abcd")
    assert "is a sft run, not a reward-model (rm) run" in error(_finished_rm_run(workspace, tiny_rm, mode="sft"))
    assert "is queued; use a run that completed" in error(_finished_rm_run(workspace, tiny_rm, status="queued"))
    assert "is failed" in error(_finished_rm_run(workspace, tiny_rm, status="failed"))
    assert "ForCausalLM with no classifier head" in error(str(tiny_model))
    assert "no config.json or adapter_config.json" in error(str(workspace))
    assert "nor a Hub id" in error("./no/such/folder")


def test_a_classifier_of_several_labels_scores_one_labels_probability_and_a_cost_is_a_flag(workspace, tiny_rm,
                                                                                          tiny_model):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = workspace / "toxicity"
    torch.manual_seed(1)
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_model, num_labels=2, id2label={0: "safe", 1: "toxic"}, label2id={"safe": 0, "toxic": 1})
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    texts = ["Hello there.", "Go away.", "You are great."]
    toxic = call(one("reward_model", workspace, {"model": str(folder), "label": "toxic"}), texts)
    safe = call(one("reward_model", workspace, {"model": str(folder), "label": "0"}), texts)
    assert all(0 < t < 1 for t in toxic) and [t + s for t, s in zip(toxic, safe)] == pytest.approx([1, 1, 1])
    cut = sorted(toxic)[1]  # the middle one: one text above, two at or below
    flags = call(one("reward_model", workspace, {"model": str(folder), "label": "toxic", "threshold": cut}), texts)
    assert flags == [float(t > cut) for t in toxic] and sum(flags) == 1
    raw = call(one("reward_model", workspace, {"model": str(tiny_rm / "classifier")}), texts)
    negated = call(one("reward_model", workspace, {"model": str(tiny_rm / "classifier"), "negate": True}), texts)
    assert negated == pytest.approx([-r for r in raw])
    for params, says in (({}, "2 labels (safe, toxic); a reward model has one output: set params.label"),
                         ({"label": "rude"}, "params.label 'rude': " + str(folder) + " has the labels safe, toxic")):
        with pytest.raises(RewardSourceError, match=re.escape(says)):
            one("reward_model", workspace, {"model": str(folder), **params})
    assert "one output; leave label empty" in validate_sources(
        [{"type": "reward_model", "params": {"model": str(tiny_rm / "classifier"), "label": "toxic"}}], [],
        workspace)[0]


# ---- embedding similarity ----

def test_embedding_similarity_prefers_a_paraphrase_to_an_unrelated_sentence(workspace):
    f = one("embedding_similarity", workspace, {"column": "reference"})
    reference = "The cat is sleeping on the sofa."
    para, unrelated, empty, no_ref = call(
        f, ["A cat naps on the couch.", "Quarterly tax filings are due in April.", "", chat("A cat naps.")],
        reference=[reference, reference, reference, None])
    assert para > unrelated + 0.3 and -1.0 <= unrelated <= 1.0 and para <= 1.0 + 1e-6
    assert empty == 0.0 and no_ref is None
    (same,) = call(f, [reference], reference=[reference])
    assert same == pytest.approx(1.0, abs=1e-5)


def test_the_minilm_model_is_located_inside_its_package_without_importing_it():
    import sys

    from backend.rewards.embedding import PACKAGE, model_dir

    path = model_dir()
    assert (path / "model.safetensors").is_file() and json.loads((path / "config.json").read_text())["hidden_size"] \
        == 384
    assert PACKAGE not in sys.modules
