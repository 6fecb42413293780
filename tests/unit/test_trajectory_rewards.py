"""Trajectory reward sources (tool_used, tool_calls, tool_errors) on completions shaped like TRL 1.16's tool loop,
and how the RL samples and tools/* metrics show such completions."""
from types import SimpleNamespace

import pytest

from backend.modes.rl_common import SampleRecorder
from backend.rewards import RewardSourceConfig, build_reward_funcs, score_completions


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


# As GRPOTrainer._tool_call_loop leaves them: assistant turn with tool_calls, tool results, final assistant turn.
CALCULATED = [
    {"role": "assistant", "content": "Let me compute it.", "tool_calls": [call("calculator", expression="347 * 29")]},
    {"role": "tool", "name": "calculator", "content": "10063"},
    {"role": "assistant", "content": "<answer>10063</answer>"},
]
FAILED = [
    {"role": "assistant", "content": "", "tool_calls": [call("calculator", expression="1/0"),
                                                        call("search", query="x")]},
    {"role": "tool", "name": "calculator", "content": str({"error": "division by zero"})},
    {"role": "tool", "name": "search", "content": "no passages"},
    {"role": "assistant", "content": "I could not compute it."},
]
PLAIN = [{"role": "assistant", "content": "It is 10063."}]
BATCH = [CALCULATED, FAILED, PLAIN]


def scores(sources, completions=BATCH):
    return score_completions(sources, ["What is 347 * 29?"], completions, workspace=".")


def test_each_kind_scores_the_whole_trajectory():
    out = scores([{"type": "tool_used", "name": "any_tool", "params": {"tool": ""}},
                  {"type": "tool_used", "params": {"tool": "calculator"}},
                  {"type": "tool_used", "name": "python_used", "params": {"tool": "python"}},
                  {"type": "tool_calls"},
                  {"type": "tool_calls", "name": "searches", "params": {"tool": "search"}},
                  {"type": "tool_errors"},
                  {"type": "tool_errors", "name": "search_errors", "params": {"tool": "search"}}])["sources"]
    assert out == {"any_tool": [1.0, 1.0, 0.0], "tool_used": [1.0, 1.0, 0.0], "python_used": [0.0, 0.0, 0.0],
                   "tool_calls": [1.0, 2.0, 0.0], "searches": [0.0, 1.0, 0.0], "tool_errors": [0.0, 1.0, 0.0],
                   "search_errors": [0.0, 0.0, 0.0]}


def test_plain_text_and_an_error_given_as_a_dict_or_json():
    out = scores([{"type": "tool_used"}, {"type": "tool_calls"}, {"type": "tool_errors"}],
                 ["just text", [{"role": "tool", "name": "f", "content": {"error": "x"}},
                                {"role": "tool", "name": "f", "content": '{"error": "y"}'},
                                {"role": "tool", "name": "f", "content": "the error was mine"}]])["sources"]
    assert out == {"tool_used": [0.0, 0.0], "tool_calls": [0.0, 0.0], "tool_errors": [0.0, 2.0]}


def test_counts_are_costs_as_they_are():
    sources = [{"type": "tool_used", "name": "ok"},
               {"type": "tool_calls", "role": "cost", "budget": 1.5},
               {"type": "tool_errors", "role": "cost", "budget": 0.1}]
    assert [s.is_cost for s in map(RewardSourceConfig.model_validate, sources)] == [False, True, True]
    out = scores(sources)
    assert out["costs"] == {"tool_calls": [1.0, 2.0, 0.0], "tool_errors": [0.0, 1.0, 0.0]}
    assert out["total"] == [1.0, 1.0, 0.0]  # costs are left to the constraint's λ


def test_a_tool_name_that_no_model_could_call_is_refused():
    with pytest.raises(ValueError, match="params.tool"):
        RewardSourceConfig.model_validate({"type": "tool_calls", "params": {"tool": "calculator()"}})


def test_sources_take_trls_keywords():
    (f,) = build_reward_funcs([{"type": "tool_errors"}], ".")
    assert f(prompts=["p"] * 3, completions=BATCH, completion_ids=None, trainer_state=None, log_extra=None,
             log_metric=None, answer=["10063"] * 3) == [0.0, 1.0, 0.0]


class Sink:
    def __init__(self):
        self.rows = []

    def add_samples(self, run_id, step, rows):
        self.rows += rows


def run_batch(recorder, funcs, completions, step=0):
    logged = []
    for f in funcs:
        f(prompts=[[{"role": "user", "content": "What is 347 * 29?"}]] * len(completions), completions=completions,
          completion_ids=None, trainer_state=SimpleNamespace(global_step=step), log_extra=None,
          log_metric=lambda name, value: logged.append((name, value)))
    return dict(logged)


def test_samples_show_the_calls_the_results_and_the_final_answer_last():
    sink = Sink()
    recorder = SampleRecorder(sink, "run", logging_steps=1, is_main=True)
    funcs = recorder.wrap_all(build_reward_funcs([{"type": "tool_used"}], "."), [1.0])
    long_result = [CALCULATED[0], {"role": "tool", "name": "calculator", "content": "9" * 2000}, CALCULATED[2]]
    run_batch(recorder, funcs, [CALCULATED, FAILED, PLAIN, long_result])
    calculated, failed, plain, long = (r["completion"] for r in sink.rows)
    assert calculated == ("Let me compute it.\n→ calculator(expression='347 * 29')\n← calculator: 10063\n"
                          "<answer>10063</answer>")
    assert "→ calculator(expression='1/0')\n→ search(query='x')\n← calculator: {'error': 'division by zero'}" \
        in failed and failed.endswith("I could not compute it.")
    assert plain == "It is 10063."  # a single message reads as before
    assert len(long) < 700 and "9" * 500 + "…" in long and long.endswith("<answer>10063</answer>")


def test_tool_metrics_are_logged_for_tool_runs_only():
    recorder = SampleRecorder(Sink(), "run", logging_steps=1, is_main=False)  # every process logs its metrics
    funcs = recorder.wrap_all(build_reward_funcs([{"type": "tool_used"}, {"type": "tool_calls"}], "."), [1.0, 0.0])
    assert run_batch(recorder, funcs, [PLAIN, PLAIN]) == {}  # no tool traffic yet: nothing new
    assert run_batch(recorder, funcs, BATCH) == {
        "tools/calls_per_episode": 1.0, "tools/error_rate": 1 / 3, "tools/turns_per_episode": 5 / 3,
        "tools/episodes_using/calculator": 2 / 3, "tools/episodes_using/search": 1 / 3}
    later = run_batch(recorder, funcs, [PLAIN])  # once tools were seen, a batch without calls logs zeros
    assert later["tools/calls_per_episode"] == 0.0 and later["tools/episodes_using/search"] == 0.0


def test_a_shown_exchange_reads_back_into_its_messages():
    from backend.rewards.trajectory import parse_trajectory, trajectory_text

    exchange = [{"role": "assistant", "content": "Let me compute.",
                 "tool_calls": [{"type": "function",
                                 "function": {"name": "python", "arguments": {"code": "print(1)\nprint(2)"}}}]},
                {"role": "tool", "name": "python", "content": "1\n2"}, {"role": "assistant", "content": "2"}]
    text = trajectory_text(exchange)
    assert text.splitlines()[2:4] == ["← python: 1", "  2"]  # a result's further lines indented
    assert parse_trajectory(text) == exchange
    assert parse_trajectory("an answer\nover two lines") == "an answer\nover two lines"  # no call: text as it is
    cut = parse_trajectory("→ search(query='a long …)\nno")  # arguments shown cut short stay their text
    assert cut[0]["tool_calls"][0]["function"] == {"name": "search", "arguments": "query='a long …"}


def test_the_playground_scores_a_pasted_exchange_as_its_messages_and_answers_through_the_tools(workspace,
                                                                                                tiny_model):
    from backend import playground
    from backend.chat import ChatModels
    from backend.models import ModelCache, ModelRef
    from tests.unit.test_chat_tools import QUESTION, Scripted

    prompts = [playground.PromptRow(1, [{"role": "user", "content": QUESTION}], {"answer": "10063"})]
    pasted = ["→ calculator(expression='347 * 29')\n← calculator: 10063\n10063", "10063"]
    sources = [{"type": "tool_used"}, {"type": "numeric_match", "params": {"column": "answer"}}]
    result = playground.score(sources, prompts, pasted, workspace, groups=[0, 0])
    assert [r.scores["tool_used"] for r in result.rows] == [1.0, 0.0]
    assert [r.scores["numeric_match"] for r in result.rows] == [1.0, 1.0]  # the final answer, as in training
    assert result.rows[0].completion == pasted[0]  # the table shows the exchange

    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    scripted = Scripted(loaded.tokenizer, ['<tool_call>\n{"name": "calculator", "arguments": {"expression": '
                                           '"347 * 29"}}\n</tool_call>', "10063"])
    cache = SimpleNamespace(spec=None, get=lambda spec: (scripted, loaded.tokenizer))
    setting = playground.ToolSetting([{"type": "calculator"}], "chatml-tools", 2, workspace)
    *_, last = playground.generate_completions([p.prompt for p in prompts], "scripted", 1, 16, temperature=0,
                                               cache=cache, tools=setting)
    assert last.completions == [pasted[0]]  # the call, its result from the real calculator, the answer
    assert loaded.tokenizer.chat_template is not None and getattr(loaded.tokenizer, "response_template", None) is None
    with pytest.raises(playground.PlaygroundError, match="tools: .*missing"):
        list(playground.generate_completions(["q"], "scripted", 1, 4, cache=cache, tools=playground.ToolSetting(
            [{"type": "search", "params": {"folder": "missing"}}], "chatml-tools", 2, workspace)))
