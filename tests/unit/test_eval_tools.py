"""Evaluating with tools: the spec's tools and chat template, the tool-use figures added next to the scores, the
checks that refuse a bad tool or template before any weights load, and one evaluation through the real tool loop
on the tiny model (which calls no tools: its answers are stored as text and every figure is 0)."""
import pytest

from backend.evals import EvalError, build_spec, plan
from backend.evals.job import judge_info
from backend.evals.spec import TOOL_FIGURES, parse_tool
from backend.runs.store import RunStore

RIGHT = {"type": "numeric_match", "name": "right", "params": {"column": "answer"}}


def spec_of(model, **data):
    return build_spec({"models": [str(model)], "dataset": "demo-calculator-eval", "limit": 2,
                       "scorers": [RIGHT], **data})


def test_the_spec_takes_tools_and_a_template_and_adds_the_tool_figures():
    spec = spec_of("m", tools=[{"type": "calculator"}], chat_template="chatml-tools", max_tool_calling_iterations=2)
    assert [t.name for t in spec.tools] == ["calculator"] and spec.chat_template == "chatml-tools"
    assert [(s.type, s.name, s.weight) for s in spec.scorers[1:]] == [(k, n, 0.0) for k, n in TOOL_FIGURES.items()]
    # stored and read back, nothing is added twice; the figures judge nothing, so numeric_match stays the judge
    assert build_spec(spec.model_dump()).scorers == spec.scorers
    assert judge_info(spec) == (["right", "used_tool", "tool_calls", "tool_errors"], "right", ["right"])
    # a kind the spec already scores is not added again
    own = spec_of("m", tools=[{"type": "calculator"}],
                  scorers=[{"type": "tool_used", "params": {"tool": "calculator"}}])
    assert [s.name for s in own.scorers] == ["", "tool_calls", "tool_errors"]
    assert spec_of("m").tools == [] and spec_of("m").scorers[1:] == []  # no tools: no figures, nothing else changes


def test_the_spec_refuses_an_unknown_template_and_two_tools_of_one_name():
    with pytest.raises(EvalError, match="chat_template: Input should be 'model', 'chatml', 'chatml-tools'"):
        spec_of("m", chat_template="chatml-tool")
    with pytest.raises(EvalError, match="tools.1: the name `calculator` is taken by tools.0"):
        spec_of("m", tools=[{"type": "calculator"}, {"type": "calculator"}])
    with pytest.raises(EvalError, match="tools.0.type: Input should be 'calculator'"):
        spec_of("m", tools=[{"type": "abacus"}])


def test_the_cli_short_form_of_a_tool():
    assert parse_tool("calculator").name == "calculator"
    search = parse_tool("search:folder=docs,top_k=5,name=docs")
    assert (search.name, search.params["folder"], search.params["top_k"]) == ("docs", "docs", 5)
    with pytest.raises(ValueError, match="'folder' has no ="):
        parse_tool("search:folder")


def test_a_bad_tool_or_a_template_without_tools_is_refused_before_anything_loads(tmp_path, tiny_model):
    store = RunStore(tmp_path)
    with pytest.raises(EvalError) as e:
        plan(store, spec_of(tiny_model, tools=[{"type": "search", "params": {"folder": "no-such-docs"}}],
                            chat_template="chatml-tools"))
    assert "tools.0 (search):" in str(e.value) and "no-such-docs" in str(e.value)
    with pytest.raises(EvalError) as e:  # SmolLM2's own template shows no tools
        plan(store, spec_of(tiny_model, tools=[{"type": "calculator"}]))
    assert "chat_template (models.0, tiny-test): tiny-test's own template does not show tool calls" in str(e.value)
    assert "set chat_template: chatml-tools" in str(e.value)
    assert plan(store, spec_of(tiny_model, tools=[{"type": "calculator"}], chat_template="chatml-tools")).rows


def test_an_evaluation_with_tools_goes_through_the_tool_loop_and_stores_text(tmp_path, tiny_model, monkeypatch):
    import backend.evals.store as db
    import backend.models
    from backend.data.templates import template_text
    from backend.evals import answers, get_eval, summary_of
    from backend.evals.job import _evaluate

    loaded = []
    real = backend.models.load_model
    monkeypatch.setattr(backend.models, "load_model", lambda *a, **k: loaded.append(real(*a, **k)) or loaded[-1])
    store = RunStore(tmp_path)
    spec = spec_of(tiny_model, tools=[{"type": "calculator"}], chat_template="chatml-tools",
                   generation={"max_new_tokens": 6, "batch_size": 2})
    e = db.create_eval(store, spec, {"models": ["tiny"]}, total=2)
    _evaluate(store, e)
    assert get_eval(store, e.id).status == "completed"
    tokenizer = loaded[0].tokenizer
    assert tokenizer.chat_template == template_text("chatml-tools") and tokenizer.response_template
    rows = answers(store, e.id)
    assert len(rows) == 2 and all(isinstance(r.answer, str) for r in rows)
    assert all(r.scores["used_tool"] == r.scores["tool_calls"] == r.scores["tool_errors"] == 0.0 for r in rows)
    summary = summary_of(store, get_eval(store, e.id))
    assert summary.judge == "right" and summary.models[0].cells["used_tool"].mean == 0.0


ECHO = '''
class Echo:
    """Says back what it is asked to look at."""

    def reset(self, answer="0", **row):
        self.answer = answer
        return " Look before you answer."

    def look(self, what: str) -> str:
        """Looks at something.

        Args:
            what: The thing to look at.
        """
        return what

    def get_reward(self) -> float:
        return float(self.answer)
'''
ENV_SCORER = {"type": "environment", "name": "env"}


def test_an_environment_scorer_needs_the_environment_and_its_get_reward(tmp_path, tiny_model):
    with pytest.raises(EvalError, match="scorers.1: an environment scorer reads the environment's get_reward, and "
                                        "none is set"):
        spec_of("m", scorers=[RIGHT, ENV_SCORER])
    with pytest.raises(EvalError, match="no shipped example is called `guess_numbers`"):
        spec_of("m", environment="guess_numbers")
    assert [s.name for s in spec_of("m", environment="guess_number").scorers[1:]] == list(TOOL_FIGURES.values())
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "mute.py").write_text(ECHO.replace("    def get_reward", "    def _get_reward"))
    with pytest.raises(EvalError) as e:
        plan(RunStore(tmp_path), spec_of(tiny_model, environment="envs/mute.py:Echo", chat_template="chatml-tools",
                                         scorers=[RIGHT, ENV_SCORER]))
    assert "Echo's get_reward, which it does not define" in str(e.value)


def test_each_answer_plays_its_own_environment_reset_from_its_row(tmp_path, tiny_model):
    """Each answer's episode is reset from its row (the reward it gives back is the row's answer; one instance,
    reset for the second row after the first's reward was read), its methods the answer's tools (their schemas go
    through the chat template), the exchange stored as text."""
    import backend.evals.store as db
    from backend.evals import answers, get_eval
    from backend.evals.job import _evaluate

    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "echo.py").write_text(ECHO)
    store = RunStore(tmp_path)
    spec = spec_of(tiny_model, environment="envs/echo.py:Echo", chat_template="chatml-tools",
                   scorers=[RIGHT, ENV_SCORER], generation={"max_new_tokens": 4, "batch_size": 1})
    assert plan(store, spec).rows
    e = db.create_eval(store, spec, {"models": ["tiny"]}, total=2)
    _evaluate(store, e)
    assert get_eval(store, e.id).status == "completed"
    rows = sorted(answers(store, e.id), key=lambda r: r.row_idx)
    assert [r.scores["env"] for r in rows] == [float(r.reference) for r in rows] and len(rows) == 2
    assert all(r.scores["tool_calls"] == 0.0 and isinstance(r.answer, str) for r in rows)


def test_the_cli_plays_an_environment_and_scores_it():
    from cli.evaluate import _spec_data, with_default_subcommand
    from launch import build_parser

    argv = with_default_subcommand(["eval", "--model", "run:X", "--dataset", "demo-guess-number", "--environment",
                                    "guess_number", "--chat-template", "chatml-tools", "--scorer", "environment"])
    spec = build_spec(_spec_data(build_parser().parse_args(argv)))
    assert spec.environment == "guess_number" and spec.plays_tools and spec.scorers[0].type == "environment"
