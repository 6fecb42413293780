"""The Prometheus exposition (/metrics): what a scrape says about the run store, read fresh at each scrape."""
import base64
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend import labeling, monitoring
from backend.config import build_config
from backend.doctor import Diagnosis, to_json
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
    # a queued run has only its info; one that ended two hours ago has nothing
    assert not any(dict(labels).get("run_name") == "old" for _, labels in samples)
    assert {n for n, labels in samples if dict(labels).get("run_name") == "waiting"} == {"workbench_run_info"}


def ids_of(run) -> dict:
    return {"run_id": run.id, "run_name": run.name, "mode": run.mode}


def test_every_queued_running_or_recent_run_has_its_status_and_health(store):
    store, runs, _ = store
    store.update_run(runs["done"].id, verdict="no_signal")
    store.update_run(runs["waiting"].id, stalled="left over")  # only a running run can be stalled
    info = {dict(labels)["run_name"]: (dict(labels)["status"], dict(labels)["health"], v)
            for (n, labels), v in scrape(store).items() if n == "workbench_run_info"}
    assert info == {"done": ("completed", "no_signal", 1), "live": ("running", "ok", 1),
                    "waiting": ("queued", "ok", 1)}  # not "old": it ended two hours ago
    store.update_run(runs["live"].id, stalled="no training step for 300 s after step 4")
    samples = scrape(store)
    assert value(samples, "workbench_run_info", **ids_of(runs["live"]), status="running", health="stalled") == 1


def test_runs_finished_is_a_counter_that_deleting_runs_does_not_lower(store):
    store, runs, _ = store
    body, _ = monitoring.exposition(monitoring.registry(store))
    family = next(f for f in text_string_to_metric_families(body.decode()) if f.name == "workbench_runs_finished")
    assert family.type == "counter"
    expected = {"completed": 1, "failed": 1, "stopped": 0, "interrupted": 0}  # every ending, 0 when none
    assert {s.labels["status"]: s.value for s in family.samples if s.name == "workbench_runs_finished_total"} == \
        expected
    store.delete_runs([runs["old"].id, runs["done"].id])
    samples = scrape(store)
    assert {s: value(samples, "workbench_runs_finished_total", status=s) for s in expected} == expected
    assert value(samples, "workbench_runs", status="completed") == 0  # the runs are gone, their endings counted


def test_a_running_run_reports_its_workers_own_heartbeat_and_whether_it_is_stalled(store):
    store, runs, _ = store
    live = ids_of(runs["live"])
    store.update_run(runs["live"].id, worker_beat_at=time.time() - 40)  # frozen worker, live supervisor
    samples = scrape(store)
    assert 40 <= value(samples, "workbench_run_worker_heartbeat_age_seconds", **live) < 70
    assert value(samples, "workbench_run_heartbeat_age_seconds", **live) < 30
    assert value(samples, "workbench_run_stalled", **live) == 0
    store.update_run(runs["live"].id, stalled="no heartbeat from the worker for 40 s")
    samples = scrape(store)
    assert value(samples, "workbench_run_stalled", **live) == 1
    for name in ("workbench_run_stalled", "workbench_run_worker_heartbeat_age_seconds"):
        assert {dict(labels)["run_name"] for n, labels in samples if n == name} == {"live"}  # running runs only


def test_each_stored_diagnosis_is_a_series_of_its_run(store):
    store, runs, _ = store
    zero = Diagnosis("zero_variance", "error", {"groups": 8}, {"metric": "frac_reward_zero_std"}, no_signal=True)
    clipped = Diagnosis("truncated", "warning", {"ratio": 1.0}, {"metric": "completions/clipped_ratio"})
    store.update_run(runs["live"].id, diagnoses=to_json([zero, clipped, zero]))  # a repeat is one series
    store.update_run(runs["done"].id, diagnoses=to_json([clipped]))
    store.update_run(runs["waiting"].id, diagnoses="not json")  # a damaged column costs its series, not the scrape
    diagnoses = sorted((dict(labels)["run_name"], dict(labels)["check"], dict(labels)["severity"], v)
                       for (n, labels), v in scrape(store).items() if n == "workbench_run_diagnosis")
    assert diagnoses == [("done", "truncated", "warning", 1), ("live", "truncated", "warning", 1),
                         ("live", "zero_variance", "error", 1)]


def test_the_workspace_disk_is_reported(store):
    samples = scrape(store[0])
    assert 0 < value(samples, "workbench_workspace_disk_free_bytes") <= \
        value(samples, "workbench_workspace_disk_size_bytes")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian's `prometheus` "
                    "package ships it; scripts/setup.sh --dev installs it)")
def test_promtool_finds_nothing_to_say_about_the_exposition(store):
    store, runs, _ = store
    store.update_run(runs["live"].id, worker_beat_at=time.time(), stalled="frozen",
                     diagnoses=to_json([Diagnosis("zero_variance", "error", {}, {})]))
    body, _ = monitoring.exposition(monitoring.registry(store))
    done = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert done.returncode == 0 and not done.stdout and not done.stderr, (done.stdout + done.stderr).decode()


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


def test_metrics_basic_auth_is_throttled_per_client_as_the_login_is(monkeypatch):
    import base64

    from backend import monitoring
    from backend.core import net

    slept, now = [], [0.0]
    monkeypatch.setattr(monitoring.time, "sleep", slept.append)
    gate = monitoring.BasicAuthGate(("prom", "secret"))
    gate.throttle = net.LoginThrottle(clock=lambda: now[0])
    basic = lambda pw: "Basic " + base64.b64encode(f"prom:{pw}".encode()).decode()  # noqa: E731
    assert gate.refusal(basic("secret"), "a") is None
    answers = [gate.refusal(basic("guess"), "a") for _ in range(net.LOCK_FAILURES)]
    assert [a[0] for a in answers] == [401] * net.LOCK_FAILURES
    assert slept == [0.0] * (net.FREE_FAILURES + 1) + [1.0, 2.0, 4.0, 8.0, 8.0]  # waits grow as at the login
    status, headers = gate.refusal(basic("secret"), "a")  # locked: even the right password
    assert status == 429 and int(headers["Retry-After"]) > 0
    assert gate.refusal(basic("secret"), "b") is None  # another address is not held back
    now[0] += net.WINDOW_S
    assert gate.refusal(basic("secret"), "a") is None
    assert monitoring.BasicAuthGate(None).refusal(None, "a") is None  # no --auth: nothing asked
