#!/usr/bin/env python
"""SFT throughput: the workbench's worker against a bare TRL SFTTrainer script, same work, same machine, one run.

Both train the embedded model with LoRA r=8 on q_proj,v_proj, batch 4, max length 256, the same rows and seed,
logging every step, fp32 on CPU. Prints tokens/s of each, their ratio (target ≥ 0.95), and the time from
Start to the first metric row stored. Runs alternate (workbench, bare, bare, workbench, ...) to spread load noise.

  .venv/bin/python bench/sft_throughput.py [--steps 20] [--repeats 2] [--model smollm2-135m-instruct]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SETTINGS = {"mode": "sft", "dataset": "demo-sft-instructions", "finetuning": "lora",
            "lora": {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]},
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "max_length": 256,
            "learning_rate": 2e-4, "seed": 42, "logging_steps": 1, "precision": "fp32"}


def bare_trl(model: str, steps: int) -> dict:
    """The baseline: what a user would write by hand with TRL, nothing of the workbench in the loop."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from backend.data import prepare_dataset
    from backend.models import resolve_model

    path = resolve_model(model)
    dataset, _ = prepare_dataset(SETTINGS["dataset"], "sft")
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=4, max_length=256,
                         learning_rate=2e-4, seed=42, logging_steps=1, bf16=False, use_cpu=True,
                         gradient_checkpointing=False, save_strategy="no", report_to="none", disable_tqdm=True)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model_ = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["q_proj", "v_proj"],
                          task_type="CAUSAL_LM")
        trainer = SFTTrainer(model=model_, args=args, train_dataset=dataset, processing_class=tokenizer,
                             peft_config=lora)
        trainer.train()
    logs = trainer.state.log_history
    tokens = max(row.get("num_tokens", 0) for row in logs)
    runtime = next(row["train_runtime"] for row in logs if "train_runtime" in row)
    return {"tokens": tokens, "runtime": runtime}


def workbench(model: str, steps: int, workspace: Path) -> dict:
    from backend.config import build_config
    from backend.jobs import submit_run
    from backend.store import RunStore

    store = RunStore(workspace)
    t0 = time.time()
    run = submit_run(store, build_config({**SETTINGS, "model": model, "max_steps": steps}))
    first_metric = None
    while (r := store.get_run(run.id)).active:
        if first_metric is None and (rows := store.metrics_since(run.id)):
            first_metric = rows[0]["time"] - t0
        time.sleep(0.2)
    if r.status != "completed":
        raise SystemExit(f"workbench run {r.id} ended {r.status}: {r.error}")
    last = store.last_metrics(run.id)
    rows = store.metrics_since(run.id)
    first_metric = first_metric or rows[0]["time"] - t0
    return {"tokens": last["num_tokens"], "runtime": last["train_runtime"], "start_to_first_metric": first_metric}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.bare:
        print(json.dumps(bare_trl(a.model, a.steps)))
        return 0

    from backend.models import resolve_model

    resolve_model(a.model)  # convert once, outside the timings
    results = {"workbench": [], "bare TRL": []}
    with tempfile.TemporaryDirectory() as ws:
        for i in range(a.repeats):
            order = ["workbench", "bare TRL"] if i % 2 == 0 else ["bare TRL", "workbench"]
            for who in order:
                if who == "workbench":
                    res = workbench(a.model, a.steps, Path(ws))
                else:
                    out = subprocess.run([sys.executable, __file__, "--bare", "--model", a.model,
                                          "--steps", str(a.steps)], capture_output=True, text=True, cwd=REPO)
                    if out.returncode:
                        raise SystemExit(out.stderr[-3000:])
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                res["tok_s"] = res["tokens"] / res["runtime"]
                results[who].append(res)
                print(f"  {who:10} repeat {i + 1}: {res['tok_s']:.1f} tok/s over {res['runtime']:.1f} s", flush=True)

    wb = statistics.median(r["tok_s"] for r in results["workbench"])
    bare = statistics.median(r["tok_s"] for r in results["bare TRL"])
    start = statistics.median(r["start_to_first_metric"] for r in results["workbench"])
    print(f"\nSFT {a.steps} steps, {a.model}, LoRA r=8 q,v, batch 4, max length 256, median of {a.repeats}")
    print(f"{'':24}{'tokens/s':>10}")
    print(f"{'workbench worker':24}{wb:10.1f}")
    print(f"{'bare TRL SFTTrainer':24}{bare:10.1f}")
    print(f"ratio workbench / bare: {wb / bare:.3f}  (target >= 0.95)")
    print(f"Start -> first metric stored: {start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
