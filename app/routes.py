"""The UI server's own routes beside Gradio's: /metrics for Prometheus, an export's zip, and the page's change stamp.
Each but /metrics sits behind the login like the page."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from backend.runs.store import RunStore


def metrics_route(workspace: str | Path, auth: tuple[str, str] | None = None):
    """GET /metrics: the workspace's state for Prometheus (backend/monitoring.py); with --auth, HTTP basic auth
    with the same user and password (Prometheus' `basic_auth`), since scrapers cannot use the login page."""
    from starlette.responses import Response
    from starlette.routing import Route

    from backend import monitoring

    registry, gate = monitoring.registry(RunStore(workspace)), monitoring.BasicAuthGate(auth)

    def metrics(request):  # sync: Starlette runs it on a worker thread, each with its own store connection
        client = request.client.host if request.client else "?"
        if refused := gate.refusal(request.headers.get("authorization"), client):
            return Response(status_code=refused[0], headers=refused[1])
        body, content_type = monitoring.exposition(registry, request.headers.get("accept"))
        return Response(body, headers={"Content-Type": content_type})

    return Route("/metrics", metrics, methods=["GET"])


def logged_in(request) -> bool:
    """The request carries the login's cookie (or the page has no login); the login middleware checks it
    already, this holds when a route is used without it."""
    app = request.app
    if getattr(app, "auth", None) is None:
        return True
    cookies = request.cookies
    token = cookies.get(f"access-token-{app.cookie_id}") or cookies.get(f"access-token-unsecure-{app.cookie_id}")
    return app.tokens.get(token) is not None


def exports_route(workspace: str | Path):
    """GET EXPORTS_PATH/<file>: a zip the Export panel made in the workspace's exports folder, downloaded from
    there (handing it to gr.File would copy it into Gradio's cache first: a merged model twice on disk).
    Behind the login like the page."""
    from starlette.responses import FileResponse, Response
    from starlette.routing import Route

    from app.export_panel import EXPORTS_PATH
    from backend.export import exports_dir

    folder = exports_dir(RunStore(workspace)).resolve()

    def download(request):
        if not logged_in(request):
            return Response(status_code=401)
        path = (folder / request.path_params["name"]).resolve()
        if path.parent != folder or not path.is_file() or path.suffix != ".zip":
            return Response(status_code=404)
        return FileResponse(path, filename=path.name, media_type="application/zip")

    return Route(EXPORTS_PATH + "/{name}", download, methods=["GET", "HEAD"])


def stamp_route(workspace: str | Path):
    """GET STAMP_PATH: the store's change counter (backend.core.database.changes: every write a page may show, a
    heartbeat only now and then), so an idle page's poll ticks stay in the browser (app/tab_polls.py); with
    `?any=1`, SQLite's data_version, which moves on every commit, heartbeats included (the full log follows a
    run's file by it while the run writes nothing else). Behind the login like the page."""
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    from app.tab_polls import STAMP_PATH
    from backend.core.database import changes

    db = sqlite3.connect(RunStore(workspace).path, check_same_thread=False)
    lock = threading.Lock()

    def stamp(request):
        if not logged_in(request):
            return Response(status_code=401)
        with lock:
            value = None if request.query_params.get("any") else changes(db)
            if value is None:  # asked for, or a store made before the counter
                value = db.execute("PRAGMA data_version").fetchone()[0]
        return PlainTextResponse(str(value), headers={"Cache-Control": "no-store"})

    return Route(STAMP_PATH, stamp, methods=["GET"])
