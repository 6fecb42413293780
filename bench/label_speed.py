#!/usr/bin/env python
"""Labeling's pair generation as the generator runs it (the first item alone, then batches of
backend.labeling.generator.BATCH items, the trained side's adapter folded into the weights) against the naive way
(one item at a time, the adapter left as PEFT runs it: three products per adapted layer per token), one invocation.

Each item is a pair, as a base-vs-trained labeling session makes it: the embedded model and the embedded model
with a LoRA adapter (r=16 on every linear layer), both greedy, through the generator's CandidateModels.
Repeats alternate (naive, generator, generator, naive, ...); medians are printed with the ratio, the mean answer
length in tokens, and how many answers are identical (left padding and float rounding of the merged sums may
move a greedy answer).

  .venv/bin/python bench/label_speed.py [--items 16] [--max-new-tokens 64] [--repeats 2]
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

from bench.eval_speed import make_adapter, prompts  # noqa: E402


def side(fast: bool, adapter: Path, items: list, max_new_tokens: int) -> tuple[float, list[str], list[int]]:
    from backend.labeling.generator import BATCH, Candidate, CandidateModels
    from backend.models import resolve_model

    base = str(resolve_model("smollm2-135m-instruct"))
    cands = [Candidate(1, "base", base, None, 0.0, "base"), Candidate(2, "tuned", base, str(adapter), 0.0, "tuned")]
    models = CandidateModels(cands, merge=fast)
    _, tokenizer = models.loaded[base]
    for c in cands:  # one-off kernel set-up, on neither side's clock
        models.generate(c, ["warm up"], seed=0, max_new_tokens=4, top_p=1.0)
    batches = ([items[:1]] + [items[i:i + BATCH] for i in range(1, len(items), BATCH)] if fast
               else [[p] for p in items])
    answers = {c.number: [] for c in cands}
    start = time.perf_counter()
    for batch in batches:
        for c in cands:
            answers[c.number] += [a[0] for a in models.generate(c, batch, seed=0, max_new_tokens=max_new_tokens,
                                                                top_p=1.0)]
    took = time.perf_counter() - start
    answers = answers[1] + answers[2]  # every base answer, then every adapter answer, in item order
    lengths = [len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
    return took, answers, lengths


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=17)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    items = prompts(a.items)
    times = {"naive": [], "generator": []}
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        adapter = make_adapter(Path(tmp) / "adapter")
        order = [("naive", "generator"), ("generator", "naive")]
        for r in range(a.repeats):
            for name in order[r % 2]:
                took, answers, lengths = side(name == "generator", adapter, items, a.max_new_tokens)
                times[name].append(took)
                outputs[name] = (answers, lengths)
                print(f"  {name:9}  pairs {len(items) / took:5.2f}/s ({took:.1f} s)", flush=True)
    print(f"\n{'side':10} {'pairs/s':>8} {'mean answer tokens':>19}")
    rate = {}
    for name in ("naive", "generator"):
        rate[name] = len(items) / statistics.median(times[name])
        lengths = outputs[name][1]
        print(f"{name:10} {rate[name]:8.2f} {sum(lengths) / len(lengths):19.1f}")
    same = sum(x == y for x, y in zip(outputs["naive"][0], outputs["generator"][0]))
    print(f"\ngenerator / naive: {rate['generator'] / rate['naive']:.2f}x pairs/s (time {rate['naive'] / rate['generator']:.2f}x); "
          f"identical answers: {same}/{len(outputs['naive'][0])}")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
