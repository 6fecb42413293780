"""ui and metrics: the web UI, or only the Prometheus endpoint, serving one workspace."""
from __future__ import annotations

import os
import sys

from backend.core.net import not_a_port, port_problem
from cli.common import EXIT_BAD_INPUT, bad_input, open_store, workspace


def add_parsers(sub, common) -> None:
    ui = sub.add_parser("ui", parents=[common], help="start the web UI (default)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=7860)
    ui.add_argument("--auth", default=os.environ.get("WORKBENCH_AUTH") or None, help="user:password")
    ui.add_argument("--lang", choices=["en", "zh"], default=os.environ.get("WORKBENCH_LANG") or "en",
                    help="interface language of a browser that has not chosen one in the header (en, zh)")
    ui.set_defaults(func=cmd_ui)

    me = sub.add_parser("metrics", parents=[common],
                        help="serve only /metrics (Prometheus) for the workspace, without the web UI")
    me.add_argument("--host", default="127.0.0.1")
    me.add_argument("--port", type=int, default=9101)
    me.add_argument("--auth", default=os.environ.get("WORKBENCH_AUTH") or None,
                    help="user:password, asked of scrapers as HTTP basic auth")
    me.set_defaults(func=cmd_metrics)


MIN_PASSWORD = 2


def _auth(args):
    """--auth user:password -> (user, password); None without it; False (after saying why) when malformed."""
    if args.auth is None:
        return None
    user, colon, password = args.auth.partition(":")
    # the password itself is never echoed: it may be the real one with a typo
    why = ("expected user:password" if not colon else
           "the user name is missing (expected user:password)" if not user.strip() else
           "the password is empty" if not password else
           f"the password is too short: use at least {MIN_PASSWORD} characters" if len(password) < MIN_PASSWORD else
           None)
    if why:
        print(f"--auth: {why}", file=sys.stderr)
        return False
    return user.strip(), password  # Gradio strips the name typed at its login


def _warn_if_open(args, auth) -> None:
    from backend.monitoring import open_warning

    if why := open_warning(args.host, auth):
        print(f"WARNING: {why}", file=sys.stderr, flush=True)


def cmd_ui(args) -> int:
    auth = _auth(args)
    if auth is False:
        return EXIT_BAD_INPUT
    from app.main import launch_ui  # gradio is imported here only: the other commands start without it

    if why := port_problem(args.host, args.port):
        return bad_input(f"cannot start the UI: {why}")
    _warn_if_open(args, auth)
    launch_ui(workspace=workspace(args), host=args.host, port=args.port, auth=auth, lang=args.lang)
    return 0


def cmd_metrics(args) -> int:
    from backend.monitoring import serve

    if why := not_a_port(args.port):
        return bad_input(f"cannot serve the metrics: {why}")
    auth = _auth(args)
    if auth is False:
        return EXIT_BAD_INPUT
    _warn_if_open(args, auth)
    try:
        server = serve(open_store(args), host=args.host, port=args.port, auth=auth)
    except OSError as e:
        return bad_input(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    print(f"Prometheus metrics of {workspace(args)} at http://{args.host}:{args.port}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
