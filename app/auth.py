"""The login in front of every route of the UI server when it runs with --auth.

Gradio checks its session cookie only on some of its routes (/reset, /cancel and /heartbeat answered anyone), so
`guard` wraps the whole app: a request passes only when Gradio's own `get_current_user` finds its user, except the
login page and the files it loads (PUBLIC). Failed logins are throttled per client address (LoginThrottle).
"""
from __future__ import annotations

import asyncio
import json
import re

from starlette._utils import get_route_path
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection

from backend.core.net import LOCK_FAILURES, WINDOW_S, LoginThrottle, respond

API_PREFIX = "/gradio_api"
LOGIN_PATHS = ("/login", "/login/")
# What the login page loads before anyone is logged in (seen in a browser): the page itself, its script and
# style bundles, Gradio's static files and the theme. /metrics asks for HTTP basic auth itself (scrapers have no
# cookie).
PUBLIC = {("GET", "/"), ("HEAD", "/"), ("GET", "/theme.css"), ("GET", "/favicon.ico"), ("GET", "/metrics"),
          *(("POST", p) for p in LOGIN_PATHS)}
PUBLIC_PREFIXES = ("/assets/", "/static/", "/svelte/")  # Gradio's frontend build: the same for everyone
ROUTES_PATH = "/wb/routes"

def is_public(method: str, path: str) -> bool:
    return (method, path) in PUBLIC or (method in ("GET", "HEAD") and path.startswith(PUBLIC_PREFIXES))


def locked_message(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    return (f"Too many failed logins from your address ({LOCK_FAILURES} in {WINDOW_S / 60:.0f} minutes): logins are "
            f"refused for about {minutes} more minute{'s' if minutes > 1 else ''}, even with the right password.")


_API_INFO = re.compile(rb"window\.gradio_api_info = .*?;</script>", re.S)


def _login_page(body: bytes, lock_message: str | None) -> bytes:
    """The page Gradio renders for "/" without a login, less the API description it embeds (~2.5 MB: every
    endpoint and its parameters), and saying why logins are refused when they are (its form shows nothing on 429)."""
    body = _API_INFO.sub(b"window.gradio_api_info = {};</script>", body, count=1)
    if lock_message:
        text = json.dumps(lock_message).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        body = body.replace(b'"auth_message":null', b'"auth_message":' + text.encode(), 1)
    return body


class LoginGuard:
    """ASGI middleware on Gradio's app: see the module's docstring."""

    def __init__(self, app, throttle: LoginThrottle | None = None):
        self.app, self.throttle = app, throttle or LoginThrottle()
        self._current_user = None

    async def user(self, scope) -> str | None:
        if self._current_user is None:
            # Gradio's own check (its session cookie, or an auth_dependency), found on the app it serves
            found = [r.endpoint for path, _, r in all_routes(scope["app"].routes) if path == f"{API_PREFIX}/user"]
            if not found:
                raise RuntimeError(f"Gradio serves no {API_PREFIX}/user: the login cannot be checked")
            self._current_user = found[0]
        return await self._current_user(HTTPConnection(scope))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        path = get_route_path(scope)  # as Starlette's router matches it
        method = scope.get("method", "WEBSOCKET")
        client = (scope.get("client") or ("?",))[0]
        if scope["type"] == "http" and is_public(method, path):
            if method == "POST":
                return await self.login(client, scope, receive, send)
            if path == "/" and method == "GET" and await self.user(scope) is None:
                return await self.app(scope, receive, self._rewriting(send, client))
            return await self.app(scope, receive, send)
        if await self.user(scope) is not None or self.starting(scope, method, path):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
        headers = dict(scope.get("headers") or [])
        if method in ("GET", "HEAD") and b"text/html" in headers.get(b"accept", b""):  # a page: to the login one
            return await respond(send, 303, b"", [(b"location", (scope.get("root_path", "") + "/").encode())])
        body = json.dumps({"detail": "Not authenticated: log in first"}).encode()
        return await respond(send, 401, body, [(b"content-type", b"application/json")])

    @staticmethod
    def starting(scope, method, path) -> bool:
        """Gradio's launch asks this once, with no cookie, to run the app's startup events."""
        return ((method, path) == ("GET", f"{API_PREFIX}/startup-events")
                and not getattr(scope["app"], "startup_events_triggered", True))

    async def login(self, client, scope, receive, send):
        async with self.throttle.lock(client):
            if wait := self.throttle.retry_after(client):
                body = json.dumps({"detail": locked_message(wait)}).encode()
                return await respond(send, 429, body, [(b"content-type", b"application/json"),
                                                        (b"retry-after", str(round(wait)).encode())])
            await asyncio.sleep(self.throttle.delay(client))
            status = []

            async def capture(message):
                if message["type"] == "http.response.start":
                    status.append(message["status"])
                await send(message)

            await self.app(scope, receive, capture)
            if status and status[0] == 200:
                self.throttle.succeeded(client)
            elif status and status[0] == 400:  # Gradio's "Incorrect credentials."
                self.throttle.failed(client)

    def _rewriting(self, send, client):
        start, chunks = [], []

        async def rewrite(message):
            if message["type"] == "http.response.start":
                start.append(message)
                return
            if message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            head = start[0]
            body = b"".join(chunks)
            if head["status"] == 200:
                wait = self.throttle.retry_after(client)
                body = _login_page(body, locked_message(wait) if wait else None)
            headers = [(k, v) for k, v in head.get("headers", []) if k.lower() != b"content-length"]
            await send({**head, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        return rewrite


def all_routes(routes, prefix: str = ""):
    """(path, methods, route) of every route, those of included routers and mounted apps too."""
    from starlette.routing import Mount

    for r in routes:
        if (inner := getattr(r, "original_router", None)) is not None:  # FastAPI 0.16x keeps included routers whole
            yield from all_routes(inner.routes, prefix + r.include_context.prefix)
        elif isinstance(r, Mount):
            yield from (all_routes(r.routes, prefix + r.path) if r.routes else
                        [(prefix + r.path + "/{path:path}", ["DELETE", "GET", "HEAD", "POST", "PUT"], r)])
        else:
            yield prefix + r.path, sorted(getattr(r, "methods", None) or ["WEBSOCKET"]), r


def guard() -> Middleware:
    """For FastAPI's `middleware` argument (Gradio's `app_kwargs`): inside Gradio's CORS middleware, which
    answers preflight requests (they carry no cookie), and around every route, mounted apps included."""
    return Middleware(LoginGuard)


def routes_route():
    """GET ROUTES_PATH: every route the app serves, as [{"path", "methods"}], behind the login like them; what
    tests/integration/test_auth_routes.py tries without one."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def listing(request):
        return JSONResponse([{"path": path, "methods": methods} for path, methods, _ in all_routes(request.app.routes)])

    return Route(ROUTES_PATH, listing, methods=["GET"])
