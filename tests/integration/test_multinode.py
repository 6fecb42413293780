"""Two machines on loopback: the same run config started in two workspaces, machine rank 0 and 1, meeting at
127.0.0.1. They train as one job of two processes; machine 0 records the metrics and the adapter, machine 1
keeps its own record of progress and outcome."""
import socket

from backend.config import build_config
from backend.runs.jobs import submit_run
from backend.runs.logs import log_path
from backend.runs.store import RunStore
from tests.waiting import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_machines_train_one_job_and_machine_0_records_it(tiny_model, tmp_path):
    port = _free_port()
    stores, runs = [], []
    for rank in (0, 1):
        store = RunStore(tmp_path / f"machine{rank}")
        config = build_config({"model": str(tiny_model), "max_steps": 3, "max_length": 64, "lora": {"r": 4},
                               "distributed": {"num_machines": 2, "machine_rank": rank,
                                               "main_process_ip": "127.0.0.1", "main_process_port": port}})
        stores.append(store)
        runs.append(submit_run(store, config))
    wait_for(lambda: not any(s.get_run(r.id).active for s, r in zip(stores, runs)), timeout=240, every=1,
             what="both machines to finish")
    (main, other), (main_run, other_run) = stores, [s.get_run(r.id) for s, r in zip(stores, runs)]

    main_log = log_path(main, main_run.id).read_text()
    assert main_run.status == "completed", main_log[-3000:]
    assert other_run.status == "completed", log_path(other, other_run.id).read_text()[-3000:]
    assert "processes: 2 (MULTI_CPU, 2 machine(s))" in main_log
    losses = [m for m in main.metrics_since(main_run.id) if m["name"] == "loss"]
    assert [m["step"] for m in losses] == [1, 2, 3]
    assert main_run.adapter_path and (tmp_path / "machine0").joinpath(main_run.adapter_path).exists()
    # machine 1: progress and outcome in its own store, but no second copy of the metrics or the adapter
    assert (other_run.step, other_run.total_steps) == (3, 3)
    assert other.metrics_since(other_run.id) == [] and other_run.adapter_path is None
    assert "metrics, samples and the adapter are recorded on machine 0" in log_path(other, other_run.id).read_text()
