#!/usr/bin/env python
"""PPO's rollout generation with the adapter folded into the weights (rl.merged_generation: auto, what PPO
does by default) against the adapter left as PEFT runs it (rl.merged_generation: off), one invocation.

Both sides train in-process with bench/ppo_quality.py's settings (presets/ppo_demo.yaml, 8 completions of up to
32 tokens per rollout, the length reward), alternating (off, auto, auto, off, ...). Printed per side: the median
of `timing/generate_s` (the rollout's sampling) and of `step_time` over the steps after the first, and the mean
completion length, which must match for the times to compare. Each prompt is prefilled once on both sides.

  .venv/bin/python bench/ppo_rollout_speed.py [--steps 6] [--repeats 2] [--set key=value ...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ppo_quality import train  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    sides = {"off": [], "auto": []}
    order = [("off", "auto"), ("auto", "off")]
    for r in range(a.repeats):
        for side in order[r % 2]:
            with tempfile.TemporaryDirectory() as workspace:
                _, rows, _ = train(a.steps, "length", [*a.set, f"rl.merged_generation={side}"], Path(workspace))
            steady = rows[1:] or rows
            generate = statistics.median(row["timing/generate_s"] for row in steady)
            step = statistics.median(row["step_time"] for row in steady)
            length = statistics.fmean(row["completions/mean_length"] for row in rows)
            sides[side].append((generate, step, length))
            print(f"  merged_generation={side:4}  generate {generate:.2f} s  step {step:.2f} s  "
                  f"completion {length:.1f} tokens", flush=True)
    print(f"\n{'rl.merged_generation':22} {'generate s':>10} {'step s':>8} {'mean tokens':>12}")
    medians = {}
    for side, runs in sides.items():
        medians[side] = [statistics.median(x[i] for x in runs) for i in range(3)]
        g, s, n = medians[side]
        print(f"{side:22} {g:10.2f} {s:8.2f} {n:12.1f}")
    (g_off, s_off, _), (g_on, s_on, _) = medians["off"], medians["auto"]
    print(f"\nmerged / unmerged: generation time {g_on / g_off:.2f}x, step time {s_on / s_off:.2f}x")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
