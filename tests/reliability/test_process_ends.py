"""Every process of a run ends when it is stopped: `stop --force` on a two-process run leaves none (torchrun
starts each rank in a session of its own), and SIGTERM to a foreground `launch.py train` stops the run cleanly,
with its adapter, as Ctrl-C does."""
import os
import signal
import subprocess
import sys
from pathlib import Path

from backend.config import build_config
from backend.core.procs import pid_alive, processes_of
from backend.runs.jobs import stop_run, submit_run
from backend.runs.store import RunStore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_force_stop_ends_every_rank_of_a_two_process_run(tiny_model, workspace):
    store = RunStore(workspace)
    run = submit_run(store, build_config({"model": str(tiny_model), "max_steps": 5000, "max_length": 64,
                                          "num_processes": 2}))
    # the two ranks and accelerate's launcher, whose command line names the worker too
    ranks = wait_for(lambda: len(p := processes_of("backend.runs.worker", run.id, str(store.workspace))) >= 3 and p,
                     timeout=240, what="two ranks")
    wait_for(lambda: store.get_run(run.id).step >= 1, timeout=240, what="a first step")
    supervisor = store.get_run(run.id).pid
    assert stop_run(store, run.id, force=True) == "stopped"
    assert not [p for p in [supervisor, *ranks] if pid_alive(p)]
    assert processes_of("backend.runs.worker", run.id) == []
    assert store.get_run(run.id).error == "killed on request before it could save"


def _rank(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [int(e[5:]) for e in env if e.startswith(b"RANK=")]
    return found[0] if found else None


def test_a_rank_killed_first_is_named_with_its_pid_and_signal_not_the_survivors_connection_error(tiny_model,
                                                                                                 workspace):
    store = RunStore(workspace)
    run = submit_run(store, build_config({"model": str(tiny_model), "max_steps": 5000, "max_length": 64,
                                          "num_processes": 2}))
    wait_for(lambda: store.get_run(run.id).step >= 1, timeout=240, what="a first step")
    [victim] = [p for p in processes_of("backend.runs.worker", run.id, str(store.workspace)) if _rank(p) == 1]
    os.kill(victim, signal.SIGKILL)
    ended = wait_for(lambda: (r := store.get_run(run.id)).status == "failed" and r.error.startswith("rank") and r,
                     timeout=120, what="the run's failure to name the rank")
    assert ended.error.startswith(f"rank 1 (pid {victim}) was killed by SIGKILL"), ended.error
    assert "then rank 0 failed" in ended.error  # the survivor's connection error comes second
    wait_for(lambda: not processes_of("backend.runs.worker", run.id), timeout=30, what="no rank left")


def test_sigterm_to_a_foreground_train_stops_the_run_with_its_adapter(tiny_model, workspace):
    proc = subprocess.Popen([sys.executable, str(REPO / "launch.py"), "train", "--workspace", str(workspace),
                             "--set", f"model={tiny_model}", "--set", "max_steps=5000", "--set", "max_length=64"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    store = RunStore(workspace)
    try:
        run = wait_for(lambda: (runs := store.list_runs()) and runs[0].step >= 1 and runs[0], timeout=180,
                       what="a first step")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out  # EXIT_STOPPED
    assert "SIGTERM: stopping" in out
    done = store.get_run(run.id)
    assert done.status == "stopped" and (Path(done.adapter_path) / "adapter_model.safetensors").exists()
