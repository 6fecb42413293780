#!/usr/bin/env python
"""From the Start click to the first point on the live plot, in a real chromium driving the real UI, on the
embedded model with the Train tab's SFT defaults: cold (every run starts a supervisor and a worker that imports
torch, transformers and TRL) and warm (the server keeps a supervisor waiting with those
imports done, and forks the worker from it: backend/runs/warm.py). Median of N clicks each; targets: cold <=
12 s, warm <= 5 s.

  .venv/bin/python bench/start_latency.py [--repeats 5] [--modes cold,warm]

Each click's run is stopped once its first point is plotted, and the next click waits until the run has ended
and (warm) a warm process is waiting again: the figure is a user's Start on an idle workbench.

Measured figures: bench/README.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


TARGETS = {"cold": 12.0, "warm": 5.0}


def measure(mode: str, repeats: int) -> tuple[list[float], list]:
    """Each counted click's seconds to the first plotted point, and where they went: submit (the UI's checks
    and the store's row), queue (until a supervisor has it), start worker (fork, or a new process), load +
    first step (imports, model, data, the step), first poll (the Runs tab reading and drawing it)."""
    from playwright.sync_api import sync_playwright

    from backend.runs import warm
    from backend.runs.jobs import stop_run
    from backend.runs.store import RunStore
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, ui_process
    from tests.browser.test_ui import PLOT_POINTS

    times, splits = [], []
    warm_on = {"WORKBENCH_WARM_WORKER": "1" if mode == "warm" else "0"}
    with tempfile.TemporaryDirectory() as ws, ui_process(ws, env=warm_on) as url:
        store = RunStore(ws)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(180_000)
            page.goto(url)
            page.wait_for_selector("#model")
            for i in range(repeats + 1):  # the first click converts / caches the model: not counted
                while store.list_runs(("queued", "running")):
                    time.sleep(0.2)
                if mode == "warm":
                    while not list(warm.warm_dir(ws).glob("*.ready")):
                        time.sleep(0.2)
                page.get_by_role("tab", name="Train").click()
                time.sleep(1.0)
                before = {r.id for r in store.list_runs()}
                t0 = time.time()
                page.click("#start")
                while not (new := [r for r in store.list_runs() if r.id not in before]):
                    time.sleep(0.02)
                run_id, marks = new[0].id, {}
                while time.time() - t0 < 120:  # each moment on the way, as the store sees it
                    run = store.get_run(run_id)
                    if run.worker_pid and "worker" not in marks:
                        marks["worker"] = time.time()
                    if store.metrics_since(run_id):
                        break
                    time.sleep(0.02)
                page.get_by_role("tab", name="Runs").click()  # the live plot of the run just started
                page.wait_for_function(
                    f"() => document.querySelector('#progress').textContent.includes({new[0].name!r})"
                    f" && ({PLOT_POINTS})() >= 1")
                took = time.time() - t0
                run = store.get_run(run_id)
                first_metric = min(m["time"] for m in store.metrics_since(run_id))
                moments = [("submit", run.created_at), ("queue", run.started_at or run.created_at),
                           ("start worker", marks.get("worker", run.train_started_at or first_metric)),
                           ("load + first step", first_metric), ("first poll", t0 + took)]
                split, last = [], t0
                for name, at in moments:
                    split.append((name, max(0.0, at - last)))
                    last = max(last, at)
                splits.append(split)
                stop_run(store, run_id)
                print(f"  {mode} click {i}: first point after {took:.1f} s: "
                      + ", ".join(f"{name} {secs:.2f}" for name, secs in split)
                      + (" (not counted)" if not i else ""), flush=True)
                if i:
                    times.append(took)
            browser.close()
    return times, splits[1:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--modes", default="cold,warm")
    a = p.parse_args()
    results = {m: measure(m, a.repeats) for m in a.modes.split(",")}
    print(f"\nStart click -> first plotted point, embedded model, SFT defaults, median of {a.repeats}:")
    for mode, (times, splits) in results.items():
        target = TARGETS[mode]
        print(f"  {mode:5} {statistics.median(times):5.1f} s  (min {min(times):.1f}, max {max(times):.1f})"
              f"  target <= {target:g} s: {'ok' if statistics.median(times) <= target else 'MISSED'}")
        print("        where the seconds go (medians): " + ", ".join(
            f"{name} {statistics.median(s[k][1] for s in splits):.2f}" for k, (name, _) in enumerate(splits[0])))
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
