"""Tools a policy may call: the calculator computes only arithmetic, a user's function is shown with its own schema
and refused with its line when it has none, every tool is tried before a run, and the chatml-tools template carries
calls and results that TRL reads back."""
import json

import pytest

from backend.config import ConfigError, build_config
from backend.tools import build_tools, tool_schemas, validate_tools
from backend.tools.calculator import CalculatorError, calculate

REWARD = {"reward_sources": [{"type": "tool_used"}]}
USER_TOOLS = '''def multiply(a: int, b: int) -> int:
    """Multiplies two whole numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a * b


def untyped(a, b):
    return a


def slow(seconds: float) -> str:
    """Sleeps.

    Args:
        seconds: How long.
    """
    import time
    time.sleep(seconds)
    return "done"
'''


@pytest.mark.parametrize("expression, value", [("347 * 29", "10063"), ("347 × 29", "10063"), ("7 / 2", "3.5"),
                                               ("2 ^ 10", "1024"), ("(12 + 7) // 4", "4"), ("-3 ** 2", "-9"),
                                               ("sqrt(16) + abs(-2)", "6"), ("1 / 3", "0.333333333333")])
def test_the_calculator_computes_arithmetic(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize("expression, said", [("__import__('os').system('x')", "is not arithmetic"),
                                              ("open('/etc/passwd')", "is not arithmetic"), ("x + 1", "the name 'x'"),
                                              ("9 ** 9 ** 9", "exponent is too large"),
                                              ("10 ** 59 * 10 ** 5", "more than 60 digits"), ("1 / 0", "division by zero"),
                                              ("", "empty expression"), ("2 +", "not an arithmetic expression")])
def test_the_calculator_refuses_anything_else_with_a_reason(expression, said):
    with pytest.raises(CalculatorError, match=said):
        calculate(expression)


def test_tools_are_named_as_the_model_calls_them_and_a_users_function_keeps_its_schema(tmp_path):
    (tmp_path / "mytools.py").write_text(USER_TOOLS)
    calc, mul = build_tools([{"type": "calculator", "name": "calc"},
                             {"type": "function", "name": "mul", "params": {"file": "mytools.py",
                                                                            "function": "multiply"}}], tmp_path)
    schemas = [s["function"] for s in tool_schemas([calc, mul])]
    assert [s["name"] for s in schemas] == ["calc", "mul"]
    assert schemas[1]["description"] == "Multiplies two whole numbers."
    assert schemas[1]["parameters"]["properties"]["a"] == {"type": "integer", "description": "The first number."}
    assert schemas[1]["parameters"]["required"] == ["a", "b"]
    assert calc(expression="12 * 12") == "144" and mul(a=12, b=11) == 132


def test_each_tool_is_tried_before_a_run_and_its_problems_named(tmp_path):
    (tmp_path / "mytools.py").write_text(USER_TOOLS)
    problems = validate_tools([{"type": "function", "params": {"file": "mytools.py", "function": "untyped"}},
                               {"type": "function", "params": {"file": "elsewhere.py", "function": "f"}},
                               {"type": "calculator"}], tmp_path)
    assert len(problems) == 2
    assert problems[0].startswith("tools.0 (untyped):") and "mytools.py, line 11" in problems[0]
    assert problems[1].startswith("tools.1 (f):") and "elsewhere.py" in problems[1]
    with pytest.raises(ConfigError, match="the name `calculator` is taken by tools.0"):
        build_config({"mode": "grpo", "tools": [{"type": "calculator"}, {"type": "calculator"}], **REWARD})
    with pytest.raises(ConfigError, match="tools"):  # RLOO has no tool loop in TRL
        build_config({"mode": "rloo", "tools": [{"type": "calculator"}], **REWARD})


def test_a_users_tool_past_its_limit_is_a_tool_error_and_the_next_call_works(tmp_path):
    (tmp_path / "mytools.py").write_text(USER_TOOLS)
    [slow] = build_tools([{"type": "function", "timeout_s": 1, "params": {"file": "mytools.py", "function": "slow"}}],
                         tmp_path)
    with pytest.raises(TimeoutError, match="longer than 1 s"):
        slow(seconds=30)
    assert slow(seconds=0) == "done"


def test_the_chatml_tools_template_carries_calls_and_results_that_trl_reads_back(tiny_model):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    from backend.data.templates import template_text, tool_template_problem, use_tool_parser
    from backend.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model, chat_template=template_text("chatml-tools"))
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    tools = build_tools([{"type": "calculator"}], ".")
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "347 * 29"}}}
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 347 × 29?"},
                                          {"role": "assistant", "content": "", "tool_calls": [call]},
                                          {"role": "tool", "name": "calculator", "content": "10063"}],
                                         tools=tools, tokenize=False)
    assert json.dumps(tool_schemas(tools)[0]["function"]) in text and "<|im_start|>tool\n10063<|im_end|>" in text
    use_tool_parser(tokenizer, "chatml-tools")
    prefix = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    answer = tokenizer('<tool_call>\n{"name": "calculator", "arguments": {"expression": "3 * 4"}}\n</tool_call>'
                       "<|im_end|>", add_special_tokens=False)["input_ids"]
    parsed = tokenizer.parse_response(answer, prefix=prefix)
    assert parsed["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "3 * 4"}}
    own = load_tokenizer(tiny_model)  # SmolLM2's own template shows no tools
    assert "data.chat_template: chatml-tools" in tool_template_problem(own, "model", "tiny")
