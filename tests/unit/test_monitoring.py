"""The Prometheus exposition (/metrics): what a scrape says about the run store, read fresh at each scrape."""
import base64
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend import labeling, monitoring
from backend.config import build_config
from backend.runs.store import RunStore


def scrape(registry) -> dict[tuple, float]:
    """{(sample name, (sorted label items)): value} from the text exposition, parsed as Prometheus would."""
    if isinstance(registry, RunStore):
        registry = monitoring.registry(registry)
    body, content_type = monitoring.exposition(registry)
    assert content_type.startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def store(tmp_path):
    """A queued, a running and a completed run (plus one that ended two hours ago) and a labeling session."""
    store = RunStore(tmp_path)
    now = time.time()
    runs = {key: store.create_run(build_config({"name": key, "mode": mode}))
            for key, mode in (("old", "sft"), ("done", "dpo"), ("live", "sft"), ("waiting", "sft"))}
    store.update_run(runs["live"].id, status="running", started_at=now - 20, train_started_at=now - 10, step=4,
                     total_steps=16, heartbeat_at=now - 3)
    store.add_metrics(runs["live"].id, 1, {"loss": 2.5, "learning_rate": 2e-4})
    store.add_metrics(runs["live"].id, 4, {"loss": 1.25, "rewards/correct/mean": 0.75, "grad_norm": float("nan")})
    store.update_run(runs["done"].id, status="running", step=8, total_steps=8)
    store.add_metrics(runs["done"].id, 8, {"loss": 0.5, "rewards/margins": 1.5})
    store.finish_run(runs["done"].id, "completed")
    store.add_metrics(runs["old"].id, 2, {"loss": 9.0})
    store.finish_run(runs["old"].id, "failed")
    store.update_run(runs["old"].id, finished_at=now - 7200)
    session = labeling.create_session(store, ["Say hi.", "Count to two."], model_a="some-model", name="greetings",
                                      check_models=False)
    for item in labeling.items(store, session.id):
        labeling.save_answers(store, item.id, [("hi", {}), ("hello", {})])
    while (item := labeling.claim_next(store, session.id, "ann")) is not None:
        labeling.commit_label(store, session.id, item.id, "a", "ann")
    return store, {k: store.get_run(r.id) for k, r in runs.items()}, session


def test_runs_are_counted_by_status_and_the_queue_on_its_own(store):
    samples = scrape(store[0])
    assert {s: value(samples, "workbench_runs", status=s) for s in ("queued", "running", "completed", "failed",
                                                                     "stopped")} == \
        {"queued": 1, "running": 1, "completed": 1, "failed": 1, "stopped": 0}
    assert value(samples, "workbench_runs_queued") == 1


def test_a_running_run_reports_its_progress_heartbeat_and_pace(store):
    store, runs, _ = store
    live = runs["live"]
    samples = scrape(store)
    ids = {"run_id": live.id, "run_name": "live", "mode": "sft"}
    assert value(samples, "workbench_run_step", **ids) == 4
    assert value(samples, "workbench_run_total_steps", **ids) == 16
    assert value(samples, "workbench_run_progress", **ids) == 0.25
    assert 3 <= value(samples, "workbench_run_heartbeat_age_seconds", **ids) < 30
    assert 4 / 30 < value(samples, "workbench_run_steps_per_second", **ids) <= 4 / 10
    # only running runs have progress: not the queued one, not the finished ones
    assert {dict(labels)["run_name"] for n, labels in samples if n == "workbench_run_step"} == {"live"}


def test_the_latest_value_of_each_metric_is_exported_with_a_typeable_name(store):
    store, runs, _ = store
    samples = scrape(store)
    live = {"run_id": runs["live"].id, "run_name": "live", "mode": "sft"}
    assert value(samples, "workbench_run_metric", **live, metric="loss") == 1.25  # the newest, not the first
    assert value(samples, "workbench_run_metric", **live, metric="learning_rate") == 2e-4
    assert value(samples, "workbench_run_metric", **live, metric="rewards_correct_mean") == 0.75
    assert value(samples, "workbench_run_metric", **live, metric="grad_norm") != \
        value(samples, "workbench_run_metric", **live, metric="grad_norm")  # NaN stays NaN
    done = {"run_id": runs["done"].id, "run_name": "done", "mode": "dpo"}
    assert value(samples, "workbench_run_metric", **done, metric="rewards_margins") == 1.5  # finished this hour
    assert not any(dict(labels).get("run_name") in ("old", "waiting") for _, labels in samples)


def test_labels_are_counted_per_session(store):
    store, _, session = store
    samples = scrape(store)
    assert value(samples, "workbench_labels", session_id=session.id, session_name="greetings", mode="pair") == 2


def test_each_scrape_reads_the_store_afresh(store):
    store, runs, _ = store
    live = {"run_id": runs["live"].id, "run_name": "live", "mode": "sft"}
    registry = monitoring.registry(store)  # as the server keeps it
    assert value(scrape(registry), "workbench_run_step", **live) == 4
    store.add_metrics(runs["live"].id, 5, {"loss": 1.0})
    store.update_run(runs["live"].id, step=5)
    samples = scrape(registry)
    assert value(samples, "workbench_run_step", **live) == 5
    assert value(samples, "workbench_run_metric", **live, metric="loss") == 1.0


def test_a_scraper_that_asks_for_openmetrics_gets_it(store):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

    body, content_type = monitoring.exposition(monitoring.registry(store[0]),
                                               "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    assert content_type.startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    families = {f.name: f for f in parse_openmetrics(body.decode())}
    assert {s.labels["status"]: s.value for s in families["workbench_runs"].samples}["running"] == 1


def test_a_scrape_of_a_hundred_runs_reports_every_metric_of_each(tmp_path):
    # bench/scrape_speed.py times the same workspace against the 50 ms target
    from bench.scrape_speed import fill_store

    store = RunStore(tmp_path)
    fill_store(store, runs=100, steps=20, metrics=12)
    body, _ = monitoring.exposition(monitoring.registry(store))
    assert body.count(b"workbench_run_metric{") == 100 * 12
    assert body.count(b"workbench_run_step{") == 10


def test_basic_auth_accepts_only_the_workbench_credentials():
    def header(text):
        return "Basic " + base64.b64encode(text.encode()).decode()

    auth = ("ann", "s3cret")
    assert monitoring.authorized(None, None)
    assert monitoring.authorized(header("ann:s3cret"), auth)
    for bad in (None, "", header("ann:wrong"), header("bob:s3cret"), header("ann"), "Bearer abc", "Basic !!!"):
        assert not monitoring.authorized(bad, auth), bad


def test_the_headless_server_serves_only_metrics(tmp_path):
    store = RunStore(tmp_path)
    store.create_run(build_config({}))
    server = monitoring.serve(store, "127.0.0.1", 0, auth=("ann", "s3cret"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(base + "/metrics", timeout=5)
        assert denied.value.code == 401 and "Basic" in denied.value.headers["WWW-Authenticate"]
        request = urllib.request.Request(base + "/metrics", headers={
            "Authorization": "Basic " + base64.b64encode(b"ann:s3cret").decode()})
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
        assert response.status == 200 and 'workbench_runs{status="queued"} 1.0' in text
        with pytest.raises(urllib.error.HTTPError) as other:
            urllib.request.urlopen(base + "/", timeout=5)
        assert other.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
