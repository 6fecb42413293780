"""The built-in preference, KTO, math and safe-dialogue sets: what the generator writes is what is committed, and
it is right."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "presets" / "data"


def load(name):
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("build_demo_sets", DATA / "build_demo_sets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_are_what_the_generator_writes(generator):
    assert load("preference.jsonl") == generator.preference_rows()
    assert load("kto.jsonl") == generator.kto_rows()
    assert load("math.jsonl") == generator.math_rows()
    assert load("safe_dialogue.jsonl") == generator.safe_dialogue_rows()
    assert (load("arithmetic.jsonl"), load("arithmetic_eval.jsonl")) == generator.arithmetic_rows()
    assert load("number_format.jsonl") == generator.number_format_rows()


def test_the_number_format_warm_up_answers_with_the_number_alone_and_never_a_sum():
    for row in load("number_format.jsonl"):
        question, answer = (m["content"] for m in row["messages"])
        a, op, b = re.match(r"What is (\d+) ([-×]) (\d+)\?", question).groups()
        assert answer == str(int(a) - int(b) if op == "-" else int(a) * int(b))


def test_arithmetic_holds_out_sums_it_never_trains_on():
    train, held_out = load("arithmetic.jsonl"), load("arithmetic_eval.jsonl")
    assert (len(train), len(held_out)) == (400, 32)
    assert not {r["prompt"][0]["content"] for r in train} & {r["prompt"][0]["content"] for r in held_out}
    for r in train + held_out:
        a, b = map(int, re.findall(r"\d+", r["prompt"][0]["content"]))
        assert r["answer"] == str(a + b)


def test_safe_dialogue_mixes_rude_baits_and_open_requests(generator):
    texts = [row["prompt"][0]["content"] for row in load("safe_dialogue.jsonl")]
    baits = [t for t in texts if any(w in t for w in ("called me", "rant", "reply to", "really think", "calling"))]
    assert len(texts) == 100 and len(baits) == 50


def test_math_answers_are_the_exact_results():
    rows = load("math.jsonl")
    assert len(rows) == 300 and len({r["prompt"][0]["content"] for r in rows}) == 300
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "×": lambda a, b: a * b}
    for row in rows:
        text = row["prompt"][0]["content"]
        a, op, b = re.match(r"What is (\d+) ([+\-×]) (\d+)\?", text).groups()
        assert 10 <= int(a) <= 999 and 10 <= int(b) <= 999
        assert row["answer"] == str(ops[op](int(a), int(b)))
        assert "<answer></answer>" in text


def test_preference_pairs_reject_a_wrong_rude_or_rambling_answer(generator):
    rows = load("preference.jsonl")
    assert len(rows) >= 100
    correct = {q: good for q, good, _ in generator.QA}
    wrong = {q: bad for q, _, bad in generator.QA}
    kinds = {"wrong": 0, "rude": 0, "rambling": 0}
    for row in rows:
        question, rejected = row["prompt"][0]["content"], row["rejected"][0]["content"]
        assert row["chosen"][0]["content"] == correct[question]
        kind = ("wrong" if rejected == wrong[question] else "rude" if rejected in generator.RUDE
                else "rambling" if rejected in generator.RAMBLING else None)
        assert kind, rejected
        kinds[kind] += 1
    assert min(kinds.values()) >= len(rows) // 3


def test_kto_labels_are_booleans_and_balanced():
    rows = load("kto.jsonl")
    labels = [r["label"] for r in rows]
    assert len(rows) >= 100 and all(isinstance(x, bool) for x in labels)
    assert abs(sum(labels) - len(labels) / 2) <= 2
    assert labels[:10] != sorted(labels[:10])  # shuffled: KTO reads in order and pairs neighbours
