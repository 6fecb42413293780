"""Ports a server of the workbench binds (the UI, /metrics, a model server), refused before anything starts, the
one reply its ASGI middleware writes, and how failed logins are throttled (the login page and /metrics' basic auth)."""
from __future__ import annotations

import asyncio
import socket
import time
from collections import deque

FREE_FAILURES = 5  # typos: no delay before the 6th attempt
MAX_DELAY_S = 8.0
LOCK_FAILURES = 10  # in WINDOW_S: even the right password is refused until the oldest of them is that old
WINDOW_S = 600.0
MAX_CLIENTS = 10_000  # addresses remembered before those with no recent failure are forgotten


def not_a_port(port: int) -> str | None:
    if 1 <= port <= 65535:
        return None
    return f"--port {port}: not a TCP port; give one from 1 to 65535"  # socket.bind would raise OverflowError


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        # as a server binds: a just-closed server's TIME_WAIT is no reason to refuse
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def port_problem(host: str, port: int) -> str | None:
    """Why `port` cannot be served on `host` (with a free one to use instead), or None when it can."""
    if why := not_a_port(port):
        return why
    if port_free(host, port):
        return None
    spare = next((p for p in range(port + 1, min(port + 100, 65536)) if port_free(host, p)), None)
    return f"port {port} on {host} is taken (another workbench or program listens there)" + (
        f"; use --port {spare}, which is free" if spare else "; choose another --port")


async def respond(send, status: int, body: bytes, headers: list | tuple = ()) -> None:
    """A whole HTTP answer from ASGI middleware (the UI's login gate, a model server's gate)."""
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class LoginThrottle:
    """Failed logins per client address, in this process's memory: a delay that doubles after FREE_FAILURES
    (1 s, 2 s, 4 s, ... MAX_DELAY_S), and a refusal after LOCK_FAILURES within WINDOW_S."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.failures: dict[str, deque] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    def _recent(self, client: str) -> deque:
        now, failed = self.clock(), self.failures.get(client, deque())
        while failed and failed[0] <= now - WINDOW_S:
            failed.popleft()
        return failed

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may try again; 0 when it may now."""
        failed = self._recent(client)
        if len(failed) < LOCK_FAILURES:
            return 0.0
        return max(1.0, failed[-LOCK_FAILURES] + WINDOW_S - self.clock())

    def delay(self, client: str) -> float:
        over = len(self._recent(client)) - FREE_FAILURES
        return 0.0 if over < 0 else min(2.0 ** over, MAX_DELAY_S)

    def failed(self, client: str) -> None:
        self.failures.setdefault(client, deque()).append(self.clock())

    def succeeded(self, client: str) -> None:
        self.failures.pop(client, None)

    def lock(self, client: str) -> asyncio.Lock:
        """One attempt at a time per address, so parallel guesses wait their delays one after another too."""
        if client not in self.locks and len(self.locks) >= MAX_CLIENTS:  # memory bounded by the recent ones
            for stale in [c for c, lock in self.locks.items() if not lock.locked() and not self._recent(c)]:
                self.locks.pop(stale)
                self.failures.pop(stale, None)
        return self.locks.setdefault(client, asyncio.Lock())
