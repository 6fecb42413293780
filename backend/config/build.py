"""Dotted setting paths derived from the schema, and building a run config from a mapping, a YAML file or
`--set key=value` overrides, with every problem named by its setting."""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from backend.config.run_config import RunConfig
from backend.config.sections import ConfigError, is_section


# ---- field paths: one list of names, derived from the schema ----

def field_paths(model: type[BaseModel] = RunConfig, prefix: str = ""):
    """Yield (dotted path, FieldInfo) for every leaf setting."""
    for name, info in model.model_fields.items():
        if is_section(info.annotation):
            yield from field_paths(info.annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


def field_info(path: str):
    for p, info in field_paths():
        if p == path:
            return info
    raise KeyError(path)


def choices(info) -> list[str] | None:
    """The values a setting may take (each item's, for a list such as report_to); None when it is free."""
    ann = info.annotation
    if get_origin(ann) is list:
        ann = get_args(ann)[0]
    return list(get_args(ann)) if get_origin(ann) is Literal else None


def get_path(data: dict, path: str):
    for part in path.split("."):
        data = data[part]
    return data


def set_path(data: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value


# ---- building and validating ----

def _format_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            known = [p for p, _ in field_paths()]
            close = difflib.get_close_matches(loc, known, n=1)
            msg = "unknown setting" + (f"; did you mean '{close[0]}'?" if close else "")
        elif "input" in e and e["type"] not in ("missing",) and not isinstance(e["input"], dict):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def build_config(data: dict | None = None) -> RunConfig:
    try:
        return RunConfig.model_validate(data or {})
    except ValidationError as err:
        raise ConfigError(_format_errors(err)) from None


def parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError([f"--set {item!r}: expected key=value (e.g. lora.r=16)"])
    key, raw = item.split("=", 1)
    key = key.strip()
    known = [p for p, _ in field_paths()]
    if key not in known:
        close = difflib.get_close_matches(key, known, n=1)
        raise ConfigError([f"--set {key}: unknown setting" + (f"; did you mean '{close[0]}'?" if close else "")])
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if field_info(key).annotation is str and value is not None:
        value = raw  # keep names like "1e-3" or "007" as typed
    return key, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = yaml.safe_load(yaml.safe_dump(data or {}))  # deep copy
    for item in overrides:
        key, value = parse_override(item)
        set_path(data, key, value)
    return data


def read_yaml_mapping(path: str | Path, what: str = "config file") -> dict:
    """A YAML file whose top level is a mapping (a run config, a sweep spec); ConfigError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{path}: {what} not found"])
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML ({e})"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping of settings at the top level"])
    return data


def load_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    data = read_yaml_mapping(path)
    try:
        return build_config(apply_overrides(data, overrides or []))
    except ConfigError as e:
        raise ConfigError([f"{path}: {line}" for line in e.errors]) from None


def to_yaml(config: RunConfig, only_changed: bool = False) -> str:
    data = config.model_dump(exclude_defaults=only_changed)
    return yaml.safe_dump(data, sort_keys=False)
