"""The settings form, generated from the run-config schema (`backend.config.field_paths`).

No parameter names are listed here: every leaf setting of RunConfig becomes one component, labelled with
its title, helped by its description and bounded by its constraints; the schema's groups other than "basic"
(advanced, compute) go into a folded accordion, a titled group (compute) as a block of its own. Components are keyed by the setting's dotted path, and their elem_id is that path
with dots as dashes (`lora.r` -> `lora-r`). Model, dataset and mode get their choices from the caller.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import get_args, get_origin

import gradio as gr

from app import reward_editor
from app.reward_editor import RewardSourcesEditor
from backend.config import (GROUP_TITLES, ConfigError, RunConfig, build_config, choices, field_paths, get_path,
                            set_path)
from backend.config import bounds as setting_bounds
from backend.core.mode_registry import GENERATING_EVAL_MODES
from backend.rewards.spec import RewardSourceConfig
from backend.tools.spec import DEFAULT_NAMES, PARAM_MODELS, ToolConfig

FIELDS = dict(field_paths())
PATHS = list(FIELDS)
# Settings that apply to some of their modes only while a switch is on: {path: (those modes, the switch's path)}.
# SFT, DPO and KTO learn nothing from reward sources: they only score the answers generated at evaluation.
ONLY_WITH = {"reward_sources": (GENERATING_EVAL_MODES, "eval.generate")}
SWITCHES = list(dict.fromkeys(switch for _, switch in ONLY_WITH.values()))


class SettingNumber(gr.Number):
    """gr.Number whose range is enforced by the browser's spinner and by the schema, not by Gradio.

    Gradio's own range check rejects the whole event with "Value 0 is less than minimum value 1" without
    saying which field; letting the value through means `build_config` reports it with the field named.
    """

    is_template = True  # rendered by the frontend's Number component

    def preprocess(self, payload):
        return None if payload is None else self.round_to_precision(payload, self.precision)


def default_value(path: str):
    return FIELDS[path].get_default(call_default_factory=True)


def group_of(path: str) -> str:
    return (FIELDS[path].json_schema_extra or {}).get("group", "basic")


def modes_of(path: str) -> list[str] | None:
    return (FIELDS[path].json_schema_extra or {}).get("modes")


def bounds(path: str) -> tuple[float | None, float | None]:
    return setting_bounds(FIELDS[path])


def _is_list(path: str) -> bool:
    """A list of words or numbers (comma-separated in a textbox)."""
    ann = FIELDS[path].annotation
    return get_origin(ann) is list and get_args(ann) in ((str,), (float,))


def is_source_list(path: str) -> bool:
    """A list of reward sources: edited row by row in a RewardSourcesEditor, not in a textbox."""
    ann = FIELDS[path].annotation
    return get_origin(ann) is list and get_args(ann) == (RewardSourceConfig,)


def is_tool_list(path: str) -> bool:
    """A list of tools: YAML in a textbox ([{type: calculator}, ...])."""
    ann = FIELDS[path].annotation
    return get_origin(ann) is list and get_args(ann) == (ToolConfig,)


TOOLS_PLACEHOLDER = "[{type: calculator}, {type: search, params: {folder: docs}}]"


def _tools_text(tools: list) -> str:
    """The tools as one line of YAML, each without what it leaves at its default."""
    import yaml

    if not tools:
        return ""
    shown = []
    for given in tools:
        tool = ToolConfig(**given)
        row = {"type": tool.type}
        if tool.name != DEFAULT_NAMES.get(tool.type, tool.params.get("function")):
            row["name"] = tool.name
        fields = PARAM_MODELS[tool.type].model_fields
        if params := {k: v for k, v in tool.params.items() if fields[k].is_required() or fields[k].default != v}:
            row["params"] = params
        if tool.timeout_s != ToolConfig.model_fields["timeout_s"].default:
            row["timeout_s"] = tool.timeout_s
        shown.append(row)
    return yaml.safe_dump(shown, default_flow_style=True, sort_keys=False, width=10_000).strip()


def tools_from_text(text: str) -> tuple[list, str | None]:
    import yaml

    if not (text or "").strip():
        return [], None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [], f"tools: not YAML ({str(e).splitlines()[0]}); write e.g. {TOOLS_PLACEHOLDER}"
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return [], f"tools: a list of tools, e.g. {TOOLS_PLACEHOLDER}"
    return value, None


@dataclass
class ToolControls:
    """Tools a model may call outside training (Evaluate, the Reward playground): one line of YAML, the chat
    template and the tool-calling turns, as a GRPO run sets them."""

    tools: gr.Textbox
    chat_template: gr.Dropdown
    turns: gr.Number

    @property
    def components(self) -> list:
        return [self.tools, self.chat_template, self.turns]

    def read(self, tools_text, template, turns) -> tuple[list, str, int, str | None]:
        """(tools, chat template, turns, the tools' problem or None) from the controls' values."""
        listed, error = tools_from_text(tools_text)
        turns = int(turns) if turns else FIELDS["rl.max_tool_calling_iterations"].default
        return listed, template or FIELDS["data.chat_template"].default, turns, error

    def filled(self, tools: list, template: str, turns: int) -> dict:
        return {self.tools: to_component_value("tools", tools), self.chat_template: template, self.turns: turns}


def tool_controls(words, prefix: str) -> ToolControls:
    """The three controls in a row, `prefix`-tools / -chat-template / -tool-turns, labelled through `words`."""
    t = words.add
    with gr.Row():
        tools = t(gr.Textbox(placeholder=TOOLS_PLACEHOLDER, elem_id=f"{prefix}-tools", scale=3), "common.tools",
                  info="common.tools_help")
        template = t(gr.Dropdown(choices(FIELDS["data.chat_template"]), value=FIELDS["data.chat_template"].default,
                                 elem_id=f"{prefix}-chat-template"), "common.chat_template")
        turns = t(gr.Number(value=FIELDS["rl.max_tool_calling_iterations"].default, precision=0,
                            minimum=1, maximum=100, elem_id=f"{prefix}-tool-turns"), "common.tool_turns")
    return ToolControls(tools, template, turns)


def paths_under(section: str) -> list[str]:
    return [p for p in PATHS if p.startswith(f"{section}.")]


def elem_id(path: str) -> str:
    return path.replace(".", "-")


def to_component_value(path: str, value):
    if is_tool_list(path):
        return _tools_text(value) if isinstance(value, list) else value
    if isinstance(value, dict):  # data.columns: name=column pairs, as its textbox takes them
        return ", ".join(f"{name}={column}" for name, column in value.items())
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) \
        if _is_list(path) and isinstance(value, list) else value


def _float_step(default: float) -> float:
    return 10 ** math.floor(math.log10(default)) if default > 0 else 0.01


def build_component(path: str, **overrides) -> gr.Component:
    """The component for one setting: Number / Checkbox / Dropdown / Textbox from its annotation.

    `overrides` are passed to the component; giving `choices` turns a text setting into a Dropdown
    (model and dataset: suggestions plus, with allow_custom_value, anything typed)."""
    info = FIELDS[path]
    kw = dict(label=info.title or path, info=info.description, elem_id=elem_id(path),
              value=to_component_value(path, default_value(path)), visible=shown_for(path, default_value("mode")))
    ann = info.annotation
    if suggested := (info.json_schema_extra or {}).get("suggestions"):  # a text setting with named examples
        kw.update(choices=list(suggested), allow_custom_value=True, filterable=True)
    if (opts := choices(info)) is not None or "choices" in overrides or suggested:
        if opts is not None:
            kw.update(choices=opts, multiselect=get_origin(ann) is list or None)  # report_to: several of them
        kw.update(overrides)
        return gr.Dropdown(**kw)
    if ann is bool:
        kw.update(overrides)
        return gr.Checkbox(**kw)
    if ann in (int, float):
        lo, hi = bounds(path)
        kw.update(minimum=lo, maximum=hi, precision=0 if ann is int else None,
                  step=1 if ann is int else _float_step(float(default_value(path))))
        kw.update(overrides)
        return SettingNumber(**kw)
    if _is_list(path):
        kw.update(placeholder="comma-separated")
    if is_tool_list(path):
        kw.update(placeholder=TOOLS_PLACEHOLDER)
    kw.update(overrides)
    return gr.Textbox(**kw)


def edit_events(components: Sequence[gr.Component]) -> list:
    """The events that fire when a user has edited one of `components`: a typed box when it is left or
    submitted (not on every keystroke), a checkbox or a list when it is picked."""
    typed = [event for box in components if isinstance(box, (gr.Textbox, gr.Number))
             for event in (box.blur, box.submit)]
    return typed + [box.input for box in components if isinstance(box, (gr.Checkbox, gr.Dropdown))]


def build_source_editor(path: str, words=None) -> RewardSourcesEditor:
    """The editor titled like its setting (`path`'s label in the chosen language) with the reward's help."""
    return reward_editor.build(prefix="reward", sources=default_value(path), title_key=path, info_key="reward.info",
                               visible=shown_for(path, default_value("mode")),
                               container_id=elem_id(path).replace("_", "-"), words=words)


def _section(path: str) -> str:
    """The titled block a setting is laid out in: its schema section, or a titled group (compute); "" for the
    untitled top-level block."""
    if "." in path:
        return path.rsplit(".", 1)[0]
    return group_of(path) if group_of(path) in GROUP_TITLES else ""


def _section_title(section: str) -> str:
    if section in GROUP_TITLES:
        return GROUP_TITLES[section]
    info = RunConfig.model_fields[section]
    return info.title or section


def shown_for(path: str, mode: str, switches: dict | None = None) -> bool:
    """Whether a setting applies to a training mode (settings without `modes` apply to all) and, for one of
    ONLY_WITH, to the `switches` ({path: value}; a switch not given: its default)."""
    modes = modes_of(path)
    if modes is not None and mode not in modes:
        return False
    if path in ONLY_WITH and mode in ONLY_WITH[path][0]:
        switch = ONLY_WITH[path][1]
        return bool((switches or {}).get(switch, default_value(switch)))
    return True


@dataclass
class Section:
    """A titled block of settings; hidden as a whole when none of them applies to the mode."""

    container: gr.Column
    paths: list[str]
    name: str = ""  # the schema section ("" for top-level settings)
    title: gr.Markdown | None = None


def build_settings(components: dict[str, gr.Component], skip: Sequence[str] = (), per_row: int = 4,
                   advanced_label: str = "Advanced settings", words=None) -> list[Section]:
    """Lay out every setting not in `skip` and not already built, by schema section: basic ones in view,
    advanced ones in a folded accordion. New components are added to `components` (keyed by path); `words`
    (an i18n.Translatable) is given the section titles and the accordion to translate."""
    todo = [p for p in PATHS if p not in skip and p not in components]
    mode = default_value("mode")
    sections: list[Section] = []

    def block(paths: list[str], section: str, titled: bool):
        simple = [p for p in paths if not is_source_list(p)]
        title = None
        with gr.Column(visible=any(shown_for(p, mode) for p in paths), elem_classes=["wb-block"]) as col:
            if titled and section and simple:
                title = gr.Markdown(f"**{_section_title(section)}**", elem_classes=["wb-section"])
                if words is not None:
                    words.add(title, f"section.{section}", "value", bold=True)
            for i in range(0, len(simple), per_row):
                with gr.Row(equal_height=True):
                    for p in simple[i:i + per_row]:
                        components[p] = build_component(p)
                        if words is not None and _is_list(p):
                            words.add(components[p], placeholder="form.comma_separated")
            for p in paths:
                if is_source_list(p):  # a whole-width editor of its own
                    components[p] = build_source_editor(p, words)
        sections.append(Section(col, paths, section, title))

    def blocks(paths: list[str]):
        for section in sorted(dict.fromkeys(_section(p) for p in paths), key=bool):  # top level first
            block([p for p in paths if _section(p) == section], section, titled=True)

    blocks([p for p in todo if group_of(p) == "basic"])
    advanced = [p for p in todo if group_of(p) != "basic"]
    if advanced:
        with gr.Accordion(advanced_label, open=False, elem_id="advanced") as folded:
            blocks(advanced)
        if words is not None:
            words.add(folded, "train.advanced")
    return sections


@dataclass
class SettingsForm:
    """Every setting's component, in schema order, and the conversions between their values and a config.

    A setting is one component, except a list of reward sources, which is a RewardSourcesEditor of several
    (one row per source). `inputs` lists them all flat (wire them as a set: the handler gets one
    {component: value} dict); `pack` turns their values back into one value per setting, the form
    `config_from_values` reads.
    """

    components: dict[str, gr.Component | RewardSourcesEditor]
    sections: list[Section] = field(default_factory=list)

    def __post_init__(self):
        missing = [p for p in PATHS if p not in self.components]
        if missing:
            raise ValueError(f"the form has no component for: {', '.join(missing)}")
        self.components = {p: self.components[p] for p in PATHS}

    @property
    def inputs(self) -> list[gr.Component]:
        out = []
        for c in self.components.values():
            out += c.inputs if isinstance(c, RewardSourcesEditor) else [c]
        return out

    @property
    def outputs(self) -> list[gr.Component]:
        """What `updates_from` fills: every input, plus the editors' rows and help."""
        out = []
        for c in self.components.values():
            out += c.outputs if isinstance(c, RewardSourcesEditor) else [c]
        return out

    def pack(self, values: dict | Sequence) -> list:
        """Values of `inputs` (an event's {component: value} dict, or a list in `inputs` order) -> one value
        per setting (in PATHS order)."""
        values = [values[c] for c in self.inputs] if isinstance(values, dict) else list(values)
        out, i = [], 0
        for c in self.components.values():
            if isinstance(c, RewardSourcesEditor):
                n = len(c.inputs)
                out.append(reward_editor.sources_from_values(values[i:i + n]))
                i += n
            else:
                out.append(values[i])
                i += 1
        if i != len(values):
            raise ValueError(f"expected {i} values, got {len(values)}")
        return out

    def config_from(self, values: dict | Sequence) -> RunConfig:
        """A RunConfig from the values of `inputs`; ConfigError lists every bad field."""
        return config_from_values(self.pack(values))

    def updates_from(self, config: RunConfig, lang: str = "en") -> dict:
        """{component: update} for `outputs` that shows `config` (the reward sources' help in `lang`)."""
        out = {}
        for c, value in zip(self.components.values(), values_from_config(config)):
            out |= c.updates_for(value, lang) if isinstance(c, RewardSourcesEditor) else {c: value}
        return out

    def _mode_paths(self) -> list[str]:
        return [p for p in PATHS if modes_of(p)]

    def _mode_sections(self) -> list[Section]:
        return [s for s in self.sections if any(modes_of(p) for p in s.paths)]

    def _shown(self, path: str):
        c = self.components[path]
        return c.container if isinstance(c, RewardSourcesEditor) else c

    def mode_outputs(self) -> list:
        """The components and section blocks whose visibility depends on the training mode (and SWITCHES)."""
        return [self._shown(p) for p in self._mode_paths()] + [s.container for s in self._mode_sections()]

    @property
    def switches(self) -> list[gr.Component]:
        """The settings some others are shown only with (SWITCHES): `mode_updates` reads their values too."""
        return [self.components[p] for p in SWITCHES]

    def mode_updates(self, mode: str, switch_values: Sequence | None = None) -> dict:
        """Visibility updates for `mode_outputs()`: only the settings that apply to `mode` (and to the values of
        `switches`, in that order; None: their defaults) are shown."""
        on = dict(zip(SWITCHES, switch_values)) if switch_values is not None else None
        return ({self._shown(p): gr.update(visible=shown_for(p, mode, on)) for p in self._mode_paths()}
                | {s.container: gr.update(visible=any(shown_for(p, mode, on) for p in s.paths))
                   for s in self._mode_sections()})


def data_from_values(values: Sequence) -> tuple[dict, list[str]]:
    """Values, one per setting (in PATHS order) -> (config data, errors for fields left empty or unreadable).

    A reward-source list is a list of source dicts whose params may still be YAML text (the editor's rows)."""
    data, errors, _ = _data_from_values(values)
    return data, errors


def _data_from_values(values: Sequence) -> tuple[dict, list[str], set[str]]:
    if len(values) != len(PATHS):
        raise ValueError(f"expected {len(PATHS)} values, got {len(values)}")
    data, errors, bad_rows = {}, [], set()
    by_path = dict(zip(PATHS, values))
    for path, value in zip(PATHS, values):
        ann = FIELDS[path].annotation
        if path in ONLY_WITH and not shown_for(path, by_path.get("mode"), {s: bool(by_path[s]) for s in SWITCHES}):
            value = [] if is_source_list(path) or is_tool_list(path) else default_value(path)  # hidden: not run
        if ann in (int, float):
            if value is None or value == "":
                errors.append(f"{path}: empty; enter a number (default {default_value(path)})")
                continue
            if ann is int and isinstance(value, float) and value.is_integer():
                value = int(value)
        elif ann is bool:
            value = bool(value)
        elif is_tool_list(path) and isinstance(value, str):
            value, error = tools_from_text(value)
            errors += [error] if error else []
        elif is_source_list(path) and isinstance(value, (list, tuple)):
            value, row_errors = reward_editor.parse_sources(value)
            errors += row_errors
            bad_rows |= {reward_editor.error_location(e) for e in row_errors}
        elif value is None:
            value = ""
        set_path(data, path, value)  # list settings stay as typed: the schema splits "a, b" itself
    return data, errors, bad_rows


def config_from_values(values: Sequence) -> RunConfig:
    """Build and validate a RunConfig from one value per setting; ConfigError lists every bad field."""
    data, errors, bad_rows = _data_from_values(values)
    try:
        config = build_config(data)
    except ConfigError as e:
        errors += reward_editor.drop_repeated_errors(e.errors, bad_rows)
    if errors:
        raise ConfigError(errors)
    return config


def values_from_config(config: RunConfig) -> list:
    """One value per setting: what its component shows (a reward-source list: source dicts)."""
    data = config.model_dump()
    return [to_component_value(p, get_path(data, p)) for p in PATHS]
