"""The server process (`python -m backend.serving.process ID --workspace DIR`, started by registry.start_server):
resolve the model to a folder, then run transformers' OpenAI-compatible server on it with the workbench's gate in
front: the API key, a bound on requests answered at once (the rest wait in a queue, beyond it 503), a request
size limit, and the counts the record shows (requests, completion tokens, seconds spent answering)."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from backend.core.net import respond
from backend.serving.registry import SERVE_KEY_ENV, get_server, update

MAX_BODY = 1_000_000  # bytes of one request: a chat of ~250k tokens, more than any model here reads
QUEUE_MAX = 64  # requests waiting for a free slot; more are refused with 503 (retry later)
SAVE_EVERY_S = 1.0  # how often the record's counts are written (when they changed)


def _json(send, status: int, message: str, kind: str):
    body = json.dumps({"error": {"message": message, "type": kind}}).encode()  # OpenAI's error shape
    return respond(send, status, body, [(b"content-type", b"application/json")])


class Counts:
    """Requests answered, completion tokens and seconds spent, written to the record by a beat (never on the
    request's path)."""

    def __init__(self, workspace: Path, server_id: str):
        self.workspace, self.server_id = workspace, server_id
        self.requests = self.tokens = 0
        self.busy_s = 0.0
        self._saved = 0
        self._lock = threading.Lock()

    def add(self, tokens: int, seconds: float) -> None:
        with self._lock:
            self.requests += 1
            self.tokens += tokens
            self.busy_s += seconds

    def save(self) -> None:
        if self._saved == self.requests:
            return
        self._saved = self.requests
        update(self.workspace, self.server_id, requests=self.requests, completion_tokens=self.tokens,
               busy_s=round(self.busy_s, 3))


def _tokens(body: bytes, streaming: bool) -> int:
    """Completion tokens of a response: its `usage`, or (streamed) the chunks that carry text, one token each."""
    if not streaming:
        try:
            return int(json.loads(body).get("usage", {}).get("completion_tokens") or 0)
        except (ValueError, AttributeError, TypeError):
            return 0
    n = 0
    for line in body.split(b"\n"):
        if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
            continue
        try:
            choice = (json.loads(line[5:]).get("choices") or [{}])[0]
        except (ValueError, AttributeError, IndexError):
            continue
        n += bool((choice.get("delta") or {}).get("content") or choice.get("text"))
    return n


class Gate:
    """ASGI middleware in front of transformers' app: see the module's docstring."""

    def __init__(self, app, key: str | None, max_concurrent: int, counts: Counts):
        import asyncio

        self.app, self.key, self.counts = app, key, counts
        self.slots = asyncio.Semaphore(max_concurrent)
        self.waiting = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.key is not None and headers.get(b"authorization", b"") != f"Bearer {self.key}".encode():
            return await _json(send, 401, "missing or wrong API key: send `Authorization: Bearer KEY` (the key the "
                                          "server was started with)", "invalid_api_key")
        if scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        if int(headers.get(b"content-length", b"0") or 0) > MAX_BODY:
            return await _json(send, 413, f"the request is larger than {MAX_BODY} bytes", "invalid_request_error")
        if self.waiting >= QUEUE_MAX:
            return await _json(send, 503, f"the server is busy ({QUEUE_MAX} requests waiting); retry later",
                               "server_busy")
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        start, body, streaming = time.monotonic(), [], []

        async def counting(message):
            if message["type"] == "http.response.start":
                kind = dict(message.get("headers") or []).get(b"content-type", b"")
                streaming.append(b"event-stream" in kind)
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            self.slots.release()
            self.counts.add(_tokens(b"".join(body), bool(streaming and streaming[0])), time.monotonic() - start)


def serve(server_id: str, workspace: Path) -> int:
    from backend.core.procs import Heartbeat
    from backend.models.specs import ModelError
    from backend.serving.model import serving_folder

    server = get_server(workspace, server_id)
    update(workspace, server_id, pid=os.getpid())
    print(f"server {server_id}: model {server.model}", flush=True)
    try:
        served, name = serving_folder(server.model, workspace,
                                      progress=lambda f, m: print(f"[model {f:.0%}] {m}", flush=True))
    except ModelError as e:
        update(workspace, server_id, status="failed", error=str(e), finished_at=time.time())
        print(f"server {server_id} failed: {e}", flush=True)
        return 2
    counts = Counts(workspace, server_id)
    key = os.environ.pop(SERVE_KEY_ENV, None) or None  # not inherited by anything this process starts

    import transformers.cli.serving.server as built
    from transformers.cli.serve import Serve

    make = built.build_server

    def gated(*args, **kwargs):
        app = make(*args, **kwargs)
        app.add_middleware(Gate, key=key, max_concurrent=server.max_concurrent, counts=counts)
        return app

    built.build_server = gated  # transformers builds its app inside Serve(): the gate goes on as it does
    try:
        running = Serve(force_model=served, host=server.host, port=server.port, non_blocking=True,
                        log_level="warning")
    except Exception as e:  # noqa: BLE001 - a model transformers cannot load: the record says why
        update(workspace, server_id, status="failed", error=f"{type(e).__name__}: {e}", finished_at=time.time())
        print(f"server {server_id} failed: {type(e).__name__}: {e}", flush=True)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: setattr(running.server, "should_exit", True))
    signal.signal(signal.SIGINT, lambda *_: setattr(running.server, "should_exit", True))
    while not running.server.started and running._thread.is_alive():
        time.sleep(0.1)
    if not running.server.started:
        update(workspace, server_id, status="failed", error="the server did not start (see its log)",
               finished_at=time.time())
        return 1
    update(workspace, server_id, status="serving", name=served, folder=served, started_at=time.time())
    print(f"server {server_id}: serving {name} at {get_server(workspace, server_id).url}", flush=True)
    with Heartbeat(counts.save, interval=SAVE_EVERY_S, name="counts"):
        while running._thread.is_alive():
            running._thread.join(0.5)
    counts.save()
    update(workspace, server_id, status="stopped", finished_at=time.time())
    print(f"server {server_id} stopped", flush=True)
    return 0


def main(argv=None) -> int:
    from backend.core.procs import job_args

    server_id, workspace = job_args("Serve one model over the OpenAI API (started by the workbench).", argv)
    return serve(server_id, Path(workspace))


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point: a run:<id> model opens the store

    load_providers()
    sys.exit(main())
