#!/usr/bin/env python
"""The GPU paths, run for real: each case trains through the whole product path (submit → supervisor →
accelerate launch → worker → store) and, for the ratio, as a bare TRL script (bench/trainer_overhead.py's two
sides), on a randomly initialised model of a real architecture built here. Speed and memory, not quality.

  python bench/gpu_check.py [--shape 1.7b] [--cases sft-liger,dpo,grpo,sft-qlora] [--out DIR] [--profile]

Prints a table (mode, setting, s/step, tokens/s, peak GPU GiB, workbench / bare, pass / fail) and writes it,
with each run's figures, to DIR (results.json, table.md). A case that fails says why and the others go on.
bench/gpu_check.sh runs this on a GPU machine with no network, installing the carried wheels first.
On a CPU (`--cpu-rehearsal`) the cases run in fp32 without their GPU-only settings, to check the plumbing.
`--profile` samples both sides' main-thread stacks while they train (bench/stack_sampler) and prints the
functions the workbench spends longer in, per step: what to look at when its ratio is off.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from trainer_overhead import run_bare, settings_of, workbench  # noqa: E402

# Decoder shapes of the SmolLM2 family (Llama architecture, tied embeddings, 49152-token vocabulary).
SHAPES = {
    # many thin layers: a step made of kernel launches and Python, as a small LoRA step on a big GPU is
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=24, num_attention_heads=4,
                 num_key_value_heads=4),
    "135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3),
    "360m": dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                 num_key_value_heads=5),
    "1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32),
}

LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["all-linear"]}
GPU = {"precision": "bf16", "lora": LORA, "learning_rate": 1e-4}

# name: (mode, what is shown, settings over trainer_overhead's, steps, GPU-only settings)
CASES = {
    "sft-liger": ("sft", "bf16 + Liger, LoRA r16 all-linear, batch 8",
                  {**GPU, "per_device_train_batch_size": 8, "max_length": 512}, 20, {"use_liger_kernel": True}),
    "dpo": ("dpo", "bf16, LoRA r16 all-linear, batch 8",
            {**GPU, "per_device_train_batch_size": 8, "max_length": 512}, 20, {}),
    "grpo": ("grpo", "bf16, transformers generation, 8 completions × 64 tokens",
             {**GPU, "per_device_train_batch_size": 8,
              "rl": {"num_generations": 8, "max_completion_length": 64, "temperature": 1.0, "beta": 0.0,
                     "loss_type": "dapo"}}, 6, {}),
    "sft-qlora": ("sft", "QLoRA (4-bit NF4 base), bf16, batch 8",
                  {**GPU, "per_device_train_batch_size": 8, "max_length": 512}, 20, {"quantization": "4bit"}),
}


def build_model(shape: str, tokenizer_dir: Path, target: Path, cpu: bool) -> Path:
    """A randomly initialised SmolLM2-shaped model with the embedded model's tokenizer, saved as a local folder."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2, **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device("cpu" if cpu else "cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if cpu else torch.bfloat16)
    model.save_pretrained(target)
    for f in tokenizer_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, target / f.name)
    params = sum(p.numel() for p in model.parameters())
    del model
    print(f"model: random SmolLM2-{shape} shape, {params / 1e6:.0f} M parameters, at {target}", flush=True)
    return target


def environment() -> str:
    import torch

    lines = [f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}"]
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        lines.append(f"GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, {torch.cuda.device_count()} device(s)")
    for name in ("transformers", "trl", "peft", "accelerate", "datasets", "liger_kernel", "bitsandbytes"):
        try:
            module = __import__(name)
            lines.append(f"{name} {getattr(module, '__version__', '?')}")
        except Exception as e:  # noqa: BLE001 - a missing package fails its cases, not the check
            lines.append(f"{name}: not importable ({type(e).__name__}: {e})")
    return "\n".join(lines)


def probe(workspace: Path) -> str:
    """What the worker pays per logged step besides training, timed on this machine (ms per call)."""
    import torch

    from backend.modes.training import peak_memory
    from backend.runs.store import RunStore

    def ms(f, n=20) -> float:
        t = time.perf_counter()
        for _ in range(n):
            f()
        return (time.perf_counter() - t) / n * 1000

    store = RunStore(workspace)
    lines = [f"store write + read per step: "
             f"{ms(lambda: (store.add_metrics('probe', 1, {'loss': 1.0}), store.stop_requested('probe'))):.2f} ms",
             f"peak_memory(): {ms(peak_memory):.2f} ms"]
    if torch.cuda.is_available():
        try:
            lines.append(f"torch.cuda.utilization() (NVML initialised per call): {ms(torch.cuda.utilization, 5):.2f} ms")
        except Exception as e:  # noqa: BLE001
            lines.append(f"torch.cuda.utilization(): {type(e).__name__}: {e}")
    return "\n".join(lines)


def sampled(folder: Path) -> tuple[int, dict[str, int]]:
    """The stack samples of the process in `folder` that trained (bench/stack_sampler): (samples, counts)."""
    best = (0, {})
    for f in folder.glob("*.json"):
        data = json.loads(f.read_text())
        if data["samples"] > best[0]:
            best = (data["samples"], dict(data["counts"]))
    return best


def profile_diff(folder: Path, steps: int, top: int = 25) -> str:
    """Where the workbench's training loop spends more time per step than the bare script's, function by
    function (seconds per step on the main thread's stack, 10 ms samples)."""
    (n_wb, wb), (n_bare, bare) = sampled(folder / "workbench"), sampled(folder / "bare")
    if not n_wb or not n_bare:
        return f"profile: no samples ({n_wb} workbench, {n_bare} bare)"
    per_step = lambda count: count * 0.01 / steps  # noqa: E731
    inner = {k for k in set(wb) | set(bare) if wb.get(k) == n_wb or bare.get(k) == n_bare}  # the loop and above
    rows = sorted((set(wb) | set(bare)) - inner, key=lambda k: per_step(wb.get(k, 0)) - per_step(bare.get(k, 0)),
                  reverse=True)[:top]
    out = [f"profile: training loop {per_step(n_wb):.3f} s/step (workbench) vs {per_step(n_bare):.3f} (bare); "
           "functions the workbench spends longer in, s/step on the stack:"]
    for k in rows:
        path, line, name = k.rsplit(":", 2)
        where = "/".join(Path(path).parts[-3:])
        out.append(f"  {per_step(wb.get(k, 0)):7.3f} {per_step(bare.get(k, 0)):7.3f}  {name} ({where}:{line})")
    return "\n".join(out)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict], title: str) -> str:
    out = [title, "",
           "| mode | setting | s/step (wb / bare) | warm s/step (wb / bare) | tokens/s (wb / bare) | "
           "peak GPU GiB (wb / bare) | wb / bare time | start → 1st metric | result |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        wb, bare = r.get("workbench") or {}, r.get("bare") or {}
        ratio = (fmt(wb["s_per_step"] / bare["s_per_step"], ".2f")
                 if wb.get("s_per_step") and bare.get("s_per_step") else "-")
        out.append(f"| {r['mode']} | {r['setting']} | {fmt(wb.get('s_per_step'), '.3f')} / "
                   f"{fmt(bare.get('s_per_step'), '.3f')} | {fmt(wb.get('warm_s_per_step'), '.3f')} / "
                   f"{fmt(bare.get('warm_s_per_step'), '.3f')} | {fmt(wb.get('tokens_per_s'), '.0f')} / "
                   f"{fmt(bare.get('tokens_per_s'), '.0f')} | {fmt(wb.get('gpu_peak_gb'), '.2f')} / "
                   f"{fmt(bare.get('gpu_peak_gb'), '.2f')} | {ratio} | "
                   f"{fmt(wb.get('start_to_first_metric'), '.1f')} s | {r['result']} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="1.7b", choices=list(SHAPES))
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated, from: " + ", ".join(CASES))
    p.add_argument("--tokenizer", default=str(REPO / ".gpu" / "tokenizer"),
                   help="a folder with the embedded model's tokenizer files (bench/gpu_wheels.sh puts them there)")
    p.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "out" / "gpu_check"))
    p.add_argument("--timeout", type=float, default=240, help="seconds one run may take before it counts failed")
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply each case's step count")
    p.add_argument("--profile", action="store_true",
                   help="sample both sides' stacks while they train and print where the workbench spends longer")
    p.add_argument("--cpu-rehearsal", action="store_true",
                   help="on a CPU: fp32, GPU-only settings left out, to check the script's plumbing")
    a = p.parse_args()
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    if unknown := [c for c in cases if c not in CASES]:
        p.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    env = environment()
    print(env, flush=True)
    rows: list[dict] = []
    title = ""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        model = str(build_model(a.shape, Path(a.tokenizer), Path(tmp) / "model", a.cpu_rehearsal))
        print(f"built in {time.time() - t0:.1f} s", flush=True)
        print(probe(Path(tmp) / "probe"), flush=True)
        device = env.splitlines()[1] if "GPU:" in env else "CPU (rehearsal)"
        title = f"Random SmolLM2-{a.shape} shape; {device}; LoRA r16 all-linear; median of 1 run per side"
        for name in cases:
            mode, setting, overrides, steps, gpu_only = CASES[name]
            overrides = dict(overrides) if a.cpu_rehearsal else {**overrides, **gpu_only}
            if a.cpu_rehearsal:
                overrides["precision"] = "fp32"
            steps = max(2, round(steps * a.steps_scale))
            row = {"case": name, "mode": mode, "setting": setting, "steps": steps,
                   "settings": settings_of(mode, overrides)}
            problems = []
            for side in ("workbench", "bare"):
                t = time.time()
                # a cold Triton cache for each run: neither side reuses the kernels the other compiled
                os.environ["TRITON_CACHE_DIR"] = str(Path(tmp) / f"triton-{name}-{side}")
                if a.profile:  # every process started from here samples its stack (bench/stack_sampler)
                    samples = Path(tmp) / f"samples-{name}" / side
                    samples.mkdir(parents=True)
                    os.environ["STACK_SAMPLES"] = str(samples)
                    os.environ["PYTHONPATH"] = os.pathsep.join(
                        [str(REPO / "bench" / "stack_sampler"), *filter(None, [os.environ.get("PYTHONPATH")])])
                try:
                    row[side] = (workbench(mode, model, steps, Path(tmp) / "ws", overrides, a.timeout)
                                 if side == "workbench" else run_bare(mode, model, steps, overrides, a.timeout))
                    print(f"  {name:10} {side:9} {row[side]['s_per_step']:.3f} s/step "
                          f"(warm {fmt(row[side].get('warm_s_per_step'), '.3f')}), "
                          f"GPU peak {fmt(row[side].get('gpu_peak_gb'), '.2f')} GiB ({time.time() - t:.0f} s)",
                          flush=True)
                except Exception as e:  # noqa: BLE001 - one failing case must not hide the others' figures
                    problems.append(f"{side}: {type(e).__name__}: {e}")
                    print(f"  {name:10} {side:9} FAILED after {time.time() - t:.0f} s\n"
                          f"{''.join(traceback.format_exception(e))[-4000:]}", flush=True)
            if a.profile:
                os.environ.pop("STACK_SAMPLES", None)
                row["profile"] = profile_diff(Path(tmp) / f"samples-{name}", steps)
                print(row["profile"], flush=True)
                with open(out / "profiles.txt", "a") as f:
                    f.write(f"== {name}: {setting}\n{row['profile']}\n\n")
            row["result"] = "pass" if not problems else "FAIL: " + " / ".join(x.splitlines()[0][:160] for x in problems)
            row["problems"] = problems
            rows.append(row)
            (out / "results.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1, default=str))
            (out / "table.md").write_text(table(rows, title) + "\n")
    print("\n" + table(rows, title))
    return 0 if all(r["result"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point, as the workbench's are

    load_providers()
    sys.exit(main())
