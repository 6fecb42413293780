"""From the run config to `accelerate launch` flags, and the combinations refused before a process starts."""
import pytest
import yaml

from backend.config import ConfigError, build_config
from backend.runs.distributed import check, launch_flags


def flag(flags, name):
    return flags[flags.index(name) + 1]


def test_one_process_on_a_cpu_runs_with_cpu_and_the_machines_threads(tmp_path):
    flags = launch_flags(build_config({}), tmp_path, cuda=False)
    assert "--cpu" in flags and "--multi_gpu" not in flags
    assert flag(flags, "--num_processes") == "1" and flag(flags, "--num_machines") == "1"
    assert int(flag(flags, "--num_cpu_threads_per_process")) >= 1


def test_several_processes_use_ddp_even_on_a_cpu(tmp_path):
    flags = launch_flags(build_config({"num_processes": 2}), tmp_path, cuda=False)
    assert "--multi_gpu" in flags and "--cpu" not in flags  # --cpu with 2 processes silently runs one
    gpu = launch_flags(build_config({"num_processes": 8}), tmp_path, cuda=True)
    assert flag(gpu, "--num_processes") == "8" and "--num_cpu_threads_per_process" not in gpu


def test_several_machines_count_every_process_and_meet_at_machine_0(tmp_path):
    config = build_config({"num_processes": 4, "distributed": {"num_machines": 2, "machine_rank": 1,
                                                               "main_process_ip": "10.0.0.5",
                                                               "main_process_port": 29600}})
    assert config.world_size == 8
    flags = launch_flags(config, tmp_path, cuda=True)
    assert flag(flags, "--num_processes") == "8" and flag(flags, "--num_machines") == "2"
    assert flag(flags, "--machine_rank") == "1" and flag(flags, "--main_process_ip") == "10.0.0.5"
    assert flag(flags, "--main_process_port") == "29600" and flag(flags, "--rdzv_backend") == "static"


def test_fsdp_and_deepspeed_flags(tmp_path):
    fsdp = launch_flags(build_config({"num_processes": 4, "distributed": {"strategy": "fsdp", "offload": True}}),
                        tmp_path, cuda=True)
    assert "--use_fsdp" in fsdp and flag(fsdp, "--fsdp_version") == "2"
    assert flag(fsdp, "--fsdp_state_dict_type") == "FULL_STATE_DICT"  # the adapter saves as a plain PEFT folder
    assert flag(fsdp, "--fsdp_offload_params") == "true" and "--multi_gpu" not in fsdp
    z3 = launch_flags(build_config({"num_processes": 2, "distributed": {"strategy": "deepspeed", "zero_stage": 3,
                                                                        "offload": True}}), tmp_path, cuda=True)
    assert "--use_deepspeed" in z3 and flag(z3, "--zero_stage") == "3"
    assert flag(z3, "--offload_optimizer_device") == "cpu" and flag(z3, "--offload_param_device") == "cpu"
    z2 = launch_flags(build_config({"distributed": {"strategy": "deepspeed", "offload": True}}), tmp_path, cuda=True)
    assert flag(z2, "--offload_param_device") == "none"  # only ZeRO-3 holds parameters to offload


def test_an_accelerate_config_file_replaces_the_flags_and_is_read_from_the_workspace(tmp_path):
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump({"distributed_type": "FSDP", "num_processes": 2}))
    config = build_config({"num_processes": 2, "distributed": {"accelerate_config": "acc.yaml"}})
    assert launch_flags(config, tmp_path, cuda=True) == ["--config_file", str(tmp_path / "acc.yaml")]
    assert check(config, tmp_path) == []


def test_an_accelerate_config_that_disagrees_or_is_missing_is_named(tmp_path):
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump({"num_processes": 8, "num_machines": 1}))
    errors = check(build_config({"num_processes": 2, "distributed": {"accelerate_config": "acc.yaml"}}), tmp_path)
    assert len(errors) == 1 and "num_processes: 8" in errors[0] and "= 2" in errors[0]
    missing = check(build_config({"distributed": {"accelerate_config": "nope.yaml"}}), tmp_path)
    assert "nope.yaml not found" in missing[0] and missing[0].startswith("distributed.accelerate_config")
    (tmp_path / "bad.yaml").write_text("a: [1,")
    assert "not valid YAML" in check(build_config({"distributed": {"accelerate_config": "bad.yaml"}}), tmp_path)[0]


def test_sharding_strategies_are_refused_where_they_cannot_run(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the no-GPU message is for CPU machines")
    errors = check(build_config({"num_processes": 2, "distributed": {"strategy": "fsdp"}}), tmp_path)
    assert any("has none" in e and "choose ddp" in e for e in errors)
    ppo = build_config({"mode": "ppo", "reward_sources": [{"type": "length", "params": {"target": 20}}], "distributed": {"strategy": "fsdp"}})
    assert any("ppo" in e and "ddp only" in e for e in check(ppo, tmp_path))


def test_machine_settings_are_validated_with_the_field_named():
    with pytest.raises(ConfigError, match="machine_rank 2 must be below num_machines"):
        build_config({"distributed": {"num_machines": 2, "machine_rank": 2, "main_process_ip": "h"}})
    with pytest.raises(ConfigError, match="main_process_ip: several machines need the address"):
        build_config({"distributed": {"num_machines": 2}})


def test_grpo_groups_count_the_processes_of_every_machine():
    base = {"mode": "grpo", "dataset": "demo-math", "reward_sources": [{"type": "length", "params": {"target": 20}}],
            "per_device_train_batch_size": 2, "rl": {"num_generations": 4}}
    build_config({**base, "distributed": {"num_machines": 2, "main_process_ip": "h"}})  # 2 × 2 machines = 4
    with pytest.raises(ConfigError, match="2 × 1 × 1 = 2 completions"):
        build_config(base)


def test_more_processes_than_the_machine_has_cores_or_gpus_are_refused(tmp_path, monkeypatch):
    from backend.runs import distributed

    monkeypatch.setattr(distributed, "local_slots", lambda: (2, "CPU cores"))
    assert check(build_config({"num_processes": 2}), tmp_path) == []
    assert check(build_config({"num_processes": 4}), tmp_path) == [
        "num_processes: 4 processes per machine, and this machine has 2 CPU cores (one process each); "
        "choose at most 2"]
    monkeypatch.undo()
    slots, what = distributed.local_slots()  # this machine as it is: its cores, or its GPUs
    assert slots >= 1 and what in ("CPU cores", "GPUs")
