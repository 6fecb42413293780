"""The Train tab: model, dataset (with a preview), mode and settings; Start / Stop; presets; the CLI command.

Handlers are thin: they read the form, call backend functions and format what comes back. What a browser
session started lives in its own gr.State (TrainSession); the run store is the only shared state.
"""
from __future__ import annotations

import functools
import html
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr
import pandas as pd

from app import doctor_render, forms, i18n
from app.choices import UPLOAD_TYPES, dataset_choices, generation_model_choices, preset_choices
from app.formatting import cli_command, error_markdown, example_html, memory_markdown, progress_html, status_text
from app.reward_editor import RewardSourcesEditor, parse_sources, sources_from_values
from app.tab_polls import TabPolls
from backend.runs import jobs, preflight
from backend.config import ConfigError, RunConfig, build_config, choices, load_config, set_path, to_yaml
from backend.doctor import fix_text
from backend.doctor.defaults import SUGGESTED_PATHS, data_suggestions
from backend.modes import available_modes
from backend.core.mode_registry import RL_MODES
from backend.rewards import is_suggestion, suggested_sources
from backend.runs.store import RunStore, default_workspace

log = logging.getLogger(__name__)
PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class TrainSession:
    """Per browser session: the run this tab started, and the status last sent to the page."""

    run_id: str | None = None
    shown_status: str | None = None


@dataclass
class TrainTab:
    form: forms.SettingsForm
    session: gr.State
    started: gr.State  # the id of a run the last Start created, else None
    start_event: object  # the Start click's dependency, for chaining the Runs tab's follow-up
    refresh_outputs: list
    refresh: Callable[[], dict]  # updates for refresh_outputs (model, dataset and preset choices)
    preview: tuple  # (fn, {inputs, outputs}) that fills the dataset preview, for the page's load event
    memory: tuple  # (fn, {inputs, outputs}) that fills the memory estimate and the fields' suggestions, for the
    # page's load event and a language switch (which resets every field's help: this writes them again)
    sources: RewardSourcesEditor  # the reward-sources editor (the playground can copy its rows)
    message: gr.Markdown  # under Start: what the last action said


def mode_choices() -> list[str]:
    """The schema's modes that have a trainer yet (the list grows as mode modules are added)."""
    return [m for m in choices(forms.FIELDS["mode"]) if m in available_modes()]


def save_preset(workspace: Path, name: str, config) -> Path:
    """Write the settings that differ from the defaults to workspace/presets/NAME.yaml."""
    name = (name or "").strip().removesuffix(".yaml")
    if not PRESET_NAME.match(name):
        raise ConfigError([f"preset name {name!r}: use letters, digits, '-', '_' or '.' (at most 64)"])
    path = Path(workspace) / "presets" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# saved from the workbench UI\n{to_yaml(config, only_changed=True)}")
    return path


DATA_PATHS = [*forms.paths_under("data"), "seed"]  # what the preview reads besides the dataset and mode


def data_options(values):
    """The data settings the form holds (values in DATA_PATHS order; empty ones at their defaults), or
    ConfigError naming a bad one."""
    from backend.data import DataOptions

    data = {}
    for path, value in zip(DATA_PATHS, values):
        if value is not None:
            set_path(data, path, value)
    return DataOptions.of(build_config(data))


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str, chat_template: str):
    from backend.data.templates import template_text
    from backend.models import load_tokenizer

    return load_tokenizer(path, chat_template=template_text(chat_template))


def _tokenizer_folder(model: str, workspace) -> str:
    """Where the tokenizer of the model a run trains on is: a run's own saved one for `run:<id>`."""
    from backend.models import RUN_PREFIX, resolve_model
    from backend.models.from_run import check_run_model

    if model.strip().startswith(RUN_PREFIX):
        return str(check_run_model(model, Path(workspace)).folder)
    return resolve_model(model)


@functools.cache
def _builtin_trains(name: str, mode: str) -> bool:
    from backend.data import preview

    return preview(name, mode, None, n=1)[2] is None


def builtin_for_mode(dataset: str, mode: str, workspace: Path) -> str | None:
    """When `dataset` is a built-in set that `mode` cannot train on, the built-in set made for it: of those
    it can train on, the one fewest other modes can (GRPO could use an SFT prompt/completion set, but the
    math set is the one with answers to reward)."""
    from backend.data import BUILTIN_DATASETS

    if dataset not in BUILTIN_DATASETS or _builtin_trains(dataset, mode):
        return None
    usable = [name for name in BUILTIN_DATASETS if _builtin_trains(name, mode)]
    modes = choices(forms.FIELDS["mode"])
    return min(usable, key=lambda name: sum(_builtin_trains(name, m) for m in modes), default=None)


SWAP_JS = "(shown, swap) => swap && shown === swap.from ? swap.to : shown"

PREVIEW_CHARS = 300  # per cell; the full text is in the file and in "Show the first example"


def column_widths(df: pd.DataFrame) -> list[str]:
    """Each preview column as wide as its longest shown text needs, within 120-420 px: a table with many
    columns scrolls sideways instead of squeezing each into a sliver."""
    widths = []
    for column in df.columns:
        longest = max([len(str(column)), *(min(len(str(v)), PREVIEW_CHARS) for v in df[column])])
        widths.append(f"{max(120, min(420, 8 * longest))}px")
    return widths


ROW_CHARS = 20_000  # per value of a clicked row shown in full


def _full_text(value) -> str:
    """One value of a dataset row as text: a conversation turn by turn, other lists and mappings as JSON."""
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return "\n\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, indent=1)
    return "" if value is None else str(value)


def row_html(row: dict, n: int, lang: str = i18n.DEFAULT, note: str = "") -> str:
    """A dataset row in full under the preview: each column's whole text, wrapped."""
    parts = []
    for column, value in row.items():
        text = _full_text(value)
        text = text if len(text) <= ROW_CHARS else text[:ROW_CHARS - 1] + "…"
        parts.append(f'<div class="wb-row-col"><b>{html.escape(str(column))}</b>'
                     f'<div style="white-space: pre-wrap; overflow-wrap: anywhere; margin: 2px 0 8px 0">'
                     f'{html.escape(text)}</div></div>')
    tail = f'<div class="wb-dim">{html.escape(note)}</div>' if note else ""
    return (f'<div class="wb-row-full" data-row="{n}"><div class="wb-section"><b>'
            f'{html.escape(i18n.text("train.row_title", lang, n=n))}</b></div>{"".join(parts)}{tail}</div>')


def format_text(info, error: str | None, mode: str, lang: str = i18n.DEFAULT) -> str:
    """The dataset's format line (what the data layer says about it stays English)."""
    t = functools.partial(i18n.text, lang=lang)
    converted = f"\n\n**{t('train.data_settings')}** {'; '.join(info.applied)}" if info is not None and info.applied \
        else ""
    converted += f"\n\n**{t('train.converted')}** {info.adapter}" if info is not None and info.adapter else ""
    if info is not None and error is None:
        kind = t("train.conversational" if info.conversational else "train.plain_text")
        columns = ", ".join(f"`{c}`" for c in info.columns)
        return t("train.ready", name=info.name, columns=columns, kind=kind, rows=info.num_rows,
                 mode=mode.upper()) + converted
    if info is not None:
        return f"**{t('train.cannot_train')}** {t('train.detected_but', name=info.name, error=error)}{converted}"
    return f"**{t('train.cannot_train')}** {error}" if error else ""


# ---- layout and events ----

def build(store: RunStore, polls: TabPolls, runs_view: gr.State, words=None) -> TrainTab:
    """`words` (an i18n.Translatable) is given this tab's settings and words to translate."""
    words = i18n.given(words)
    workspace = store.workspace
    shown_ws = None if workspace == default_workspace() else workspace
    session = gr.State(TrainSession())
    pending_fix = gr.State({})  # the last reward check's suggested settings, for "Apply"
    started = gr.State(None)
    # {"from": dataset, "to": the built-in set for the mode}, from the server; the browser swaps only while the field
    # still shows "from" (a path typed while the answer was on its way stays)
    swap = gr.JSON(None, visible=False, elem_id="dataset-swap")
    c: dict[str, gr.Component] = {}

    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=420):
            with gr.Row(equal_height=True):
                c["model"] = forms.build_component("model", choices=generation_model_choices(store),
                                                   allow_custom_value=True, filterable=True, scale=3)
                c["mode"] = forms.build_component("mode", choices=mode_choices(), scale=2)
            with gr.Row(equal_height=True):
                c["dataset"] = forms.build_component("dataset", choices=dataset_choices(store),
                                                     allow_custom_value=True, filterable=True, scale=3)
                upload = words.add(gr.File(file_types=UPLOAD_TYPES, type="filepath", elem_id="upload", height=120,
                                           scale=2, min_width=180), "train.upload")
            sections = forms.build_settings(c, skip=("model", "mode", "dataset"), words=words)
            form = forms.SettingsForm(c, sections)
            with gr.Accordion(open=False, elem_id="presets") as presets_box:
                words.add(presets_box, "train.presets")
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    preset = words.add(gr.Dropdown(choices=preset_choices(workspace), value=None, elem_id="preset",
                                                   scale=3), "train.preset")
                    load_btn = words.add(gr.Button(elem_id="load-preset", scale=1), "train.load_preset", "value")
                with gr.Row(equal_height=False, elem_classes=["wb-bottom"]):
                    preset_name = words.add(gr.Textbox(placeholder="my-preset", elem_id="preset-name", scale=3),
                                            "train.save_as")
                    save_btn = words.add(gr.Button(elem_id="save-preset", scale=1), "train.save_preset", "value")

        with gr.Column(scale=2, min_width=340):
            with gr.Row():
                start = words.add(gr.Button(variant="primary", elem_id="start", scale=2), "train.start", "value")
                stop = words.add(gr.Button(variant="stop", elem_id="stop", scale=1), "train.stop", "value")
            memory = gr.Markdown("", elem_id="memory-estimate")
            status = gr.HTML(progress_html(None, empty=i18n.english("train.no_run")), elem_id="run-status")
            message = gr.Markdown("", elem_id="train-message")
            words.add(gr.Markdown(elem_classes=["wb-section"]), "train.preview", "value", bold=True)
            data_format = gr.Markdown("", elem_id="dataset-format")
            data_preview = gr.Dataframe(value=pd.DataFrame(), interactive=False, wrap=True, max_height=320,
                                        max_chars=PREVIEW_CHARS, show_row_numbers=True,
                                        elem_id="dataset-preview", show_label=False)
            data_row = gr.HTML("", elem_id="dataset-row")  # a clicked row in full (the cells show the start)
            show_example = words.add(gr.Button(elem_id="show-example", size="sm"), "train.show_example", "value")
            example = gr.HTML("", elem_id="dataset-example")
            with gr.Row():
                check = words.add(gr.Button(elem_id="check-rewards", size="sm"), "train.check_rewards", "value")
                apply_fix = words.add(gr.Button(elem_id="apply-fix", size="sm", visible=False), "train.apply_fix",
                                      "value")
            reward_check = gr.Markdown("", visible=False, elem_id="reward-check")
            show_cli = words.add(gr.Button(elem_id="show-cli", size="sm"), "train.show_cli", "value")
            cli = words.add(gr.Code(language="shell", visible=False, elem_id="cli-command", interactive=False,
                                    wrap_lines=True, show_line_numbers=False), "train.cli")
    words.settings.update({p: comp for p, comp in c.items() if not isinstance(comp, RewardSourcesEditor)})

    # ---- handlers ----

    # Handlers that need the session's language read their inputs as one {component: value} dict: Gradio passes
    # `request` to a positional parameter only, never to one after *values (it would stay None: always English).
    def on_preview(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        dataset, mode = values[c["dataset"]], values[c["mode"]]
        data_values, source_values = [values[x] for x in data_inputs], sources.read(values)
        try:
            from backend.data import preview
        except ImportError as e:  # data module missing in a partial checkout
            return {data_preview: pd.DataFrame(), data_format: i18n.text("train.preview_unavailable", lang, error=e)}
        try:
            options = data_options(data_values)
        except ConfigError as e:
            return {data_preview: pd.DataFrame(), data_format: format_text(None, e.errors[0], mode, lang)}
        df, info, error = preview(dataset, mode, workspace=workspace, n=5, options=options)
        text = format_text(info, error, mode, lang)
        hint = f'<div class="wb-dim">{html.escape(i18n.text("train.row_hint", lang))}</div>' if len(df) else ""
        out = {data_preview: gr.update(value=df, column_widths=column_widths(df)), data_row: hint} \
            | folder_choices(dataset)
        current, unreadable = parse_sources(sources_from_values(source_values))
        if info is not None and mode in RL_MODES and not unreadable and is_suggestion(current):
            # an RL run needs a reward: start from one this dataset supports (an earlier suggestion nobody
            # edited follows the dataset; edited sources are never replaced)
            suggested, why = suggested_sources(list(df.columns))  # every column, not only the format's
            out |= sources.updates_for(suggested, lang)
            text += "\n\n" + i18n.text("train.reward_prefilled", lang, why=why)
            if sources_from_values(source_values) != sources_from_values(sources.read(out)):
                # the estimate beside it read the sources before these: it follows this event (see the wiring)
                out[memory] = i18n.text("train.memory_estimating", lang)
        return out | {data_format: text}

    def on_row(evt: gr.SelectData, values: dict, request: gr.Request = None):
        """A clicked preview row in full: the cells show each value's start only (the row is read again)."""
        from backend.data import prepare_dataset

        lang = i18n.lang_of(request)
        shown, dataset, mode = values[data_preview], values[c["dataset"]], values[c["mode"]]
        data_values = [values[x] for x in data_inputs]
        index = int(evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index)
        try:
            ds, _ = prepare_dataset(dataset, mode, workspace, data_options(data_values))
            row, note = ds[index], ""
        except Exception as e:  # noqa: BLE001 - the shown (shortened) values still say something
            log.debug("reading preview row %s again failed", index, exc_info=True)
            row = shown.iloc[index].to_dict() if isinstance(shown, pd.DataFrame) and index < len(shown) else {}
            note = i18n.text("train.row_clipped", lang, error=e)
        return row_html(row, index + 1, lang, note)

    def folder_choices(dataset) -> dict:
        """A LLaMA-Factory data folder's datasets offered in the dataset list once the folder is given."""
        from backend.data.sources import data_folder_datasets

        names = data_folder_datasets(dataset, workspace)
        offered = [(f"{spec.rsplit('/', 1)[1]} (LLaMA-Factory)", spec) for spec in names]
        return {c["dataset"]: gr.update(choices=offered + dataset_choices(store))} if names else {}

    def on_example(values: dict, request: gr.Request = None):
        """The model's tokenizer and chat template over the first prepared row (loads the tokenizer: on demand)."""
        from backend.data import DatasetError, prepare_dataset
        from backend.data.render import render_first
        from backend.models import ModelError

        lang = i18n.lang_of(request)
        model, dataset, mode = values[c["model"]], values[c["dataset"]], values[c["mode"]]
        data_values = [values[x] for x in data_inputs]
        try:
            options = data_options(data_values)
            ds, info = prepare_dataset(dataset, mode, workspace, options)
            rendered = render_first(ds, info, mode, _tokenizer(_tokenizer_folder(model, workspace),
                                                               options.chat_template))
        except (ConfigError, DatasetError, ModelError) as e:
            return example_html([], error=str(e), lang=lang)
        except Exception as e:  # a template that fails on this data: say so rather than a traceback
            log.exception("rendering the first example failed")
            return example_html([], error=i18n.text("train.template_failed", lang, error=e), lang=lang)
        return example_html(rendered, lang=lang)

    def on_mode(mode, dataset, *switches):
        # a built-in set made for another mode is swapped for one made for this mode, when there is one
        to = builtin_for_mode(dataset, mode, workspace)
        return form.mode_updates(mode, switches) | {swap: {"from": dataset, "to": to} if to else None}

    def on_upload(path, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not path:
            return gr.skip()
        from backend.data import DatasetError, save_upload

        try:
            saved = save_upload(path, workspace)
        except DatasetError as e:
            return {upload: None, message: error_markdown([str(e)], i18n.text("train.upload_refused", lang), lang)}
        return {c["dataset"]: gr.update(choices=dataset_choices(store), value=str(saved)), upload: None,
                message: i18n.text("train.uploaded", lang, name=saved.name)}

    def on_start(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        config = None
        try:
            config = form.config_from(values)
            run = jobs.submit_run(store, config)
        except ConfigError as e:
            # settings refused before submit_run's own check: check the model and dataset too
            errors = e.errors + (source_errors(values, e.errors) if config is None else [])
            gr.Warning(i18n.text("train.cannot_start_warning", lang, errors="; ".join(errors)[:400]))
            return {message: error_markdown(errors, lang=lang), started: None}
        except Exception as e:  # never a traceback in the page; the log has it
            log.exception("starting a run failed")
            return {message: error_markdown([f"{type(e).__name__}: {e}"], i18n.text("train.could_not_start", lang),
                                            lang), started: None}
        html = progress_html(run, lang=lang)
        queued = i18n.text("train.queued", lang) if run.status == "queued" else ""
        return {message: i18n.text("train.started", lang, name=run.name, id=run.id, queued=queued),
                session: TrainSession(run.id, html), status: html, started: run.id}

    def source_errors(values: dict, errors: list[str]) -> list[str]:
        """When other settings are wrong, still check the model and dataset, so one click lists every
        problem (submit_run checks them only once the settings are valid)."""
        data, _ = forms.data_from_values(form.pack(values))
        sources = {k: data[k] for k in ("model", "dataset", "mode")}
        if any(line.split(":", 1)[0] in (*sources, *forms.paths_under("data"), "seed") for line in errors):
            return []
        try:
            # only these are read, and an RL mode alone would not validate (it needs reward sources)
            settings = build_config({"data": data["data"], "seed": data["seed"]})
            preflight.preflight(RunConfig.model_construct(**sources, data=settings.data, seed=settings.seed), workspace)
        except ConfigError as e:
            return e.errors
        except Exception:  # the real start reports these; this is only a courtesy
            log.exception("checking model and dataset failed")
        return []

    def stop_target(sess: TrainSession, view) -> str | None:
        for run_id in (sess.run_id, getattr(view, "run_id", None)):
            if run_id:
                try:
                    if store.get_run(run_id).active:
                        return run_id
                except KeyError:
                    pass
        return None

    def on_stop(sess: TrainSession, view, request: gr.Request = None):
        lang = i18n.lang_of(request)
        run_id = stop_target(sess, view)
        if run_id is None:
            gr.Info(i18n.text("train.nothing_to_stop", lang))
            return {message: i18n.text("train.nothing_to_stop", lang)}
        outcome = jobs.stop_run(store, run_id)
        run = store.get_run(run_id)
        text = (i18n.text("train.stopping", lang, name=run.name) if outcome == "stopping"
                else i18n.text("train.outcome", lang, name=run.name, outcome=status_text(outcome, lang)))
        if sess.run_id != run_id:
            return {message: text}
        html = progress_html(run, lang=lang)
        return {status: html, session: replace(sess, shown_status=html), message: text}

    def on_tick(sess: TrainSession, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not sess.run_id:  # the empty line too, in the page's language (it is built in English)
            html = progress_html(None, empty=i18n.text("train.no_run", lang))
            if html == (sess.shown_status or progress_html(None, empty=i18n.english("train.no_run"))):
                return gr.skip()
            return {status: html, session: replace(sess, shown_status=html)}
        try:
            html = progress_html(store.get_run(sess.run_id), time.time(), lang=lang)
        except KeyError:
            html = progress_html(None, empty=i18n.text("train.gone", lang, id=sess.run_id))
        if html == sess.shown_status:
            return gr.skip()
        return {status: html, session: replace(sess, shown_status=html)}

    def measured_memory(config: RunConfig):
        """The memory estimate, or the ModelError that says why there is none."""
        from backend.models import ModelError

        try:
            return preflight.memory_estimate(config, workspace)
        except ModelError as e:
            return e

    def memory_line(estimate, lang: str) -> str:
        if isinstance(estimate, Exception):
            return memory_markdown(None, why_not=str(estimate), lang=lang)
        return memory_markdown(estimate.summary(i18n.memory_texts(lang)), estimate.fits, lang=lang)

    def measured_hints(config: RunConfig) -> dict:
        """The data's suggestions by setting path ({} when the data is refused)."""
        try:
            return {s.path: s for s in data_suggestions(config, workspace)}
        except Exception:  # noqa: BLE001 - advice only: a dataset the preview refuses says why there
            log.debug("no data suggestions", exc_info=True)
            return {}

    def field_hints(found: dict, lang: str) -> dict:
        """Under each setting the data contradicts, its help then "💡 suggested: …"; every other setting a
        suggestion may name gets its help alone, so none stays once its value agrees, the data changed or the
        settings do not validate. Form events only, never the poll: the measure is kept per model and data."""
        out = {}
        for path in SUGGESTED_PATHS:
            lines = [i18n.setting_text(path, lang)[1]]
            if s := found.get(path):
                lines.append("💡 " + i18n.text(f"train.suggested.{s.key}", lang, value=s.value, **s.params))
            out[c[path]] = gr.update(info="\n".join(filter(None, lines)) or None)  # as the language switch writes it
        return out

    def on_memory(values: dict, request: gr.Request = None):
        try:
            config = form.config_from(values)
        except ConfigError as e:
            lang = i18n.lang_of(request)
            return {memory: memory_markdown(None, why_not=i18n.text("train.fix_first", lang, error=e.errors[0]),
                                            lang=lang)} | field_hints({}, lang)
        estimate, found = measured_memory(config), measured_hints(config)
        # the language is read once the measuring is done: a switch made meanwhile (whose own estimate may finish
        # first) is the one this answer speaks
        lang = i18n.lang_of(request)
        return {memory: memory_line(estimate, lang)} | field_hints(found, lang)

    def on_cli(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        try:
            config = form.config_from(values)
        except ConfigError as e:
            return {message: error_markdown(e.errors, i18n.text("train.cannot_command", lang), lang)}
        return {cli: gr.update(value=cli_command(config, shown_ws), visible=True), message: "",
                memory: memory_line(measured_memory(config), lang)}

    def on_save(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        try:
            path = save_preset(workspace, values[preset_name], form.config_from(values))
        except ConfigError as e:
            return {message: error_markdown(e.errors, i18n.text("train.cannot_save", lang), lang)}
        gr.Info(i18n.text("train.saved_info", lang, name=path.stem))
        return {preset: gr.update(choices=preset_choices(workspace), value=str(path)),
                message: i18n.text("train.saved", lang, name=path.stem, path=path)}

    def on_load(path, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not path:
            return {message: i18n.text("train.choose_preset", lang)}
        try:
            config = load_config(path, only_applicable=False)  # the form keeps other modes' settings
        except ConfigError as e:
            return {message: error_markdown(e.errors, i18n.text("train.cannot_load", lang), lang)}
        return form.updates_from(config, lang) | {message: i18n.text("train.loaded", lang, name=Path(path).stem)}

    def on_check(values: dict, request: gr.Request = None):
        """The reward probe on the settings on screen, with the model the playground keeps loaded (bounded: one
        group per prompt for a few prompts)."""
        from backend.doctor.probe import check_rewards
        from backend.playground import MODELS

        lang = i18n.lang_of(request)
        hidden = {apply_fix: gr.update(visible=False), pending_fix: {}}
        try:
            config = form.config_from(values)
            if not config.spec.online_rl:
                return {reward_check: gr.update(value=i18n.text("doctor.rl_only", lang), visible=True), **hidden}
            preflight.preflight(config, workspace)
            report = check_rewards(config, workspace, loaded=MODELS.get(config.model))
        except ConfigError as e:
            return {reward_check: gr.update(value=error_markdown(e.errors, lang=lang), visible=True), **hidden}
        except Exception as e:  # noqa: BLE001 - never a traceback in the page; the log has it
            log.exception("the reward check failed")
            return {reward_check: gr.update(value=i18n.text("doctor.check_failed", lang,
                                                            error=f"{type(e).__name__}: {e}"), visible=True), **hidden}
        text = report.summary() + "\n\n" + (doctor_render.banner_markdown(report.diagnoses, lang)
                                            or i18n.text("doctor.all_good", lang))
        fix = doctor_render.fixes(report.diagnoses)
        fixable = doctor_render.fixed_config(config, fix) is not None
        return {reward_check: gr.update(value=text, visible=True), apply_fix: gr.update(visible=fixable),
                pending_fix: fix if fixable else {}}

    def on_apply(values: dict, request: gr.Request = None):
        """The reward check's suggested settings into the form."""
        lang = i18n.lang_of(request)
        fix = values[pending_fix]
        try:
            fixed = doctor_render.fixed_config(form.config_from(values), fix)
        except ConfigError as e:
            return {message: error_markdown(e.errors, lang=lang)}
        if fixed is None:
            return {apply_fix: gr.update(visible=False)}
        return form.updates_from(fixed, lang) | {message: i18n.text("doctor.applied", lang, fix=fix_text(fix)),
                                           apply_fix: gr.update(visible=False), pending_fix: {}}

    def refresh():
        return {c["model"]: gr.update(choices=generation_model_choices(store)),
                c["dataset"]: gr.update(choices=dataset_choices(store)),
                preset: gr.update(choices=preset_choices(workspace))}

    # ---- wiring ----

    form_values = set(form.inputs)  # handlers read them by component: form.config_from(values)
    data_inputs = [c[p] for p in DATA_PATHS]
    sources = next(c for c in form.components.values() if isinstance(c, RewardSourcesEditor))
    preview_io = dict(inputs={c["dataset"], c["mode"], *data_inputs, *sources.inputs},
                      outputs=[data_preview, data_format, data_row, memory, c["dataset"], *sources.outputs])
    previewed = gr.on([c["dataset"].change, c["mode"].change, *forms.edit_events(data_inputs)], on_preview,
                      **preview_io, show_progress="minimal", show_progress_on=data_preview)
    # every setting counts for memory. A new dataset or mode (and the data settings) may pre-fill the reward
    # sources (an RL mode's from the dataset): the estimate follows the preview that fills them, never runs beside
    # it, or it reads the sources before them ("add at least one source" next to the one just shown)
    # the estimate first: a hidden-progress event tracks its first output only (app/main.py)
    memory_io = dict(inputs=form_values, outputs=[memory, *(c[p] for p in SUGGESTED_PATHS)])
    previewed.then(on_memory, **memory_io, show_progress="hidden")
    via_preview = {c["dataset"], c["mode"], *data_inputs}
    gr.on([c["model"].change, *forms.edit_events([x for x in form.inputs if x not in via_preview])], on_memory,
          **memory_io, show_progress="hidden", trigger_mode="always_last")
    # a setting shown only with another (reward sources in SFT / DPO / KTO: with eval.generate) follows both
    c["mode"].change(on_mode, [c["mode"], c["dataset"], *form.switches], [*form.mode_outputs(), swap],
                     show_progress="hidden").then(None, [c["dataset"], swap], c["dataset"], js=SWAP_JS,
                                                  show_progress="hidden")
    gr.on([switch.change for switch in form.switches], lambda mode, *on: form.mode_updates(mode, on),
          [c["mode"], *form.switches], form.mode_outputs(), show_progress="hidden")
    data_preview.select(on_row, {data_preview, c["dataset"], c["mode"], *data_inputs}, data_row,
                        show_progress_on=data_row)
    upload.upload(on_upload, upload, [c["dataset"], upload, message])
    start_event = start.click(on_start, form_values, [message, session, status, started], concurrency_limit=None)
    stop.click(on_stop, [session, runs_view], [status, session, message])
    polls.add("train", on_tick, session, [status, session], show_progress="hidden", concurrency_limit=None)
    show_cli.click(on_cli, form_values, [cli, message, memory])
    check.click(on_check, form_values, [reward_check, apply_fix, pending_fix], show_progress_on=reward_check)
    apply_fix.click(on_apply, form_values | {pending_fix}, [*form.outputs, message, apply_fix, pending_fix],
                    show_progress="hidden").then(on_memory, **memory_io, show_progress="hidden")
    show_example.click(on_example, {c["model"], c["dataset"], c["mode"], *data_inputs}, example)
    save_btn.click(on_save, form_values | {preset_name}, [preset, message])
    load_btn.click(on_load, preset, [*form.outputs, message], show_progress_on=message).then(
        on_memory, **memory_io, show_progress="hidden")
    return TrainTab(form=form, session=session, started=started, start_event=start_event,
                    refresh_outputs=[c["model"], c["dataset"], preset], refresh=refresh,
                    preview=(on_preview, preview_io), memory=(on_memory, memory_io), sources=sources,
                    message=message)
