"""The reward-sources editor: one row per source (kind, name, weight, parameters as YAML, role, a cost's
budget and the source it is gated on), with Add / Remove.

Built from the reward-source schema (`backend.rewards.spec`): the kinds, their one-line descriptions, their
parameters' titles, help and defaults, and the ready-to-edit examples all come from there; nothing here
names a parameter. The Train tab and the reward playground each build one (with their own elem_id prefix).

The editor has a fixed number of row slots (MAX_SOURCES), shown or hidden, rather than a @gr.render list:
every control keeps a stable elem_id (`reward-type-0`, `reward-params-1`, ...) and the value a person is
typing is never lost to a re-render. A slot whose kind is empty is unused; used slots are always the first
ones (Remove moves the rows below it up).

Values travel as one list per editor, in slot order: kind, name, weight, params text, role, budget, when for each
slot (`read` takes them out of an event's {component: value} dict).
`sources_from_values` turns them into source dicts (params still as text), `parse_sources` into dicts
the run config validates, and `updates_for` does the reverse for loading a preset.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

import gradio as gr
import yaml

from app import i18n
from app.events import Packed

from backend.config import ConfigError, build_config
from backend.rewards.spec import (EXAMPLES, PARAM_MODELS, SOURCE_KINDS, RewardSourceConfig,
                                  validate_params)

MAX_SOURCES = 8
FIELDS_PER_ROW = 7  # kind, name, weight, params text, role, budget, when
DEFAULT_KIND = "numeric_match"
_SOURCE_FIELDS = RewardSourceConfig.model_fields


# ---- rows <-> sources (no gradio) ----

def params_text(kind: str, params: dict | None) -> str:
    """Params as one line of YAML. Those at their default are left out (the help lists the defaults),
    except the ones the kind's example sets to something, so `{column: answer}` stays as written."""
    model = PARAM_MODELS.get(kind)
    params = dict(params or {})
    if model is not None:
        example = set(EXAMPLES.get(kind, {}))
        defaults = {name: info.get_default(call_default_factory=True)
                    for name, info in model.model_fields.items() if not info.is_required()}
        params = {k: v for k, v in params.items()
                  if k not in defaults or defaults[k] != v or (k in example and v not in ([], "", None))}
    return _flow(params)


def parse_params(text) -> dict:
    """A params text (YAML: `{column: answer}` or `column: answer`) as a dict; ValueError saying what is wrong."""
    if isinstance(text, dict):
        return text
    if text is None or not str(text).strip():
        return {}
    try:
        value = yaml.safe_load(str(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at column {mark.column + 1}" if mark else ""
        raise ValueError(f"not valid YAML ({getattr(e, 'problem', None) or 'parse error'}{where}); write them "
                         "like {column: answer, tolerance: 0.01}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected name: value pairs like {{column: answer}}, got {str(text).strip()!r}")
    return value


def empty_row() -> list:
    return [None, "", 1.0, "", "reward", None, ""]


def row_from_source(source) -> list:
    s = source.model_dump() if isinstance(source, RewardSourceConfig) else dict(source)
    kind = s.get("type")
    params = s.get("params")
    text = params if isinstance(params, str) else params_text(kind, params)
    return [kind, s.get("name") or "", s.get("weight", 1.0), text, s.get("role") or "reward", s.get("budget"),
            s.get("when") or ""]


def values_for(sources: Sequence) -> list:
    """The editor's flat values (every slot) showing `sources` (configs or dicts); extra sources are cut."""
    rows = [row_from_source(s) for s in list(sources or [])[:MAX_SOURCES]]
    rows += [empty_row() for _ in range(MAX_SOURCES - len(rows))]
    return [v for row in rows for v in row]


def rows_of(values: Sequence) -> list[list]:
    values = list(values)
    if len(values) != MAX_SOURCES * FIELDS_PER_ROW:
        raise ValueError(f"expected {MAX_SOURCES * FIELDS_PER_ROW} editor values, got {len(values)}")
    return [values[i:i + FIELDS_PER_ROW] for i in range(0, len(values), FIELDS_PER_ROW)]


def sources_from_values(values: Sequence) -> list[dict]:
    """The used rows as source dicts {type, name, weight, params (the text as typed), role, budget and when (when
    given)}."""
    return [_source(*row) for row in rows_of(values) if row[0]]


def _source(kind, name, weight, params, role, budget, when) -> dict:
    source = {"type": kind, "name": (name or "").strip(), "weight": weight, "params": params or "",
              "role": role or "reward"}
    # a budget on a reward is passed on for the schema to refuse by name; a 0 there is what an empty number box
    # mounted in a hidden tab sends back (the Reward playground's), not something typed
    if budget not in (None, "") and not (source["role"] == "reward" and budget == 0):
        source["budget"] = budget
    if (when or "").strip():
        source["when"] = when.strip()
    return source


def parse_sources(sources: Sequence[dict]) -> tuple[list[dict], list[str]]:
    """Source dicts whose params may be text -> (dicts for the run config, errors for rows it cannot read).

    Errors name the row as the schema does (`reward_sources.<i>.<field>`); such a row keeps its text, so
    validation of the other rows still runs and `drop_row_errors` removes the schema's second opinion on it.
    """
    parsed, errors = [], []
    for i, source in enumerate(sources):
        source = dict(source)
        kind = source.get("type") or "?"
        weight = source.get("weight")
        if weight is None or weight == "" or (isinstance(weight, float) and not math.isfinite(weight)):
            errors.append(f"reward_sources.{i}.weight: empty; enter a number (default 1)")
        elif isinstance(weight, float) and weight.is_integer():
            source["weight"] = int(weight) if abs(weight) < 2**53 else weight
        try:
            source["params"] = parse_params(source.get("params"))
        except ValueError as e:
            errors.append(f"reward_sources.{i}.params: {kind} source: {e}")
        parsed.append(source)
    return parsed, errors


def error_location(error: str) -> str:
    """The setting an error line is about: `reward_sources.1.params` for "reward_sources.1.params: ..."."""
    return error.split(":", 1)[0].strip()


def drop_repeated_errors(errors: list[str], reported: set[str]) -> list[str]:
    """Schema errors about fields already reported as unreadable (e.g. params that are not YAML reach the
    schema as text and would add "Input should be a valid dictionary")."""
    return [e for e in errors if error_location(e) not in reported]


# ---- help text, from the schema ----

def _default_text(info, lang: str = i18n.DEFAULT) -> str:
    if info.is_required():
        return i18n.text("reward.help.required", lang)
    value = info.get_default(call_default_factory=True)
    if isinstance(value, list):
        value = ", ".join(map(str, value)) or i18n.text("reward.help.none", lang)
    return i18n.text("reward.help.default", lang, value=value)


def kind_help(kind: str | None, open_params: bool = False, lang: str = i18n.DEFAULT) -> str:
    """What a kind scores and its parameters (title, default, help), as HTML, in `lang`; the parameter list is
    folded unless `open_params` (the row's params have a problem)."""
    if not kind or kind not in PARAM_MODELS:
        return ""
    fields = PARAM_MODELS[kind].model_fields
    items = []
    for name, info in fields.items():
        title, help_text = i18n.reward_param_text(kind, name, lang)
        items.append(f"<li><code>{name}</code> <i>{html.escape(title)}, {html.escape(_default_text(info, lang))}</i>"
                     f" — {html.escape(help_text)}</li>")
    example = _flow(EXAMPLES.get(kind)) or "{}"
    summary = i18n.text("reward.help.params", lang, names=", ".join(fields))
    return (f'<div class="wb-help-kind"><b>{kind}</b>: {html.escape(i18n.kind_description(kind, lang))}</div>'
            f'<details{" open" if open_params else ""}><summary>{html.escape(summary)} '
            f'<code>{html.escape(example)}</code></summary><ul>{"".join(items)}</ul></details>')


def row_problem(kind: str | None, params) -> str | None:
    """The schema's message for a row's params, or None when they are valid (or the row is unused)."""
    if not kind:
        return None
    try:
        validate_params(kind, parse_params(params))
    except ValueError as e:
        return str(e)
    return None


def row_help(kind: str | None, params, lang: str = i18n.DEFAULT) -> str:
    """A row's help in `lang`: whether its params are valid (the schema's message stays English), then its kind's."""
    if not kind:
        return ""
    problem = row_problem(kind, params)
    status = (f'<div class="wb-help-error">⚠ {html.escape(problem)}</div>' if problem
              else f'<div class="wb-help-ok">✓ {html.escape(i18n.text("reward.help.valid", lang))}</div>')
    return f'<div class="wb-help">{status}{kind_help(kind, open_params=bool(problem), lang=lang)}</div>'


def kind_choices() -> list[tuple[str, str]]:
    return [(kind, kind) for kind in SOURCE_KINDS]


def params_on_kind_change(kind: str | None, params) -> str | None:
    """When a person picks another kind: the new kind's example, unless the params already fit it."""
    if not kind:
        return None
    if str(params or "").strip() and row_problem(kind, params) is None:
        return None  # keep
    return _flow(EXAMPLES.get(kind))


def _flow(params: dict | None) -> str:
    return yaml.safe_dump(params, default_flow_style=True, sort_keys=False, width=10_000).strip() if params else ""


# ---- the component ----

@dataclass
class RewardSourcesEditor:
    container: gr.Column
    rows: list[gr.Column]
    kinds: list[gr.Dropdown]
    names: list[gr.Textbox]
    weights: list[gr.Number]
    params: list[gr.Textbox]
    roles: list[gr.Dropdown]
    budgets: list[gr.Number]
    whens: list[gr.Textbox]
    helps: list[gr.HTML]
    add: gr.Button
    add_kind: gr.Dropdown

    @property
    def inputs(self) -> list[gr.Component]:
        """Every slot's kind, name, weight, params, role, budget and when, in slot order (what
        `sources_from_values` reads)."""
        return [c for i in range(MAX_SOURCES) for c in (self.kinds[i], self.names[i], self.weights[i],
                                                        self.params[i], self.roles[i], self.budgets[i],
                                                        self.whens[i])]

    @property
    def outputs(self) -> list[gr.Component]:
        """`inputs`, then each slot's row (shown or hidden) and help: what `updates_for` fills."""
        return [*self.inputs, *self.rows, *self.helps]

    def read(self, values: dict) -> list:
        """This editor's values in slot order, out of an event's {component: value} dict."""
        return [values[c] for c in self.inputs]

    def updates_for(self, sources: Sequence, lang: str = i18n.DEFAULT) -> dict:
        """{component: update} for `outputs` that shows `sources` (their help in `lang`)."""
        values = values_for(sources)
        rows = rows_of(values)
        return (dict(zip(self.inputs, values)) | {row: gr.update(visible=bool(r[0])) for row, r in zip(self.rows, rows)}
                | {h: row_help(r[0], r[3], lang) for h, r in zip(self.helps, rows)})

    def copy_from(self, values: Sequence, lang: str = i18n.DEFAULT) -> dict:
        """Updates showing the rows of another editor, given its values in slot order (the playground's "use
        the Train tab's sources")."""
        return self.updates_for(sources_from_values(values), lang)

    @property
    def help_refresh(self) -> tuple:
        """(fn, inputs, outputs) that writes every row's help in the session's language (after it changes)."""
        def on_language(values: dict, request: gr.Request = None):  # a dict: `request` must be positional
            lang = i18n.lang_of(request)
            return [row_help(values[k], values[p], lang) for k, p in zip(self.kinds, self.params)]
        return on_language, {*self.kinds, *self.params}, list(self.helps)


def build(prefix: str = "reward", sources: Sequence = (), title_key: str | None = None, info_key: str | None = None,
          visible: bool = True, container_id: str | None = None, words=None) -> RewardSourcesEditor:
    """Lay out the editor; elem_ids are `<prefix>-type-<i>`, `<prefix>-name-<i>`, `<prefix>-weight-<i>`,
    `<prefix>-params-<i>`, `<prefix>-role-<i>`, `<prefix>-budget-<i>`, `<prefix>-when-<i>`, `<prefix>-remove-<i>`,
    `<prefix>-help-<i>`,
    `<prefix>-add`, `<prefix>-add-type`. `title_key` (a setting's path) titles it with that setting's label,
    `info_key` (a UI key) adds a help line; `words` (an i18n.Translatable) is given its words."""
    from app import i18n

    words = i18n.given(words)
    values = values_for(sources)
    rows_values = rows_of(values)

    def field(name: str) -> dict:  # a row control's label, the source schema's field title in each language
        return {"label": f"reward.field.{name}"}
    kinds, names, weights, params, roles, budgets, whens, helps, rows, removes = ([] for _ in range(10))
    with gr.Column(visible=visible, elem_id=container_id or f"{prefix}-sources",
                   elem_classes=["wb-sources"]) as container:
        if title_key:
            words.add(gr.Markdown(elem_classes=["wb-section"]),
                      lambda lang: f"**{i18n.setting_text(title_key, lang)[0]}**", "value")
        if info_key:
            words.add(gr.Markdown(elem_classes=["wb-kinds"]), info_key, "value")
        for i, (kind, name, weight, text, role, budget, when) in enumerate(rows_values):
            with gr.Column(visible=bool(kind), elem_id=f"{prefix}-row-{i}", elem_classes=["wb-source-row"]) as row:
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    kinds.append(words.add(gr.Dropdown(choices=kind_choices(), value=kind,
                                                       elem_id=f"{prefix}-type-{i}", scale=4, min_width=190),
                                           **field("type")))
                    names.append(words.add(gr.Textbox(value=name, elem_id=f"{prefix}-name-{i}", scale=2,
                                                      min_width=110, max_lines=1),
                                           **field("name"), placeholder="reward.name_placeholder"))
                    weights.append(words.add(gr.Number(value=weight, elem_id=f"{prefix}-weight-{i}", scale=1,
                                                       min_width=80, step=0.1), **field("weight")))
                    params.append(words.add(gr.Textbox(value=text, placeholder="{name: value, ...}",
                                                       elem_id=f"{prefix}-params-{i}", scale=5, min_width=220,
                                                       lines=1, max_lines=4), **field("params")))
                    roles.append(words.add(gr.Dropdown(choices=list(get_args(_SOURCE_FIELDS["role"].annotation)),
                                                       value=role, elem_id=f"{prefix}-role-{i}", scale=1,
                                                       min_width=100), **field("role")))
                    budgets.append(words.add(gr.Number(value=budget, elem_id=f"{prefix}-budget-{i}", scale=1,
                                                       min_width=80, step=0.01),
                                             **field("budget"), placeholder="reward.budget_placeholder"))
                    whens.append(words.add(gr.Textbox(value=when, elem_id=f"{prefix}-when-{i}", scale=1,
                                                      min_width=100, max_lines=1),
                                           **field("when"), placeholder="reward.when_placeholder"))
                    removes.append(words.add(gr.Button(elem_id=f"{prefix}-remove-{i}", size="md", scale=0,
                                                       min_width=80, variant="secondary", elem_classes=["wb-remove"]),
                                             "reward.remove", "value"))
                helps.append(gr.HTML(row_help(kind, text), elem_id=f"{prefix}-help-{i}", padding=False))
            rows.append(row)
        with gr.Row(equal_height=True, elem_classes=["wb-bottom"]):
            add_kind = words.add(gr.Dropdown(choices=kind_choices(), value=DEFAULT_KIND, info=None,
                                             elem_id=f"{prefix}-add-type", scale=3, min_width=150), "reward.add_kind")
            add = words.add(gr.Button(elem_id=f"{prefix}-add", scale=2, min_width=140), "reward.add", "value")
        words.add(gr.Markdown(elem_classes=["wb-kinds"]), lambda lang: _kinds_markdown(i18n.text("reward.kinds", lang),
                                                                                   lang), "value")
    editor = RewardSourcesEditor(container, rows, kinds, names, weights, params, roles, budgets, whens, helps, add,
                                 add_kind)
    _wire(editor, removes)
    return editor


def _kinds_markdown(kinds: str = "Kinds:", lang: str = i18n.DEFAULT) -> str:
    # each kind is a value typed in YAML (code); its description is in its tooltip
    return f"{kinds} " + " · ".join(f"<abbr title=\"{html.escape(i18n.kind_description(k, lang))}\"><code>{k}</code>"
                                    "</abbr>" for k in SOURCE_KINDS)


def _wire(editor: RewardSourcesEditor, removes: list[gr.Button]) -> None:
    slot_outputs = editor.outputs

    def on_add(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        sources = sources_from_values(editor.read(values))
        if len(sources) >= MAX_SOURCES:
            gr.Warning(i18n.text("reward.at_most", lang, n=MAX_SOURCES))
            return gr.skip()  # skips every output (an empty dict would not)
        kind = values[editor.add_kind] or DEFAULT_KIND
        sources.append({"type": kind, "name": "", "weight": 1.0, "params": _flow(EXAMPLES.get(kind)),
                        "role": "reward"})
        return editor.updates_for(sources, lang)

    def kind_changed(params_box: gr.Textbox, help_box: gr.HTML):
        def on_kind(kind, params, request: gr.Request = None):
            lang = i18n.lang_of(request)
            new = params_on_kind_change(kind, params)
            if new is None:  # the params fit the new kind: kept as typed
                return {help_box: row_help(kind, params, lang)}
            return {params_box: new, help_box: row_help(kind, new, lang)}
        return on_kind

    def remover(index: int):
        def on_remove(values: dict, request: gr.Request = None):
            rows = rows_of(editor.read(values))
            del rows[index]
            return editor.updates_for([_source(*row) for row in rows if row[0]], i18n.lang_of(request))
        return on_remove

    # the rows' ~56 fields go packed (app/events.Packed): one input per event, not one the page tracks per field
    Packed({editor.add_kind, *editor.inputs}).on(editor.add.click, on_add, slot_outputs, show_progress="hidden")
    rows = Packed(set(editor.inputs))
    for i, button in enumerate(removes):
        rows.on(button.click, remover(i), slot_outputs, show_progress="hidden")
    for kind, params, help_ in zip(editor.kinds, editor.params, editor.helps):
        # Only a person's edits are listened to: programmatic updates (Add, Remove, a loaded preset) set the
        # help themselves and keep their params, and a .change listener could read a row half-updated.
        kind.input(kind_changed(params, help_), [kind, params], [params, help_], show_progress="hidden")
        # .input fires on key presses only; .blur also catches pasted or filled text once the box is left
        params.input(_help_in_language, [kind, params], help_, show_progress="hidden", trigger_mode="always_last")
        params.blur(_help_in_language, [kind, params], help_, show_progress="hidden")


def _help_in_language(kind, params, request: gr.Request = None) -> str:
    return row_help(kind, params, i18n.lang_of(request))


def configs_from_values(values: Sequence) -> tuple[list, list[str]]:
    """The editor's values as validated RewardSourceConfigs, and every problem (one line per row and field,
    `reward_sources.<i>...` as the Train tab reports them); the configs are empty when there is a problem."""
    parsed, errors = parse_sources(sources_from_values(values))
    try:
        configs = build_config({"mode": "grpo", "reward_sources": parsed}).reward_sources  # any RL mode: sources alone
    except ConfigError as e:
        errors += drop_repeated_errors(e.errors, {error_location(x) for x in errors})
        configs = []
    return ([] if errors else configs), errors
