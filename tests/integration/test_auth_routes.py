"""With --auth, every route the UI server serves wants the login (app/auth.py), the login throttles a client that
keeps failing, and a password too weak to mean anything is refused at the command line."""
import http.client
import json
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from app import auth as login
from backend.core import net
from tests.browser.conftest import ui_process

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "ann", "s3cret"


class Server(tuple):
    """(host, port), and the workspace the server serves."""
    workspace: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("auth")
    with ui_process(tmp / "ws", tmp / "ui.log", env={"WORKBENCH_AUTH": f"{USER}:{PASSWORD}"}) as url:
        parts = urllib.parse.urlsplit(url)
        served = Server((parts.hostname, parts.port))
        served.workspace = tmp / "ws"
        yield served


def call(server, method, path, headers=None, body=None):
    """(status, headers, body) of one request, redirects not followed."""
    conn = http.client.HTTPConnection(*server, timeout=20)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.msg, r.read()
    finally:
        conn.close()


def log_in(server, password=PASSWORD, client=None):
    """(status, headers, body) of POST /login; `client`: the address it comes from (X-Forwarded-For, which the
    server trusts from loopback as from a reverse proxy there)."""
    headers = {"Content-Type": "application/x-www-form-urlencoded", **({"X-Forwarded-For": client} if client else {})}
    return call(server, "POST", "/login", headers, urllib.parse.urlencode({"username": USER, "password": password}))


def test_every_route_wants_the_login_but_the_login_page(server):
    status, headers, _ = log_in(server, client="198.51.100.1")
    assert status == 200
    cookie = {"Cookie": "; ".join(c.split(";")[0] for c in headers.get_all("set-cookie"))}
    status, _, body = call(server, "GET", login.ROUTES_PATH, cookie)
    assert status == 200
    routes = json.loads(body)  # the live app's own list
    paths = {r["path"] for r in routes}
    assert {"/gradio_api/reset", "/gradio_api/cancel", "/gradio_api/heartbeat/{session_hash}", "/config",
            "/wb/stamp", "/metrics", login.ROUTES_PATH} <= paths

    public, refused = set(), {}
    for route in routes:
        path = re.sub(r"\{[^}]*\}", "x", route["path"])
        for method in route["methods"]:
            if method == "WEBSOCKET" or login.is_public(method, path):
                public.add((method, path))
                continue
            status = call(server, method, path, {"Content-Type": "application/json"}, b"{}")[0]
            if status not in (401, 403):
                refused[f"{method} {path}"] = status
    assert refused == {}, "answered without the login"
    assert {m for m, _ in public} <= {"GET", "HEAD", "POST"}
    assert {p for _, p in public} <= {"/", "/login", "/login/", "/theme.css", "/favicon.ico", "/metrics",
                                      "/assets/x", "/static/x", "/svelte/x"}
    assert call(server, "GET", "/metrics")[0] == 401  # its own HTTP basic auth
    assert call(server, "GET", "/no/such/route")[0] == 401  # nothing to probe either
    status, headers, _ = call(server, "GET", "/gradio_api/runs", {"Accept": "text/html"})
    assert (status, headers["location"]) == (303, "/")  # a browser is sent to the login page

    status, _, page = call(server, "GET", "/")
    assert status == 200 and b'"auth_required":true' in page
    assert b"window.gradio_api_info = {};" in page and b"on_add" not in page  # no endpoint listing before a login

    assert call(server, "GET", "/config", cookie)[0] == 200  # logged in, the routes answer
    assert call(server, "GET", "/monitoring", cookie)[0] == 403  # Gradio's traffic monitor stays off

    # an export's zip downloads from the exports folder itself, and nothing else there or above it does
    exports = server.workspace / "exports"
    exports.mkdir(exist_ok=True)
    (exports / "run-adapter.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    (exports / "notes.txt").write_text("not an export")
    assert call(server, "GET", "/wb/exports/run-adapter.zip")[0] == 401
    status, headers, body = call(server, "GET", "/wb/exports/run-adapter.zip", cookie)
    assert (status, body[:4]) == (200, b"PK\x05\x06") and "run-adapter.zip" in headers["content-disposition"]
    for name in ("notes.txt", "..%2Fui.log", "%2E%2E/ws.zip", "missing.zip"):
        assert call(server, "GET", f"/wb/exports/{name}", cookie)[0] == 404, name


def test_failed_logins_slow_down_then_lock_the_address_out(server):
    attacker = "203.0.113.7"
    took = []
    for _ in range(net.LOCK_FAILURES):
        start = time.monotonic()
        assert log_in(server, "guess", attacker)[0] == 400
        took.append(time.monotonic() - start)
    assert max(took[:net.FREE_FAILURES]) < 1.0
    assert took[net.FREE_FAILURES] >= 1.0 and took[net.FREE_FAILURES + 2] >= 4.0  # 1 s, 2 s, 4 s, ...

    start = time.monotonic()
    status, headers, body = log_in(server, PASSWORD, attacker)
    assert time.monotonic() - start < 1.0
    assert status == 429 and int(headers["retry-after"]) > 500
    assert "Too many failed logins from your address" in json.loads(body)["detail"]
    assert b"Too many failed logins" in call(server, "GET", "/", {"X-Forwarded-For": attacker})[2]  # the form says so
    assert log_in(server, PASSWORD, "203.0.113.8")[0] == 200  # per address: others still log in


def test_the_lock_lifts_when_the_window_passes():
    now = [0.0]
    throttle = net.LoginThrottle(clock=lambda: now[0])
    delays = []
    for _ in range(net.LOCK_FAILURES):
        delays.append(throttle.delay("a"))
        throttle.failed("a")
        now[0] += 1
    assert delays == [0] * net.FREE_FAILURES + [1, 2, 4, 8, 8]
    assert throttle.retry_after("a") == pytest.approx(net.WINDOW_S - net.LOCK_FAILURES)
    assert throttle.retry_after("b") == 0
    now[0] += net.WINDOW_S
    assert throttle.retry_after("a") == 0 and throttle.delay("a") == 0


@pytest.mark.parametrize("auth,message", [("ann:", "--auth: the password is empty"),
                                          ("ann:x", "--auth: the password is too short"),
                                          (":s3cret", "--auth: the user name is missing")])
def test_a_missing_user_or_a_weak_password_is_refused_at_start(auth, message, tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "launch.py"), "ui", "--auth", auth, "--workspace",
                           str(tmp_path / "ws")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "ws").exists()
