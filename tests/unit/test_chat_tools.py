"""Chat with a run trained with tools: the run's tools are found from its config, the answer goes through the
tool loop (each call reported as it happens), the Chatbot shows each call inline with its result, and the next
turn sees the calls."""
import json
import threading
import time
import types

import torch

from app.chat_tab import chatbot_messages, last_turn, shown
from backend import chat
from backend.chat import ChatModels, Sampling
from backend.config import build_config
from backend.models import LoadedModel, ModelCache, ModelRef
from backend.runs.store import RunStore

QUESTION = "What is 347 × 29? Reply with the number only."
CALL = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "347 * 29"}}}
TRAJECTORY = [{"role": "assistant", "content": "", "tool_calls": [CALL]},
              {"role": "tool", "name": "calculator", "content": "10063"},
              {"role": "assistant", "content": "10063"}]


def finished_run(store, tiny_model, **config):
    """A completed run with an adapter folder (never loaded here): what the chat can pick."""
    run = store.create_run(build_config({"model": str(tiny_model), **config}))
    adapter = store.run_dir(run.id) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"task_type": "CAUSAL_LM"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    store.update_run(run.id, adapter_path=str(adapter))
    store.finish_run(run.id, "completed")
    return run


def test_a_runs_tools_template_and_rounds_come_from_its_config(workspace, tiny_model):
    store = RunStore(workspace)
    agent = finished_run(store, tiny_model, mode="grpo", dataset="demo-calculator", tools=[{"type": "calculator"}],
                         data={"chat_template": "chatml-tools"}, rl={"max_tool_calling_iterations": 3},
                         reward_sources=[{"type": "tool_used"}])
    plain = finished_run(store, tiny_model, mode="sft")
    tools = chat.run_tools(chat.chat_model(chat.RUN_PREFIX + agent.id, store), workspace)
    assert (tools.run_id, tools.names, tools.template, tools.max_iterations) == (
        agent.id, ["calculator"], "chatml-tools", 3)
    assert chat.run_tools(chat.chat_model(chat.RUN_PREFIX + plain.id, store), workspace) is None
    assert chat.run_tools(chat.chat_model(str(tiny_model), store), workspace) is None
    assert chat.run_tools(None, workspace) is None


def test_the_next_turn_sees_the_calls_only_with_tools():
    history = [{"role": "user", "content": QUESTION}, *TRAJECTORY]
    with_tools = chat.conversation("", history, "And 2 × 3?", tools=True)
    assert with_tools[1:4] == TRAJECTORY and with_tools[-1] == {"role": "user", "content": "And 2 × 3?"}
    # a model chatting without tools reads the text of the turns, as before
    assert chat.conversation("", history, "And 2 × 3?") == [
        {"role": "user", "content": QUESTION}, {"role": "assistant", "content": "10063"},
        {"role": "user", "content": "And 2 × 3?"}]


def test_a_tool_turn_is_scored_as_its_messages(workspace):
    history = [{"role": "user", "content": QUESTION}, *TRAJECTORY]
    result = chat.score_replies([{"type": "tool_used"}, {"type": "numeric_match", "params": {"column": "answer"}}],
                                [[history[0]]] * 2, [last_turn(history), "10063"], workspace, {"answer": 10063})
    assert result["sources"]["tool_used"] == [1.0, 0.0] and result["sources"]["numeric_match"] == [1.0, 1.0]


def test_a_trajectory_shows_each_call_with_its_result_then_the_answer():
    history = [{"role": "user", "content": QUESTION}, *TRAJECTORY]
    assert shown(history) == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "10063", "metadata": {"title": "→ calculator(expression='347 * 29')"}},
        {"role": "assistant", "content": "10063"}]
    assert last_turn(history) == TRAJECTORY  # scored as GRPO scores a tool-calling completion
    assert last_turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) == "hello"

    # while the call runs: a spinner, and the answer's placeholder after it
    running = chatbot_messages([{"role": "user", "content": QUESTION}, TRAJECTORY[0]], busy=True)
    assert running[-1]["metadata"]["status"] == "pending"
    # a call left at the limit of rounds was never run; text written before calls stays; a multi-line result is
    # shown as it came
    text_first = {"role": "assistant", "content": "Let me compute.", "tool_calls": [CALL]}
    cut = chatbot_messages([{"role": "user", "content": QUESTION}, text_first,
                            {"role": "tool", "name": "calculator", "content": "a\nb"}, TRAJECTORY[0]])
    assert [m["content"] for m in cut[1:3]] == ["Let me compute.", "```\na\nb\n```"]
    assert len(cut) == 4 and "not run" in cut[-1]["content"] and "status" not in cut[-1]["metadata"]


class Scripted:
    """A model that writes given turns in order (a call, then the answer), as a trained agent would: the tool
    loop's parsing and calls run for real on the real tokenizer."""

    def __init__(self, tokenizer, turns: list[str]):
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.turns = [tokenizer(t, add_special_tokens=False)["input_ids"] + [end] for t in turns]
        self.config = types.SimpleNamespace(is_encoder_decoder=False)
        self.generation_config = types.SimpleNamespace(eos_token_id=end)
        self.device = torch.device("cpu")
        self.seen = []

    def generate(self, input_ids, streamer=None, **kwargs):
        self.seen.append(input_ids)
        if len(self.seen) > 1:
            time.sleep(0.3)  # the page gets a snapshot with the call and its result before the answer
        new = torch.tensor([self.turns[len(self.seen) - 1]])
        if streamer is not None:
            streamer.put(input_ids)
            for token in new[0]:
                streamer.put(token[None])
            streamer.end()
        return torch.cat([input_ids, new], 1)


def test_an_answer_through_the_tool_loop_reports_each_call_and_keeps_the_loops_messages(workspace, tiny_model):
    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    template = loaded.tokenizer.chat_template
    scripted = Scripted(loaded.tokenizer, ['<tool_call>\n{"name": "calculator", "arguments": {"expression": '
                                           '"347 * 29"}}\n</tool_call>', "10063"])
    tools = chat.ChatTools("r", [{"type": "calculator"}], "chatml-tools", 4, workspace)
    plain = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    messages = chat.conversation("", [], QUESTION)
    snapshots = [[(r.turn, r.done) if r else None for r in snap]
                 for snap in chat.stream_replies([(LoadedModel(None, scripted, loaded.tokenizer, "cpu"), messages,
                                                   tools), (plain, messages)], Sampling(8, 0), min_interval=0)]
    final_turn, done = snapshots[-1][0]
    assert done and final_turn == TRAJECTORY
    # the call was shown as it started and its result as it came, before the answer
    live = [turn for (turn, _), _plain in snapshots]
    assert any(turn[:1] == [chat.call_message("calculator", {"expression": "347 * 29"})] for turn in live[:-1])
    # the second round read the call and its result, through the run's template (its tools in the system turn)
    second = loaded.tokenizer.decode(scripted.seen[1][0])
    assert "<tools>" in second and "10063" in second and "<tool_call>" in second
    assert snapshots[-1][1][1]  # the other side, without tools, answered as before
    # the cached model's tokenizer serves the other side and the API unchanged
    assert loaded.tokenizer.chat_template == template and getattr(loaded.tokenizer, "response_template", None) is None


def test_the_tiny_model_answers_through_the_loop_without_calling(workspace, tiny_model):
    """The untrained tiny model calls nothing: its answer is one plain message, as the loop returns it."""
    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    tools = chat.ChatTools("r", [{"type": "calculator"}], "chatml-tools", 2, workspace)
    *_, [reply] = chat.stream_replies([(loaded, chat.conversation("", [], QUESTION), tools)], Sampling(6, 0))
    assert reply.done and reply.error is None and reply.finished and reply.calls == 0
    assert reply.tokens == 6 and reply.turn == [{"role": "assistant", "content": reply.text}]


def test_a_tool_that_cannot_be_made_fails_that_side_only(workspace, tiny_model):
    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    tools = chat.ChatTools("r", [{"type": "search", "params": {"folder": "missing"}}], "chatml-tools", 2, workspace)
    messages = chat.conversation("", [], QUESTION)
    *_, [broken, fine] = chat.stream_replies([(loaded, messages, tools), (loaded, messages)], Sampling(4, 0))
    assert broken.done and "missing" in broken.error
    assert fine.done and fine.error is None


def test_closing_the_stream_stops_the_tool_loop(workspace, tiny_model):
    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    tools = chat.ChatTools("r", [{"type": "calculator"}], "chatml-tools", 4, workspace)
    stream = chat.stream_replies([(loaded, chat.conversation("", [], QUESTION), tools)], Sampling(4000, 1.0),
                                 min_interval=0)
    next(stream)
    stream.close()  # Stop, or the page went away
    deadline = time.time() + 20
    while any(t.name.startswith("chat-generate") for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(t.name.startswith("chat-generate") for t in threading.enumerate())


def test_a_runs_tools_are_built_once_for_its_turns_and_anew_when_their_file_changes(workspace):
    """A user function starts a process (~2 s): the chat keeps it between turns, calls from two sessions take
    turns on it, and an edited file is built anew."""
    import os

    from backend.tools import tool_schemas
    from tests.unit.test_tools import USER_TOOLS

    (workspace / "mytools.py").write_text(USER_TOOLS)
    tools = chat.ChatTools("r1", [{"type": "calculator"},
                                  {"type": "function", "params": {"file": "mytools.py", "function": "multiply"}}],
                           "chatml-tools", 2, workspace)
    first = chat.chat_tools(tools)
    assert chat.chat_tools(tools) is first
    assert [s["function"]["name"] for s in tool_schemas(first)] == ["calculator", "multiply"]  # the schema kept
    mul = first[1]
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append((i, mul(a=i, b=7)))) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [(i, 7 * i) for i in range(6)]
    stat = (workspace / "mytools.py").stat()
    os.utime(workspace / "mytools.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert chat.chat_tools(tools) is not first


def test_a_run_trained_in_an_environment_chats_in_an_instance_of_its_own(workspace, tiny_model):
    """The conversation's instance is reset from one of the run's training rows; its methods are the tools the
    model calls (here a scripted call with that row's secret, answered by the instance in its own process); a
    cleared conversation ends the instance."""
    from dataclasses import replace

    from app.chat_layout import ChatSession

    store = RunStore(workspace)
    game = finished_run(store, tiny_model, mode="grpo", dataset="demo-guess-number", environment="guess_number",
                        data={"chat_template": "chatml-tools"}, reward_sources=[{"type": "environment", "name": "won"}])
    tools = chat.run_tools(chat.chat_model(chat.RUN_PREFIX + game.id, store), workspace)
    assert (tools.environment, tools.names, tools.configs) == ("guess_number", ["guess_number"], [])
    picked = []
    episode = chat.ChatEpisode(tools, pick=lambda rows: picked.append(rows[3]) or rows[3])
    session = ChatSession()
    session.episodes[1] = episode
    secret = picked[0]["secret"]
    assert [fn.__name__ for fn in episode.tools()] == ["guess"] and episode.observation == ""
    loaded = ChatModels(ModelCache()).get(ModelRef.parse(str(tiny_model)))
    call = '<tool_call>\n{"name": "guess", "arguments": {"number": %d}}\n</tool_call>' % secret
    scripted = Scripted(loaded.tokenizer, [call, str(secret)])
    *_, [reply] = chat.stream_replies([(LoadedModel(None, scripted, loaded.tokenizer, "cpu"),
                                        chat.conversation("", [], "Let us play."), replace(tools, episode=episode))],
                                      Sampling(16, 0), min_interval=0)
    assert reply.error is None and reply.turn[1] == {"role": "tool", "name": "guess",
                                                    "content": f"{secret} is correct, found in 1 guesses."}
    assert "guess" in loaded.tokenizer.decode(scripted.seen[0][0])  # its schema shown to the model
    assert episode.instance._user.running
    session.clear(1)
    assert session.episodes == [None, None] and not episode.instance._user.running
