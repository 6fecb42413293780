"""Teardown shared by the tests that start detached processes: leave none of them running."""
import os
import signal

from backend import sweeps
from backend.core.procs import pid_alive
from backend.runs.jobs import stop_run
from backend.runs.store import RunStore


def leave_nothing_running(workspace) -> None:
    """Kill sweep drivers first (they would start new trials), then force-stop the runs, then stop model servers."""
    store = RunStore(workspace)
    for sweep in sweeps.list_sweeps(store, sweeps.ACTIVE):
        if sweep.pid and pid_alive(sweep.pid):
            os.kill(sweep.pid, signal.SIGKILL)
    for run in store.list_runs(("queued", "running")):
        stop_run(store, run.id, force=True)
    from backend import serving

    for server in serving.list_servers(workspace, active_only=True):  # a model server a failed test left
        serving.stop_server(workspace, server.id)
