#!/usr/bin/env python
"""PPO quality on the embedded model: the reward curve and the KL from the reference over N steps with rule
rewards, printed as a table with the time per step.

It trains in-process (no worker, same trainer as the `ppo` mode) from presets/ppo_demo.yaml (demo-math, LoRA
r=8 on q_proj,v_proj, completions of up to 32 tokens, 2 per prompt, kl_coef 0.05, separate value model) with
settings that move within ten steps: 8 completions per rollout, 4 PPO epochs, learning rate 5e-4. The reward is
a length rule (1 at 16 tokens, falling linearly to 0 at 0 and 32), which gives every completion a graded score;
`--reward preset` keeps the preset's correctness + format sources instead (mostly 0 for the first dozens of
steps on a 135M model). Any setting can be overridden with --set, as in `launch.py train`.

  .venv/bin/python bench/ppo_quality.py [--steps 10] [--reward length|preset] [--set key=value ...]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BENCH_SETTINGS = ["learning_rate=0.0005", "per_device_train_batch_size=8", "ppo.num_ppo_epochs=4"]
LENGTH_SOURCES = [{"type": "length", "name": "length", "params": {"target": 16, "unit": "tokens", "tolerance": 1.0}}]


def train(steps: int, reward: str, overrides: list[str], workspace: Path):
    from transformers import PrinterCallback

    from backend.config import build_config, load_config
    from backend.data import prepare_dataset
    from backend.models import resolve_model
    from backend.modes import mode_module
    from backend.runs.store import RunStore
    from backend.modes.training import TrainContext

    sets = [f"max_steps={steps}", "logging_steps=1", *BENCH_SETTINGS, *overrides]
    config = load_config(REPO / "presets" / "ppo_demo.yaml", sets)
    if reward == "length":
        config = build_config({**config.model_dump(), "reward_sources": LENGTH_SOURCES})
    store = RunStore(workspace)
    run = store.create_run(config)
    model_path = resolve_model(config.model)
    dataset, _ = prepare_dataset(config.dataset, "ppo", workspace=workspace)
    ctx = TrainContext(config=config, run_id=run.id, run_dir=store.run_dir(run.id), store=store,
                       model_path=model_path, dataset=dataset)
    start = time.time()
    trainer = mode_module("ppo").build_trainer(ctx)
    load_time = time.time() - start
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    rows = [row for row in trainer.state.log_history if "objective/kl" in row]
    return config, rows, load_time


def table(config, rows) -> str:
    from backend.rewards import source_names

    sources = source_names(config.reward_sources)
    columns = [("step", "step", "{:>4}"), ("reward", "objective/scores", "{:>7.3f}")]
    columns += [(name[:9], f"rewards/{name}/mean", "{:>9.3f}") for name in sources]
    columns += [("KL", "objective/kl", "{:>7.3f}"), ("kl_coef", "objective/kl_coef", "{:>7.4f}"),
                ("rlhf_rew", "objective/rlhf_reward", "{:>8.3f}"), ("tokens", "completions/mean_length", "{:>6.1f}"),
                ("clipfrac", "policy/clipfrac", "{:>8.3f}"), ("approxkl", "policy/approxkl", "{:>8.4f}"),
                ("v_loss", "loss/value", "{:>7.4f}"), ("s/step", "step_time", "{:>6.1f}")]
    header = " ".join(f"{title:>{len(fmt.format(0))}}" for title, _, fmt in columns)
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(" ".join(fmt.format(row.get(key, float("nan"))) for _, key, fmt in columns))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--reward", choices=["length", "preset"], default="length")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as workspace:
        start = time.time()
        config, rows, load_time = train(a.steps, a.reward, a.set, Path(workspace))
        total = time.time() - start
    print(f"\nPPO on {config.model}, dataset {config.dataset}, {config.per_device_train_batch_size} completions "
          f"({config.rl.num_generations} per prompt) × {config.rl.max_completion_length} tokens per rollout, "
          f"{config.ppo.num_ppo_epochs} PPO epochs, value model {config.ppo.value_model}, lr {config.learning_rate}, "
          f"kl_coef {config.ppo.kl_coef}\n")
    print(table(config, rows))
    half = max(1, len(rows) // 2)
    first = sum(r["objective/scores"] for r in rows[:half]) / half
    last = sum(r["objective/scores"] for r in rows[-half:]) / half
    times = [r["step_time"] for r in rows]
    steady = times[1:] or times
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    print(f"\nreward: first {half} steps {first:.3f}, last {half} steps {last:.3f} (change {last - first:+.3f}); "
          f"final KL {rows[-1]['objective/kl']:.3f} nats")
    print(f"time per step: mean {sum(steady) / len(steady):.1f} s over steps 2-{len(times)}, first {times[0]:.1f} s; "
          f"model load {load_time:.1f} s, total {total:.0f} s, peak RSS {rss:.2f} GiB")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
