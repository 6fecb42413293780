"""What every subcommand shares: the --workspace option and its store, exit codes, JSON and tables."""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_STOPPED = 1, 2, 3


def workspace_option() -> argparse.ArgumentParser:
    """The parent parser of the program and of every subcommand. SUPPRESS keeps a subcommand's default from
    overwriting a --workspace given before the command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", default=argparse.SUPPRESS,
                        help="workspace folder (default: $WORKBENCH_WORKSPACE or ./workspace)")
    return common


def workspace(args) -> str:
    from backend.runs.store import WorkspaceError, default_workspace

    if args.workspace is not None and not args.workspace.strip():  # '' would fall back to ./workspace silently
        raise WorkspaceError(f"--workspace {args.workspace!r}: no folder named; give one (e.g. --workspace "
                             "~/workbench), or leave the option out for $WORKBENCH_WORKSPACE or ./workspace")
    return args.workspace or str(default_workspace())


def open_store(args):
    from backend.runs.store import RunStore

    return RunStore(workspace(args))


def bad_input(message, errors=()) -> int:
    """Say on stderr what is wrong, one `  - ` line per problem; the exit code for bad input."""
    print(message, file=sys.stderr)
    for line in errors:
        print(f"  - {line}", file=sys.stderr)
    return EXIT_BAD_INPUT


def clean(value):
    """JSON that browsers and jq accept: NaN/inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def print_json(obj) -> None:
    print(json.dumps(clean(obj), indent=2, allow_nan=False, default=str))


def print_table(layout: str, header, rows) -> None:
    """The header and each row through one format string, so the columns cannot drift apart."""
    print(layout.format(*header))
    for row in rows:
        print(layout.format(*row))


def fmt_time(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"
