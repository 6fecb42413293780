#!/usr/bin/env python
"""Does the workbench's training actually teach? Each task goes the whole product path (submit -> supervisor ->
worker -> store), then the evaluator (backend/evals) judges the trained model against its base on prompts the
run never saw, greedy. One table at the end: task, base score, trained score, minutes, target, verdict.

  grpo  presets/grpo_arithmetic.yaml: 400 sums a + b (0..20), "Reply with the number only"; evaluated on the 32
        held-out sums. Scores: right number (numeric_match) and strict (the number alone).
        target: >= 80% right AND >= 50% strict, within 15 minutes on this CPU
  grpo-warm  the same after an SFT warm-up (presets/sft_number_format.yaml: differences and products answered with
        the number alone), GRPO training on from it (model: run:<warm-up id>); the warm-up alone is in the table
  dpo   presets/dpo_labels.yaml: 100 preference pairs (the labeling export's format: demo-preference) -> DPO
        with the apo_zero loss; win rate against the base on the held-out prompts, judged by a reward model
        trained here on the same pairs.   target: >= 65%
  ppo   presets/ppo_arithmetic.yaml: the same sums, PPO with a value model; the held-out eval_reward every 10
        steps and each step's KL printed, then base vs trained on the 32 held-out sums.
        target: the right-number rate rises, with KL bounded (its mean over the last 10 steps < 1)
  calculator  three-digit products on the 64 held-out rows of demo-calculator-eval: the base without tools, the SFT
        warm-up (presets/sft_calculator.yaml) and GRPO on from it (presets/grpo_calculator.yaml), both evaluated
        with the calculator as GRPO trains (its tools, chat template and tool-calling turns); prints the three side
        by side: right number, share of episodes calling the calculator, minutes of each stage.
        target: after GRPO >= 80% right AND >= 90% of episodes calling the calculator, within 20 minutes
  orpo, simpo  presets/orpo_demo.yaml / simpo_demo.yaml (dpo_labels' LoRA, rate and steps) on dpo's 100 pairs,
        judged like dpo (win rate against the base on the held-out prompts, by the same reward model, trained once
        per workspace).
        target: >= 65%, as dpo's
  online_dpo  presets/online_dpo_demo.yaml: pairs sampled on the arithmetic sums, judged by numeric_match; right
        number on the 32 held-out sums against the base.   target: above the base
  gkd   a teacher trained here (the SFT warm-up presets/sft_number_format.yaml: the number alone), distilled into a
        fresh student on the same prompts (presets/gkd_demo.yaml, teacher: run:<its id>); base, teacher and student
        on the 32 held-out sums.   target: the student's number-only rate moves from the base's most of the way
        toward the teacher's (>= half the gap)

  .venv/bin/python bench/quality.py [--tasks grpo,dpo,ppo,calculator,orpo,simpo,online_dpo,gkd] [--workspace DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STRICT = r"^\s*-?\d+\.?\s*$"
EMBEDDED = "smollm2-135m-instruct"  # the base of every task: named, since a warm-up's merged model is a base too


def train(store, preset: str, **overrides):
    from backend.config import load_config
    from backend.runs.jobs import dispatch, submit_run

    config = load_config(REPO / "presets" / preset, [f"{k}={v}" for k, v in overrides.items()])
    run = submit_run(store, config)
    print(f"  {run.name} ({run.id}): training", flush=True)
    started = time.time()
    while store.get_run(run.id).active:
        dispatch(store)
        time.sleep(2)
    run = store.get_run(run.id)
    if run.status != "completed":
        raise SystemExit(f"{run.id} {run.status}: {run.error}")
    return run, (time.time() - started) / 60


def evaluate(store, models: list[str], dataset: str, scorers: list[dict], max_new_tokens: int = 32, **settings):
    """`settings`: more of the spec (tools, chat_template, max_tool_calling_iterations)."""
    from backend import evals
    from backend.runs.jobs import dispatch

    spec = evals.build_spec({"models": models, "dataset": dataset, "scorers": scorers,
                             "generation": {"max_new_tokens": max_new_tokens, "batch_size": 16}, **settings})
    e = evals.submit_eval(store, spec)
    started = time.time()
    while evals.get_eval(store, e.id).active:
        dispatch(store)
        time.sleep(1)
    e = evals.get_eval(store, e.id)
    if e.status != "completed":
        raise SystemExit(f"evaluation {e.id} {e.status}: {e.error}")
    summary = evals.summary_of(store, e)
    print(evals.format_table(summary), flush=True)
    return summary, (time.time() - started) / 60


def grpo(store) -> list[tuple]:
    run, minutes = train(store, "grpo_arithmetic.yaml", **{"eval.dataset": "", "eval.steps": 0})
    return _arithmetic_rows(store, "grpo arithmetic", [], run, minutes)


def grpo_warm(store) -> list[tuple]:
    """Two stages: the number-only form from an SFT warm-up on differences and products, then GRPO on the sums."""
    warm, warm_minutes = train(store, "sft_number_format.yaml")
    run, minutes = train(store, "grpo_arithmetic.yaml", model=f"run:{warm.id}",
                         **{"eval.dataset": "", "eval.steps": 0})
    return _arithmetic_rows(store, "sft warm-up + grpo", [f"run:{warm.id}"], run, warm_minutes + minutes)


def _arithmetic_rows(store, task: str, also: list[str], run, minutes: float) -> list[tuple]:
    scorers = [{"type": "numeric_match", "name": "right", "params": {"column": "answer"}},
               {"type": "regex", "name": "strict", "weight": 0.0, "params": {"pattern": STRICT}}]
    summary, eval_minutes = evaluate(store, [EMBEDDED, *also, f"run:{run.id}"], "demo-arithmetic-eval", scorers, 16)
    base, tuned = summary.models[0], summary.models[-1]  # a warm-up alone is in the table printed above
    right, strict = tuned.cells["right"].mean, tuned.cells["strict"].mean
    total = minutes + eval_minutes
    return [(f"{task}: right number", base.cells["right"].mean, right, total, ">= 0.80",
             right >= 0.8 and total <= 15),
            (f"{task}: number only", base.cells["strict"].mean, strict, total, ">= 0.50",
             strict >= 0.5 and total <= 15)]


def _pairs_and_judge(store):
    """(the 100 pairs' file, the rm run trained on them, its minutes): trained once per workspace, so the
    preference tasks (and a rerun in the same --workspace) share one judge."""
    from backend.data import BUILTIN_DATASETS

    train_file = store.workspace / "pairs.jsonl"
    judges = [r for r in store.list_runs() if r.config.mode == "rm" and r.status == "completed"
              and r.config.dataset == str(train_file) and r.config.max_steps == 60]
    if judges:
        return train_file, judges[0], 0.0
    rows = [json.loads(line) for line in BUILTIN_DATASETS["demo-preference"].read_text().splitlines()]
    train_file.write_text("".join(json.dumps(r) + "\n" for r in rows[:100]))
    rm, rm_minutes = train(store, "rm_demo.yaml", dataset=str(train_file), max_steps=60)
    return train_file, rm, rm_minutes


def _preference(store, task: str, preset: str, **overrides) -> list[tuple]:
    train_file, rm, rm_minutes = _pairs_and_judge(store)
    policy, minutes = train(store, preset, dataset=str(train_file), **overrides)
    scorers = [{"type": "reward_model", "name": "rm", "params": {"model": rm.id}}]
    # held out: demo-prompts, everyday requests none of the pairs asks
    summary, eval_minutes = evaluate(store, ["base", f"run:{policy.id}"], "demo-prompts", scorers, 48)
    rate = summary.models[1].win_rate or 0.0
    return [(f"{task}: win rate vs base (rm judge)", 0.5, rate, rm_minutes + minutes + eval_minutes, ">= 0.65",
             rate >= 0.65)]


def dpo(store) -> list[tuple]:
    return _preference(store, "dpo on labels", "dpo_labels.yaml")


def orpo(store) -> list[tuple]:
    return _preference(store, "orpo on labels", "orpo_demo.yaml")


def simpo(store) -> list[tuple]:
    return _preference(store, "simpo on labels", "simpo_demo.yaml")


def online_dpo(store) -> list[tuple]:
    run, minutes = train(store, "online_dpo_demo.yaml", **{"eval.dataset": "", "eval.steps": 0, "save_steps": 0})
    scorers = [{"type": "numeric_match", "name": "right", "params": {"column": "answer"}}]
    summary, eval_minutes = evaluate(store, [EMBEDDED, f"run:{run.id}"], "demo-arithmetic-eval", scorers, 16)
    base, tuned = (m.cells["right"].mean for m in summary.models)
    return [("online dpo arithmetic: right number", base, tuned, minutes + eval_minutes, "> base", tuned > base)]


def gkd(store) -> list[tuple]:
    """A teacher that answers with the number alone, distilled into a fresh student on the same prompts."""
    teacher, teacher_minutes = train(store, "sft_number_format.yaml")
    student, minutes = train(store, "gkd_demo.yaml", dataset="demo-number-format", max_steps=60, save_steps=0,
                             **{"gkd.teacher": f"run:{teacher.id}", "gkd.max_new_tokens": 16, "max_length": 128})
    scorers = [{"type": "numeric_match", "name": "right", "params": {"column": "answer"}},
               {"type": "regex", "name": "strict", "weight": 0.0, "params": {"pattern": STRICT}}]
    summary, eval_minutes = evaluate(store, [EMBEDDED, f"run:{teacher.id}", f"run:{student.id}"],
                                     "demo-arithmetic-eval", scorers, 16)
    base, taught, learned = (m.cells["strict"].mean for m in summary.models)
    moved = (learned - base) / (taught - base) if taught != base else 0.0
    return [(f"gkd: number only (teacher {taught:.3f})", base, learned, teacher_minutes + minutes + eval_minutes,
             ">= half gap", moved >= 0.5)]


def ppo(store) -> list[tuple]:
    run, minutes = train(store, "ppo_arithmetic.yaml")
    rows = store.metrics_since(run.id)
    series = {n: [(m["step"], m["value"]) for m in rows if m["name"] == n] for n in ("eval_reward", "objective/kl")}
    kl = dict(series["objective/kl"])
    print("  step  held-out eval_reward  kl")
    for step, value in series["eval_reward"]:
        print(f"  {step:4}  {value:20.4f}  {kl.get(step, float('nan')):.4f}")
    # each step's KL is an estimate from 8 sampled answers (negative at times): bounded means its mean over the
    # last 10 steps, the largest single step printed beside it
    kls = [v for _, v in series["objective/kl"]]
    late_kl = sum(kls[-10:]) / len(kls[-10:])
    print(f"  KL: mean of the last 10 steps {late_kl:.4f}, largest single step {max(kls):.4f}")
    scorers = [{"type": "numeric_match", "name": "right", "params": {"column": "answer"}}]
    summary, eval_minutes = evaluate(store, [EMBEDDED, f"run:{run.id}"], "demo-arithmetic-eval", scorers, 16)
    base, tuned = (m.cells["right"].mean for m in summary.models)
    return [("ppo arithmetic: right number on the held-out sums", base, tuned, minutes + eval_minutes,
             "rises, KL < 1", tuned > base and late_kl < 1)]


def calculator(store) -> list[tuple]:
    """The base answering alone, then the warm-up and GRPO calling the calculator as GRPO trains with it."""
    from backend.config import load_config

    grpo_config = load_config(REPO / "presets" / "grpo_calculator.yaml")
    with_tools = {"tools": [t.model_dump() for t in grpo_config.tools],
                  "chat_template": grpo_config.data.chat_template,
                  "max_tool_calling_iterations": grpo_config.rl.max_tool_calling_iterations}
    right = [{"type": "numeric_match", "name": "right", "params": {"column": "answer"}}]
    dataset = "demo-calculator-eval"
    base, base_minutes = evaluate(store, [EMBEDDED], dataset, right, 32)
    warm, warm_train = train(store, "sft_calculator.yaml")
    warm_eval, warm_minutes = evaluate(store, [f"run:{warm.id}"], dataset, right, 64, **with_tools)
    run, grpo_train = train(store, "grpo_calculator.yaml", model=f"run:{warm.id}",
                            **{"eval.dataset": "", "eval.steps": 0})  # judged below, on the same held-out rows
    grpo_eval, grpo_minutes = evaluate(store, [f"run:{run.id}"], dataset, right, 64, **with_tools)
    stages = [("base, no tools", base, base_minutes), ("sft warm-up + calculator", warm_eval,
                                                        warm_train + warm_minutes),
              ("grpo + calculator", grpo_eval, grpo_train + grpo_minutes)]
    print(f"\n  {'stage':28} {'right':>6} {'calls calculator':>17} {'minutes':>8}")
    for name, summary, minutes in stages:
        cells = summary.models[0].cells
        used = f"{cells['used_tool'].mean:17.3f}" if "used_tool" in cells else f"{'-':>17}"
        print(f"  {name:28} {cells['right'].mean:6.3f} {used} {minutes:8.1f}", flush=True)
    tuned = grpo_eval.models[0].cells
    right_rate, used = tuned["right"].mean, tuned["used_tool"].mean
    total = sum(minutes for _, _, minutes in stages)
    return [("calculator: right number (base without tools)", base.models[0].cells["right"].mean, right_rate, total,
             ">= 0.80", right_rate >= 0.8),
            ("calculator: episodes calling it", 0.0, used, total, ">= 0.90", used >= 0.9)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="grpo,dpo,ppo",
                   help="of grpo, grpo-warm, dpo, ppo, calculator, orpo, simpo, online_dpo, gkd")
    p.add_argument("--workspace", help="keep the runs here (default: a temporary folder)")
    a = p.parse_args()
    from backend.runs.store import RunStore

    tasks = {"grpo": grpo, "grpo-warm": grpo_warm, "dpo": dpo, "ppo": ppo, "calculator": calculator, "orpo": orpo,
             "simpo": simpo, "online_dpo": online_dpo, "gkd": gkd}
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(a.workspace or tmp)
        rows = []
        for name in a.tasks.split(","):
            print(f"\n== {name}", flush=True)
            rows += tasks[name](store)
    print(f"\n{'task':46} {'base':>6} {'trained':>8} {'minutes':>8} {'target':>14}  verdict")
    for task, base, trained, minutes, target, ok in rows:
        print(f"{task:46} {base:6.3f} {trained:8.3f} {minutes:8.1f} {target:>14}  {'met' if ok else 'NOT met'}")
    return 0 if all(r[-1] for r in rows) else 1


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
