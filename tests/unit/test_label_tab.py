"""The Labeling tab's handlers, called as the page calls them: each updates only components its event lists as
outputs, a label shows the next item, a repeated key press labels once, and undo offers the item again."""
import gradio as gr
import pytest

from app import label_tab
from app.label_layout import LabelView
from app.tab_polls import TabPolls
from backend import labeling as L
from backend.runs.store import RunStore

PROMPTS = ["What is 2 + 2?", "Name a colour.", "Say hello."]


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path)


@pytest.fixture
def page(store):
    """The tab in a Blocks, and `call(handler, *args)`: runs the handler the way its wired event does and checks
    that every component it updates is one of that event's outputs."""
    with gr.Blocks() as demo:
        polls = TabPolls(1.5, ("train", "labeling"))
        with gr.Tabs() as polls.tabs:
            with gr.Tab("Train"):
                train = {k: gr.Textbox() for k in ("mode", "dataset", "model")}
            with gr.Tab("Labeling") as label_page:
                tab = label_tab.build(store, polls, train)
        tab.remember.render()  # as app/main.py wires it
        demo.load(tab.load[0], **tab.load[1])
        label_page.select(tab.open[0], **tab.open[1])

    def call(handler, *args):
        fns = [f for f in demo.fns.values() if getattr(f.fn, "__wrapped__", None) is handler]
        assert fns, f"{handler.__name__} is wired to no event"
        out = fns[0].fn(*args)
        if isinstance(out, dict) and out != gr.skip():
            assert set(out) <= set(fns[0].outputs), handler.__name__
        return out
    call.train, call.polls = train, polls
    return tab.ui, call


def answered_session(store, mode="pair"):
    s = L.create_session(store, PROMPTS, model_a="some-model", mode=mode, prompt_source="test",
                         settings=L.GenerationSettings(), check_models=False)
    for item in L.items(store, s.id):
        answers = [(f"good {item.idx}", {"candidate": 1, "label": "m1"})]
        if mode == "pair":
            answers.append((f"bad {item.idx}", {"candidate": 2, "label": "m2"}))
        L.save_answers(store, item.id, answers, swapped=False)
    return s


def test_opening_the_tab_shows_this_browsers_item(store, page):
    ui, call = page
    s = answered_session(store)
    out = call(label_tab.on_open, LabelView(), {"client": "c1", "session": s.id}, None)
    assert out[ui.view].client == "c1" and out[ui.view].active and out[ui.view].session_id == s.id
    assert out[ui.item_box] and "What is 2 + 2?" in out[ui.prompt] and "good 0" in out[ui.answer_a]
    assert out[ui.remember] == {"session": s.id, "client": "c1", "annotator": "labeler-c1"}


def test_a_label_shows_the_next_item_and_a_repeated_press_labels_once(store, page):
    ui, call = page
    s = answered_session(store)
    first = call(label_tab.on_open, LabelView(), {"client": "c1", "session": s.id}, None)
    nxt = call(label_tab.on_label, {ui.view: first[ui.view], ui.item_box: first[ui.item_box], ui.annotator: "ann",
                                    ui.edit: "", ui.note: ""})
    assert nxt[ui.item_box] != first[ui.item_box] and "Name a colour." in nxt[ui.prompt]
    assert nxt[ui.edit] == "" and "1 labeled / 2 remaining" in nxt[ui.count]  # a new item: an empty edit box
    again = call(label_tab.on_label, {ui.view: nxt[ui.view], ui.item_box: first[ui.item_box], ui.annotator: "ann",
                                      ui.edit: "", ui.note: ""})  # the same key again before the page updated
    assert L.summarize(store, s.id).labels == 1 and again[ui.item_box] == nxt[ui.item_box]


def test_undo_offers_the_item_again(store, page):
    ui, call = page
    s = answered_session(store)
    first = call(label_tab.on_open, LabelView(), {"client": "c1", "session": s.id}, None)
    nxt = call(label_tab.on_label, {ui.view: first[ui.view], ui.item_box: first[ui.item_box], ui.annotator: "ann",
                                    ui.edit: "", ui.note: "why"})
    out = call(label_tab.on_undo, nxt[ui.view], "ann")
    assert out[ui.item_box] == first[ui.item_box] and out[ui.note] == "why" and "Undid" in out[ui.status]


def test_a_poll_with_nothing_new_updates_nothing(store, page):
    ui, call = page
    s = answered_session(store)
    first = call(label_tab.on_open, LabelView(), {"client": "c1", "session": s.id}, None)
    assert call(label_tab.on_tick, first[ui.view]) == gr.skip()
    assert call(label_tab.on_tick, LabelView()) == gr.skip()  # the tab was never opened: no item taken


def test_single_answer_sessions_show_thumbs_and_refuse_dpo(store, page):
    ui, call = page
    s = answered_session(store, mode="single")
    out = call(label_tab.on_open, LabelView(), {"client": "c1", "session": s.id}, None)
    assert out[ui.single_buttons]["visible"] is True and out[ui.pair_buttons]["visible"] is False
    refused = label_tab.on_train(ui, store, call.train, call.polls, "dpo", out[ui.view])
    assert set(refused) == {ui.export.summary} and "Train KTO on it" in refused[ui.export.summary]


def test_start_reports_a_bad_prompt_source_in_the_message_only(store, page):
    ui, call = page
    f = ui.new
    values = {c: c.value for c in f.inputs} | {ui.view: LabelView(), ui.annotator: "ann", f.source: "upload",
                                               f.upload: None}
    out = call(label_tab.on_start, values)
    assert set(out) == {f.message, ui.started} and "upload a prompt file first" in out[f.message]
    assert out[ui.started] is None  # nothing to show: the view is left as it was


def test_an_item_held_by_the_labelers_older_tab_shows_in_the_new_one_and_otherwise_the_card_says_why(store, page):
    ui, call = page
    s = L.create_session(store, PROMPTS[:1], model_a="some-model", mode="pair", prompt_source="test",
                         settings=L.GenerationSettings(), check_models=False)
    (only,) = L.items(store, s.id)
    L.save_answers(store, only.id, [("good", {"candidate": 1}), ("bad", {"candidate": 2})])
    old = call(label_tab.on_open, LabelView(), {"client": "old", "session": s.id, "annotator": "ann"}, None)
    assert old[ui.item_box]
    # the same labeler in another browser: their own claim comes along instead of a blank panel
    new = call(label_tab.on_open, LabelView(), {"client": "new", "session": s.id, "annotator": "ann"}, None)
    assert new[ui.item_box] == old[ui.item_box] and "What is 2 + 2?" in new[ui.prompt]
    # someone else: no item, and the prompt's card (where the item would be) says why, not only the status below
    other = call(label_tab.on_open, LabelView(), {"client": "bob", "session": s.id, "annotator": "bob"}, None)
    assert other[ui.item_box] is None and "labeled by others" in other[ui.status]
    assert 'id="label-reason"' in other[ui.prompt] and "labeled by others" in other[ui.prompt]
    assert '<div id="label-prompt"></div>' in other[ui.prompt]  # the prompt itself stays empty


def test_a_tick_on_an_open_tab_without_a_session_shows_the_newest(store, page, monkeypatch):
    """A view write lost to a race between the page's events (a slow load after Start) never leaves the tab blank."""
    ui, call = page
    monkeypatch.setattr(label_tab.label_generator, "ensure_generator", lambda *a, **k: "done")
    assert call(label_tab.on_tick, LabelView(client="c1", active=True)) == gr.skip()  # no session yet
    s = answered_session(store)
    assert call(label_tab.on_tick, LabelView(client="c1")) == gr.skip()  # the tab not open
    out = call(label_tab.on_tick, LabelView(client="c1", annotator="ann", active=True))
    assert out[ui.view].session_id == s.id and out[ui.view].item_id is not None
    assert out[ui.prompt]  # the item is shown
