#!/usr/bin/env python
"""The evaluator's generation against a naive loop, same machine, one invocation.

Both sides answer the same prompts greedily with the embedded model carrying a LoRA adapter (r=16 on every
linear layer, saved as a run would save it):
  naive      PeftModel.from_pretrained, then one `generate` per prompt (how a hand-written eval loop reads)
  evaluator  backend.evals: the adapter merged into the weights, prompts sorted by length, left-padded batches
Repeats alternate (naive, evaluator, evaluator, naive, ...); medians are printed with the ratio.
Also printed: mean answer length in tokens on both sides and how many answers are identical (greedy decoding
in a padded batch may differ in float rounding only).

  target: evaluator prompts/s >= 3 x naive

  .venv/bin/python bench/eval_speed.py [--prompts 32] [--max-new-tokens 48] [--batch-size 16] [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_adapter(out: Path) -> Path:
    from peft import LoraConfig, get_peft_model

    from backend.models import load_causal_lm, load_tokenizer, resolve_model

    base = resolve_model("smollm2-135m-instruct")
    model = get_peft_model(load_causal_lm(base), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    model.save_pretrained(out)
    load_tokenizer(base).save_pretrained(out)
    return out


def prompts(n: int) -> list:
    from backend.data import BUILTIN_DATASETS

    rows = [json.loads(line) for line in BUILTIN_DATASETS["demo-prompts"].read_text().splitlines()]
    return [r["prompt"] for r in rows[:n]]


def warm_up(model, tokenizer) -> None:
    """The first generate of a process pays one-off kernel set-up (seconds here): not part of either side."""
    import torch

    with torch.inference_mode():
        model.generate(**tokenizer(["warm up"], return_tensors="pt"), max_new_tokens=4, do_sample=False,
                       pad_token_id=tokenizer.pad_token_id)


def naive(adapter: Path, items: list, max_new_tokens: int) -> tuple[float, list[str], list[int]]:
    import torch
    from peft import PeftModel

    from backend.evals.generate import prompt_text_for
    from backend.models import load_causal_lm, load_tokenizer, resolve_model

    tokenizer = load_tokenizer(adapter)
    model = PeftModel.from_pretrained(load_causal_lm(resolve_model("smollm2-135m-instruct")), str(adapter)).eval()
    warm_up(model, tokenizer)
    start = time.perf_counter()
    answers, lengths = [], []
    for p in items:
        text, templated = prompt_text_for(tokenizer, p, True)
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=not templated)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                 top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id)
        new = out[0, enc["input_ids"].shape[1]:]
        answers.append(tokenizer.decode(new, skip_special_tokens=True).strip())
        lengths.append(int((new != tokenizer.pad_token_id).sum()))
    return time.perf_counter() - start, answers, lengths


def evaluator(adapter: Path, items: list, max_new_tokens: int, batch_size: int) -> tuple[float, list[str], list[int]]:
    from backend.evals.generate import generate_answers
    from backend.evals.spec import Generation
    from backend.models import ModelRef, load_model

    loaded = load_model(ModelRef.of_folder(adapter), merge=True)
    warm_up(loaded.model, loaded.tokenizer)
    start = time.perf_counter()
    answers = [""] * len(items)
    for idx, outs in generate_answers(loaded, items, Generation(max_new_tokens=max_new_tokens, batch_size=batch_size)):
        for i, k in zip(idx, outs):
            answers[i] = k[0]
    seconds = time.perf_counter() - start
    lengths = [len(loaded.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
    return seconds, answers, lengths


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    items = prompts(a.prompts)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = make_adapter(Path(tmp) / "adapter")
        times = {"naive": [], "evaluator": []}
        outputs = {}
        order = [("naive", "evaluator"), ("evaluator", "naive")]
        for r in range(a.repeats):
            for side in order[r % 2]:
                if side == "naive":
                    s, answers, lengths = naive(adapter, items, a.max_new_tokens)
                else:
                    s, answers, lengths = evaluator(adapter, items, a.max_new_tokens, a.batch_size)
                times[side].append(s)
                outputs[side] = (answers, lengths)
                print(f"  {side:9}  {len(items) / s:6.2f} prompts/s  ({s:.1f} s)", flush=True)
    rate = {k: len(items) / statistics.median(v) for k, v in times.items()}
    same = sum(x == y for x, y in zip(outputs["naive"][0], outputs["evaluator"][0]))
    print(f"\n{'side':10} {'prompts/s':>10} {'mean answer tokens':>19}")
    for side in ("naive", "evaluator"):
        lengths = outputs[side][1]
        print(f"{side:10} {rate[side]:10.2f} {sum(lengths) / len(lengths):19.1f}")
    ratio = rate["evaluator"] / rate["naive"]
    print(f"\nevaluator / naive: {ratio:.2f}x (target >= 3.00: {'met' if ratio >= 3 else 'NOT met'}); "
          f"identical answers: {same}/{len(items)}")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
