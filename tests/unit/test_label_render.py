"""What the Labeling tab shows of an answer: Markdown, or a tool-calling exchange turn by turn."""
from app.label_render import answer_html
from backend.rewards.trajectory import trajectory_text


def test_a_tool_calling_answer_shows_turn_by_turn_and_a_plain_one_as_markdown():
    exchange = trajectory_text([
        {"role": "assistant", "content": "Let me <b>compute</b>.",
         "tool_calls": [{"type": "function", "function": {"name": "calculator",
                                                          "arguments": {"expression": "433 * 419"}}}]},
        {"role": "tool", "name": "calculator", "content": "181427\nexact"},
        {"role": "assistant", "content": "It is **181427**."}])
    assert "wb-trajectory" not in answer_html(exchange)  # an answer written without tools is Markdown as it is
    shown = answer_html(exchange, tools=True)
    assert shown.startswith('<div class="wb-trajectory">')
    assert '<pre class="wb-tool-call">→ calculator(expression=&#x27;433 * 419&#x27;)</pre>' in shown
    assert '<pre class="wb-tool-result">← calculator: 181427\n  exact</pre>' in shown  # its further lines too
    assert "&lt;b&gt;compute&lt;/b&gt;" in shown and "<strong>181427</strong>" in shown  # Markdown, never markup
    assert shown.index("wb-tool-call") < shown.index("wb-tool-result") < shown.index("<strong>")
    assert answer_html("Plain **text**", tools=True) == "<p>Plain <strong>text</strong></p>\n"
    assert answer_html(None, tools=True) == answer_html(None) == ""
