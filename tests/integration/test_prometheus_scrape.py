"""The real Prometheus server (Debian's `prometheus` package) scrapes the workbench's /metrics every second with
the shipped rules loaded: it stores the runs' series and fires WorkbenchRunFailed when a run fails."""
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from backend import monitoring
from backend.config import build_config
from backend.doctor import Diagnosis, to_json
from backend.runs.store import RunStore
from tests.integration.test_metrics_endpoint import _free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus server is not installed (Debian's "
                                "`prometheus` package; scripts/setup.sh --dev installs it)")


def api(base, path, **query):
    url = f"{base}/api/v1/{path}" + ("?" + urllib.parse.urlencode(query) if query else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)["data"]
    except OSError:  # not listening yet
        return None


@pytest.fixture
def workbench(tmp_path):
    store = RunStore(tmp_path / "ws")
    server = monitoring.serve(store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield store, server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def prometheus(workbench, tmp_path):
    _, target = workbench
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(REPO / "docs/prometheus/alerts.yml")],
        "scrape_configs": [{"job_name": "workbench", "static_configs": [{"targets": [f"127.0.0.1:{target}"]}]}]}))
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_prometheus_scrapes_the_runs_and_fires_when_one_fails(workbench, prometheus):
    store, _ = workbench
    run = store.create_run(build_config({"name": "doomed", "mode": "sft"}))
    store.update_run(run.id, status="running", step=1, total_steps=4)
    # a second run as its supervisor leaves a frozen worker: stalled, its own beat 45 s old, a diagnosis stored
    frozen = store.create_run(build_config({"name": "frozen", "mode": "sft"}))
    store.update_run(frozen.id, status="running", worker_pid=4321, worker_beat_at=time.time() - 45,
                     stalled="no heartbeat from the worker (pid 4321) for 45 s",
                     diagnoses=to_json([Diagnosis("loss_rising", "warning", {}, {})]))

    def series(query):
        found = api(prometheus, "query", query=query)
        return found and found["result"]

    def one(query):  # the single series' labels (less the scrape's own) and value
        [r] = series(query)
        return {k: v for k, v in r["metric"].items() if k not in ("__name__", "instance", "job")} | {
            "value": r["value"][1]}

    info = wait_for(lambda: series('workbench_run_info{run_name="doomed"}'), timeout=20, every=0.5,
                    what="the first scrape")
    assert [r["metric"] | {"value": r["value"][1]} for r in info] == [{
        "__name__": "workbench_run_info", "instance": info[0]["metric"]["instance"], "job": "workbench",
        "run_id": run.id, "run_name": "doomed", "mode": "sft", "status": "running", "health": "ok", "value": "1"}]
    ids = {"run_id": frozen.id, "run_name": "frozen", "mode": "sft"}
    assert one('workbench_run_info{run_name="frozen"}') == ids | {"status": "running", "health": "stalled",
                                                                  "value": "1"}
    assert one('workbench_run_stalled{run_name="frozen"}') == ids | {"value": "1"}
    assert one('workbench_run_stalled{run_name="doomed"}')["value"] == "0"
    age = one('workbench_run_worker_heartbeat_age_seconds{run_name="frozen"}')
    assert float(age.pop("value")) >= 45 and age == ids
    assert one('workbench_run_diagnosis{run_name="frozen"}') == ids | {"check": "loss_rising", "severity": "warning",
                                                                       "value": "1"}
    rules = wait_for(lambda: [r for g in api(prometheus, "rules")["groups"] for r in g["rules"] if r["health"] == "ok"],
                     timeout=10, every=0.5, what="the rules' first evaluation")  # "unknown" until then
    assert sorted(r["name"] for r in rules) == \
        ["WorkbenchDiskNearlyFull", "WorkbenchNoLearningSignal", "WorkbenchRunFailed", "WorkbenchWorkerStalled"]

    store.finish_run(run.id, "failed", error="CUDA out of memory")
    store.finish_run(frozen.id, "failed", error="stalled: ...; the worker was ended (stall_action: stop)")
    firing = wait_for(lambda: [a for a in (api(prometheus, "alerts") or {}).get("alerts", [])
                               if a["labels"]["alertname"] == "WorkbenchRunFailed" and a["state"] == "firing"],
                      timeout=20, every=0.5, what="WorkbenchRunFailed to fire")
    assert firing[0]["labels"]["status"] == "failed"
    # a scrape after the end: the ended run's liveness series are gone (stale), its info and diagnoses stay
    wait_for(lambda: series('workbench_run_stalled{run_name="frozen"}') == [] and
             series('workbench_run_worker_heartbeat_age_seconds{run_name="frozen"}') == [],
             timeout=20, every=0.5, what="the ended run's liveness series to go")
    assert one('workbench_run_info{run_name="frozen"}') == ids | {"status": "failed", "health": "ok", "value": "1"}
    assert one('workbench_run_diagnosis{run_name="frozen"}')["check"] == "loss_rising"
    assert one('workbench_run_info{run_name="doomed"}')["status"] == "failed"
