"""The workbench's state for Prometheus: runs by status and how many ever ended, each run's status and health
(stalled, no learning signal, the run doctor's diagnoses), each running run's progress and heartbeats, the latest
value of every metric a running (or recently finished) run logged, labels per labeling session and the
workspace's free disk. docs/prometheus/alerts.yml holds alerting rules on these series.

Nothing is kept in memory: a custom collector reads the run store at every scrape, with a handful of indexed
queries, so the UI server (`/metrics`), `launch.py metrics` and any number of workers agree without a shared
process. Served by the UI (app/main.py) and, for machines without it, by `serve` below.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import math
import re
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from backend.doctor import NO_SIGNAL_VERDICT, parse_diagnoses
from backend.labeling import label_counts
from backend.runs.store import ENDED, STATUSES, RunStore

RECENT_SECONDS = 3600.0  # finished runs keep their info, diagnoses and last metric values in the exposition this long
RUN_LABELS = ["run_id", "run_name", "mode"]
_UNSAFE = re.compile(r"[^A-Za-z0-9_:]")


def metric_label(name: str) -> str:
    """A trainer's metric name as a label value PromQL users can type: rewards/correct/mean -> rewards_correct_mean."""
    return _UNSAFE.sub("_", name)


class WorkbenchCollector:
    """Reads the run store on each `collect` (each scrape)."""

    def __init__(self, store: RunStore, recent_seconds: float = RECENT_SECONDS):
        self.store, self.recent_seconds = store, recent_seconds

    def describe(self):
        return []  # nothing to read at registration: the families depend on what the store holds

    def collect(self):
        now = time.time()
        with self.store.connect() as db:
            counts = dict(db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
            runs = db.execute("SELECT id, name, mode, status, step, total_steps, heartbeat_at, train_started_at, "
                              "gpus, worker_beat_at, stalled, diagnoses, verdict FROM runs "
                              "WHERE status IN ('queued','running') OR finished_at >= ? ORDER BY created_at",
                              (now - self.recent_seconds,)).fetchall()
        sessions = label_counts(self.store)
        outcomes = self.store.outcome_counts()

        by_status = GaugeMetricFamily("workbench_runs", "Runs in the workspace by status.", labels=["status"])
        for status in STATUSES:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status
        yield GaugeMetricFamily("workbench_runs_queued", "Runs waiting for a free training slot.",
                                value=counts.get("queued", 0))
        finished = CounterMetricFamily("workbench_runs_finished", "Runs that ended, by final status (deleting runs "
                                       "does not lower it).", labels=["status"])
        for status in ENDED:
            finished.add_metric([status], outcomes.get(status, 0))
        yield finished

        step = GaugeMetricFamily("workbench_run_step", "Optimizer steps done by a running run.", labels=RUN_LABELS)
        total = GaugeMetricFamily("workbench_run_total_steps", "Steps a running run will train.", labels=RUN_LABELS)
        progress = GaugeMetricFamily("workbench_run_progress", "Fraction of its steps a running run has done (0-1).",
                                     labels=RUN_LABELS)
        info = GaugeMetricFamily("workbench_run_info", "1 for each queued, running or recently ended run: its status "
                                 "and its health (ok, stalled: its worker makes no progress, no_signal: it learned "
                                 "nothing).", labels=[*RUN_LABELS, "status", "health"])
        heartbeat = GaugeMetricFamily("workbench_run_heartbeat_age_seconds",
                                      "Seconds since a running run's supervisor last reported alive (it beats while "
                                      "the worker process exists, even a frozen one).", labels=RUN_LABELS)
        worker_beat = GaugeMetricFamily("workbench_run_worker_heartbeat_age_seconds",
                                        "Seconds since a running run's worker process itself last reported alive.",
                                        labels=RUN_LABELS)
        stalled = GaugeMetricFamily("workbench_run_stalled", "1 when the supervisor judges a running run's worker "
                                    "stalled (no training step, or no worker heartbeat, for too long), else 0.",
                                    labels=RUN_LABELS)
        diagnosis = GaugeMetricFamily("workbench_run_diagnosis", "1 for each finding of the run doctor on a running or "
                                      "recently ended run (check: the check's name, as `launch.py doctor` shows it; "
                                      "severity: error = it cannot learn as set, warning = it learns badly).",
                                      labels=[*RUN_LABELS, "check", "severity"])
        pace = GaugeMetricFamily("workbench_run_steps_per_second",
                                 "Training throughput of a running run since its first step.", labels=RUN_LABELS)
        held = GaugeMetricFamily("workbench_run_gpus", "GPUs a running run holds (its trainer's and its vLLM "
                                 "server's); the gpus label lists them as CUDA_VISIBLE_DEVICES names them.",
                                 labels=[*RUN_LABELS, "gpus"])
        latest = GaugeMetricFamily("workbench_run_metric",
                                   "Latest value of each metric a running or recently finished run logged "
                                   "(loss, reward, kl, learning_rate, rewards/<source>/mean, memory/gpu_peak_gb, "
                                   "gpu/utilization, ...; the name's "
                                   "characters other than letters, digits, _ and : become _).",
                                   labels=[*RUN_LABELS, "metric"])
        for run in runs:
            ids = [run["id"], run["name"], run["mode"]]
            running = run["status"] == "running"
            health = ("stalled" if running and run["stalled"] else
                      "no_signal" if run["verdict"] == NO_SIGNAL_VERDICT else "ok")
            info.add_metric([*ids, run["status"], health], 1)
            findings = {(d.check, d.severity) for d in parse_diagnoses(run["diagnoses"])}
            for check, severity in sorted(findings):  # one series per check and severity, however often stored
                diagnosis.add_metric([*ids, check, severity], 1)
            if run["status"] == "queued":
                continue  # a requeued run's metrics are its last attempt's: not news until it runs
            if running:
                stalled.add_metric(ids, 1 if run["stalled"] else 0)
                if run["worker_beat_at"]:
                    worker_beat.add_metric(ids, max(0.0, now - run["worker_beat_at"]))
                step.add_metric(ids, run["step"])
                if run["total_steps"]:
                    total.add_metric(ids, run["total_steps"])
                    progress.add_metric(ids, min(1.0, run["step"] / run["total_steps"]))
                if run["heartbeat_at"]:
                    heartbeat.add_metric(ids, max(0.0, now - run["heartbeat_at"]))
                if run["train_started_at"] and run["step"] > 0:
                    pace.add_metric(ids, run["step"] / max(now - run["train_started_at"], 1e-9))
                if run["gpus"]:
                    held.add_metric([*ids, run["gpus"]], len(run["gpus"].split(",")))
            seen = set()
            for name, value in self.store.last_metrics(run["id"]).items():
                label = metric_label(name)
                if label not in seen:
                    seen.add(label)
                    latest.add_metric([*ids, label], math.nan if value is None else value)
        yield from (info, step, total, progress, heartbeat, worker_beat, stalled, pace, held, latest, diagnosis)

        labels = GaugeMetricFamily("workbench_labels", "Preference labels given in a labeling session (undone ones "
                                   "excluded).", labels=["session_id", "session_name", "mode"])
        for s in sessions:
            labels.add_metric([s[0], s[1], s[2]], s[3])
        yield labels

        try:
            disk = shutil.disk_usage(self.store.workspace)
        except OSError:  # the workspace's disk unmounted under a live server: the other series still answer
            return
        yield GaugeMetricFamily("workbench_workspace_disk_free_bytes", "Bytes free on the workspace's file system "
                                "(runs, checkpoints and the store live there).", value=disk.free)
        yield GaugeMetricFamily("workbench_workspace_disk_size_bytes", "Size of the workspace's file system in bytes.",
                                value=disk.total)


def registry(store: RunStore) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(WorkbenchCollector(store))
    return reg


def exposition(reg: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type): Prometheus text format, or OpenMetrics when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(reg), content_type


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def open_warning(host: str, auth: tuple[str, str] | None) -> str | None:
    """What to say loudly when a server listens beyond this machine with no password; None when it doesn't."""
    if auth or host in LOOPBACK:
        return None
    return (f"serving on {host} without --auth: anyone who can reach this machine can start runs and read the "
            "workspace; give --auth user:password (or WORKBENCH_AUTH)")


def authorized(header: str | None, auth: tuple[str, str] | None) -> bool:
    """Whether an Authorization header carries the workbench's credentials (HTTP basic, what Prometheus sends)."""
    if auth is None:
        return True
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    ok_user = hmac.compare_digest(user.encode(), auth[0].encode())
    ok_password = hmac.compare_digest(password.encode(), auth[1].encode())
    return bool(sep) and ok_user and ok_password


UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Basic realm="workbench metrics"'}


class BasicAuthGate:
    """/metrics' basic auth, throttled per client as the login page is (a scraper with the password never waits;
    a guesser waits and is then refused). Called on the servers' request threads."""

    def __init__(self, auth: tuple[str, str] | None):
        from backend.core.net import LoginThrottle

        self.auth, self.throttle = auth, LoginThrottle()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def refusal(self, header: str | None, client: str) -> tuple[int, dict] | None:
        """None when the request may pass, else (status, headers) to answer with."""
        if self.auth is None:
            return None
        with self._guard:
            lock = self._locks.setdefault(client, threading.Lock())
            if len(self._locks) > 10_000:  # memory bounded by the recent clients
                self._locks = {c: lk for c, lk in self._locks.items() if lk.locked() or self.throttle.failures.get(c)}
        with lock:  # one attempt at a time per address: parallel guesses wait their delays in turn
            if wait := self.throttle.retry_after(client):
                return 429, {"Retry-After": str(round(wait))}
            time.sleep(self.throttle.delay(client))
            if authorized(header, self.auth):
                self.throttle.succeeded(client)
                return None
            self.throttle.failed(client)
            return 401, UNAUTHORIZED_HEADERS


def serve(store: RunStore, host: str = "127.0.0.1", port: int = 9101,
          auth: tuple[str, str] | None = None) -> ThreadingHTTPServer:
    """An HTTP server that answers only GET /metrics (call serve_forever on it); for machines without the UI."""
    reg, gate = registry(store), BasicAuthGate(auth)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if urlsplit(self.path).path != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            if refused := gate.refusal(self.headers.get("Authorization"), self.client_address[0]):
                self.send_response(refused[0])
                for key, value in refused[1].items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body, content_type = exposition(reg, self.headers.get("Accept"))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 - scrapes every few seconds would flood the console
            pass

    return ThreadingHTTPServer((host, port), Handler)
