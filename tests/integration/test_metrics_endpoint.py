"""GET /metrics on the real UI server (behind the same user and password as the UI, as HTTP basic auth) and on
the headless `launch.py metrics`, read by Prometheus' own parser."""
import base64
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend.config import build_config
from backend.runs.store import RunStore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CREDENTIALS = "Basic " + base64.b64encode(b"ann:s3cret").decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, auth=None):
    """(status, content type, body)."""
    request = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], ""


def answers(url, status) -> bool:
    try:
        return get(url)[0] == status
    except OSError:  # not listening yet
        return False


def samples(text) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def seeded(tmp_path):
    """A finished run with logged metrics (nothing queued: the UI would start it)."""
    store = RunStore(tmp_path / "ws")
    run = store.create_run(build_config({"name": "finished-sft"}))
    store.update_run(run.id, status="running", step=2, total_steps=2)
    store.add_metrics(run.id, 2, {"loss": 0.75, "rewards/format/mean": 0.5})
    store.finish_run(run.id, "completed")
    return tmp_path / "ws", run


def start(args, workspace, log):
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_AUTH"}
    return subprocess.Popen([sys.executable, str(REPO / "launch.py"), *args, "--workspace", str(workspace)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(env, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False"))


def stop(proc):
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_the_ui_server_answers_metrics_to_its_user_only(seeded, tmp_path):
    path, run = seeded
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with open(tmp_path / "ui.log", "w") as log:
        proc = start(["ui", "--port", str(port), "--auth", "ann:s3cret"], path, log)
        try:
            wait_for(lambda: proc.poll() is not None or answers(base + "/metrics", 401), timeout=90,
                     what="the UI server")
            assert proc.poll() is None, (tmp_path / "ui.log").read_text()[-3000:]
            status, content_type, text = get(base + "/metrics", CREDENTIALS)
            assert status == 200 and content_type.startswith("text/plain")
            found = samples(text)
            assert found[("workbench_runs", (("status", "completed"),))] == 1
            ids = (("mode", "sft"), ("run_id", run.id), ("run_name", "finished-sft"))
            assert found[("workbench_run_metric", tuple(sorted((*ids, ("metric", "loss")))))] == 0.75
            assert found[("workbench_run_metric", tuple(sorted((*ids, ("metric", "rewards_format_mean")))))] == 0.5
            assert get(base + "/metrics", "Basic " + base64.b64encode(b"ann:wrong").decode())[0] == 401
            assert get(base + "/config")[0] == 401  # the UI's own routes keep their login
        finally:
            stop(proc)


def test_launch_metrics_serves_only_metrics_without_the_ui(seeded, tmp_path):
    path, run = seeded
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with open(tmp_path / "metrics.log", "w") as log:
        proc = start(["metrics", "--port", str(port)], path, log)
        try:
            started = time.time()
            wait_for(lambda: proc.poll() is not None or answers(base + "/metrics", 200), timeout=60,
                     what="launch.py metrics")
            assert proc.poll() is None, (tmp_path / "metrics.log").read_text()[-3000:]
            assert time.time() - started < 30  # no gradio, no torch
            found = samples(get(base + "/metrics")[2])
            assert found[("workbench_runs", (("status", "completed"),))] == 1
            assert get(base + "/")[0] == 404
        finally:
            stop(proc)
