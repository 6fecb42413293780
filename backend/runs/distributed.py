"""From the run config's `num_processes` and `distributed` section to `accelerate launch` flags: one process,
several (DDP), sharded (FSDP2 or DeepSpeed ZeRO), on one machine or several. The scaling engine is accelerate's;
this module only says what to ask it for, and refuses combinations before a process starts.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from backend.config import RunConfig
from backend.core.mode_registry import modes_where
from backend.runs import gpus

# FSDP2 wraps each decoder layer, and gathers a full state dict so the adapter saves as a plain PEFT folder.
_FSDP = ["--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
         "--fsdp_state_dict_type", "FULL_STATE_DICT", "--fsdp_reshard_after_forward", "true"]


def accelerate_config_path(config: RunConfig, workspace: Path) -> Path:
    path = Path(config.distributed.accelerate_config).expanduser()
    return path if path.is_absolute() else Path(workspace) / path


def launch_flags(config: RunConfig, workspace: Path, cuda: bool) -> list[str]:
    """The `accelerate launch` flags for this run (everything before the module to run)."""
    d = config.distributed
    if d.accelerate_config:
        return ["--config_file", str(accelerate_config_path(config, workspace))]
    world = config.world_size
    flags = ["--num_machines", str(d.num_machines), "--num_processes", str(world),
             "--mixed_precision", "no", "--dynamo_backend", "no"]
    if d.num_machines > 1:
        # static rendezvous: every machine is told machine 0's address, no etcd or c10d store needed
        flags += ["--machine_rank", str(d.machine_rank), "--main_process_ip", d.main_process_ip,
                  "--main_process_port", str(d.main_process_port), "--rdzv_backend", "static", "--same_network"]
    if d.strategy == "fsdp" and world > 1:
        flags += [*_FSDP, "--fsdp_offload_params", "true" if d.offload else "false"]
    elif d.strategy == "deepspeed":
        offload = "cpu" if d.offload else "none"
        flags += ["--use_deepspeed", "--zero_stage", str(d.zero_stage), "--offload_optimizer_device", offload,
                  "--offload_param_device", offload if d.zero_stage == 3 else "none"]
    elif world > 1:
        flags.append("--multi_gpu")  # on CPU too: `--cpu` with several processes silently runs one
    if not cuda:
        if world == 1 and d.strategy == "ddp":
            flags.append("--cpu")
        import torch

        # the threads a plain torch script would use, shared among this machine's processes
        flags += ["--num_cpu_threads_per_process", str(max(1, torch.get_num_threads() // config.num_processes))]
    return flags


def check(config: RunConfig, workspace: Path) -> list[str]:
    """What would make `accelerate launch` fail for this run, each as a line naming the setting."""
    d, errors = config.distributed, []
    if d.accelerate_config:
        errors += _check_accelerate_file(config, accelerate_config_path(config, workspace))
    errors += _check_process_count(config)
    errors += gpus.check(config)
    if d.strategy != "ddp" and not gpus.machine().gpus:
        errors.append(f"distributed.strategy: {d.strategy} shards the model across GPUs and this machine has none "
                      "(accelerate would quietly run plain ddp on the CPU); choose ddp here")
    if d.strategy == "deepspeed" and not gpus.machine().has("deepspeed"):
        errors.append("distributed.strategy: DeepSpeed is not installed in this environment; "
                      "`pip install deepspeed` (on the GPU machines), or choose fsdp or ddp")
    if d.strategy != "ddp" and config.spec.ddp_only:
        others = " / ".join(modes_where(online_rl=True, ddp_only=False))
        errors.append(f"distributed.strategy: {config.mode} runs the workbench's own training loop, which shards "
                      f"with ddp only; choose ddp (or train with {others} under {d.strategy})")
    return errors


def local_slots() -> tuple[int, str]:
    """How many processes this machine can run one each of: its GPUs, else its CPU cores."""
    import os

    if gpus.machine().gpus:
        return gpus.machine().gpus, "GPUs"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores, "CPU cores"


def _check_process_count(config: RunConfig) -> list[str]:
    """One process per GPU (per core on a CPU): more would share a device and fail or crawl. Each machine of a
    multi-machine run is checked where it starts."""
    slots, what = local_slots()
    if config.num_processes > slots:
        return [f"num_processes: {config.num_processes} processes per machine, and this machine has {slots} {what} "
                f"(one process each); choose at most {slots}"]
    return []


def _check_accelerate_file(config: RunConfig, path: Path) -> list[str]:
    where = "distributed.accelerate_config"
    if not path.is_file():
        return [f"{where}: {path} not found (a YAML written by `accelerate config`; relative paths are read "
                "from the workspace)"]
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        return [f"{where}: {path} is not valid YAML ({e})"]
    if not isinstance(data, dict):
        return [f"{where}: {path} should hold a mapping of accelerate settings"]
    errors = []
    machines = int(data.get("num_machines", 1) or 1)
    if machines != config.distributed.num_machines:
        errors.append(f"{where}: {path.name} says num_machines: {machines}, this run distributed.num_machines: "
                      f"{config.distributed.num_machines}; make them agree")
    if "num_processes" in data and int(data["num_processes"]) != config.world_size:
        errors.append(f"{where}: {path.name} says num_processes: {data['num_processes']} (over all machines), "
                      f"this run has {config.num_processes} per machine × {machines} machine(s) = "
                      f"{config.world_size}; make them agree")
    return errors
