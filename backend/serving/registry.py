"""The model servers of a workspace: one record per server in <workspace>/servers/<id>.json (its model, address,
process, status and request count), written by the server process as it goes, read by `serve list` and the UI.

A server is a detached process (backend/core/procs.py), so it outlives the terminal or the UI that started it; its
API key travels in its environment only, never on a command line, in a record or in a log.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from backend.core.net import port_problem
from backend.core.procs import LAUNCH_GRACE_S, argv_of, kill_groups, pid_alive, spawn_detached

SERVE_KEY_ENV = "WORKBENCH_SERVE_KEY"  # the API key a client sends as `Authorization: Bearer KEY`
ACTIVE = ("loading", "serving")
STOP_WAIT_S = 15.0  # a server asked to stop (SIGTERM) ends its open requests within this, else it is killed


class ServeError(ValueError):
    """A server that cannot be started or found; the message says why."""


@dataclass
class Server:
    id: str
    model: str  # as given
    host: str
    port: int
    status: str = "loading"  # loading | serving | stopped | failed
    name: str = ""  # what /v1/models lists
    folder: str = ""  # what is served (the adapter merged in)
    pid: int | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    requests: int = 0
    completion_tokens: int = 0
    busy_s: float = 0.0  # seconds spent answering, for tokens per second
    key: bool = False  # whether clients must send the API key
    max_concurrent: int = 4

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def tokens_per_s(self) -> float | None:
        return self.completion_tokens / self.busy_s if self.busy_s > 0 else None


def folder(workspace: Path) -> Path:
    return Path(workspace) / "servers"


def record_path(workspace: Path, server_id: str) -> Path:
    return folder(workspace) / f"{server_id}.json"


def log_path(workspace: Path, server_id: str) -> Path:
    return folder(workspace) / f"{server_id}.log"


def write(workspace: Path, server: Server) -> None:
    path = record_path(workspace, server.id)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(server)))
    tmp.replace(path)  # a reader never sees half a record


def update(workspace: Path, server_id: str, **values) -> Server:
    server = _read(workspace, server_id)  # as recorded: what a reader concludes of a dead process is not written
    for k, v in values.items():
        setattr(server, k, v)
    write(workspace, server)
    return server


def _alive(server: Server) -> bool:
    """Its process runs: the pid lives and is this server's (a reused pid is not), or was just started (between
    fork and exec a child still shows its parent's command line)."""
    if not server.pid or not pid_alive(server.pid):
        return False
    return server.id in argv_of(server.pid) or time.time() - server.created_at < LAUNCH_GRACE_S


def _settled(workspace: Path, server: Server) -> Server:
    """A record that says loading / serving while its process is gone: failed, with its log's last line."""
    if server.active and not _alive(server):
        lines = [line for line in _log_lines(workspace, server.id) if line.strip()]
        server.status, server.finished_at = "failed", server.finished_at or time.time()
        server.error = server.error or "the server process ended" + (f": {lines[-1].strip()}" if lines else "")
    return server


def _log_lines(workspace: Path, server_id: str) -> list[str]:
    try:
        return log_path(workspace, server_id).read_text(errors="replace").splitlines()[-40:]
    except OSError:
        return []


def _read(workspace: Path, server_id: str) -> Server:
    try:
        return Server(**json.loads(record_path(workspace, server_id).read_text()))
    except (OSError, ValueError, TypeError):
        known = ", ".join(s.id for s in list_servers(workspace)) or "none"
        raise ServeError(f"no server '{server_id}' in the workspace {workspace} (servers: {known})") from None


def get_server(workspace: Path, server_id: str) -> Server:
    return _settled(workspace, _read(workspace, server_id))


def list_servers(workspace: Path, active_only: bool = False) -> list[Server]:
    out = []
    for path in sorted(folder(workspace).glob("serve-*.json"), reverse=True):
        try:
            server = _settled(workspace, Server(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
        if server.active or not active_only:
            out.append(server)
    return out


def start_server(workspace: Path, model: str, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                 max_concurrent: int = 4) -> Server:
    """Start serving `model` in a detached process; returns its record (status loading). ServeError when the port
    cannot be used or the model cannot be named; a model that fails to load fails the server (see its record)."""
    from backend.models.ref import ModelRef
    from backend.models.specs import ModelError

    if why := port_problem(host, port):
        raise ServeError(f"cannot serve on {host}:{port}: {why}")
    try:
        ModelRef.parse(model, workspace).check()  # a typo, or a Hub id offline, is said here, not in a log
    except ModelError as e:
        raise ServeError(str(e)) from None
    folder(workspace).mkdir(parents=True, exist_ok=True)
    server = Server(id="serve-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2), model=model,
                    host=host, port=port, key=bool(api_key), max_concurrent=max_concurrent)
    write(workspace, server)
    env = {SERVE_KEY_ENV: api_key} if api_key else {}
    proc = spawn_detached(["-m", "backend.serving.process", server.id, "--workspace", str(workspace)],
                          log_path(workspace, server.id), env=env)
    return update(workspace, server.id, pid=proc.pid)


def wait_until_ready(workspace: Path, server_id: str, timeout_s: float = 600.0, every_s: float = 0.5) -> Server:
    """The server once it answers (serving) or has failed; ServeError past `timeout_s`."""
    end = time.time() + timeout_s
    while time.time() < end:
        server = get_server(workspace, server_id)
        if server.status != "loading":
            return server
        time.sleep(every_s)
    raise ServeError(f"server {server_id} is still loading after {timeout_s:.0f} s (see {log_path(workspace, server_id)})")


def stop_server(workspace: Path, server_id: str) -> Server:
    """Stop a server: SIGTERM (open requests end), then SIGKILL after STOP_WAIT_S. Its record says stopped."""
    import signal

    server = get_server(workspace, server_id)
    if not server.active:
        return server
    if _alive(server):
        os.kill(server.pid, signal.SIGTERM)
        end = time.time() + STOP_WAIT_S
        while _alive(server) and time.time() < end:
            time.sleep(0.2)
        if _alive(server):
            kill_groups([server.pid], wait_s=5)
    return update(workspace, server_id, status="stopped", finished_at=time.time())


def snippets(server: Server) -> dict[str, str]:
    """How a client calls the server: a `curl` command and the `openai` Python client (the key as $KEY / from
    the environment, never written out)."""
    auth = ' -H "Authorization: Bearer $KEY"' if server.key else ""
    body = json.dumps({"model": server.name, "messages": [{"role": "user", "content": "Hello!"}]})
    key = 'os.environ["KEY"]' if server.key else '"none"'
    return {
        "curl": f"curl {server.url}/chat/completions{auth} -H \"Content-Type: application/json\" -d '{body}'",
        "python": ("import os\nfrom openai import OpenAI\n\n"
                   f"client = OpenAI(base_url=\"{server.url}\", api_key={key})\n"
                   f"reply = client.chat.completions.create(model=\"{server.name}\",\n"
                   "                                       messages=[{\"role\": \"user\", \"content\": \"Hello!\"}])\n"
                   "print(reply.choices[0].message.content)"),
    }
