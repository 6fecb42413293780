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
    assert (prefill(store, sft.id)["tools"], prefill(store, sft.id)["chat_template"]) == ([], "model")
    tools = store.create_run(build_config({"mode": "grpo", "dataset": "demo-calculator", "tools": [{"type": "calculator"}],
                                           "data": {"chat_template": "chatml-tools"}, "reward_sources": [source],
                                           "rl": {"max_tool_calling_iterations": 2}}))
    filled = prefill(store, tools.id)  # judged with the tools, template and turns it trained with
    assert [t["type"] for t in filled["tools"]] == ["calculator"]
    assert (filled["chat_template"], filled["tool_turns"], filled["environment"]) == ("chatml-tools", 2, "")
    game = store.create_run(build_config({"mode": "grpo", "dataset": "demo-guess-number", "environment": "guess_number",
                                          "data": {"chat_template": "chatml-tools"},
                                          "reward_sources": [{"type": "environment", "name": "won"}]}))
    filled = prefill(store, game.id)  # it plays the environment it trained in, scored by it
    assert filled["environment"] == "guess_number" and json.loads(filled["scorers"])["type"] == "environment"
    assert "No evaluation selected" in progress_html(None) and "未选择评估" in progress_html(None, "zh")


def test_the_note_next_to_the_set_says_plainly_whether_a_run_trained_on_it(tmp_path):
    from app.eval_render import dataset_note, prefill
    from backend.config import build_config

    store = RunStore(tmp_path)
    plain = store.create_run(build_config({"mode": "sft", "dataset": "demo-math", "name": "plain"}))
    filled = prefill(store, plain.id)
    note = dataset_note(store, filled["models"], filled["dataset"])
    assert filled["dataset"] == "demo-math" and 'id="eval-dataset-training"' in note
    assert "This is the data plain trained on" in note and "held nothing out" in note
    assert "训练所用的数据" in dataset_note(store, [f"run:{plain.id}@2"], "demo-math", "zh")  # a checkpoint too
    assert dataset_note(store, ["base", f"run:{plain.id}"], "demo-sft-instructions") == ""  # another set
    held = store.create_run(build_config({"mode": "sft", "name": "held", "eval": {"split": 0.1}}))
    note = dataset_note(store, ["base", f"run:{held.id}"], prefill(store, held.id)["dataset"])
    assert "The 10% of demo-sft-instructions that held held out" in note and "never trained" in note
    assert "eval-dataset-training" not in note
    own = store.create_run(build_config({"mode": "sft", "name": "own", "eval": {"dataset": "demo-math"}}))
    assert prefill(store, own.id)["dataset"] == "demo-math"
    assert "evaluation set of own" in dataset_note(store, [f"run:{own.id}"], "demo-math")


def test_the_progress_and_the_start_line_say_what_the_evaluation_is_doing_until_it_ends():
    from app.eval_render import progress_html, status_message
    from backend.evals.store import Evaluation

    spec = build_spec({"models": ["base", "run:x"], "dataset": "demo-math"})

    def ev(status, message, done=0, error=None):
        return Evaluation("eval-1", "mine", status, spec, 0.0, done=done, total=6, message=message, error=error)

    assert "waiting for a free slot (0/6 answers)" in progress_html(ev("queued", "Queued"))
    loading = progress_html(ev("running", "Loading base (tiny)"))
    assert "loading base (tiny) and generating its first answers… (0/6 answers)" in loading and "Loading" not in loading
    assert "wb-busy" in loading  # nothing answered yet: the bar moves
    going = progress_html(ev("running", "run-x: 4/6 answers, about 12 s left", 4))
    assert "generating answers with run-x, about 12 s left (4/6 answers)" in going
    assert "正在用 run-x 生成回答，约剩 12 s" in progress_html(ev("running", "run-x: 4/6 answers, about 12 s left", 4), "zh")
    assert "completed (6/6 answers)" in progress_html(ev("completed", "Completed: 6 answers", 6))
    assert "failed — CUDA out of memory" in progress_html(ev("failed", "Failed", 2, "CUDA out of memory"))
    assert status_message(ev("running", "Starting")) == "Started **mine** (`eval-1`): running."
    assert status_message(ev("completed", "Completed: 6 answers", 6)) == "Evaluation **mine** (`eval-1`): completed."
    assert status_message(ev("failed", "Failed", 0, "boom")).endswith("failed. boom")
    assert "已完成" in status_message(ev("completed", "", 6), "zh")


def test_the_results_and_examples_tables_speak_the_session_language():
    from app.eval_render import examples_html, results_frame, win_figure, win_note
    from backend.evals.results import summarize
    from backend.evals.store import Answer

    answers = [Answer(m, r, 0, f"q{r}", "1", "a", {"numeric_match": float((m + r) % 2)}, {})
               for m in range(2) for r in range(2)]
    summary = summarize(answers, ["base", "run:x"], ["numeric_match"], ["numeric_match"], "numeric_match")
    zh = results_frame(summary, "zh")
    assert list(zh.columns) == ["模型", "行数", "numeric_match", "对基线的胜率（胜 / 平 / 负）"] and zh.iloc[0, -1] == "基线"
    en = results_frame(summary)
    assert list(en.columns) == ["model", "rows", "numeric_match", "win rate vs baseline (win / tie / loss)"]
    assert en.iloc[1, -1] == "0.50 (1 / 0 / 1)"  # wins plus half the ties, over the rows both answered
    note = win_note(summary)
    assert "**Win rate** of a model over the baseline (base)" in note and "`numeric_match` score is higher" in note
    assert "a tie counting half" in note and "胜率" in win_note(summary, "zh")
    assert "weighted sum" in win_note(summarize(answers, ["base", "run:x"], ["reward"], [], "reward"))
    assert win_note(summarize(answers[:2], ["base"], ["numeric_match"], [], "numeric_match")) == ""  # no comparison
    cards = examples_html(answers, summary, "all", 1, "zh")
    assert cards.count('class="wb-ex-card"') == 2 and "A 更好" in cards and "B 更好" in cards and ">行 1<" in cards
    assert "<b>B</b> · run:x" in cards and "numeric_match=1.00" in cards
    assert "此类别中没有样例" in examples_html(answers, summary, "both wrong", 1, "zh")
    long = [Answer(m, 0, 0, "<q>", "1", "x" * 3000, {"numeric_match": 1.0}, {}) for m in range(2)]
    wide = examples_html(long, summarize(long, ["a", "b"], ["numeric_match"], [], "numeric_match"), "all", 1)
    assert "&lt;q&gt;" in wide and "x" * 3000 in wide  # escaped, and whole: the card wraps it (EXAMPLES_CSS)
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
