"""Dotted setting paths derived from the schema, and building a run config from a mapping, a YAML file or
`--set key=value` overrides, with every problem named by its setting."""
from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from backend.config.run_config import RunConfig
from backend.config.sections import ConfigError, is_section
from backend.core.mode_registry import mode_spec  # no torch


# ---- field paths: one list of names, derived from the schema ----

def field_paths(model: type[BaseModel] = RunConfig, prefix: str = ""):
    """Yield (dotted path, FieldInfo) for every leaf setting."""
    for name, info in model.model_fields.items():
        if is_section(info.annotation):
            yield from field_paths(info.annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


_LEAVES = {p for p, _ in field_paths()}


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


def bounds(info) -> tuple[float | None, float | None]:
    """The lowest and highest value a number setting takes (None: unbounded)."""
    lo = hi = None
    for c in info.metadata:
        lo = getattr(c, "ge", getattr(c, "gt", lo))
        hi = getattr(c, "le", getattr(c, "lt", hi))
    return lo, hi


def describe_settings(mode: str | None = None) -> list[dict]:
    """Every setting (those `mode` reads, when given) as a row for `launch.py settings` and `train --help`:
    path, section, kind, default, range or choices, the modes it applies to, TRL's names for it, help."""
    rows = []
    for path, info in field_paths():
        extra = info.json_schema_extra or {}
        if mode and not _applies(info, mode):
            continue
        default = info.get_default(call_default_factory=True)
        lo, hi = bounds(info)
        rows.append({"path": path, "section": path.split(".")[0] if "." in path else extra.get("group", "basic"),
                     "kind": _kind(info), "default": default,
                     "choices": choices(info), "min": lo, "max": hi, "modes": extra.get("modes"),
                     "aliases": list(extra.get("aliases") or ()), "title": info.title, "help": info.description})
    return rows


def _kind(info) -> str:
    """str, int, float, bool, choice, mapping or list: what `launch.py settings` says a setting holds."""
    ann = info.annotation
    if choices(info):
        return "choice"
    return ann.__name__ if isinstance(ann, type) else "mapping" if get_origin(ann) is dict else "list"


def trainer_settings(mode: str) -> list[tuple[str, tuple[str, ...]]]:
    """The settings a `mode` run hands to its trainer's config dataclass by name, each with the names TRL may give
    it (its own, then its TRL aliases): the common settings and those of the mode's sections. A setting's
    `trainer` says otherwise: False (the workbench's own, or turned into trainer arguments by hand), or per mode
    ({mode: TRL's name, or False})."""
    sections = mode_spec(mode).sections
    out = []
    for path, info in field_paths():
        head, _, leaf = path.rpartition(".")
        extra = info.json_schema_extra or {}
        rule = extra.get("trainer", True)
        rule = rule.get(mode, True) if isinstance(rule, dict) else rule
        section_extra = (RunConfig.model_fields[head].json_schema_extra or {}) if head else {}
        if (head and head not in sections) or False in (rule, section_extra.get("trainer")) or not _applies(info, mode):
            continue
        named = extra.get("aliases") or ()
        out.append((path, (rule,) if isinstance(rule, str) else (leaf, *(() if isinstance(named, dict) else named))))
    return out


def get_path(data: dict | BaseModel, path: str):
    """The value at a dotted path of a settings mapping or of a RunConfig."""
    for part in path.split("."):
        data = getattr(data, part) if isinstance(data, BaseModel) else data[part]
    return data


def set_path(data: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value


# ---- TRL / transformers spellings ----

def aliases() -> dict[str, list[tuple[str, object]]]:
    """TRL's and transformers' names for settings (each defined next to its field as `aliases`): name → [(setting
    path, the value a flag selects, or None)]. One name may stand for a setting of several modes (`beta`: dpo.beta, kto.beta,
    rl.beta); a flag such as `bf16: true` maps to a value of its setting (`precision: bf16`)."""
    out: dict[str, list] = {}
    for path, info in field_paths():
        named = (info.json_schema_extra or {}).get("aliases") or ()
        for name in named:
            out.setdefault(name, []).append((path, named[name] if isinstance(named, dict) else None))
    return out


def _applies(info, mode: str) -> bool:
    modes = (info.json_schema_extra or {}).get("modes")
    return not modes or mode in modes


def _mode_of(data: dict) -> str:
    return data.get("mode") or RunConfig.model_fields["mode"].default


def _alias_targets(name: str, mode: str) -> list[tuple[str, object]]:
    """The settings a TRL name stands for in a `mode` run (the first is the one it sets)."""
    return [(p, vmap) for p, vmap in aliases()[name] if _applies(field_info(p), mode)]


def _flag_off(value) -> bool:
    return value in (False, None, "false", "False", 0)


def resolve_aliases(data: dict) -> dict:
    """`data` with top-level TRL names moved to their settings; ConfigError naming both when an alias and its
    setting (or two aliases) disagree, or when the run's mode has no such setting."""
    table, known = aliases(), {p for p, _ in field_paths()}
    given = [k for k in data if k in table and k not in known and k.split(".")[0] not in RunConfig.model_fields]
    if not given:
        return data
    data, errors, source = dict(data), [], {}
    mode = _mode_of(data)
    for name in given:
        value = data.pop(name)
        targets = _alias_targets(name, mode)
        if not targets:
            where = ", ".join(f"{p} ({', '.join(field_info(p).json_schema_extra['modes'])})" for p, _ in table[name])
            errors.append(f"{name}: {mode} runs have no such setting; it stands for {where}")
            continue
        path, vmap = targets[0]
        if vmap is not None:  # a flag: true selects its value, false selects nothing
            if _flag_off(value):
                continue
            value = vmap
        try:
            current = get_path(data, path)
        except (KeyError, TypeError):
            current = None
        if current is not None and current != value:
            first = source.get(path, path)
            errors.append(f"{name}: TRL's name for {path}, which is also given as {first} ({current!r} vs "
                          f"{value!r}); give one of them")
            continue
        set_path(data, path, value)
        source[path] = name
    if errors:
        raise ConfigError(errors)
    return data


# ---- building and validating ----

def _non_finite(value) -> bool:
    try:
        return isinstance(value, (float, str)) and not math.isfinite(float(value))
    except ValueError:
        return False


def _format_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if _non_finite(e.get("input")):  # nan / inf fail every bound: say what they are
            msg = f"not a finite number (got {e['input']!r})"
        elif e["type"] == "extra_forbidden":
            close = nearest_setting(loc)
            msg = "unknown setting" + (f"; did you mean '{close}'?" if close else "")
        elif "input" in e and e["type"] not in ("missing",) and not isinstance(e["input"], dict):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def build_config(data: dict | None = None) -> RunConfig:
    try:
        return RunConfig.model_validate(resolve_aliases(data or {}))
    except ValidationError as err:
        raise ConfigError(_format_errors(err)) from None


def nearest_setting(key: str, also=()) -> str | None:
    """The setting (or TRL name, or one of `also`) closest to a mistyped one, for "did you mean"; None when none
    is close."""
    close = difflib.get_close_matches(key, [*(p for p, _ in field_paths()), *aliases(), *also], n=1)
    return close[0] if close else None


class UnknownSetting(ConfigError):
    """A key that names no setting (the CLI then also suggests its own options)."""


def setting_of(key: str) -> str:
    """The setting `key` gives a value of: itself, the one a TRL name stands for, or the mapping setting that a
    dotted path goes into (data.columns.prompt: data.columns). ConfigError naming the key otherwise."""
    if key in _LEAVES:
        return key
    if key in (table := aliases()):
        return table[key][0][0]
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:i])
        if head not in _LEAVES:
            continue
        info = field_info(head)
        if get_origin(info.annotation) is not dict:
            raise ConfigError([f"{key}: {head} is a setting of kind {_kind(info)}, not a mapping; give it whole "
                               f"({head}=VALUE)"])
        if i < len(parts) - 1 and get_origin(get_args(info.annotation)[1]) is not dict:
            raise ConfigError([f"{key}: {head}.{parts[i]} is one entry of the mapping {head}, not a mapping "
                               f"itself; give {head}.{parts[i]}=VALUE"])
        return head
    close = nearest_setting(key)
    raise UnknownSetting([f"{key}: unknown setting" + (f"; did you mean '{close}'?" if close else "")
                          + " (`launch.py settings` lists them)"])


def _value_type(key: str, leaf: str):
    """The type a --set value is read as: the setting's, or a mapping entry's for a dotted path into a mapping."""
    ann = field_info(leaf).annotation
    return get_args(ann)[1] if key.startswith(leaf + ".") else ann


def parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError([f"--set {item!r}: expected key=value (e.g. lora.r=16)"])
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        leaf = setting_of(key)
    except ConfigError as e:
        raise type(e)([f"--set {line}" for line in e.errors]) from None
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if _value_type(key, leaf) is str and value is not None:
        value = raw  # keep names like "1e-3" or "007" as typed
    return key, value


def _mapping_of(data: dict, leaf: str, item: str) -> dict:
    """The mapping setting `leaf` as given so far (a file's mapping, or `prompt=question, ...` text that the
    schema's own parsing turns into one), so that a dotted --set adds an entry instead of replacing them all."""
    current = _given(data, leaf, item)
    if current is None or isinstance(current, dict):
        return dict(current or {})
    *section, name = leaf.split(".")
    model = RunConfig
    for part in section:
        model = model.model_fields[part].annotation
    try:
        return dict(getattr(model.model_validate({name: current}), name))
    except ValidationError as err:
        prefix = ".".join(section) + "." if section else ""
        raise ConfigError([f"--set {item}: {prefix}{line}" for line in _format_errors(err)]) from None


def _given(data: dict, path: str, item: str):
    """The value at `path` (None: not given); ConfigError naming the part that is not a mapping on the way."""
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not isinstance(data, dict):
            raise ConfigError([f"--set {item}: {'.'.join(parts[:i])} is not a mapping in the config it overrides "
                               f"(got {data!r})"])
        if part not in data:
            return None
        data = data[part]
    return data


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = yaml.safe_load(yaml.safe_dump(data or {}))  # deep copy
    given: set[str] = set()  # the settings these overrides have given so far
    table = aliases()
    for item in overrides:
        key, value = parse_override(item)
        leaf = setting_of(key)
        if key.startswith(leaf + "."):  # one entry of a mapping setting: data.columns.prompt=question
            mapping = _mapping_of(data, leaf, item)
            mapping[key[len(leaf) + 1:]] = value
            key, value = leaf, mapping
        elif key in table and key not in _LEAVES:
            leaf = _replace_by_alias(data, key, value, given, item)
        else:
            _given(data, key, item)  # a section given as no mapping: named here, not a TypeError in set_path
        set_path(data, key, value)
        given.add(leaf)
    return data


def _replace_by_alias(data: dict, name: str, value, given: set[str], item: str) -> str:
    """A TRL name given by --set (`lora_r=16`) replaces its setting's value in the file, as any --set does; the
    setting it stands for. resolve_aliases still refuses it against a --set of that setting or another name."""
    targets = _alias_targets(name, _mode_of(data))
    if not targets:  # resolve_aliases says which modes have it
        return name
    path, vmap = targets[0]
    if path not in given and not (vmap is not None and _flag_off(value)):  # `bf16=false` selects nothing
        parent, _, setting = path.rpartition(".")
        holder = _given(data, parent, item) if parent else data
        if isinstance(holder, dict):
            holder.pop(setting, None)
    return path


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, refusing a key given twice in one mapping (YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError([f"line {line}: `{key}` is given a second time (first on line {seen[key]}); "
                                   "keep one of them"])
            seen[key] = line
        return super().construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)


def _read_text(path: Path, what: str) -> str:
    """The file as UTF-8 text; ConfigError saying where it is not."""
    raw = path.read_bytes()
    if b"\0" in raw[:8192]:
        raise ConfigError([f"{path}: a binary file, not a YAML {what}"])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError([f"{path} line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {column}); "
                           "save the file as UTF-8"]) from None


def read_yaml_mapping(path: str | Path, what: str = "config file") -> dict:
    """A YAML file whose top level is a mapping (a run config, a sweep spec); ConfigError naming the file."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO would block the read
        kind = "a folder" if path.is_dir() else "not a regular file (a FIFO, device or socket)"
        raise ConfigError([f"{path}: {kind}; give the {what} as a .yaml file"])
    if not path.is_file():
        raise ConfigError([f"{path}: {what} not found"])
    try:
        data = yaml.load(_read_text(path, what), Loader=_UniqueKeyLoader) or {}
    except ConfigError as e:  # a key given twice: its lines
        raise ConfigError([e.errors[0] if e.errors[0].startswith(str(path)) else f"{path} {e.errors[0]}"]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML ({e})"]) from None
    except OSError as e:
        raise ConfigError([f"{path}: cannot be read ({e.strerror or e})"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping of settings at the top level"])
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None,
                only_applicable: bool = True) -> RunConfig:
    """A run config from a YAML file (None: the defaults) and `--set` overrides. only_applicable: refuse a
    setting given there, off its default, that the run's mode or fine-tuning does not read (it would be ignored
    silently); one at its default, as a whole config written out (`to_yaml`) gives them, changes nothing."""
    data = read_yaml_mapping(path) if path else {}
    set_here = {parse_override(item)[0]: item for item in overrides or []}
    table = aliases()
    for key, item in list(set_here.items()):  # a TRL name's (or a mapping entry's) problems are blamed on its --set
        for target in [t for t, _ in table.get(key, ())] + [setting_of(key)]:
            set_here.setdefault(target, item)
    try:
        data = apply_overrides(data, overrides or [])
        config = build_config(data)
        if only_applicable and (unread := _unread(config, _given_paths(resolve_aliases(data)))):
            raise ConfigError([_not_applying(p, config) for p in unread])
        return config
    except ConfigError as e:  # each problem blamed on where its value came from: the file or a --set
        raise ConfigError([_blame(line, set_here, path) for line in e.errors]) from None


def applies(path: str, config: RunConfig) -> bool:
    """Whether a run with `config`'s mode and fine-tuning reads the setting `path`."""
    if path.startswith("lora.") and config.finetuning != "lora":
        return False
    return _applies(field_info(path), config.mode)


def _unread(config: RunConfig, given: list[str]) -> list[str]:
    """The settings of `given` that `config`'s run does not read, and that are not at their defaults."""
    data = config.model_dump()
    return [p for p in given if not applies(p, config)
            and get_path(data, p) != field_info(p).get_default(call_default_factory=True)]


def _given_paths(data: dict, prefix: str = "") -> list[str]:
    """The setting paths a mapping (a YAML file with its --set overrides) gives values for."""
    out = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path in RunConfig.model_fields and is_section(
                RunConfig.model_fields[path].annotation):
            out += _given_paths(value, f"{path}.")
        elif path in _LEAVES:
            out.append(path)
    return out


def _not_applying(path: str, config: RunConfig) -> str:
    if path.startswith("lora.") and config.finetuning != "lora":
        return (f"{path}: does not apply with finetuning: {config.finetuning} (LoRA settings shape an adapter, and "
                "a full fine-tune has none); leave it out, or set finetuning to lora")
    modes = ", ".join(field_info(path).json_schema_extra["modes"])
    return (f"{path}: does not apply to {config.mode} runs (only to {modes}); leave it out, or set mode to "
            f"{'one of those' if ',' in modes else modes}")


def _blame(line: str, set_here: dict[str, str], path) -> str:
    """`line` ("key: problem") said of the --set that gave the key (or a section above it), else of the file."""
    key, _, problem = line.partition(": ")
    if key in set_here:
        return f"--set {set_here[key]}: {problem}"
    given = next((k for k in sorted(set_here, key=len, reverse=True) if key.startswith(k + ".")), None)
    if given:
        return f"--set {set_here[given]}: {line}"
    return f"{path}: {line}" if path else line


def to_yaml(config: RunConfig, only_changed: bool = False) -> str:
    """The config as YAML; only_changed: the settings not at their defaults that the run reads (those of other
    modes, or LoRA's in a full fine-tune, left on a form would be refused by `load_config`)."""
    data = config.model_dump(exclude_defaults=only_changed)
    if only_changed:
        data = _prune(data, config)
    return yaml.safe_dump(data, sort_keys=False)


def _prune(data: dict, config: RunConfig, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if path in _LEAVES:
            if applies(path, config):
                out[key] = value
        elif isinstance(value, dict) and (kept := _prune(value, config, f"{path}.")):
            out[key] = kept
    return out
