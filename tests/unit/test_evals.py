"""Evaluation without generating: the spec and its short CLI forms, every scorer on its edge cases, the
summary's numbers against a hand count, and the checks that refuse a bad evaluation before anything loads."""
import json

import pytest

from backend.evals import (EvalError, build_spec, examples, format_table, parse_scorer, plan, summarize,
                           write_predictions)
from backend.evals.results import bootstrap_interval, table_rows
from backend.evals.scorers import build_scorers, reference_text
from backend.evals.spec import ScorerConfig
from backend.evals.store import Answer
from backend.runs.store import RunStore


def score(kind_or_config, answers, references, **columns):
    config = kind_or_config if isinstance(kind_or_config, ScorerConfig) else ScorerConfig(type=kind_or_config)
    scorer = build_scorers([config], "answer", workspace=".")[0]
    return scorer(["p"] * len(answers), answers, {"answer": references, **columns}), scorer


def test_short_scorer_forms_become_full_configs():
    assert parse_scorer("numeric_match:solution").params["column"] == "solution"
    assert parse_scorer("rouge").type == "rouge_l"
    assert parse_scorer("bleu:target").column == "target"
    assert parse_scorer("regex:^\\d+$").params["pattern"] == "^\\d+$"
    assert parse_scorer("blocklist:darn,heck").params["keywords"] == ["darn", "heck"]
    assert parse_scorer('{type: length, params: {target: 5}}').params["target"] == 5
    with pytest.raises(ValueError, match="unknown kind 'rogue'"):
        parse_scorer("rogue")


def test_a_spec_refuses_a_zero_limit_and_several_greedy_samples():
    with pytest.raises(EvalError, match="limit: 0 rows evaluates nothing"):
        build_spec({"models": ["m"], "dataset": "d", "limit": 0})
    with pytest.raises(EvalError, match="needs sampling"):
        build_spec({"models": ["m"], "dataset": "d", "generation": {"samples": 4}})
    with pytest.raises(EvalError, match="a metric takes no params"):
        build_spec({"models": ["m"], "dataset": "d", "scorers": [{"type": "rouge_l", "params": {"x": 1}}]})


def test_rouge_l_on_identical_empty_and_chinese_text():
    scores, _ = score("rouge_l", ["the cat sat", "", "我爱北京天安门", "北京"], ["the cat sat", "the cat sat",
                                                                              "我爱北京天安门", "我爱北京天安门"])
    assert scores[0] == pytest.approx(1.0) and scores[1] == 0.0 and scores[2] == pytest.approx(1.0)
    assert 0 < scores[3] < 1  # one word of jieba's four (我 / 爱 / 北京 / 天安门): segmented, not dropped


def test_math_verify_accepts_equal_forms_and_message_answers():
    scores, _ = score("math", ["\\boxed{3/4}", "0.75", "so it is 72 apples", "71",
                               [{"role": "assistant", "content": "The answer is $\\frac{1}{2}$"}]],
                      ["0.75", "\\frac{3}{4}", "Natalia sold 48 + 24 = 72 clips.\n#### 72", "72", "0.5"])
    assert scores == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert reference_text("… so 72.\n#### 72") == "72"


def test_bleu_and_chrf_are_fractions():
    scores, _ = score("bleu", ["the cat sat on the mat", "dog"], ["the cat sat on the mat"] * 2)
    assert scores[0] == pytest.approx(1.0) and scores[1] < 0.1
    chrf, _ = score("chrf", ["the cat", ""], ["the cat"] * 2)
    assert chrf[0] == pytest.approx(1.0) and chrf[1] == 0.0


def test_a_scorer_that_raises_on_one_row_loses_only_that_row(tmp_path):
    (tmp_path / "picky.py").write_text("def reward(prompts, completions, **kw):\n"
                                       "    if any(c == 'boom' for c in completions):\n"
                                       "        raise ValueError('cannot score boom')\n"
                                       "    return [float(len(c)) for c in completions]\n")
    config = ScorerConfig(type="python", params={"file": "picky.py"})
    scorer = build_scorers([config], "", workspace=tmp_path)[0]
    assert scorer(["p"] * 3, ["ab", "boom", "abcd"], {}) == [2.0, None, 4.0]
    assert list(scorer.errors) == [1] and "raised ValueError: cannot score boom (line 3)" in scorer.errors[1]


def test_a_gated_scorer_scores_only_the_answers_its_gate_passes_and_a_bad_gate_is_named():
    from backend.evals.scorers import check_scorers

    configs = [parse_scorer("numeric_match:answer"),
               ScorerConfig(type="length", name="brief", when="numeric_match", params={"target": 1, "tolerance": 10})]
    right, brief = build_scorers(configs, "answer", workspace=".")
    answers = ["16", "7 + 9 = 16", "15"]
    assert right(["p"] * 3, answers, {"answer": ["16"] * 3}) == [1.0, 1.0, 0.0]
    assert brief(["p"] * 3, answers, {"answer": ["16"] * 3}) == [1.0, pytest.approx(0.6), 0.0]
    backwards = configs[::-1]
    assert check_scorers(backwards, ["prompt", "answer"], "answer", ".") == [
        "scorers.0 (brief): when: 'numeric_match' is not an earlier reward-source scorer; name a reward source "
        "listed before it"]
    with pytest.raises(EvalError, match="scorer brief: when: 'numeric_match' is not an earlier"):
        build_scorers(backwards, "answer", workspace=".")
    with pytest.raises(ValueError, match="a metric takes no params or when"):
        ScorerConfig(type="rouge_l", when="numeric_match")


def answer(model, row, score, sample=0, **extra):
    return Answer(model, row, sample, f"prompt {row}", "ref", f"answer {model}/{row}", {"ok": score, **extra}, {})


def test_the_summary_matches_a_hand_count():
    rows = [answer(0, r, s) for r, s in enumerate([1, 0, 0, 1])] + [answer(1, r, s) for r, s in enumerate([1, 1, 0, 0])]
    summary = summarize(rows, ["base", "tuned"], ["ok"], ["ok"], "ok")
    base, tuned = summary.models
    assert base.cells["ok"].mean == 0.5 and tuned.cells["ok"].mean == 0.5
    assert (tuned.wins, tuned.ties, tuned.losses) == (1, 2, 1) and tuned.win_rate == 0.5
    low, high = bootstrap_interval([1, 0, 0, 1])
    assert 0 <= low <= 0.5 <= high <= 1
    header, table = table_rows(summary)
    assert header == ["model", "rows", "ok", "win / tie / loss vs base"]
    assert table[1][3] == "0.50 (1 / 2 / 1)"
    verdicts = [x["verdict"] for x in examples(rows, ["base", "tuned"], "ok", True)]
    assert verdicts == ["both wrong" if v == "-" else v for v in ["same", "B better", "both wrong", "A better"]]
    assert [x["row"] for x in examples(rows, ["base", "tuned"], "ok", True, category="B better")] == [2]
    assert "tuned" in format_table(summary)


def test_pass_at_k_counts_a_prompt_once_any_sample_is_right():
    rows = [answer(0, 0, 0, 0), answer(0, 0, 1, 1), answer(0, 1, 0, 0), answer(0, 1, 0, 1)]
    cell = summarize(rows, ["m"], ["ok"], ["ok"], "ok", samples=2).models[0].cells["ok"]
    assert cell.mean == 0.25 and cell.pass_at_k == 0.5


def test_predictions_are_written_as_jsonl_and_parquet(tmp_path):
    import pandas as pd

    rows = [answer(0, 0, 1), answer(1, 0, 0)]
    lines = write_predictions(rows, ["base", "tuned"], tmp_path / "p.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["answer[base]"] == "answer 0/0" and record["scores[tuned]"] == {"ok": 0}
    frame = pd.read_parquet(write_predictions(rows, ["base", "tuned"], tmp_path / "p.parquet"))
    assert list(frame["answer[tuned]"]) == ["answer 1/0"]


def refusal(tmp_path, **data) -> str:
    spec = build_spec({"models": ["smollm2-135m-instruct"], "dataset": "demo-math", **data})
    with pytest.raises(EvalError) as e:
        plan(RunStore(tmp_path), spec)
    return str(e.value)


def test_bad_evaluations_are_refused_before_anything_loads(tmp_path, tiny_model):
    assert "prompt_column: demo-math has no column 'question' (columns: prompt, answer)" in \
        refusal(tmp_path, prompt_column="question")
    assert "scorers.0 (rouge_l): the evaluation set has no column 'target'" in \
        refusal(tmp_path, scorers=[{"type": "rouge_l", "column": "target"}])
    assert "scorers.0 (numeric_match): the dataset has no column 'solution'" in \
        refusal(tmp_path, scorers=[{"type": "numeric_match", "params": {"column": "solution"}}])
    (tmp_path / "q.jsonl").write_text('{"text": "a"}\n')
    assert "has none of the usual prompt columns" in refusal(tmp_path, dataset="q.jsonl")
    assert "models.1 (no/such/folder)" in refusal(tmp_path, models=[str(tiny_model), "no/such/folder"])
    assert "models.0 (base): `base` means the base model of the other models" in refusal(tmp_path, models=["base"])
    assert "dataset: no run with id" in refusal(tmp_path, dataset="heldout:20260101-000000-abcd")


def test_the_evaluate_form_names_a_bad_scorer_line_and_a_run_prefills_its_base_and_held_out_rows(tmp_path):
    from app.eval_render import parse_scorer_lines, prefill, progress_html
    from backend.config import build_config

    assert [s["type"] for s in parse_scorer_lines("rouge_l\n\n# a comment\nnumeric_match:answer")] == \
        ["rouge_l", "numeric_match"]
    with pytest.raises(ValueError, match=r"scorers, line 2 \(rogue\): .*unknown kind"):
        parse_scorer_lines("rouge_l\nrogue")
    store = RunStore(tmp_path)
    source = {"type": "numeric_match", "params": {"column": "answer"}}
    grpo = store.create_run(build_config({"mode": "grpo", "dataset": "demo-math", "reward_sources": [source]}))
    filled = prefill(store, grpo.id)
    assert filled["models"] == ["base", f"run:{grpo.id}"] and filled["dataset"] == "demo-math"
    assert json.loads(filled["scorers"])["type"] == "numeric_match"  # judged by what it was trained on
    cost = {"type": "blocklist", "role": "cost", "budget": 0.1, "params": {"keywords": ["darn"]}}
    safe = store.create_run(build_config({"mode": "grpo", "dataset": "demo-math", "reward_sources": [source, cost]}))
    lines = parse_scorer_lines(prefill(store, safe.id)["scorers"])
    assert [(s["type"], s["weight"]) for s in lines] == [("numeric_match", 1.0), ("blocklist", 0.0)]
    sft = store.create_run(build_config({"mode": "sft", "eval": {"split": 0.1}}))
    assert prefill(store, sft.id)["dataset"] == f"heldout:{sft.id}" and prefill(store, sft.id)["scorers"] == "rouge_l"
    assert "No evaluation selected" in progress_html(None) and "未选择评估" in progress_html(None, "zh")


def test_the_results_and_examples_tables_speak_the_session_language():
    from app.eval_render import examples_frame, results_frame, win_figure
    from backend.evals.results import summarize
    from backend.evals.store import Answer

    answers = [Answer(m, r, 0, f"q{r}", "1", "a", {"numeric_match": float((m + r) % 2)}, {})
               for m in range(2) for r in range(2)]
    summary = summarize(answers, ["base", "run:x"], ["numeric_match"], ["numeric_match"], "numeric_match")
    zh = results_frame(summary, "zh")
    assert list(zh.columns) == ["模型", "行数", "numeric_match", "对 base 的胜 / 平 / 负"] and zh.iloc[0, -1] == "基线"
    assert list(results_frame(summary).columns)[:2] == ["model", "rows"]
    examples = examples_frame(answers, summary, "all", 1, "zh")
    assert list(examples.columns)[:2] == ["行", "判定"] and set(examples["判定"]) == {"A 更好", "B 更好"}
    assert [t.name for t in win_figure(summary, "zh").data] == ["胜", "平", "负"]


def test_a_run_shows_the_evaluations_it_took_part_in(tmp_path):
    from app.eval_render import run_evaluations_markdown
    from backend.config import build_config
    from backend.evals.store import create_eval, finish_eval, save_answers

    store = RunStore(tmp_path)
    run = store.create_run(build_config({"mode": "sft"}))
    assert run_evaluations_markdown(store, run.id) == ""
    spec = build_spec({"models": ["base", f"run:{run.id}"], "dataset": "demo-math",
                       "scorers": [{"type": "exact_match", "name": "ok"}]})
    e = create_eval(store, spec, {"models": ["base", "tuned"]}, total=4)
    save_answers(store, e.id, [answer(0, 0, 0), answer(0, 1, 1), answer(1, 0, 1), answer(1, 1, 1)])
    assert run_evaluations_markdown(store, run.id) == ""  # still running: nothing to show yet
    finish_eval(store, e.id, "completed")
    text = run_evaluations_markdown(store, run.id)
    assert f"`{e.id}` on demo-math (2 rows): ok 1.000 (baseline 0.500); vs base: 1 win / 1 tie / 0 loss" in text
    zh = run_evaluations_markdown(store, run.id, "zh")
    assert f"`{e.id}` 在 demo-math 上（2 行）：ok 1.000（基线 0.500）；对比 base：1 胜 / 1 平 / 0 负" in zh
