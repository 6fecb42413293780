"""A run handed to a warm supervisor (backend/runs/warm.py): forked with its imports done, trained, stopped."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend.config import build_config
from backend.core.procs import pid_alive
from backend.runs import warm
from backend.runs.jobs import stop_run, submit_run
from backend.runs.logs import log_tail
from backend.runs.store import RunStore
from tests.processes import leave_nothing_running
from tests.waiting import wait_for


@pytest.fixture
def warm_on(monkeypatch, workspace):
    monkeypatch.setenv("WORKBENCH_WARM_WORKER", "1")  # inherited by the warm processes started here
    yield
    leave_nothing_running(workspace)
    for path in warm.warm_dir(workspace).glob("*"):  # waiting or still importing: none outlives the test
        pid = path.read_text().split()[0] if path.name == "starting" else path.name.split(".")[0]
        if pid.isdigit() and pid_alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


def _ready(workspace) -> int:
    wait_for(lambda: list(warm.warm_dir(workspace).glob("*.ready")), timeout=120, what="a warm process ready")
    return int(next(warm.warm_dir(workspace).glob("*.ready")).stem)


def _settings(tiny_model, steps):
    return build_config({"mode": "sft", "model": str(tiny_model), "dataset": "demo-sft-instructions",
                         "max_steps": steps, "per_device_train_batch_size": 2, "max_length": 64,
                         "lora": {"r": 4}, "name": "warm"})


def test_a_run_forks_from_the_warm_supervisor_and_the_next_one_waits(tiny_model, workspace, warm_on):
    store = RunStore(workspace)
    started = warm.ensure_warm(workspace)
    pid = _ready(workspace)
    assert pid == started
    assert warm.ensure_warm(workspace) is None  # one waits already

    run = submit_run(store, _settings(tiny_model, 3))
    wait_for(lambda: not store.get_run(run.id).active, timeout=180, what="the warm run to end")
    done = store.get_run(run.id)
    log = log_tail(store, run.id, 200)
    assert done.status == "completed", log
    assert done.pid == pid and done.worker_pid != pid  # the warm process supervised; its child trained
    assert "warm start: the worker is forked" in log
    assert sorted({m["step"] for m in store.metrics_since(run.id) if m["name"] == "loss"}) == [1, 2, 3]
    assert (store.run_dir(run.id) / "adapter" / "adapter_config.json").is_file()
    wait_for(lambda: not pid_alive(pid), timeout=30, what="the used warm process to end")

    assert warm.ensure_warm(workspace, busy=True) is None  # a training run gets the CPU to itself
    nxt = warm.ensure_warm(workspace)
    assert nxt and nxt != pid
    _ready(workspace)
    os.kill(nxt, signal.SIGTERM)


def test_a_warm_run_stops_when_killed(tiny_model, workspace, warm_on):
    store = RunStore(workspace)
    warm.ensure_warm(workspace)
    pid = _ready(workspace)
    run = submit_run(store, _settings(tiny_model, 500))
    wait_for(lambda: store.metrics_since(run.id), timeout=120, what="the first metric")
    worker = store.get_run(run.id).worker_pid
    assert stop_run(store, run.id, force=True) == "stopped"
    assert not pid_alive(pid) and not pid_alive(worker)
    assert store.get_run(run.id).status == "stopped"


def test_a_cold_single_process_run_starts_its_worker_without_the_launcher(tiny_model, workspace):
    """No accelerate launcher between the supervisor and a single process (it would import torch and accelerate
    in a process of its own first); the worker sets the launcher's environment itself."""
    import psutil

    store = RunStore(workspace)
    run = submit_run(store, _settings(tiny_model, 500))
    try:
        wait_for(lambda: store.metrics_since(run.id), timeout=180, what="the first metric")
        started = store.get_run(run.id)
        worker = psutil.Process(started.worker_pid)
        assert "--direct" in worker.cmdline() and worker.ppid() == started.pid  # the supervisor's own child
    finally:
        assert stop_run(store, run.id, force=True) == "stopped"
    leave_nothing_running(workspace)


def test_claims_take_only_current_code_and_only_once(workspace, warm_on):
    folder = warm.warm_dir(workspace)
    folder.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--warm",  # as a warm one
                                "--workspace", str(workspace)])
    wait_for(lambda: "--warm" in Path(f"/proc/{sleeper.pid}/cmdline").read_text(), timeout=10, what="its argv")
    try:
        (folder / f"{sleeper.pid}.ready").write_text("old-code")
        assert warm.claim(workspace, "r1") is None  # other code: never handed a run
        (folder / f"{os.getpid()}.ready").write_text(warm.fingerprint())
        assert warm.claim(workspace, "r1") is None  # a live pid that is no warm process (a reused pid)
        (folder / f"{os.getpid()}.ready").unlink()
        (folder / f"{sleeper.pid}.ready").write_text(warm.fingerprint())
        assert warm.claim(workspace, "r1") == sleeper.pid
        assert (folder / f"{sleeper.pid}.run-r1").exists()
        assert warm.claim(workspace, "r2") is None  # taken

        (folder / f"{sleeper.pid}.run-r1").rename(folder / f"{sleeper.pid}.ready")
        (folder / f"{sleeper.pid}.ready").write_text("old-code")
        warm.ensure_warm(workspace, busy=True)  # ends the stale one, starts none while a run trains
        assert sleeper.wait(10) == -signal.SIGTERM
        assert not list(folder.glob("*.ready"))
    finally:
        sleeper.kill()


def test_the_forked_worker_gets_what_accelerate_launch_gives(workspace, monkeypatch):
    import torch

    from backend.runs.supervisor import launch_command

    monkeypatch.setenv("TEST_MARK", "kept")
    env = warm.launcher_env(launch_command(_settings("m", 3), "r1", workspace))
    assert env["ACCELERATE_USE_CPU"] == "True" and env["ACCELERATE_MIXED_PRECISION"] == "no"
    assert env["OMP_NUM_THREADS"] == str(torch.get_num_threads())  # the threads a plain torch script uses
    assert env["TEST_MARK"] == "kept" and "RANK" not in env
    # a process with another environment (a CLI with its own HF_TOKEN, say) is not handed this one's runs
    assert warm.fingerprint() != warm.fingerprint({**warm.child_env(), "HF_TOKEN": "x"})


def test_what_starts_cold():
    def refusal(cuda=False, server=False, **settings):
        return warm.fork_refusal(build_config({"mode": "sft", **settings}), cuda=cuda, server=server)

    assert refusal() is None
    assert "several processes" in refusal(num_processes=2)
    assert "CUDA" in refusal(cuda=True)
    assert "vLLM" in refusal(server=True)
    assert "deepspeed" in refusal(distributed={"strategy": "deepspeed"})
