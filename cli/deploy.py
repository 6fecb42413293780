"""serve: a model over the OpenAI API (transformers serve, started and stopped by the workbench)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from cli.common import EXIT_BAD_INPUT, bad_input, fmt_time, print_json, print_table, workspace

SUBCOMMANDS = ("start", "list", "stop")


def add_parsers(sub, common) -> None:
    sv = sub.add_parser("serve", parents=[common],
                        help="serve a model over the OpenAI API: serve MODEL | serve list | serve stop ID")
    cmds = sv.add_subparsers(dest="serve_command", required=True)
    st = cmds.add_parser("start", parents=[common], help="serve MODEL (the default: `serve MODEL`)")
    st.add_argument("model", help="run:<id>[@step], an export or model folder, a Hub id, or smollm2-135m-instruct")
    st.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    st.add_argument("--port", type=int, default=8000)
    st.add_argument("--api-key", default=os.environ.get("WORKBENCH_SERVE_KEY") or None,
                    help="clients must send it as `Authorization: Bearer KEY` (default: $WORKBENCH_SERVE_KEY)")
    st.add_argument("--auth", default=os.environ.get("WORKBENCH_AUTH") or None,
                    help="user:password, as the UI takes it: the password is the API key")
    st.add_argument("--max-concurrent", type=int, default=4,
                    help="requests answered at once; the others wait in a queue (default 4)")
    st.add_argument("--detach", action="store_true", help="leave it running and return (serve stop ID ends it)")
    st.set_defaults(func=cmd_start)
    ls = cmds.add_parser("list", parents=[common], help="the workspace's servers")
    ls.add_argument("--all", action="store_true", help="stopped and failed ones too")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)
    sp = cmds.add_parser("stop", parents=[common], help="stop a server")
    sp.add_argument("server_id")
    sp.set_defaults(func=cmd_stop)


def with_default_subcommand(argv: list[str]) -> list[str]:
    """`launch.py serve MODEL` is `serve start MODEL`."""
    if "serve" not in argv:
        return argv
    i = argv.index("serve")
    rest = argv[i + 1:]
    if rest and rest[0] not in SUBCOMMANDS and rest[0] not in ("-h", "--help"):
        return argv[:i + 1] + ["start"] + rest
    return argv


def _key(args) -> str | None | bool:
    """The API key (None: none), or False after saying why it cannot be used."""
    if args.auth:
        user, colon, password = args.auth.partition(":")
        if not colon or not password:
            print("--auth: expected user:password (the password is the API key)", file=sys.stderr)
            return False
        return password
    if args.api_key is not None and len(args.api_key) < 8:
        print("--api-key: use at least 8 characters", file=sys.stderr)
        return False
    return args.api_key


def cmd_start(args) -> int:
    from backend.core.net import not_a_port
    from backend.monitoring import LOOPBACK
    from backend.serving import ServeError, start_server, stop_server, wait_until_ready
    from backend.serving.registry import log_path, snippets

    if why := not_a_port(args.port):
        return bad_input(f"cannot serve: {why}")
    if args.max_concurrent < 1:
        return bad_input(f"--max-concurrent {args.max_concurrent}: at least 1 request must be answered at once")
    key = _key(args)
    if key is False:
        return EXIT_BAD_INPUT
    if not key and args.host not in LOOPBACK:
        print(f"WARNING: serving on {args.host} without an API key: anyone who can reach this machine can use the "
              "model; give --api-key KEY (or --auth user:password)", file=sys.stderr, flush=True)
    ws = Path(workspace(args))
    try:
        server = start_server(ws, args.model, args.host, args.port, key, args.max_concurrent)
    except ServeError as e:
        return bad_input(str(e))
    print(f"server {server.id}: loading {args.model} (log: {log_path(ws, server.id)})", flush=True)
    try:
        server = wait_until_ready(ws, server.id)
    except KeyboardInterrupt:
        stop_server(ws, server.id)
        return 130
    if server.status != "serving":
        return bad_input(f"server {server.id} failed: {server.error}")
    code = snippets(server)
    print(f"serving {args.model} at {server.url}" + (" (API key required)" if server.key else ""))
    print(f"\n{code['curl']}\n\n{code['python']}\n")
    if args.detach:
        print(f"stop it with: launch.py serve stop {server.id}")
        return 0
    print("Ctrl-C stops it.", flush=True)
    try:
        while (server := _current(ws, server.id)).active:
            time.sleep(1.0)
    except KeyboardInterrupt:
        server = stop_server(ws, server.id)
    print(f"server {server.id}: {server.status}" + (f" ({server.error})" if server.error else "")
          + f"; {server.requests} requests answered")
    return 0 if server.status == "stopped" else 1


def _current(ws: Path, server_id: str):
    from backend.serving import get_server

    return get_server(ws, server_id)


def cmd_list(args) -> int:
    from backend.serving import list_servers

    servers = list_servers(Path(workspace(args)), active_only=not args.all)
    if args.json:
        from dataclasses import asdict

        print_json([{**asdict(s), "url": s.url} for s in servers])
        return 0
    if not servers:
        print("no servers" + ("" if args.all else " running (--all lists ended ones too)"))
        return 0
    rows = [[s.id, s.status, s.url, s.model, str(s.requests),
             f"{s.tokens_per_s:.1f}" if s.tokens_per_s else "-", fmt_time(s.started_at or s.created_at)]
            for s in servers]
    print_table("{:<28} {:<8} {:<28} {:<36} {:>8} {:>8} {}", ["id", "status", "url", "model", "requests",
                                                              "tok/s", "started"], rows)
    return 0


def cmd_stop(args) -> int:
    from backend.serving import ServeError, stop_server

    try:
        server = stop_server(Path(workspace(args)), args.server_id)
    except ServeError as e:
        return bad_input(str(e))
    print(f"server {server.id}: {server.status}")
    return 0
