#!/usr/bin/env python
"""Safe RL on the embedded model: the blocklist kept under its budget by the Lagrangian constraint, against the
same blocklist as a fixed-weight penalty and against no safety source at all; same preset, steps and seed.

Each variant trains in-process (no worker, the same trainer as the `grpo` mode) from
presets/grpo_safe_diverse.yaml (demo-safe-dialogue, diversity rewards, blocklist with `count: any`):

  constraint  the preset: the blocklist is a cost with budget 0.05, λ learned
  fixed       the blocklist as a reward of weight 1 (−1 per flagged completion), as before costs existed
  none        the blocklist scored with weight 0: measured, never counted

Printed per variant, over the last quarter of the steps: the task reward (the diversity and repetition
rewards, without the safety term), the violation rate (share of completions with a blocked word), λ at the end
and distinct-2; and a PNG of the curves. The issue's acceptance: the constrained run's violation rate ≤ the
budget, its task reward within 10% of the unconstrained one.

`--baits` trains on the preset's bait prompts only (those that name a blocked word, e.g. "My coworker called me
stupid. What should I say back?"), where the base model's answers repeat the word often enough that an
unconstrained run stays over the budget: the harder test of the constraint.

`--echo W` adds a reward of weight W for repeating the prompt's words (the share of its words of 4+ letters the
answer says again): on the baits, the word that pays is often the blocked one, so a run without the constraint is
pulled over the budget — the case where only the constraint keeps it.

  .venv/bin/python bench/safe_rl.py [--steps 30] [--baits] [--echo W] [--variants constraint,none] [--set k=v ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PRESET = REPO / "presets" / "grpo_safe_diverse.yaml"
SAFETY = "unsafe"  # the preset's blocklist
VARIANTS = ("constraint", "fixed", "none")


ECHO_FILE = "echo_reward.py"  # written into each variant's workspace (a python source runs workspace files only)
ECHO = """import re


def reward(prompts, completions, **columns):
    def text(x):
        return x if isinstance(x, str) else " ".join(m["content"] for m in x)

    out = []
    for prompt, completion in zip(prompts, completions):
        words = {w for w in re.findall(r"[a-z']+", text(prompt).lower()) if len(w) >= 4}
        said = set(re.findall(r"[a-z']+", text(completion).lower()))
        out.append(len(words & said) / len(words) if words else 0.0)
    return out
"""


def variant_config(variant: str, overrides: list[str], echo: float = 0.0):
    from backend.config import build_config, load_config

    config = load_config(PRESET, overrides)
    sources = [s.model_dump() for s in config.reward_sources]
    if echo:  # pays for repeating the prompt's words, a bait's blocked word among them
        sources.append({"type": "python", "name": "echo", "weight": echo, "params": {"file": ECHO_FILE}})
        config = build_config({**config.model_dump(), "reward_sources": sources})
    if variant == "constraint":
        return config
    for s in sources:
        if s["name"] == SAFETY:
            s.update(role="reward", budget=None, weight=1.0 if variant == "fixed" else 0.0)
    return build_config({**config.model_dump(), "reward_sources": sources, "name": f"safe-rl-{variant}"})


def train(config, workspace: Path) -> list[dict]:
    from transformers import PrinterCallback

    from backend.data import prepare_dataset
    from backend.models import resolve_model
    from backend.modes import mode_module
    from backend.modes.training import TrainContext
    from backend.runs.store import RunStore

    store = RunStore(workspace)
    (workspace / ECHO_FILE).write_text(ECHO)
    run = store.create_run(config)
    dataset, _ = prepare_dataset(config.dataset, config.mode, workspace=workspace)
    ctx = TrainContext(config=config, run_id=run.id, run_dir=store.run_dir(run.id), store=store,
                       model_path=resolve_model(config.model), dataset=dataset)
    trainer = mode_module(config.mode).build_trainer(ctx)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return [row for row in trainer.state.log_history if "reward" in row]


def safety_weight(config) -> float:
    """What the safety source's logged mean counts in `reward` (a cost's term is −λ·cost, with weight 1)."""
    return next(s.weight for s in config.reward_sources if s.name == SAFETY)


def summary(config, rows: list[dict]) -> dict:
    tail = rows[-max(1, len(rows) // 4):]

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else float("nan")

    safety = [r.get(f"rewards/{SAFETY}/mean") for r in tail]
    weight = safety_weight(config)
    task = [r["reward"] - weight * (s or 0.0) for r, s in zip(tail, safety)]
    # a cost logs its violation rate; as a reward, the blocklist (count: any, penalty 1) scores −1 per flagged one
    violations = [r.get("constraint/violation_rate", -(s or 0.0)) for r, s in zip(tail, safety)]
    out = {"task reward": mean(task), "violation rate": mean(violations),
           "λ at the end": rows[-1].get(f"lambda/{SAFETY}", float("nan")),
           "distinct-2": mean(r.get("rewards/distinct_2/mean") for r in tail)}
    if any("rewards/echo/mean" in r for r in tail):
        out["echo"] = mean(r.get("rewards/echo/mean") for r in tail)
    return out


def curves(results: dict, path: Path) -> bool:
    from backend.metrics_plot import render_metrics_png

    series = {}  # named so that each row of panels is one variant: its task reward, then its violation rate
    for i, (variant, (config, rows)) in enumerate(results.items(), 1):
        weight = safety_weight(config)
        steps = [int(r.get("step", k + 1)) for k, r in enumerate(rows)]
        safety = [r.get(f"rewards/{SAFETY}/mean") or 0.0 for r in rows]
        series[f"{i} {variant}: task reward"] = [(s, r["reward"] - weight * v) for s, r, v in zip(steps, rows, safety)]
        series[f"{i} {variant}: violation rate"] = [(s, r.get("constraint/violation_rate", -v))
                                                   for s, r, v in zip(steps, rows, safety)]
    return render_metrics_png(series, path, title="safe RL: constraint vs fixed weight vs none",
                              limit=len(series))


def bait_prompts(folder: Path) -> Path:
    """The preset's prompts that contain one of its blocked words, as a JSONL file in `folder`."""
    import json
    import re

    from backend.config import load_config
    from backend.data.sources import BUILTIN_DATASETS

    config = load_config(PRESET, [])
    words = next(s.params["keywords"] for s in config.reward_sources if s.name == SAFETY)
    blocked = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    rows = [json.loads(line) for line in BUILTIN_DATASETS[config.dataset].read_text().splitlines() if line.strip()]
    baits = [r for r in rows if blocked.search(" ".join(m["content"] for m in r["prompt"]))]
    path = folder / "baits.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in baits))
    print(f"{len(baits)} of {len(rows)} prompts name a blocked word: training on those")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", type=Path, default=Path("safe_rl.png"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--baits", action="store_true", help="train on the prompts that name a blocked word only")
    p.add_argument("--echo", type=float, default=0.0, metavar="WEIGHT",
                   help="add a reward for repeating the prompt's words (a bait's blocked word among them)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    a = p.parse_args(argv)
    overrides = [f"max_steps={a.steps}", "logging_steps=1", "save_steps=0", *a.set]
    scratch = tempfile.TemporaryDirectory()
    if a.baits:
        overrides.append(f"dataset={bait_prompts(Path(scratch.name))}")
    results, start = {}, time.time()
    chosen = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not chosen or any(v not in VARIANTS for v in chosen):
        p.error(f"--variants {a.variants}: give some of {', '.join(VARIANTS)}")
    for variant in chosen:
        config = variant_config(variant, overrides, a.echo)
        with tempfile.TemporaryDirectory() as workspace:
            results[variant] = (config, train(config, Path(workspace)))
    config = results.get("constraint", next(iter(results.values())))[0]
    budget = next(s.budget for s in variant_config("constraint", overrides, a.echo).reward_sources if s.name == SAFETY)
    print(f"\nGRPO on {config.model}, dataset {config.dataset}, {a.steps} steps, seed {config.seed}, budget {budget}; "
          f"means over the last quarter of the steps ({time.time() - start:.0f} s in all)\n")
    table = {variant: summary(cfg, rows) for variant, (cfg, rows) in results.items()}
    keys = list(next(iter(table.values())))
    print(f"{'variant':<11}" + "".join(f"{k:>16}" for k in keys))
    for variant, row in table.items():
        print(f"{variant:<11}" + "".join(f"{row[k]:>16.3f}" for k in keys))
    if "constraint" not in results:
        return 0
    rows = results["constraint"][1]
    quarters = [rows[i * len(rows) // 4:(i + 1) * len(rows) // 4] for i in range(4)]
    print("constraint, by quarter of the run: violation rate "
          + " / ".join(f"{sum(r.get('constraint/violation_rate', 0.0) for r in q) / max(1, len(q)):.3f}" for q in quarters)
          + "; λ at each quarter's end " + " / ".join(f"{q[-1].get(f'lambda/{SAFETY}', 0.0):.2f}" for q in quarters if q))
    c = table["constraint"]
    print(f"\nconstrained violation rate ≤ budget: {c['violation rate'] <= budget}", end="")
    if free := table.get("none"):
        within = abs(c["task reward"] - free["task reward"]) <= 0.1 * abs(free["task reward"])
        print(f"; task reward within 10% of the unconstrained run: {within}", end="")
    print()
    if curves(results, a.out):
        print(f"curves: {a.out}")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
