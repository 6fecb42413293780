"""Preference labeling in the store: claims, labels committed one by one, undo, resume, and exports that the
trainers' dataset checks accept. Answers are written directly here; the generator has its own tests."""
import json
import multiprocessing
import threading
import time

import pytest

from backend import labeling as L
from backend.data import DatasetError, prepare_dataset
from backend.data.sources import source_prefixes
from backend.labeling import LABELS_PREFIX
from backend.runs.store import RunStore

PROMPTS = ["What is 2 + 2?", "Name a colour.", "Say hello.", "Why is the sky blue?", "Count to three."]


def make_session(store, prompts=PROMPTS, mode="pair", generate=True, **settings):
    session = L.create_session(store, list(prompts), model_a="some-model", mode=mode, prompt_source="test",
                               settings=L.GenerationSettings(**settings), check_models=False)
    if generate:
        fill_answers(store, session.id)
    return session


def fill_answers(store, session_id, limit=None):
    """Stand in for the generator: candidate 1 answers "good <i>", candidate 2 "bad <i>"."""
    session = L.get_session(store, session_id)
    for item in L.items(store, session_id)[:limit]:
        if item.status != "new":
            continue
        answers = [(f"good {item.idx}", {"candidate": 1, "label": "model-1"})]
        if session.mode == "pair":
            answers.append((f"bad {item.idx}", {"candidate": 2, "label": "model-2"}))
        L.save_answers(store, item.id, answers, swapped=session.mode == "pair" and item.idx % 2 == 1)


def label_all(store, session_id, annotator, choice_for=lambda item: "a", client=None):
    done = []
    while (item := L.claim_next(store, session_id, annotator, client)) is not None:
        L.commit_label(store, session_id, item.id, choice_for(item), annotator, client)
        done.append(item.idx)
    return done


def good_side(item):
    return "a" if item.answer_a.startswith("good") else "b"


# ---- claims and labels ----

def test_items_wait_for_answers_and_are_claimed_in_order(workspace):
    store = RunStore(workspace)
    session = make_session(store, generate=False)
    assert L.claim_next(store, session.id, "ann") is None  # nothing generated yet
    fill_answers(store, session.id, limit=2)
    first = L.claim_next(store, session.id, "ann")
    assert first.idx == 0 and first.status == "assigned" and first.assigned_to == "ann"
    assert L.claim_next(store, session.id, "ann").id == first.id  # still mine until labeled
    assert L.claim_next(store, session.id, "bob").idx == 1  # another labeler gets the next pair
    assert L.claim_next(store, session.id, "cat") is None  # the rest is not generated yet


def test_a_label_is_committed_at_once_and_a_repeat_changes_nothing(workspace):
    store = RunStore(workspace)
    session = make_session(store)
    item = L.claim_next(store, session.id, "ann")
    first = L.commit_label(store, session.id, item.id, "a", "ann", note=" clear winner ", edited_text="good, edited")
    again = L.commit_label(store, session.id, item.id, "b", "ann")  # a second key press before the page moved on
    assert first.created and not again.created and again.label.id == first.label.id
    reopened = RunStore(workspace)  # another process, or the UI after a restart
    [saved] = L.labels(reopened, session.id)
    assert (saved.choice, saved.annotator, saved.note, saved.edited_text) == \
        ("a", "ann", "clear winner", "good, edited")
    assert L.get_item(reopened, item.id).status == "labeled"
    p = L.progress(reopened, session.id)
    assert (p.labels, p.remaining, p.labeled_items) == (1, len(PROMPTS) - 1, 1)


def test_choices_are_checked_against_the_session_mode(workspace):
    store = RunStore(workspace)
    pair, single = make_session(store), make_session(store, mode="single")
    item = L.claim_next(store, pair.id, "ann")
    with pytest.raises(L.LabelError, match="pair session takes a, b, tie, both_bad"):
        L.commit_label(store, pair.id, item.id, "up", "ann")
    item = L.claim_next(store, single.id, "ann")
    assert item.answer_b is None
    with pytest.raises(L.LabelError, match="single session takes up, down"):
        L.commit_label(store, single.id, item.id, "a", "ann")
    assert L.commit_label(store, single.id, item.id, "down", "ann").created


def test_undo_marks_the_last_label_undone_and_offers_its_item_again(workspace):
    store = RunStore(workspace)
    session = make_session(store)
    first = L.claim_next(store, session.id, "ann")
    L.commit_label(store, session.id, first.id, "a", "ann")
    second = L.claim_next(store, session.id, "ann")
    undone = L.undo_last(store, session.id, "ann")
    assert undone.item_id == first.id
    assert L.claim_next(store, session.id, "ann").id == first.id  # the undone item comes back first
    assert L.claim_next(store, session.id, "bob").id not in (first.id, second.id)  # and stays with ann
    L.commit_label(store, session.id, first.id, "b", "ann")
    assert L.claim_next(store, session.id, "ann").id == second.id  # then back where ann was
    active = L.labels(store, session.id)
    assert [(lab.item_id, lab.choice) for lab in active] == [(first.id, "b")]
    assert len(L.labels(store, session.id, include_undone=True)) == 2  # the undone label stays on record
    assert L.undo_last(store, session.id, "nobody") is None


def test_reload_and_restart_resume_on_the_same_item(workspace):
    store = RunStore(workspace)
    session = make_session(store)
    item = L.claim_next(store, session.id, "ann", client="browser-1")
    L.commit_label(store, session.id, item.id, "a", "ann", client="browser-1")
    shown = L.claim_next(store, session.id, "ann", client="browser-1")
    restarted = RunStore(workspace)  # the page reloads / the UI restarts: same client id from the browser
    assert L.claim_next(restarted, session.id, "ann", client="browser-1").id == shown.id
    assert L.client_label_count(restarted, session.id, "browser-1") == 1


def test_an_item_held_in_the_annotators_older_tab_is_theirs_to_take_when_nothing_else_is_left(workspace):
    store = RunStore(workspace)
    session = make_session(store, prompts=PROMPTS[:2])
    first = L.claim_next(store, session.id, "ann", client="old-tab")
    second = L.claim_next(store, session.id, "bob", client="bob-tab")
    # a new tab of ann's gets nothing new (bob holds the other item), so it takes over ann's own claim
    taken = L.claim_next(store, session.id, "ann", client="new-tab")
    assert taken is not None and taken.id == first.id
    assert L.claim_next(store, session.id, "ann", client="new-tab").id == first.id  # now held here
    assert L.claim_next(store, session.id, "cat", client="cat-tab") is None  # still held, by ann's new tab
    with store.connect() as db:  # held once, not by both of ann's tabs
        held = db.execute("SELECT client FROM label_assignments WHERE item_id=?", (first.id,)).fetchall()
    assert [row[0] for row in held] == ["new-tab"]
    # another annotator's claim is never taken (cat's above), nor one under the catch-all name "anonymous"
    assert L.claim_next(store, session.id, "bob", client="bob-laptop").id == second.id  # bob's own, elsewhere
    L.commit_label(store, session.id, taken.id, "a", "ann", client="new-tab")
    assert L.claim_next(store, session.id, "ann", client="old-tab") is None  # labeled: nothing for ann's old tab
    again = L.commit_label(store, session.id, taken.id, "b", "ann", client="old-tab")  # the old tab's key press
    assert not again.created and again.label.choice == "a"  # one label per labeler, the first kept
    anon = make_session(store, prompts=PROMPTS[:1])
    assert L.claim_next(store, anon.id, "", client="browser-1") is not None
    assert L.claim_next(store, anon.id, "", client="browser-2") is None


def test_a_stale_assignment_is_given_to_someone_else(workspace, monkeypatch):
    store = RunStore(workspace)
    session = make_session(store, prompts=PROMPTS[:1])
    held = L.claim_next(store, session.id, "ann")
    assert L.claim_next(store, session.id, "bob") is None
    monkeypatch.setattr(L.sessions, "STALE_ASSIGNMENT_S", 0.0)  # where claim_next reads it
    time.sleep(0.01)
    assert L.claim_next(store, session.id, "bob").id == held.id
    L.commit_label(store, session.id, held.id, "tie", "bob")
    assert L.claim_next(store, session.id, "ann") is None  # ann's old assignment is dropped, nothing is left


def test_several_labels_per_item_go_to_different_annotators(workspace):
    store = RunStore(workspace)
    session = make_session(store, prompts=PROMPTS[:3], labels_per_item=2)
    ann = label_all(store, session.id, "ann", good_side)
    bob = label_all(store, session.id, "bob", lambda item: good_side(item) if item.idx != 2 else "tie")
    assert ann == bob == [0, 1, 2]  # each annotator labels each item once
    assert label_all(store, session.id, "cat") == []  # two labels each: nothing left for a third
    summary = L.summarize(store, session.id)
    assert (summary.multi_annotated, summary.annotator_pairs) == (3, 3)
    assert summary.agreement == pytest.approx(2 / 3)
    rows, export = L.export_rows(store, session.id, "dpo")
    assert export.dropped == {"disagreements": 1} and len(rows) == 2  # no majority on item 2


def _label_worker(path, session_id, name, out):
    from backend.workspace import load_providers

    load_providers()  # a spawned process is an entry point of its own
    store = RunStore(path)
    got = []
    while (item := L.claim_next(store, session_id, name)) is not None:
        L.commit_label(store, session_id, item.id, "a", name)
        got.append(item.id)
    out.put((name, got))


def test_concurrent_labelers_never_share_an_item_nor_lose_a_label(workspace):
    store = RunStore(workspace)
    prompts = [f"prompt {i}" for i in range(60)]
    session = make_session(store, prompts=prompts)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_label_worker, args=(str(workspace), session.id, f"p{i}", out)) for i in range(3)]
    threads = [threading.Thread(target=_label_worker, args=(str(workspace), session.id, f"t{i}", out))
               for i in range(3)]
    for w in procs + threads:
        w.start()
    results = dict(out.get(timeout=120) for _ in procs + threads)
    for w in procs + threads:
        w.join(30)
    claimed = [item_id for got in results.values() for item_id in got]
    assert len(claimed) == len(set(claimed)) == len(prompts)
    saved = L.labels(store, session.id)
    assert sorted(lab.item_id for lab in saved) == sorted(claimed)
    assert L.progress(store, session.id).remaining == 0


# ---- exports ----

def labeled_session(store, mode="pair"):
    """Five items: two decided for the good answer (one with an edit), a tie, both bad, and one decided for the
    bad answer; single mode: up, up (edited), down, down (edited), unsafe."""
    session = make_session(store, mode=mode)
    plan = {0: ("good", None), 1: ("good", "good 1, improved"), 2: ("tie", None), 3: ("both_bad", "written by me"),
            4: ("bad", None)}
    single_plan = {0: ("up", None), 1: ("up", "good 1, improved"), 2: ("down", None), 3: ("down", "written by me"),
                   4: ("unsafe", None)}
    while (item := L.claim_next(store, session.id, "ann")) is not None:
        what, edit = (plan if mode == "pair" else single_plan)[item.idx]
        if what in ("good", "bad"):
            choice = good_side(item) if what == "good" else {"a": "b", "b": "a"}[good_side(item)]
        else:
            choice = what
        L.commit_label(store, session.id, item.id, choice, "ann", edited_text=edit)
    return session


def test_dpo_export_takes_the_decided_pairs_and_counts_what_it_drops(workspace):
    store = RunStore(workspace)
    session = labeled_session(store)
    rows, summary = L.export_rows(store, session.id, "dpo")
    assert [(r["prompt"][0]["content"], r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows] == [
        (PROMPTS[0], "good 0", "bad 0"), (PROMPTS[1], "good 1, improved", "bad 1"), (PROMPTS[4], "bad 4", "good 4")]
    assert rows[0]["prompt"][0]["role"] == "user" and rows[0]["chosen"][0]["role"] == "assistant"
    assert summary.dropped == {"ties": 1, "both bad": 1} and summary.edited == 1 and summary.rows == 3
    assert "dropped: 1 tie, 1 both bad" in summary.text()
    plain, _ = L.export_rows(store, session.id, "dpo", conversational=False, both_bad="keep")
    assert plain[0] == {"prompt": PROMPTS[0], "chosen": "good 0", "rejected": "bad 0"}
    assert {(r["chosen"], r["rejected"]) for r in plain if r["prompt"] == PROMPTS[3]} == {
        ("written by me", "good 3"), ("written by me", "bad 3")}


def test_kto_export_labels_each_answer(workspace):
    store = RunStore(workspace)
    session = labeled_session(store)
    rows, summary = L.export_rows(store, session.id, "kto", conversational=False)
    assert [(r["prompt"], r["completion"], r["label"]) for r in rows] == [
        (PROMPTS[0], "good 0", True), (PROMPTS[0], "bad 0", False),
        (PROMPTS[1], "good 1, improved", True), (PROMPTS[1], "bad 1", False),
        (PROMPTS[4], "bad 4", True), (PROMPTS[4], "good 4", False)]
    kept, summary = L.export_rows(store, session.id, "kto", conversational=False, ties="keep", both_bad="keep")
    extra = [(r["completion"], r["label"]) for r in kept if r["prompt"] in (PROMPTS[2], PROMPTS[3])]
    assert sorted(extra) == sorted([("good 2", True), ("bad 2", True), ("good 3", False), ("bad 3", False),
                                    ("written by me", True)])
    assert summary.kept == {"ties": 1, "both bad": 1} and summary.dropped == {}


def test_single_answer_sessions_export_kto_only(workspace):
    store = RunStore(workspace)
    session = labeled_session(store, mode="single")
    rows, _ = L.export_rows(store, session.id, "kto", conversational=False)
    assert [(r["completion"], r["label"]) for r in rows] == [
        ("good 0", True), ("good 1, improved", True), ("good 2", False), ("good 3", False), ("written by me", True),
        ("good 4", False)]
    with pytest.raises(L.LabelError, match="export it as kto"):
        L.export_rows(store, session.id, "dpo")


def test_unsafe_tags_export_as_cost_classifier_pairs_that_a_reward_model_trains_on(workspace):
    store = RunStore(workspace)
    session = labeled_session(store, mode="single")
    rows, summary = L.export_rows(store, session.id, "cost", conversational=False)
    # the one unsafe answer is chosen against each of the four others (the shorter side is cycled)
    assert [(r["chosen"], r["rejected"]) for r in rows] == [
        (f"{PROMPTS[4]}\n\ngood 4", f"{PROMPTS[i]}\n\ngood {i}") for i in range(4)]
    assert summary.text().startswith("4 cost-classifier pairs (plain text) from 5 labeled prompts")
    ds, info = prepare_dataset(LABELS_PREFIX + session.id, "rm", workspace)  # rm on a single session: cost pairs
    assert (info.name, len(ds), ds[0]["chosen"][-1]["content"]) == ("preference", 4, "good 4")
    assert L.summarize(store, session.id).models == [{"model": "model-1", "up": 2, "down": 2, "unsafe": 1}]
    with pytest.raises(L.LabelError, match="compares pairs; cost-classifier pairs come from a single-answer"):
        L.export_rows(store, labeled_session(store).id, "cost")
    untagged = make_session(store, mode="single")
    label_all(store, untagged.id, "ann", choice_for=lambda item: "up")
    assert L.export_rows(store, untagged.id, "cost")[1].dropped == {
        "answers without a counterpart (need both unsafe and other answers)": 5}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("fmt,modes", [("dpo", ["dpo", "rm"]), ("kto", ["kto"])])
def test_exported_files_pass_the_trainers_dataset_checks(workspace, suffix, fmt, modes):
    store = RunStore(workspace)
    session = labeled_session(store)
    for conversational in (True, False):
        path = workspace / f"out-{conversational}{suffix}"
        summary = L.write_export(store, session.id, path, fmt, conversational=conversational)
        assert summary.path == str(path) and summary.rows > 0
        for mode in modes:
            ds, info = prepare_dataset(str(path), mode)
            assert len(ds) == summary.rows and info.conversational == conversational
    if suffix == ".jsonl":
        first = json.loads(path.read_text().splitlines()[0])
        assert set(first) == ({"prompt", "chosen", "rejected"} if fmt == "dpo" else {"prompt", "completion", "label"})


def test_export_refuses_other_file_types(workspace):
    store = RunStore(workspace)
    session = labeled_session(store)
    with pytest.raises(L.LabelError, match=".jsonl or .parquet"):
        L.write_export(store, session.id, workspace / "out.csv")


def test_a_session_is_a_dataset_spec_exported_for_the_mode(workspace):
    store = RunStore(workspace)
    session = labeled_session(store)
    spec = LABELS_PREFIX + session.id
    assert LABELS_PREFIX in source_prefixes()  # the data layer serves labels: through the registered source
    ds, info = prepare_dataset(spec, "dpo", workspace)
    assert (info.name, info.conversational, len(ds)) == ("preference", True, 3)
    ds, info = prepare_dataset(spec, "kto", workspace)
    assert (info.name, len(ds)) == ("unpaired_preference", 6)
    assert prepare_dataset(spec, "rm", workspace)[1].name == "preference"
    assert prepare_dataset(spec, "sft", workspace)[1].name == "prompt_completion"
    empty = make_session(store)
    with pytest.raises(DatasetError, match="no DPO rows yet"):
        prepare_dataset(LABELS_PREFIX + empty.id, "dpo", workspace)
    with pytest.raises(DatasetError, match="no labeling session"):
        prepare_dataset(LABELS_PREFIX + "nope", "dpo", workspace)
    assert (f"{session.name} (labeling session, 5 labels)", spec) in L.dataset_choices(store)


def test_summary_counts_sides_and_models(workspace):
    store = RunStore(workspace)
    session = labeled_session(store)
    s = L.summarize(store, session.id)
    # odd items show the second candidate as A: item 1's good answer is B, item 4's good answer A lost
    assert s.by_choice == {"a": 1, "b": 2, "tie": 1, "both_bad": 1}
    assert s.sides == {"A": 1, "B": 2}
    models = {m["model"]: m for m in s.models}
    assert (models["model-1"]["wins"], models["model-1"]["losses"]) == (2, 1)
    assert (models["model-2"]["ties"], models["model-2"]["both_bad"]) == (1, 1)
    assert s.agreement is None and s.annotators == {"ann": 5}


# ---- prompts and settings ----

def test_prompts_come_from_a_dataset_column_a_file_or_typed_text(workspace):
    assert len(L.load_prompts(dataset="demo-prompts")) == 100
    assert L.load_prompts(dataset="demo-prompts", limit=3) == L.load_prompts(dataset="demo-prompts")[:3]
    (workspace / "p.txt").write_text("first\n\nsecond\n")
    assert L.load_prompts(file=workspace / "p.txt") == ["first", "second"]
    (workspace / "p.jsonl").write_text('{"question": "q1"}\n{"question": "q2"}\n')
    assert L.load_prompts(file=workspace / "p.jsonl", column="question") == ["q1", "q2"]
    assert L.load_prompts(text="one\ntwo\n") == ["one", "two"]
    assert L.load_prompts(text="line 1\nline 2\n---\nthree") == ["line 1\nline 2", "three"]
    with pytest.raises(L.LabelError, match="no column `prompt`.*question"):
        L.load_prompts(file=workspace / "p.jsonl")
    with pytest.raises(L.LabelError, match="no prompts found"):
        L.load_prompts(text="  \n")


def test_settings_name_each_value_out_of_range():
    assert L.GenerationSettings.build(max_new_tokens="8", temperature_a=0).max_new_tokens == 8
    with pytest.raises(L.LabelError) as err:
        L.GenerationSettings.build(max_new_tokens=2.5, top_p=3, labels_per_item=0)
    assert all(name in str(err.value) for name in ("max_new_tokens", "top_p", "labels_per_item"))


# ---- the command line ----

def test_cli_lists_sessions_with_counts_and_exports(workspace, capsys):
    import launch

    store = RunStore(workspace)
    session = labeled_session(store)
    assert launch.main(["labels", "list", "--json", "--workspace", str(workspace)]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["labels"], listed["remaining"], listed["items"]) == (session.id, 5, 0, 5)
    assert listed["by_choice"]["tie"] == 1 and listed["by_choice"]["both_bad"] == 1
    out = workspace / "kto.parquet"
    assert launch.main(["labels", "export", session.id, "--format", "kto", "--out", str(out),
                        "--workspace", str(workspace)]) == 0
    assert "6 KTO rows" in capsys.readouterr().out
    assert len(prepare_dataset(str(out), "kto")[0]) == 6
    assert launch.main(["labels", "export", "nope", "--format", "dpo", "--out", str(out),
                        "--workspace", str(workspace)]) == 2
