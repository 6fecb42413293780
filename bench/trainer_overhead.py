#!/usr/bin/env python
"""The workbench's worker against bare TRL scripts: same work, same machine, one invocation.

For each mode the workbench trains through the whole product path (submit → supervisor → worker, in the
environment accelerate launch gives it → store) and a bare script trains with TRL directly, as a user would
write it by hand: same embedded model, LoRA r=8 on q_proj,v_proj, rows, seed and steps, fp32 on CPU. Runs
alternate (workbench, bare, bare, workbench, ...) to spread load noise; medians are printed side by side.

  sft   throughput in tokens/s                       target: workbench / bare >= 0.95
  dpo   throughput in preference pairs/s             target: workbench / bare >= 0.95
  grpo  time per optimizer step (generation included) target: workbench / bare <= 0.80 (the workbench
        prefills each prompt once and generates with the adapter merged, its update reads each prompt once for
        all its completions and its LM head projects only completion positions; LoRA dropout 0 on both sides)
  rloo  the same, with TRL's RLOOTrainer

  .venv/bin/python bench/trainer_overhead.py [--modes dpo,grpo] [--repeats 2] [--steps N]

Peak resident memory of each side is printed too (the worker logs it as `memory/peak_rss_gb`).

Both sides of GRPO score with the same two rules (numeric answer, <answer> format): the workbench through its
reward sources and sample recorder, the bare script through two plain functions. Also printed: the time from
Start to the first metric row stored, which is the wait a user sees. Measured figures: bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LORA = {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
# save_steps 0: no checkpoints, as the bare scripts write none (the workbench's default, one every 10% of the run,
# is ten in a 20-step run: on an H200 they were most of the gap to bare TRL for a 1.7B model's LoRA steps)
COMMON = {"finetuning": "lora", "lora": LORA, "learning_rate": 1e-4, "seed": 42, "logging_steps": 1,
          "precision": "fp32", "gradient_accumulation_steps": 1, "save_steps": 0}

# Each mode: the workbench run settings, the default step count, the unit and which way is better.
MODES = {
    "sft": {"settings": {"mode": "sft", "dataset": "demo-sft-instructions", "per_device_train_batch_size": 4,
                         "max_length": 256},
            "steps": 20, "unit": "tokens/s", "higher_is_better": True, "target": 0.95},
    "dpo": {"settings": {"mode": "dpo", "dataset": "demo-preference", "per_device_train_batch_size": 2,
                         "max_length": 256, "dpo": {"beta": 0.1, "loss_type": "sigmoid"}},
            "steps": 20, "unit": "pairs/s", "higher_is_better": True, "target": 0.95},
    "grpo": {"settings": {"mode": "grpo", "dataset": "demo-math", "per_device_train_batch_size": 4,
                          # no reward probe: it would draw from the RNG before the first step, and both sides
                          # must sample the same completions
                          "rl": {"num_generations": 4, "max_completion_length": 32, "temperature": 1.0,
                                 "beta": 0.0, "loss_type": "dapo", "probe": "off"},
                          "reward_sources": [
                              {"type": "numeric_match", "name": "correct", "weight": 1.0,
                               "params": {"column": "answer"}},
                              {"type": "regex", "name": "format", "weight": 0.5,
                               "params": {"pattern": r"<answer>\s*-?\d+\s*</answer>"}}],
                          # no LoRA dropout (both sides): the workbench then generates with the adapter merged
                          "lora": {**LORA, "dropout": 0.0}},
             "steps": 8, "unit": "s/step", "higher_is_better": False, "target": 0.80},
}
MODES["rloo"] = {**MODES["grpo"], "settings": {**MODES["grpo"]["settings"], "mode": "rloo",
                                              "rl": {k: v for k, v in MODES["grpo"]["settings"]["rl"].items()
                                                     if k != "loss_type"}}}


# --- the bare TRL side -------------------------------------------------------------------------------------------

def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def _bare_rewards():
    answer = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
    number = re.compile(r"-?\d+(?:\.\d+)?")
    fmt = re.compile(r"<answer>\s*-?\d+\s*</answer>")

    def correct(prompts, completions, **kwargs):
        scores = []
        for c, ref in zip(completions, kwargs["answer"]):
            text = _text(c)
            inner = answer.findall(text)
            found = number.findall(inner[-1] if inner else text)
            scores.append(float(bool(found) and abs(float(found[-1]) - float(ref)) < 1e-6))
        return scores

    def format_(prompts, completions, **kwargs):
        return [float(bool(fmt.search(_text(c)))) for c in completions]

    return [correct, format_], [1.0, 0.5]


def settings_of(mode: str, overrides: dict | None = None) -> dict:
    """The run settings of one side-by-side case: the common ones, the mode's, then any overrides."""
    return {**COMMON, **MODES[mode]["settings"], **(overrides or {})}


def bare_trl(mode: str, model: str, steps: int, overrides: dict | None = None) -> dict:
    """What a user would write by hand with TRL: nothing of the workbench in the loop but the data loader.
    `overrides` are workbench settings (precision, quantization, use_liger_kernel, lora, rl, batch, lengths),
    turned into TRL's arguments here by hand."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.data import prepare_dataset
    from backend.models import resolve_model
    from backend.modes.training import peak_memory

    s = settings_of(mode, overrides)
    cuda = torch.cuda.is_available()
    bf16 = s["precision"] == "bf16" or (s["precision"] == "auto" and cuda)
    path = resolve_model(model)
    dataset, _ = prepare_dataset(s["dataset"], mode)
    tokenizer = AutoTokenizer.from_pretrained(path)
    load = {"dtype": torch.bfloat16 if bf16 else torch.float32}
    if s.get("quantization") == "4bit":
        from transformers import BitsAndBytesConfig

        compute = torch.bfloat16 if bf16 else torch.float32
        load.update(quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_use_double_quant=True,
                                                           bnb_4bit_compute_dtype=compute), device_map={"": 0})
    policy = AutoModelForCausalLM.from_pretrained(path, **load)
    lo = s["lora"]
    modules = lo["target_modules"]
    lora = LoraConfig(r=lo["r"], lora_alpha=lo["alpha"], lora_dropout=lo["dropout"], task_type="CAUSAL_LM",
                      target_modules="all-linear" if modules == ["all-linear"] else modules)
    with tempfile.TemporaryDirectory() as out:
        common = dict(output_dir=out, max_steps=steps, per_device_train_batch_size=s["per_device_train_batch_size"],
                      learning_rate=s["learning_rate"], seed=42, logging_steps=1, bf16=bf16, use_cpu=not cuda,
                      use_liger_kernel=s.get("use_liger_kernel", False), gradient_checkpointing=False,
                      save_strategy="no", report_to="none", disable_tqdm=True)
        if mode == "sft":
            from trl import SFTConfig, SFTTrainer
            trainer = SFTTrainer(model=policy, args=SFTConfig(max_length=s["max_length"], **common),
                                 train_dataset=dataset, processing_class=tokenizer, peft_config=lora)
        elif mode == "dpo":
            from trl import DPOConfig, DPOTrainer
            args = DPOConfig(max_length=s["max_length"], beta=s["dpo"]["beta"], loss_type=[s["dpo"]["loss_type"]],
                             **common)
            trainer = DPOTrainer(model=policy, ref_model=None, args=args, train_dataset=dataset,
                                 processing_class=tokenizer, peft_config=lora)
        else:
            from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer
            funcs, weights = _bare_rewards()
            rl = s["rl"]
            config, trainer_cls = (GRPOConfig, GRPOTrainer) if mode == "grpo" else (RLOOConfig, RLOOTrainer)
            extra = {"loss_type": rl["loss_type"]} if mode == "grpo" else {}
            args = config(num_generations=rl["num_generations"], max_completion_length=rl["max_completion_length"],
                          temperature=rl["temperature"], beta=rl["beta"], reward_weights=weights, **extra, **common)
            trainer = trainer_cls(model=policy, reward_funcs=funcs, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, peft_config=lora)
        from transformers import TrainerCallback

        class LogTimes(TrainerCallback):  # when each step's log row is written, as the workbench stores it
            def on_log(self, args, state, control, logs=None, **kwargs):
                times[state.global_step] = time.time()

        times: dict[int, float] = {}
        trainer.add_callback(LogTimes)
        trainer.train()
    memory = peak_memory()
    return {**measure(mode, trainer.state.log_history, steps, s["per_device_train_batch_size"], times),
            "peak_rss_gb": memory["memory/peak_rss_gb"], "gpu_peak_gb": memory.get("memory/gpu_peak_gb")}


# --- the workbench side ------------------------------------------------------------------------------------------

def workbench(mode: str, model: str, steps: int, workspace: Path, overrides: dict | None = None,
              timeout_s: float | None = None) -> dict:
    from backend.config import build_config
    from backend.runs.jobs import stop_run, submit_run
    from backend.runs.logs import log_tail
    from backend.runs.store import RunStore

    store = RunStore(workspace)
    t0 = time.time()
    s = settings_of(mode, overrides)
    run = submit_run(store, build_config({**s, "model": model, "max_steps": steps, "name": f"bench-{mode}"}))
    first_metric = None
    while (r := store.get_run(run.id)).active:
        if first_metric is None and (rows := store.metrics_since(run.id)):
            first_metric = rows[0]["time"] - t0
        if timeout_s and time.time() - t0 > timeout_s:
            stop_run(store, run.id, force=True)
            raise RuntimeError(f"workbench {mode} run {r.id} still running after {timeout_s:.0f} s:\n"
                               f"{log_tail(store, run.id)}")
        time.sleep(0.2)
    if r.status != "completed":
        raise RuntimeError(f"workbench {mode} run {r.id} ended {r.status}: {r.error}\n{log_tail(store, run.id)}")
    rows = store.metrics_since(run.id)
    by_step: dict[int, dict] = {}
    for row in rows:
        by_step.setdefault(row["step"], {})[row["name"]] = row["value"]
    times = {row["step"]: row["time"] for row in rows if row["name"] == "loss"}
    result = measure(mode, list(by_step.values()), steps, s["per_device_train_batch_size"], times)
    result["start_to_first_metric"] = first_metric or rows[0]["time"] - t0
    for key, name in (("peak_rss_gb", "memory/peak_rss_gb"), ("gpu_peak_gb", "memory/gpu_peak_gb")):
        result[key] = max((row["value"] for row in rows if row["name"] == name), default=None)
    return result


# --- shared ------------------------------------------------------------------------------------------------------

def measure(mode: str, history: list[dict], steps: int, batch: int, log_times: dict[int, float] | None = None) -> dict:
    """The mode's figure from a trainer log history (a list of logged dicts, as TRL keeps it), with seconds
    per step and tokens per second (where the trainer counts tokens) for any mode, and the median step once
    warm (`log_times`: when each step's log row was written; the first two steps, which compile and
    autotune, left out)."""
    runtime = next(row["train_runtime"] for row in history if "train_runtime" in row)
    tokens = max((row.get("num_tokens", 0) for row in history), default=0)
    if mode == "sft":
        value = tokens / runtime
    elif mode == "dpo":
        value = steps * batch / runtime
    else:
        value = runtime / steps
    lengths = [row["completions/mean_length"] for row in history if "completions/mean_length" in row]
    logged = sorted((log_times or {}).items())
    gaps = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(logged, logged[1:]) if s0 >= 2 and s1 > s0]
    return {"value": value, "runtime": runtime, "s_per_step": runtime / steps,
            "warm_s_per_step": statistics.median(gaps) if gaps else None,
            "tokens_per_s": tokens / runtime if tokens else None,
            "mean_completion_length": statistics.fmean(lengths) if lengths else None}


def run_bare(mode: str, model: str, steps: int, overrides: dict | None = None,
             timeout_s: float | None = None) -> dict:
    # A fresh interpreter per run, as the workbench's worker is: no warm caches carried between the two sides.
    out = subprocess.run([sys.executable, __file__, "--bare", mode, "--model", model, "--steps", str(steps),
                          "--settings", json.dumps(overrides or {})],
                         capture_output=True, text=True, cwd=REPO, timeout=timeout_s)
    if out.returncode:
        raise RuntimeError(f"bare TRL {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="dpo,grpo", help="comma-separated, from: " + ", ".join(MODES))
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--steps", type=int, help="optimizer steps per run (default: per mode)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--bare", choices=list(MODES), help=argparse.SUPPRESS)
    p.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.bare:
        print(json.dumps(bare_trl(a.bare, a.model, a.steps or MODES[a.bare]["steps"], json.loads(a.settings))))
        return 0
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if unknown := [m for m in modes if m not in MODES]:
        p.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")

    from backend.models import resolve_model

    resolve_model(a.model)  # convert once, outside the timings
    results = {m: {"workbench": [], "bare TRL": []} for m in modes}
    with tempfile.TemporaryDirectory() as ws:
        for mode in modes:
            steps = a.steps or MODES[mode]["steps"]
            for i in range(a.repeats):
                order = ["workbench", "bare TRL"] if i % 2 == 0 else ["bare TRL", "workbench"]
                for who in order:
                    res = (workbench(mode, a.model, steps, Path(ws)) if who == "workbench"
                           else run_bare(mode, a.model, steps))
                    results[mode][who].append(res)
                    length = (f", completions {res['mean_completion_length']:.1f} tokens"
                              if res["mean_completion_length"] else "")
                    print(f"  {mode:4} {who:9} repeat {i + 1}: {res['value']:.3f} {MODES[mode]['unit']} "
                          f"({res['runtime']:.1f} s{length}, peak RSS {res['peak_rss_gb']:.2f} GiB)", flush=True)

    print(f"\n{a.model}, LoRA r=8 q,v, fp32 on CPU, median of {a.repeats} runs per side")
    print(f"{'mode':6}{'unit':>10}{'workbench':>12}{'bare TRL':>12}{'ratio':>9}{'target':>10}  verdict"
          f"{'peak RSS GiB (wb / bare)':>28}")
    for mode in modes:
        spec = MODES[mode]
        wb = statistics.median(r["value"] for r in results[mode]["workbench"])
        bare = statistics.median(r["value"] for r in results[mode]["bare TRL"])
        ratio = wb / bare
        ok = ratio >= spec["target"] if spec["higher_is_better"] else ratio <= spec["target"]
        target = f"{'>=' if spec['higher_is_better'] else '<='} {spec['target']}"
        mem = [max(r["peak_rss_gb"] for r in results[mode][who]) for who in ("workbench", "bare TRL")]
        print(f"{mode:6}{spec['unit']:>10}{wb:12.3f}{bare:12.3f}{ratio:9.3f}{target:>10}  {'ok' if ok else 'MISSED':7}"
              f"{mem[0]:>12.2f} / {mem[1]:.2f} ({mem[0] / mem[1]:.2f})")
    starts = [r["start_to_first_metric"] for m in modes for r in results[m]["workbench"]]
    print(f"Start -> first metric stored (median over all workbench runs): {statistics.median(starts):.1f} s")
    return 0


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
