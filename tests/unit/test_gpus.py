"""GPU settings: refused with the machine's numbers where they cannot run, turned into the trainer's arguments
where they can; the GPUs each run gets; and the vLLM server launched beside the trainer for 1, 2 and 8 GPUs."""
import subprocess
import sys
import time

import pytest

from backend.config import ConfigError, build_config
from backend.runs import gpus, jobs
from backend.runs.gpus import Machine, plan_launch
from backend.runs.store import RunStore

REWARD = [{"type": "length", "params": {"target": 20}}]
ALL_PACKAGES = frozenset(gpus.GPU_PACKAGES)


def grpo(**settings):
    rl = {"num_generations": 2, **settings.pop("rl", {})}
    return build_config({"mode": "grpo", "dataset": "demo-math", "reward_sources": REWARD, "rl": rl, **settings})


def vllm_server(vllm_gpus=1, **settings):
    return grpo(rl={"generation_backend": "vllm", "vllm_mode": "server", "vllm_gpus": vllm_gpus}, **settings)


def gpu_box(n: int, bf16=True, installed=ALL_PACKAGES) -> Machine:
    return Machine(gpu_ids=tuple(str(i) for i in range(n)), bf16=bf16, installed=installed)


def ports_from(start):  # the ports a fresh machine would give: the first one asked for
    return start


# ---- refusals ----

def test_each_gpu_only_setting_is_refused_on_this_cpu_machine_with_its_reason():
    here = gpus.machine()
    if here.gpus:
        pytest.skip("the refusals are for a machine without GPUs")
    refused = {
        "precision": build_config({"precision": "fp16"}),
        "quantization": build_config({"quantization": "4bit"}),
        "use_liger_kernel": build_config({"use_liger_kernel": True}),
        "rl.vllm_gpus": vllm_server(num_processes=2),
        "rl.generation_backend": grpo(rl={"generation_backend": "vllm"}),
    }
    for setting, config in refused.items():
        errors = gpus.check(config, here)
        assert any(e.startswith(f"{setting}: ") for e in errors), (setting, errors)
    assert "rl.vllm_gpus: 1 + num_processes: 2 needs 3 GPUs (the vLLM server's and one per training process); " \
           "this machine has none" in gpus.check(refused["rl.vllm_gpus"], here)
    assert "needs a GPU, and this machine has none" in gpus.check(refused["precision"], here)[0]
    # what runs on a CPU is not refused: bf16 (slow), checkpointing, DoRA / rsLoRA, several processes
    fine = build_config({"precision": "bf16", "gradient_checkpointing": True, "num_processes": 2,
                         "lora": {"use_dora": True, "use_rslora": True}})
    assert gpus.check(fine, here) == []


def test_the_preflight_check_names_the_gpu_settings_too(tmp_path):
    from backend.runs.distributed import check

    if gpus.machine().gpus:
        pytest.skip("the refusals are for a machine without GPUs")
    errors = check(build_config({"quantization": "4bit", "use_liger_kernel": True}), tmp_path)
    assert [e.split(":")[0] for e in errors] == ["quantization", "use_liger_kernel"]


def test_on_a_gpu_machine_missing_packages_and_gpus_are_named_with_the_numbers():
    bare = gpu_box(2, installed=frozenset())
    errors = gpus.check(build_config({"quantization": "4bit", "use_liger_kernel": True}), bare)
    assert "`pip install bitsandbytes`" in errors[0] and "`pip install liger-kernel`" in errors[1]
    assert "`pip install vllm`" in gpus.check(grpo(rl={"generation_backend": "vllm"}), bare)[0]
    assert gpus.check(vllm_server(num_processes=2), gpu_box(2)) == [
        "rl.vllm_gpus: 1 + num_processes: 2 needs 3 GPUs (the vLLM server's and one per training process); "
        "this machine has 2"]
    assert gpus.check(vllm_server(num_processes=2), gpu_box(3)) == []
    assert "bf16 needs GPUs that compute in it" in gpus.check(build_config({"precision": "bf16"}),
                                                              gpu_box(1, bf16=False))[0]
    everything = build_config({"quantization": "4bit", "use_liger_kernel": True, "precision": "bf16"})
    assert gpus.check(everything, gpu_box(1)) == []


def test_tensor_parallel_vllm_must_split_the_attention_heads_evenly(tmp_path):
    (tmp_path / "config.json").write_text('{"num_attention_heads": 9}')  # SmolLM2-135M has 9
    errors = gpus.check(vllm_server(vllm_gpus=2, model=str(tmp_path)), gpu_box(8))
    assert errors == ["rl.vllm_gpus: the vLLM server splits the model's 9 attention heads over its 2 GPUs, which "
                      "leaves a fraction of a head per GPU; choose a divisor of 9 (1, 3)"]
    assert gpus.check(vllm_server(vllm_gpus=3, model=str(tmp_path)), gpu_box(8)) == []


def test_generations_must_share_out_over_the_training_processes_alone():
    # 8 GPUs as 1 inference + 7 training: 2 × 1 × 7 = 14 completions per step cannot hold groups of 4
    with pytest.raises(ConfigError, match=r"2 × 1 × 7 = 14 completions\) must hold whole groups of them; the "
                                          r"vLLM server's 1 GPU\(s\) are not training processes"):
        grpo(num_processes=7, rl={"num_generations": 4, "generation_backend": "vllm", "vllm_mode": "server"})
    assert grpo(num_processes=6, rl={"num_generations": 4, "generation_backend": "vllm", "vllm_mode": "server"})


@pytest.mark.parametrize("data, message", [
    ({"quantization": "4bit", "finetuning": "full"}, "quantization: a 4-bit base is frozen"),
    ({"quantization": "4bit", "mode": "ppo", "reward_sources": REWARD}, "quantization: ppo loads its models"),
    ({"mode": "ppo", "reward_sources": REWARD, "rl": {"generation_backend": "vllm"}},
     "rl.generation_backend: ppo generates in the workbench's own loop"),
    ({"mode": "grpo", "reward_sources": REWARD, "rl": {"generation_backend": "vllm", "vllm_gpus": 2}},
     "rl.vllm_gpus: 2 GPUs for a vLLM server, and vLLM is colocated"),
    ({"mode": "grpo", "reward_sources": REWARD, "rl": {"generation_backend": "vllm", "vllm_server_host": "h"}},
     "rl.vllm_server_host: colocated vLLM"),
])
def test_combinations_no_machine_can_run_are_refused_by_the_schema(data, message):
    with pytest.raises(ConfigError, match=message):
        build_config(data)


def test_trl_names_select_the_settings():
    c = build_config({"mode": "grpo", "reward_sources": REWARD, "use_vllm": True, "vllm_mode": "server",
                      "load_in_4bit": True, "use_dora": True})
    assert (c.rl.generation_backend, c.rl.vllm_mode, c.quantization, c.lora.use_dora) == \
        ("vllm", "server", "4bit", True)


# ---- the trainer's arguments ----

def test_memory_savers_reach_peft_transformers_and_bitsandbytes(tmp_path):
    import torch

    from backend.modes.training import TrainContext, lora_config, model_kwargs, trainer_args

    config = build_config({"lora": {"use_dora": True, "use_rslora": True}, "use_liger_kernel": True,
                           "quantization": "4bit", "precision": "bf16"})
    lora = lora_config(config)
    assert lora.use_dora and lora.use_rslora
    kwargs = model_kwargs(config)
    q = kwargs["quantization_config"]
    assert q.load_in_4bit and q.bnb_4bit_quant_type == "nf4" and q.bnb_4bit_use_double_quant
    assert q.bnb_4bit_compute_dtype == torch.bfloat16 and kwargs["device_map"] == {"": 0}
    assert "quantization_config" not in model_kwargs(build_config({}))
    ctx = TrainContext(config=config, run_id="r", run_dir=tmp_path, store=RunStore(tmp_path), model_path="m",
                       dataset=None)
    assert trainer_args(ctx).use_liger_kernel


def test_vllm_settings_become_grpo_config_fields(tmp_path):
    from backend.modes.rl_common import rl_args
    from backend.modes.training import TrainContext

    def args(config, env=None):
        ctx = TrainContext(config=config, run_id="r", run_dir=tmp_path, store=RunStore(tmp_path), model_path="m",
                           dataset=None)
        return gpus.vllm_trainer_args(config, env or {}), rl_args(ctx, [1.0])

    fields, built = args(grpo(rl={"generation_backend": "vllm"}))
    assert fields == {"use_vllm": True, "vllm_mode": "colocate", "vllm_tensor_parallel_size": 1,
                      "vllm_gpu_memory_utilization": 0.3}
    assert built.use_vllm and built.vllm_mode == "colocate"
    fields, _ = args(vllm_server(), {gpus.VLLM_URL_ENV: "http://127.0.0.1:8003", gpus.VLLM_GROUP_PORT_ENV: "51217"})
    assert (fields["vllm_server_base_url"], fields["vllm_group_port"]) == ("http://127.0.0.1:8003", 51217)
    external = grpo(rl={"generation_backend": "vllm", "vllm_mode": "server", "vllm_server_host": "10.0.0.9",
                        "vllm_server_port": 8100})
    assert gpus.vllm_trainer_args(external, {})["vllm_server_base_url"] == "http://10.0.0.9:8100"
    assert gpus.vllm_trainer_args(grpo(), {}) == {} and not args(grpo())[1].use_vllm


# ---- the launch plan: which GPUs train, which serve ----

def test_without_vllm_every_gpu_of_the_run_trains():
    assert plan_launch(grpo(), ()).train_env() == {}  # a CPU machine: nothing set, as before
    assert plan_launch(grpo(), ("0",)).train_env() == {"CUDA_VISIBLE_DEVICES": "0"}
    eight = plan_launch(build_config({"num_processes": 8}), tuple("01234567"), ports_from)
    assert eight.train_env() == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"} and not eight.server_gpus
    colocated = plan_launch(grpo(rl={"generation_backend": "vllm"}), ("1",), ports_from)
    assert colocated.train_env() == {"CUDA_VISIBLE_DEVICES": "1"} and not colocated.server_gpus


@pytest.mark.parametrize("vllm_gpus, processes, held, server, train", [
    (1, 1, ("0", "1"), "0", "1"),                       # 2 GPUs: 1 inference + 1 training
    (1, 7, tuple("01234567"), "0", "1,2,3,4,5,6,7"),    # 8 GPUs: 1 + 7
    (2, 6, tuple("01234567"), "0,1", "2,3,4,5,6,7"),    # 8 GPUs: a 2-way tensor-parallel server + 6
    (1, 1, ("2", "3"), "2", "3"),                       # a run given GPUs 2 and 3 of a shared machine
])
def test_a_vllm_server_takes_the_first_of_the_runs_gpus(vllm_gpus, processes, held, server, train):
    config = vllm_server(vllm_gpus=vllm_gpus, num_processes=processes)
    assert gpus.gpus_needed(config) == len(held)
    plan = plan_launch(config, held, ports_from)
    assert plan.server_env() == {"CUDA_VISIBLE_DEVICES": server, "VLLM_SERVER_DEV_MODE": "1"}
    assert plan.train_env() == {"CUDA_VISIBLE_DEVICES": train, gpus.VLLM_URL_ENV: "http://127.0.0.1:8000",
                                gpus.VLLM_GROUP_PORT_ENV: "51216"}
    command = plan.server_command(config, "/models/m")
    assert command[:4] == [sys.executable, "-m", "trl.cli.main", "vllm-serve"]
    assert command[command.index("--tensor-parallel-size") + 1] == str(vllm_gpus)


def test_the_server_command_is_what_trl_vllm_serve_reads():
    from trl.scripts.vllm_serve import make_parser

    config = grpo(rl={"generation_backend": "vllm", "vllm_mode": "server", "vllm_gpus": 2,
                      "vllm_gpu_memory_utilization": 0.8})
    plan = plan_launch(config, ("0", "1", "2"), lambda start: start + 1)  # the first ports were taken
    command = plan.server_command(config, "/models/m")
    parsed, rest = make_parser().parse_args_and_config(args=command[4:], return_remaining_strings=True)
    assert (parsed.model, parsed.tensor_parallel_size, parsed.host, parsed.port, parsed.gpu_memory_utilization) \
        == ("/models/m", 2, "127.0.0.1", 8001, 0.8) and rest == []
    assert plan.train_env()[gpus.VLLM_URL_ENV] == "http://127.0.0.1:8001"


def test_other_machines_and_external_servers_start_no_server():
    several = {"num_machines": 2, "main_process_ip": "10.0.0.5"}
    rank1 = vllm_server(distributed={**several, "machine_rank": 1})
    assert gpus.gpus_needed(rank1) == 1 and gpus.gpus_needed(vllm_server(distributed=several)) == 2
    assert not plan_launch(rank1, ("0",), ports_from).server_gpus
    external = grpo(rl={"generation_backend": "vllm", "vllm_mode": "server", "vllm_server_host": "10.0.0.9"})
    plan = plan_launch(external, ("0",), ports_from)
    assert gpus.gpus_needed(external) == 1 and not plan.server_gpus
    assert plan.train_env() == {"CUDA_VISIBLE_DEVICES": "0", gpus.VLLM_URL_ENV: "http://10.0.0.9:8000",
                                gpus.VLLM_GROUP_PORT_ENV: "51216"}


def test_free_ports_skip_one_in_use():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert gpus.free_port(port) > port


# ---- one GPU set per concurrent run ----

@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(gpus, "machine", lambda: gpu_box(2))
    monkeypatch.setattr(jobs, "_COUNT_SET", False)


def test_two_one_gpu_runs_train_side_by_side_and_a_third_waits_saying_why(tmp_path, two_gpus):
    store = RunStore(tmp_path)
    a, b, c = (store.create_run(build_config({"name": n})) for n in "abc")
    assert [jobs._claim_next(store) for _ in range(3)] == [a.id, b.id, None]
    runs = {r.name: r for r in store.list_runs()}
    assert (runs["a"].gpus, runs["b"].gpus, runs["c"].status) == ("0", "1", "queued")
    assert runs["c"].waiting == "waiting for 1 GPU: 0 free; GPU 0 held by a; GPU 1 held by b"
    assert plan_launch(runs["b"].config, runs["b"].gpu_ids).train_env() == {"CUDA_VISIBLE_DEVICES": "1"}
    store.finish_run(a.id, "completed")
    assert jobs._claim_next(store) == c.id and store.get_run(c.id).gpus == "0"  # the lowest free one
    assert store.get_run(c.id).waiting == ""


def test_the_oldest_run_waits_for_its_gpus_and_the_younger_wait_behind_it(tmp_path, two_gpus):
    store = RunStore(tmp_path)
    first = store.create_run(build_config({"name": "one"}))
    assert jobs._claim_next(store) == first.id
    big = store.create_run(build_config({"name": "big", "num_processes": 2}))
    small = store.create_run(build_config({"name": "small"}))
    assert jobs._claim_next(store) is None
    assert store.get_run(big.id).waiting == "waiting for 2 GPUs: 1 free (GPU 1); GPU 0 held by one"
    assert store.get_run(small.id).waiting.startswith("queued behind big, which is waiting for 2 GPUs")
    huge = store.create_run(build_config({"name": "huge", "num_processes": 3}))
    store.finish_run(first.id, "completed")
    assert jobs._claim_next(store) == big.id and store.get_run(big.id).gpus == "0,1"
    jobs._claim_next(store)
    assert "needs 3 GPUs and this machine has 2" in store.get_run(huge.id).error  # never fits: not left queued
    assert store.get_run(huge.id).status == "failed"


def test_on_a_cpu_machine_the_slot_works_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(gpus, "machine", lambda: Machine())
    store = RunStore(tmp_path)
    a, _ = (store.create_run(build_config({"name": n})) for n in "ab")
    assert [jobs._claim_next(store), jobs._claim_next(store)] == [a.id, None]  # WORKBENCH_MAX_CONCURRENT: 1
    assert store.get_run(a.id).gpus == ""


def test_a_run_shows_the_gpus_it_holds_and_why_it_waits(tmp_path, two_gpus):
    from app.formatting import status_line

    store = RunStore(tmp_path)
    a = store.create_run(build_config({"name": "a", "num_processes": 2}))
    b = store.create_run(build_config({"name": "b"}))
    jobs._claim_next(store)
    jobs._claim_next(store)
    assert "GPUs 0,1" in status_line(store.get_run(a.id))
    assert status_line(store.get_run(b.id)) == "queued · waiting for 1 GPU: 0 free; GPUs 0, 1 held by a"
    from prometheus_client.parser import text_string_to_metric_families

    from backend import monitoring

    body, _ = monitoring.exposition(monitoring.registry(store))
    held = [(s.labels, s.value) for f in text_string_to_metric_families(body.decode()) for s in f.samples
            if s.name == "workbench_run_gpus"]
    assert held == [({"run_id": a.id, "run_name": "a", "mode": "sft", "gpus": "0,1"}, 2.0)]


# ---- the server beside the trainer ----

def stand_in(code: str) -> list[str]:
    """A process in the vLLM server's place (vLLM itself needs a GPU): what the supervisor does with it is the
    same."""
    return [sys.executable, "-c", code]


def test_a_server_is_started_with_its_gpus_logged_in_the_run_folder_and_stopped(tmp_path):
    server = gpus.ServerProcess(stand_in("import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
                                         "time.sleep(60)"), {"CUDA_VISIBLE_DEVICES": "0"}, tmp_path / "vllm.log")
    server.start()
    try:
        deadline = time.time() + 20
        while not (tmp_path / "vllm.log").read_text() and time.time() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "vllm.log").read_text().strip() == "0" and server.exit_code() is None
    finally:
        server.stop(grace_s=5)
    assert server.exit_code() is not None


def test_a_server_that_dies_ends_the_trainer_and_says_why(tmp_path):
    server = gpus.ServerProcess(stand_in("import sys; print('torch.OutOfMemoryError: CUDA out of memory'); "
                                         "sys.exit(3)"), {}, tmp_path / "vllm.log").start()
    trainer = subprocess.Popen(stand_in("import time; time.sleep(60)"))
    recorded = []
    started = time.time()
    rc = gpus.wait_for(trainer, server, on_server_exit=lambda: recorded.append(server.death_message()),
                       poll_s=0.1)
    assert rc != 0 and time.time() - started < 30
    assert recorded == [f"the vLLM server (pid {server.pid}) exited with code 3: torch.OutOfMemoryError: CUDA out "
                        f"of memory; its log is {tmp_path / 'vllm.log'}"]


def test_a_machine_without_gpu_device_files_is_known_without_importing_torch():
    """Every cold start's supervisor plans its launch: on a machine with no GPU it must not pay torch's import."""
    import glob
    from pathlib import Path

    if any(glob.glob(pattern) for pattern in gpus.GPU_DEVICE_FILES):
        pytest.skip("this machine has GPU device files")
    code = "import sys; from backend.runs import gpus; m = gpus.machine(); print(m.gpus, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["0", "False"]
