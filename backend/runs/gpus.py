"""GPUs: what this machine offers (`machine`), the GPU-only settings it refuses and why (`check`), how many
GPUs a run takes and which ones (`gpus_needed`, `allocate`), and the vLLM server a run starts beside its
trainer (`plan_launch`, `ServerProcess`).

A run's GPUs are named as this machine's children see them: the entries of the workbench's own
CUDA_VISIBLE_DEVICES when it was started with one, else 0, 1, ... The supervisor gives the trainer and the vLLM
server their share through CUDA_VISIBLE_DEVICES, so two runs on one machine never see each other's GPUs.
torch is imported inside `machine` only: the schema-level helpers here cost nothing to import.
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from backend.config import RunConfig
from backend.core.procs import REPO_ROOT

# import name → pip name, of the optional packages the GPU settings need
GPU_PACKAGES = {"vllm": "vllm", "bitsandbytes": "bitsandbytes", "liger_kernel": "liger-kernel",
                "deepspeed": "deepspeed"}
# how the supervisor tells the trainer where its vLLM server listens (the port is chosen when the run starts)
VLLM_URL_ENV = "WORKBENCH_VLLM_URL"
VLLM_GROUP_PORT_ENV = "WORKBENCH_VLLM_GROUP_PORT"
VLLM_GROUP_PORT = 51216  # TRL's default port for the weight-sync group between trainer and server
VLLM_SERVER_TIMEOUT_S = 900.0  # a large model takes minutes to load into a fresh server
COLOCATED_MEMORY, SERVER_MEMORY = 0.3, 0.9  # rl.vllm_gpu_memory_utilization 0: the trainer shares a colocated GPU


@dataclass(frozen=True)
class Machine:
    """What this machine has for the GPU settings."""

    gpu_ids: tuple[str, ...] = ()  # each GPU as CUDA_VISIBLE_DEVICES names it for a child process
    bf16: bool = False  # its GPUs compute in bf16 (Ampere or newer)
    installed: frozenset[str] = field(default_factory=frozenset)  # import names of GPU_PACKAGES present
    gpu_memory: tuple[int, ...] = ()  # bytes of memory of each GPU, in gpu_ids order

    @property
    def gpus(self) -> int:
        return len(self.gpu_ids)

    def has(self, package: str) -> bool:
        return package in self.installed


# the device files of a GPU torch can use (NVIDIA, Jetson, AMD's ROCm, WSL): with none there is no GPU, and asking
# torch costs its import, seconds of every cold start's supervisor
GPU_DEVICE_FILES = ("/dev/nvidia*", "/dev/nvhost-*", "/dev/nvgpu*", "/dev/kfd", "/dev/dxg")


@functools.lru_cache(maxsize=1)
def machine() -> Machine:
    """This machine, asked once per process (GPUs do not come and go under a running workbench)."""
    installed = frozenset(p for p in GPU_PACKAGES if importlib.util.find_spec(p) is not None)
    if not any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES):
        return Machine(installed=installed)
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    ids = tuple(visible[:count]) if len(visible) >= count and visible else tuple(str(i) for i in range(count))
    return Machine(gpu_ids=ids, bf16=bool(count) and torch.cuda.is_bf16_supported(), installed=installed,
                   gpu_memory=tuple(torch.cuda.get_device_properties(i).total_memory for i in range(count)))


def memory_here(here: Machine | None = None) -> tuple[str, list[int]]:
    """What a run's memory estimate is measured against: ("cuda", each GPU's memory) on a GPU machine, else
    ("cpu", [the RAM available now]). A GPU's total, not its free memory: asking CUDA for the free memory would
    open a context (hundreds of MB) in the asking process, and the runs here get whole GPUs."""
    here = here or machine()
    if here.gpus:
        return "cuda", list(here.gpu_memory)
    import psutil

    return "cpu", [psutil.virtual_memory().available]


# ---- what a run needs ----

def uses_vllm(config: RunConfig) -> bool:
    return config.spec.vllm and config.rl.generation_backend == "vllm"


def serves_here(config: RunConfig) -> bool:
    """Whether this machine starts the run's vLLM server: server mode without an address, on machine 0 (only the
    main process talks to the server; the other machines' processes get their completions from it)."""
    return uses_vllm(config) and config.rl.starts_server and config.distributed.machine_rank == 0


def gpus_needed(config: RunConfig) -> int:
    """GPUs the run takes on this machine: one per training process, plus its vLLM server's when it starts one
    here."""
    return config.num_processes + (config.rl.vllm_gpus if serves_here(config) else 0)


def _install_hint(package: str) -> str:
    return f"`pip install {GPU_PACKAGES[package]}` (on the GPU machines)"


def check(config: RunConfig, here: Machine | None = None) -> list[str]:
    """The GPU settings this machine cannot run, each as a line naming the setting, why, and the numbers."""
    here = here or machine()
    n, errors = here.gpus, []
    has = f"this machine has {n}" if n else "this machine has none"
    if config.precision == "fp16" and not n:
        errors.append("precision: fp16 mixed precision needs a GPU, and this machine has none (accelerate would "
                      "quietly train in fp32); choose auto (fp32 here) or bf16")
    if config.precision == "bf16" and n and not here.bf16:
        errors.append("precision: bf16 needs GPUs that compute in it (Ampere or newer), and this machine's do not; "
                      "choose fp16 or auto")
    if config.quantization == "4bit":
        if not n:
            errors.append("quantization: 4-bit loading (bitsandbytes, QLoRA) runs on CUDA GPUs, and this machine "
                          "has none; set quantization to none")
        elif not here.has("bitsandbytes"):
            errors.append(f"quantization: bitsandbytes is not installed in this environment; "
                          f"{_install_hint('bitsandbytes')}, or set quantization to none")
    if config.use_liger_kernel:
        if not n:
            errors.append("use_liger_kernel: Liger's kernels are Triton code for CUDA GPUs, and this machine has "
                          "none; turn use_liger_kernel off")
        elif not here.has("liger_kernel"):
            errors.append(f"use_liger_kernel: liger-kernel is not installed in this environment; "
                          f"{_install_hint('liger_kernel')}, or turn use_liger_kernel off")
    if uses_vllm(config):
        errors += _check_vllm(config, here, has)
    return errors


def _check_vllm(config: RunConfig, here: Machine, has: str) -> list[str]:
    rl, errors = config.rl, []
    if not here.has("vllm"):
        errors.append(f"rl.generation_backend: vLLM is not installed in this environment; {_install_hint('vllm')}, "
                      "or choose transformers")
    need, processes = gpus_needed(config), config.num_processes
    if need > here.gpus and (processes <= here.gpus or not here.gpus):  # more processes than GPUs: said elsewhere
        if serves_here(config):
            errors.append(f"rl.vllm_gpus: {rl.vllm_gpus} + num_processes: {processes} needs {need} GPUs (the vLLM "
                          f"server's and one per training process); {has}")
        else:
            where = "colocated with the trainer" if rl.vllm_mode == "colocate" else "with a vLLM server"
            errors.append(f"rl.generation_backend: vLLM {where} trains on GPUs, one per process: num_processes: "
                          f"{processes} needs {need}; {has}")
    if serves_here(config) and rl.vllm_gpus > 1 and (heads := attention_heads(config.model)):
        if heads % rl.vllm_gpus:  # tensor parallelism gives each GPU a whole number of heads
            fits = [d for d in range(1, heads + 1) if heads % d == 0 and d <= max(here.gpus, rl.vllm_gpus)]
            errors.append(f"rl.vllm_gpus: the vLLM server splits the model's {heads} attention heads over its "
                          f"{rl.vllm_gpus} GPUs, which leaves a fraction of a head per GPU; choose a divisor of "
                          f"{heads} ({', '.join(map(str, fits))})")
    return errors


def attention_heads(model: str) -> int | None:
    """The attention heads of a model whose config is on this machine (the embedded one, a folder); None when
    it is not here to read (a Hub id: the server reports it when it loads)."""
    from backend.models.specs import EMBEDDED_MODEL, model_cache_dir

    model = (model or "").strip()
    folder = model_cache_dir() / EMBEDDED_MODEL if model.lower() == EMBEDDED_MODEL else Path(model).expanduser()
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    heads = data.get("num_attention_heads") or (data.get("text_config") or {}).get("num_attention_heads")
    return int(heads) if isinstance(heads, int) and heads > 0 else None


# ---- which GPUs a run gets ----

def allocate(need: int, gpu_ids: Sequence[str], held: set[str]) -> tuple[str, ...] | None:
    """The lowest `need` free GPUs, in the machine's order; None while fewer are free."""
    free = [g for g in gpu_ids if g not in held]
    return tuple(free[:need]) if len(free) >= need else None


def _gpu_list(ids: Sequence[str]) -> str:
    return ("GPU " if len(ids) == 1 else "GPUs ") + ", ".join(ids)


def waiting_reason(need: int, gpu_ids: Sequence[str], holders: Mapping[str, str]) -> str:
    """Why a queued run waits: what it needs, what is free, and who holds the rest ({gpu id: run name})."""
    free = [g for g in gpu_ids if g not in holders]
    if need > len(gpu_ids):
        return f"needs {need} GPUs and this machine has {len(gpu_ids)}; it cannot start here"
    by_run: dict[str, list[str]] = {}
    for gpu in gpu_ids:
        if gpu in holders:
            by_run.setdefault(holders[gpu], []).append(gpu)
    held = "; ".join(f"{_gpu_list(ids)} held by {name}" for name, ids in by_run.items())
    return (f"waiting for {need} GPU{'s' if need > 1 else ''}: {len(free)} free"
            + (f" ({_gpu_list(free)})" if free else "") + (f"; {held}" if held else ""))


# ---- the launch: GPUs for the trainer, and the vLLM server beside it ----

def free_port(start: int, host: str = "127.0.0.1") -> int:
    """The first port from `start` nothing on this machine listens on."""
    for port in range(start, min(start + 200, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port in {start}-{start + 199} on this machine")


@dataclass(frozen=True)
class LaunchPlan:
    """Which of a run's GPUs train and which serve vLLM, and where the trainer reaches the server."""

    train_gpus: tuple[str, ...] = ()
    server_gpus: tuple[str, ...] = ()  # empty: this machine starts no server
    server_port: int | None = None
    group_port: int | None = None
    vllm_url: str | None = None  # server mode: what the trainer connects to

    @property
    def serves(self) -> bool:
        """The trainer generates through a vLLM server (this run's or one given by URL)."""
        return bool(self.server_gpus or self.vllm_url)

    def train_env(self) -> dict[str, str]:
        """Variables for `accelerate launch` (the trainer's processes)."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(self.train_gpus)} if self.train_gpus else {}
        if self.vllm_url:
            env[VLLM_URL_ENV] = self.vllm_url
        if self.group_port:
            env[VLLM_GROUP_PORT_ENV] = str(self.group_port)
        return env

    def server_env(self) -> dict[str, str]:
        # TRL's weight-sync endpoints live behind vLLM's development mode (what `trl vllm-serve` sets too)
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.server_gpus), "VLLM_SERVER_DEV_MODE": "1"}

    def server_command(self, config: RunConfig, model_path: str) -> list[str]:
        """`trl vllm-serve` for this run: tensor parallel over the server's GPUs, on localhost (only the trainer's
        main process, on this machine, talks to it)."""
        memory = config.rl.vllm_gpu_memory_utilization or SERVER_MEMORY
        return [sys.executable, "-m", "trl.cli.main", "vllm-serve", "--model", str(model_path),
                "--tensor-parallel-size", str(len(self.server_gpus)), "--host", "127.0.0.1",
                "--port", str(self.server_port), "--gpu-memory-utilization", f"{memory:g}"]

    def describe(self) -> str:
        """One line for the run's log."""
        if self.server_gpus:
            train = _gpu_list(self.train_gpus) if self.train_gpus else "the CPU"
            return (f"vLLM server on {_gpu_list(self.server_gpus)} at {self.vllm_url}; training on {train}")
        return f"training on {_gpu_list(self.train_gpus)}" if self.train_gpus else ""


def plan_launch(config: RunConfig, gpus: Sequence[str],
                port_from: Callable[[int], int] = free_port) -> LaunchPlan:
    """Split the run's GPUs (`allocate`'s, empty on a CPU machine) between its vLLM server, first, and its
    training processes, and choose the server's ports (`port_from(start)`: the first free one from start)."""
    gpus, rl = tuple(gpus), config.rl
    if not uses_vllm(config) or rl.vllm_mode == "colocate":
        return LaunchPlan(train_gpus=gpus)
    if not serves_here(config):  # a server elsewhere, or machine 0's (only the main process talks to it)
        host = rl.vllm_server_host or config.distributed.main_process_ip or "127.0.0.1"
        return LaunchPlan(train_gpus=gpus, vllm_url=f"http://{host}:{rl.vllm_server_port}",
                          group_port=VLLM_GROUP_PORT)
    port = port_from(rl.vllm_server_port)
    return LaunchPlan(train_gpus=gpus[rl.vllm_gpus:], server_gpus=gpus[:rl.vllm_gpus], server_port=port,
                      group_port=port_from(VLLM_GROUP_PORT), vllm_url=f"http://127.0.0.1:{port}")


def vllm_trainer_args(config: RunConfig, env: Mapping[str, str] | None = None) -> dict:
    """GRPOConfig / RLOOConfig fields for the run's generation backend ({} for transformers); `env` is the
    worker's, where the supervisor put the server's address."""
    if not uses_vllm(config):
        return {}
    rl, env = config.rl, os.environ if env is None else env
    if rl.vllm_mode == "colocate":
        return {"use_vllm": True, "vllm_mode": "colocate", "vllm_tensor_parallel_size": 1,
                "vllm_gpu_memory_utilization": rl.vllm_gpu_memory_utilization or COLOCATED_MEMORY}
    url = env.get(VLLM_URL_ENV) or f"http://{rl.vllm_server_host or '127.0.0.1'}:{rl.vllm_server_port}"
    return {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": url,
            "vllm_group_port": int(env.get(VLLM_GROUP_PORT_ENV) or VLLM_GROUP_PORT),
            "vllm_server_timeout": VLLM_SERVER_TIMEOUT_S}


_ERROR_LINE = re.compile(r"[\w.]*(Error|Exception)\b.*")


class ServerProcess:
    """A run's vLLM server, supervised beside its trainer: output in the run folder's vllm.log, in the
    supervisor's process group (a forced stop of the run kills it too), stopped when the trainer ends."""

    def __init__(self, command: list[str], env: Mapping[str, str], log: Path):
        self.command, self.env, self.log = command, dict(env), Path(log)
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command, env=dict(os.environ, **self.env), cwd=REPO_ROOT,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exit_code(self) -> int | None:
        """None while it runs."""
        return self.proc.poll() if self.proc else None

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (vLLM shuts its workers down), then SIGKILL after `grace_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def death_message(self) -> str:
        """How it ended, with the last error line of its log."""
        rc = self.exit_code()
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-200:]
        except OSError:
            lines = []
        errors = [m.group(0).strip() for line in lines if (m := _ERROR_LINE.search(line))]
        how = f"was killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with code {rc}"
        return (f"the vLLM server (pid {self.pid}) {how}" + (f": {errors[-1]}" if errors else "")
                + f"; its log is {self.log}")


def wait_for(proc: subprocess.Popen, server: ServerProcess | None, on_server_exit: Callable[[], None],
             poll_s: float = 1.0) -> int:
    """The trainer's exit code. When the server ends first, `on_server_exit` is called once (it records why)
    and the trainer is ended: it cannot generate any more."""
    if server is None:
        return proc.wait()
    while (rc := proc.poll()) is None:
        if server.exit_code() is not None:
            on_server_exit()
            proc.terminate()
            try:
                return proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait()
        time.sleep(poll_s)
    return rc
