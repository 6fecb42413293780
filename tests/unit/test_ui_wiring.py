"""How the UI is put together: tabs share helpers but never import each other, queued runs are dispatched by one
server thread rather than by every browser's poll, and bound handlers keep what Gradio reads from them."""
import ast
import threading
import time
from pathlib import Path

import gradio as gr
import pytest
from gradio import utils

from app.events import bind
from backend.runs import jobs
from backend.runs.store import RunStore

APP = Path(__file__).resolve().parents[2] / "app"
TABS = sorted(p.stem for p in APP.glob("*_tab.py"))


def imported_app_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "app":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("app.")}
    return found


def test_no_tab_imports_another_tab():
    assert len(TABS) >= 6
    for tab in TABS:
        others = imported_app_modules(APP / f"{tab}.py") & (set(TABS) - {tab})
        assert not others, f"app/{tab}.py imports {sorted(others)}: share through app/choices.py and friends"


def test_the_dispatcher_calls_dispatch_until_stopped_and_survives_a_failure(tmp_path, monkeypatch):
    calls, extra = [], []

    def flaky(store):
        calls.append(time.time())
        if len(calls) == 1:
            raise RuntimeError("database is locked")

    monkeypatch.setattr(jobs, "dispatch", flaky)
    d = jobs.start_dispatcher(RunStore(tmp_path), every_s=0.05, also=[extra.append])
    deadline = time.time() + 10
    while len(calls) < 3 and time.time() < deadline:
        time.sleep(0.02)
    d.stop()
    assert len(calls) >= 3 and len(extra) >= 3 and d.thread.daemon
    assert not d.thread.is_alive()
    n = len(calls)
    time.sleep(0.2)
    assert len(calls) == n  # stopped means stopped


def test_one_dispatcher_thread_whatever_the_number_of_polls(tmp_path):
    d = jobs.start_dispatcher(RunStore(tmp_path), every_s=10)
    try:
        assert [t.name for t in threading.enumerate()].count("workbench-dispatcher") == 1
    finally:
        d.stop()


def test_bind_keeps_the_parameters_gradio_fills_in():
    def handler(ui, store, value, request: gr.Request, evt: gr.SelectData):
        return ui, store, value, request, evt

    bound = bind(handler, "ui", "store")
    assert list(utils.get_type_hints(bound)) == ["request", "evt"]  # not hidden, as functools.partial would
    assert bound(1, "r", "e") == ("ui", "store", 1, "r", "e")


def test_a_bound_generator_streams_and_every_streaming_handler_is_wired_as_one(tmp_path):
    """Gradio streams a generator function's yields; a plain function returning a generator would be one value."""
    import inspect

    from app.main import build_app

    def stream(ui, n):
        yield from range(ui, n)

    bound = bind(stream, 1)
    assert inspect.isgeneratorfunction(bound) and list(bound(3)) == [1, 2]
    demo = build_app(tmp_path)
    sent = next(f for f in demo.fns.values() if f.name == "on_send")  # the Chat tab streams its answers
    assert sent.inputs and inspect.isgeneratorfunction(sent.fn)


def test_packed_inputs_reach_the_handler_as_gradio_would_hand_them():
    """A JS-only step copies the browser's values into one box; the backend step reads the box and the states,
    and the handler gets each value through its component's preprocessing (a Number's precision, a Dropdown's
    choices checked), as one dict for a set of inputs, positionally for a list, a generator still streaming."""
    import inspect
    import json

    from app.events import PACK_JS, Packed

    with gr.Blocks() as demo:
        steps = gr.Number(precision=0)
        mode = gr.Dropdown(["sft", "grpo"], value="sft")
        kept = gr.State({"kept": True})
        go, out = gr.Button(), gr.Textbox()
        as_dict = Packed({steps, mode, kept})
        as_dict.on(go.click, lambda values: repr(sorted((type(k).__name__, v) for k, v in values.items())), out)
        as_list = Packed([mode, steps])
        as_list.on(go.click, lambda m, n: (yield f"{m}:{n}"), out)
    copy, read = [f for f in demo.fns.values() if f.fn is None], [f for f in demo.fns.values() if f.fn is not None]
    assert [f.js for f in copy] == [PACK_JS, PACK_JS]
    assert [f.inputs for f in read] == [[as_dict.box, kept], [as_list.box]]
    text = as_dict.text({steps: 3.0, mode: "grpo", kept: None})
    assert sorted(map(str, json.loads(text))) == ["3.0", "grpo"]  # the browser's values only
    shown = [("Dropdown", "grpo"), ("Number", 3), ("State", {"kept": True})]
    assert read[0].fn(text, {"kept": True}) == repr(sorted(shown))
    assert inspect.isgeneratorfunction(read[1].fn)
    assert list(read[1].fn(json.dumps(["grpo", 2.0]))) == ["grpo:2"]
    with pytest.raises(gr.Error, match="not in the list of choices"):
        read[0].fn(as_dict.text({steps: 1, mode: "ppo"}))


def test_the_page_tracks_progress_on_few_components(tmp_path):
    """Gradio's page looks up, at every status message of every event, each component any event has shown
    progress on or read as an input, depth first in the whole component tree: events that show none all track
    one hidden box first in the tree, those that show some show it on a few components (never a layout block,
    whose children are walked too), no backend event reads a settings form field by field (they go packed), and
    the states and packed boxes every poll reads come first in the tree, or watching a live run costs the
    browser a core (app/main.py)."""
    from gradio.blocks import BlockContext

    from app.events import PACKED_CLASS
    from app.main import build_app

    demo = build_app(tmp_path)
    deps = demo.config["dependencies"]
    hidden = [d for d in deps if d["show_progress"] == "hidden"]
    [sink] = {i for d in hidden for i in d["show_progress_on"]}
    assert len(hidden) > 100 and demo.config["layout"]["children"][0]["id"] == sink
    layout = {i for i, b in demo.blocks.items() if isinstance(b, BlockContext) and b.children}
    assert not layout & {i for d in deps for i in d["show_progress_on"] or ()}  # a target's children are walked too
    tracked = {i for d in deps for i in (d["outputs"] if d["show_progress_on"] is None else d["show_progress_on"])}
    assert len(tracked) < 60, f"{len(tracked)} components show an event's progress"
    read = {f.name: len([b for b in f.inputs if not b.stateful]) for f in demo.fns.values() if f.fn is not None}
    assert max(read.values()) <= 20, sorted(read.items(), key=lambda kv: -kv[1])[:3]
    packed = {f.name: len(f.fn.pack.browser) for f in demo.fns.values() if hasattr(f.fn, "pack")}
    assert read["on_memory"] == 1 and packed["on_memory"] > 150  # the Train form's settings, in one box
    first = [c["id"] for c in demo.config["layout"]["children"][:40]]
    early = [b._id for b in demo.blocks.values() if isinstance(b, (gr.State, gr.BrowserState))
             or PACKED_CLASS in (getattr(b, "elem_classes", None) or [])]
    flat = set(first) | {g["id"] for c in demo.config["layout"]["children"][:40] for g in c.get("children", [])}
    assert set(early) <= flat


def test_the_pages_load_answers_each_language_with_updates_of_its_outputs(tmp_path):
    """The load event (on_open) answers with a dict of its own outputs whatever the browser kept: an empty dict
    reads to Gradio as one value for 547 outputs, fails the load and every step chained after it."""
    from app.main import build_app

    demo = build_app(tmp_path)
    [fn] = [f for f in demo.fns.values() if f.name == "on_open" and len(f.outputs) > 100]
    for saved in ("", "en", "zh"):
        out = fn.fn(saved, None)
        assert isinstance(out, dict) and out and set(out) <= set(fn.outputs), saved
