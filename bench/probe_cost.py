"""What the reward probe adds to an RL run's start: submit → first stored metric of the GRPO demo preset (embedded
model, 2 steps, cold start) with `rl.probe: off` and `warn`, interleaved, in one invocation. The probe should
cost at most one generation step (the issue's bound): compare the difference with the runs' `step_time`.

    .venv/bin/python bench/probe_cost.py [--repeats 2] [--preset presets/grpo_demo.yaml]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WORKBENCH_WARM_WORKER", "0")  # cold starts on both sides: the probe's cost alone differs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--preset", default="presets/grpo_demo.yaml")
    a = p.parse_args()
    from backend.config import load_config
    from backend.runs.jobs import submit_run
    from backend.runs.store import RunStore

    store = RunStore(tempfile.mkdtemp(prefix="probe-cost-"))
    first, steps, probes = {"off": [], "warn": []}, [], []
    for _ in range(a.repeats):
        for probe in ("off", "warn"):
            run = submit_run(store, load_config(a.preset, [f"rl.probe={probe}", "max_steps=2", "save_steps=0"]))
            t0 = time.time()
            while not store.metrics_since(run.id):
                time.sleep(0.1)
            first[probe].append(time.time() - t0)
            while store.get_run(run.id).active:
                time.sleep(0.5)
            log = (store.run_dir(run.id) / "train.log").read_text()
            steps += [float(x) for x in re.findall(r"step_time=([\d.]+)", log)]
            probes += [float(x) for x in re.findall(r"reward probe: .* in ([\d.]+) s", log)]
            print(f"rl.probe={probe}: submit -> first metric {first[probe][-1]:.1f} s", flush=True)
    off, warn = statistics.median(first["off"]), statistics.median(first["warn"])
    step = statistics.median(steps)
    print(f"median submit -> first metric: off {off:.1f} s, probe {warn:.1f} s: +{warn - off:.1f} s; the probe itself "
          f"{statistics.median(probes):.1f} s; a step {step:.1f} s; added / step = {(warn - off) / step:.2f}")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
