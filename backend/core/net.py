"""Ports a server of the workbench binds (the UI, /metrics, a model server), refused before anything starts, and
the one reply its ASGI middleware writes."""
from __future__ import annotations

import socket


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

