"""The run-config schema: the one definition of every training parameter.

The UI form, YAML presets, `launch.py train --set`, the worker and "show CLI command" all read it.
Each field carries its label (title), help (description), range and group once, in `sections.py` and
`run_config.py`; `build.py` derives the dotted paths and builds configs from mappings, files and overrides.
"""
from backend.config.build import (UnknownSetting, aliases, applies, apply_overrides, bounds, build_config, choices,
                                  describe_settings, field_info, field_paths, get_path, load_config, nearest_setting,
                                  parse_override, read_yaml_mapping, resolve_aliases, set_path, setting_of, to_yaml)
from backend.config.run_config import DEFAULT_DATASET, DEFAULT_MODEL, RunConfig
from backend.config.sections import DPO_LOSSES, GROUP_TITLES, GRPO_LOSSES, ConfigError

__all__ = ["DEFAULT_DATASET", "DEFAULT_MODEL", "DPO_LOSSES", "GROUP_TITLES", "GRPO_LOSSES", "ConfigError", "RunConfig",
           "UnknownSetting", "aliases", "applies", "apply_overrides", "bounds", "build_config", "choices",
           "describe_settings", "field_info", "field_paths", "get_path", "load_config", "nearest_setting",
           "parse_override", "read_yaml_mapping", "resolve_aliases", "set_path", "setting_of", "to_yaml"]
