"""A real workbench UI in its own process and Debian's chromium driven by Playwright."""
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ui_process(workspace, log: Path | None = None, env: dict | None = None, wait_s: float = 90):
    """`launch.py ui` on a free port over `workspace`, its output in `log` (None: discarded); yields its URL once
    it answers, and ends it after."""
    port = _free_port()
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, str(REPO / "launch.py"), "ui", "--port", str(port),
                             "--workspace", str(workspace)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                            env=dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False", **(env or {})))
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + wait_s
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("UI did not start:\n" + (Path(log).read_text()[-3000:] if log else ""))
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log:
            out.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.call_failed = report.failed
    return report


@pytest.fixture
def ui_server(tmp_path, request):
    workspace = tmp_path / "ws"
    log = tmp_path / "ui.log"
    with ui_process(workspace, log) as url:
        yield {"url": url, "workspace": workspace}
    if getattr(request.node, "call_failed", False):  # what the server said is often why the page did not change
        print(f"--- the last lines of the UI's log ({log}) ---\n" + "\n".join(log.read_text().splitlines()[-80:]),
              file=sys.stderr)
    from tests.processes import leave_nothing_running

    leave_nothing_running(workspace)  # never leave a sweep driver or a worker behind


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash scripts/setup.sh --dev` (installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        yield pg
        context.close()
        browser.close()
