"""The UI server's safe defaults (loopback only, and a password when asked for one), and its one dispatcher
thread that moves the queue and notices dead workers with no browser open."""
import base64
import http.cookiejar
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url) -> int:
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code


def test_auth_protects_the_api_and_the_server_binds_loopback(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(REPO / "launch.py"), "ui", "--port", str(port), "--auth", "ann:s3cret",
                             "--workspace", str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(base + "/", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "UI did not start"
                time.sleep(0.5)
        assert _status(base + "/config") == 401
        assert _status(base + "/openapi.json") in (401, 404)  # no route listing without the password
        assert _status(base + "/wb/stamp") == 401  # the poll ticks' change stamp is behind the login too
        signed_in = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        signed_in.open(base + "/login", data=urllib.parse.urlencode({"username": "ann", "password": "s3cret"}).encode(),
                       timeout=10)
        assert signed_in.open(base + "/wb/stamp", timeout=10).read().decode().isdigit()
        # Gradio's history of calls would rewrite every poll's outputs in the browser's storage (app/main.py)
        assert json.loads(signed_in.open(base + "/config", timeout=10).read())["run_history"] is False
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        local = {line.split()[3] for line in listening.splitlines() if line.strip()}
        assert local == {f"127.0.0.1:{port}"}
    finally:
        proc.terminate()
        proc.wait(15)


def _start_ui(workspace, *extra):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(REPO / "launch.py"), "ui", "--port", str(port), "--workspace",
                             str(workspace), *extra], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def test_the_server_notices_a_dead_worker_with_no_browser_open(tmp_path):
    from backend.config import build_config
    from backend.runs.store import RunStore

    store = RunStore(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = store.create_run(build_config({"name": "orphan"}))
    store.update_run(run.id, status="running", started_at=time.time(), heartbeat_at=time.time(), pid=gone.pid)
    proc, _ = _start_ui(tmp_path)
    try:
        deadline = time.time() + 90
        while store.get_run(run.id).status == "running":
            assert proc.poll() is None and time.time() < deadline, "the server never reconciled the run"
            time.sleep(0.5)
        assert store.get_run(run.id).status == "interrupted" and "is gone" in store.get_run(run.id).error
    finally:
        proc.terminate()
        proc.wait(15)
