"""settings: every run setting with its help, default and range (also the epilog of `train --help`), and the
TRL / transformers names the CLI and presets accept for them."""
from __future__ import annotations

import textwrap

from cli.common import bad_input, print_json


def add_parsers(sub, common) -> None:
    from backend.core.mode_registry import ALL_MODES

    s = sub.add_parser("settings", parents=[common], help="list every run setting (for --set and presets)")
    s.add_argument("--mode", choices=ALL_MODES, help="only the settings this mode reads")
    s.add_argument("--json", action="store_true", help="machine-readable")
    s.set_defaults(func=cmd_settings)


def _range(row: dict) -> str:
    if row["choices"]:
        return " | ".join(map(str, row["choices"]))
    if row["min"] is not None or row["max"] is not None:
        lo, hi = (_number(row[k]) for k in ("min", "max"))
        return f"{lo}..{hi}"
    return row["kind"]


def _number(v) -> str:
    if v is None:
        return ""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def settings_text(mode: str | None = None, width: int = 100) -> str:
    """The settings grouped by section, each with its range or choices, default, modes, TRL names and help."""
    from backend.config import describe_settings

    sections: dict[str, list[dict]] = {}
    for row in describe_settings(mode):
        sections.setdefault(row["section"], []).append(row)
    out = []
    for section, rows in sections.items():
        out.append(f"\n{section}:")
        out += [line for row in rows for line in _describe(row, width)]
    return "\n".join(out).lstrip("\n")


def _describe(row: dict, width: int) -> list[str]:
    default = row["default"] if row["default"] not in ("", [], {}, None) else "-"
    extras = [f"default {default}"]
    if row["modes"]:
        extras.append("modes " + ",".join(row["modes"]))
    if row["aliases"]:
        extras.append("also " + ", ".join(row["aliases"]))
    return [f"  {row['path']}  [{_range(row)}]  ({'; '.join(extras)})",
            *textwrap.wrap(f"{row['title']}: {row['help'] or ''}", width, initial_indent=" " * 6,
                           subsequent_indent=" " * 6)]


def cmd_settings(args) -> int:
    from backend.config import describe_settings

    if args.json:
        print_json(describe_settings(args.mode))
        return 0
    if not describe_settings(args.mode):
        return bad_input(f"no settings for mode {args.mode}")
    print(settings_text(args.mode))
    return 0
