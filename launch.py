#!/usr/bin/env python
"""The workbench's one entry point: the web UI and the headless CLI.

  python launch.py [ui] [--host 127.0.0.1] [--port 7860] [--workspace DIR] [--auth user:pass]
  python launch.py train [CONFIG.yaml] [--set key=value ...] [--key value ...] [--detach]
  python launch.py runs [--status STATUS] [--json]
  python launch.py show RUN_ID [--json]
  python launch.py logs RUN_ID [-f] [--lines N]
  python launch.py note RUN_ID "text"
  python launch.py delete RUN_ID [RUN_ID ...] [--yes]
  python launch.py compare RUN_ID RUN_ID [...] [--json]
  python launch.py doctor RUN_ID [--json] [--lang zh]
  python launch.py stop RUN_ID [--force]
  python launch.py labels list [--json]
  python launch.py labels export SESSION_ID --format dpo|kto|sft --out FILE.jsonl|FILE.parquet
  python launch.py export RUN_ID --out DIR [--merge] [--zip] [--overwrite]
  python launch.py sweep start SPEC.yaml | --preset RUN.yaml --param FIELD=KIND:LOW:HIGH ... [--detach]
  python launch.py sweep list|show|stop|resume SWEEP_ID
  python launch.py eval [start] --model run:ID --against base --dataset FILE --scorer numeric_match:answer
  python launch.py eval list|show|stop|restart|delete EVAL_ID
  python launch.py metrics [--host 127.0.0.1] [--port 9101] [--auth user:pass]
  python launch.py serve MODEL [--port 8000] [--api-key KEY] [--detach]   (OpenAI API)
  python launch.py serve list|stop SERVER_ID
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from cli import deploy, doctor, evaluate, export, labels, runs, serve, settings, sweep, train  # noqa: E402
from cli.common import run_command, settings_as_sets, subcommands, workspace_option  # noqa: E402

# Each module adds its subcommands; this order is the order of `launch.py --help`.
COMMANDS = (serve, train, settings, runs, doctor, evaluate, export, labels, sweep, deploy)


def build_parser() -> argparse.ArgumentParser:
    common = workspace_option()
    p = argparse.ArgumentParser(prog="launch.py", description="RL post-training workbench", parents=[common])
    sub = p.add_subparsers(dest="command")
    for module in COMMANDS:
        module.add_parsers(sub, common)
    return p


def with_default_command(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`launch.py --port 7861` starts the UI, as `launch.py` alone does: `ui` when no command is named."""
    commands = subcommands(parser)
    if not any(a in commands or a in ("-h", "--help") for a in argv):
        return ["ui", *argv]
    return deploy.with_default_subcommand(evaluate.with_default_subcommand(argv))


def main(argv=None) -> int:
    from backend.workspace import load_providers

    load_providers()
    parser = build_parser()
    argv = with_default_command(parser, sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(settings_as_sets(parser, argv))
    args.workspace = getattr(args, "workspace", None)
    return run_command(args)


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `launch.py runs | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit cannot fail again
        code = 0
    sys.exit(code)
