"""What every subcommand shares: the --workspace option and its store, exit codes, JSON and tables, running a
command (--json: JSON alone on stdout), and TRL's `--KEY VALUE` as `--set KEY=VALUE`."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
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
    from backend.core.database import WorkspaceError
    from backend.runs.store import default_workspace

    if args.workspace is not None and not args.workspace.strip():  # '' would fall back to ./workspace silently
        raise WorkspaceError(f"--workspace {args.workspace!r}: no folder named; give one (e.g. --workspace "
                             "~/workbench), or leave the option out for $WORKBENCH_WORKSPACE or ./workspace")
    return args.workspace or str(default_workspace())


# Commands that only act on what a workspace holds: on one without a store they find nothing, and make none.
_ON_WHAT_IS_THERE = {"runs", "show", "logs", "note", "delete", "compare", "stop", "doctor", "resume", "export",
                     "push", "labels", "eval", "sweep"}


def open_store(args):
    """The workspace's store. When it has none yet, `train` and `eval/sweep start` make it at first use (a
    refusal before then leaves nothing behind), the commands above read it as empty and write nothing, and the
    others (the servers) make it now, as they always have."""
    from backend.runs.store import RunStore

    command = getattr(args, "command", None)
    resuming = command == "train" and getattr(args, "resume", None)
    if (command == "train" and not resuming) or getattr(args, f"{command}_command", "") == "start":
        create = "on_use"
    elif command in _ON_WHAT_IS_THERE or resuming:
        create = "never"
    else:
        create = "now"
    return RunStore(workspace(args), create=create)


def bad_input(message, errors=(), code=EXIT_BAD_INPUT) -> int:
    """Say on stderr what is wrong in one line (`Cannot start the run: <problem>`), or, for several problems, the
    message and one `  - ` line each (with --json, on stdout too, as {"error": ..., "errors": [...]}: a script
    reads JSON either way); the exit code, by default the one for bad input."""
    lines = [_one_line(e) for e in errors]
    if len(lines) == 1 and str(message).endswith(":"):
        print(f"{message} {lines[0]}", file=sys.stderr)
    else:
        print(_one_line(message), file=sys.stderr)
        for line in lines:
            print(f"  - {line}", file=sys.stderr)
    if _JsonStdout.out is not None and not _JsonStdout.written:
        print_json({"error": str(message).rstrip(":"), "errors": [str(e) for e in errors], "exit_code": code})
    return code


def _one_line(text) -> str:
    """A problem on one line: a library's message may span several (a YAML error quotes the line it failed on)."""
    return re.sub(r"\s*\n\s*", " ", str(text).strip())


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
    print(json.dumps(clean(obj), indent=2, allow_nan=False, default=str), file=_JsonStdout.out or sys.stdout)
    _JsonStdout.written = True


class _JsonStdout:
    """While a --json command runs: the real stdout, which only print_json writes to (every other print goes to
    stderr), and whether it has (a failure that wrote no JSON still gets an error object)."""
    out = None
    written = False


@contextlib.contextmanager
def json_stdout(enabled: bool):
    """With --json, stdout carries the JSON alone (`| jq` must not meet "evaluation id: ..."): progress and
    messages printed meanwhile go to stderr."""
    if not enabled:
        yield
        return
    _JsonStdout.out, _JsonStdout.written = sys.stdout, False
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _JsonStdout.out = None


def run_command(args) -> int:
    """The parsed command's exit code. With --json, stdout gets JSON alone, also when the command fails."""
    from backend.core.database import WorkspaceError

    as_json = bool(getattr(args, "json", False))
    with json_stdout(as_json):
        try:
            code = args.func(args)
        except WorkspaceError as e:
            code = bad_input(e)
        if as_json and code and not _JsonStdout.written:  # a failure said on stderr only: say that it failed
            print_json({"error": f"failed with exit code {code}; the messages are on stderr", "errors": [],
                        "exit_code": code})
    return code


def print_table(layout: str, header, rows) -> None:
    """The header and each row through one format string, so the columns cannot drift apart."""
    print(layout.format(*header))
    for row in rows:
        print(layout.format(*row))


def fmt_time(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


# ---- TRL's and transformers' `--max_steps 3` ----

def subcommands(parser: argparse.ArgumentParser) -> dict:
    """A parser's subcommands by name ({} for one without)."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.ArgumentParser, int]:
    """The innermost (sub)command parser that argv names (`sweep start`: start's), and where its words begin."""
    start = 0
    for i, word in enumerate(argv):
        if word in (subs := subcommands(parser)):
            parser, start = subs[word], i + 1
    return parser, start


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def settings_as_sets(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """argv with TRL's and transformers' spellings of settings, `--max_steps 3`, `--max_steps=3`, `--max-steps 3`,
    `--lora.r 16` (and a flag such as `--bf16` or `--packing` alone: true), turned into `--set KEY=VALUE`, for the
    commands that take --set. Any other unknown `--word` there is refused naming it and the closest setting or
    option: argparse's "unrecognized arguments" names neither."""
    command, start = command_parser(parser, argv)
    own = command._option_string_actions
    if "--set" not in own:
        return argv
    from backend.config import ConfigError, UnknownSetting, aliases, field_info, nearest_setting, setting_of

    out, i = list(argv[:start]), start
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":  # what follows is positional
            out += argv[i - 1:]
            break
        name, eq, value = word.partition("=")
        if not name.startswith("--") or name in own:
            out.append(word)
            continue
        try:
            key = name[2:]
            try:
                path = setting_of(key)
            except UnknownSetting:
                key = key.replace("-", "_")  # transformers takes --max-steps for max_steps too
                path = setting_of(key)
        except UnknownSetting:
            if any(o.startswith(name) for o in own):  # argparse's abbreviation of its own option (--det: --detach)
                out.append(word)
                continue
            near = nearest_setting(name[2:], also=[o[2:] for o in own if o.startswith("--")])
            command.error(f"{name}: {command.prog} has no such option, and no run setting is named {name[2:]!r}"
                          + (f"; did you mean --{near}?" if near else "")
                          + " (`launch.py settings` lists the settings; give one as --KEY VALUE or --set KEY=VALUE)")
        except ConfigError as e:  # a dotted path into a setting that is no mapping
            command.error(f"--{e.errors[0]}")  # "data.system.x: data.system is a setting of kind str, ..."
        if not eq:
            following = argv[i] if i < len(argv) else None
            flag = field_info(path).annotation is bool or any(v is not None for _, v in aliases().get(key, ()))
            if flag and not (following and following.lower() in _BOOL_WORDS):
                value = "true"  # `--packing` alone, as TRL's parser takes it
            elif following is None or following.startswith("--"):
                command.error(f"{name}: give a value ({name} VALUE or {name}=VALUE); `launch.py settings` says "
                              f"what {path} takes")
            else:
                value, i = following, i + 1
        out += ["--set", f"{key}={value}"]
    return out
