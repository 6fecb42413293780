"""The Train tab: model, dataset (with a preview), mode and settings; Start / Stop; presets; the CLI command.

Handlers are thin: they read the form, call backend functions and format what comes back. What a browser
session started lives in its own gr.State (TrainSession); the run store is the only shared state. The layout is in
app/train_layout.py, what the preview renders in app/train_render.py; handlers here take the TrainUI first and are
bound to it where they are wired.
"""
from __future__ import annotations

import functools
import html
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr
import pandas as pd

from app import doctor_render, forms, i18n
from app.choices import dataset_choices, generation_model_choices, preset_choices
from app.events import Packed, bind
from app.formatting import cli_command, error_markdown, example_html, memory_markdown, progress_html, status_text
from app.reward_editor import RewardSourcesEditor, parse_sources, sources_from_values
from app.tab_polls import TabPolls
from app.train_layout import DATA_PATHS, TrainSession, TrainUI, layout
from app.train_render import column_widths, format_text, row_html
from backend.runs import jobs, preflight
from backend.config import ConfigError, RunConfig, build_config, choices, load_config, set_path, to_yaml
from backend.doctor import fix_text
from backend.doctor.defaults import SUGGESTED_PATHS, data_suggestions
from backend.core.mode_registry import RL_MODES
from backend.rewards import is_suggestion, suggested_sources
from backend.runs.store import RunStore

log = logging.getLogger(__name__)
PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class TrainTab:
    form: forms.SettingsForm
    session: gr.State
    started: gr.State  # the id of a run the last Start created, else None
    start_event: object  # the Start click's dependency, for chaining the Runs tab's follow-up
    refresh_outputs: list
    refresh: Callable[[], dict]  # updates for refresh_outputs (model, dataset and preset choices)
    preview: Callable  # preview(listen, **options) wires the dataset preview after `listen` (`event.then`)
    memory: Callable  # memory(listen, **options) wires the memory estimate and the fields' suggestions: for the
    # page's load event and a language switch (which resets every field's help: this writes them again)
    sources: RewardSourcesEditor  # the reward-sources editor (the playground can copy its rows)
    message: gr.Markdown  # under Start: what the last action said


def save_preset(workspace: Path, name: str, config) -> Path:
    """Write the settings that differ from the defaults to workspace/presets/NAME.yaml."""
    name = (name or "").strip().removesuffix(".yaml")
    if not PRESET_NAME.match(name):
        raise ConfigError([f"preset name {name!r}: use letters, digits, '-', '_' or '.' (at most 64)"])
    path = Path(workspace) / "presets" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# saved from the workbench UI\n{to_yaml(config, only_changed=True)}")
    return path


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


# ---- handlers ----

# Handlers that need the session's language read their inputs as one {component: value} dict: Gradio passes
# `request` to a positional parameter only, never to one after *values (it would stay None: always English).
def on_preview(ui: TrainUI, values: dict, request: gr.Request = None):
    lang = i18n.lang_of(request)
    dataset, mode = values[ui.c["dataset"]], values[ui.c["mode"]]
    data_values, source_values = [values[x] for x in ui.data_inputs], ui.sources.read(values)
    try:
        from backend.data import preview
    except ImportError as e:  # data module missing in a partial checkout
        return {ui.data_preview: pd.DataFrame(), ui.data_format: i18n.text("train.preview_unavailable", lang, error=e)}
    try:
        options = data_options(data_values)
    except ConfigError as e:
        return {ui.data_preview: pd.DataFrame(), ui.data_format: format_text(None, e.errors[0], mode, lang)}
    df, info, error = preview(dataset, mode, workspace=ui.workspace, n=5, options=options)
    text = format_text(info, error, mode, lang)
    hint = f'<div class="wb-dim">{html.escape(i18n.text("train.row_hint", lang))}</div>' if len(df) else ""
    out = {ui.data_preview: gr.update(value=df, column_widths=column_widths(df)), ui.data_row: hint} \
        | folder_choices(ui, dataset)
    current, unreadable = parse_sources(sources_from_values(source_values))
    if info is not None and mode in RL_MODES and not unreadable and is_suggestion(current):
        # an RL run needs a reward: start from one this dataset supports (an earlier suggestion nobody
        # edited follows the dataset; edited sources are never replaced)
        suggested, why = suggested_sources(list(df.columns))  # every column, not only the format's
        out |= ui.sources.updates_for(suggested, lang)
        text += "\n\n" + i18n.text("train.reward_prefilled", lang, why=why)
        if sources_from_values(source_values) != sources_from_values(ui.sources.read(out)):
            # the estimate beside it read the sources before these: it follows this event (see the wiring)
            out[ui.memory] = i18n.text("train.memory_estimating", lang)
    return out | {ui.data_format: text}


def on_row(ui: TrainUI, evt: gr.SelectData, values: dict, request: gr.Request = None):
    """A clicked preview row in full: the cells show each value's start only (the row is read again)."""
    from backend.data import prepare_dataset

    lang = i18n.lang_of(request)
    shown, dataset, mode = values[ui.data_preview], values[ui.c["dataset"]], values[ui.c["mode"]]
    data_values = [values[x] for x in ui.data_inputs]
    index = int(evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index)
    try:
        ds, _ = prepare_dataset(dataset, mode, ui.workspace, data_options(data_values))
        row, note = ds[index], ""
    except Exception as e:  # noqa: BLE001 - the shown (shortened) values still say something
        log.debug("reading preview row %s again failed", index, exc_info=True)
        row = shown.iloc[index].to_dict() if isinstance(shown, pd.DataFrame) and index < len(shown) else {}
        note = i18n.text("train.row_clipped", lang, error=e)
    return row_html(row, index + 1, lang, note)


def folder_choices(ui: TrainUI, dataset) -> dict:
    """A LLaMA-Factory data folder's datasets offered in the dataset list once the folder is given."""
    from backend.data.sources import data_folder_datasets

    names = data_folder_datasets(dataset, ui.workspace)
    offered = [(f"{spec.rsplit('/', 1)[1]} (LLaMA-Factory)", spec) for spec in names]
    return {ui.c["dataset"]: gr.update(choices=offered + dataset_choices(ui.store))} if names else {}


def on_example(ui: TrainUI, values: dict, request: gr.Request = None):
    """The model's tokenizer and chat template over the first prepared row (loads the tokenizer: on demand)."""
    from backend.data import DatasetError, prepare_dataset
    from backend.data.render import render_first
    from backend.models import ModelError

    lang = i18n.lang_of(request)
    model, dataset, mode = values[ui.c["model"]], values[ui.c["dataset"]], values[ui.c["mode"]]
    data_values = [values[x] for x in ui.data_inputs]
    try:
        options = data_options(data_values)
        ds, info = prepare_dataset(dataset, mode, ui.workspace, options)
        rendered = render_first(ds, info, mode, _tokenizer(_tokenizer_folder(model, ui.workspace),
                                                           options.chat_template))
    except (ConfigError, DatasetError, ModelError) as e:
        return example_html([], error=str(e), lang=lang)
    except Exception as e:  # a template that fails on this data: say so rather than a traceback
        log.exception("rendering the first example failed")
        return example_html([], error=i18n.text("train.template_failed", lang, error=e), lang=lang)
    return example_html(rendered, lang=lang)


def on_mode(ui: TrainUI, mode, dataset, *switches):
    # a built-in set made for another mode is swapped for one made for this mode, when there is one
    to = builtin_for_mode(dataset, mode, ui.workspace)
    return ui.form.mode_updates(mode, switches) | {ui.swap: {"from": dataset, "to": to} if to else None}


def on_upload(ui: TrainUI, path, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not path:
        return gr.skip()
    from backend.data import DatasetError, save_upload

    try:
        saved = save_upload(path, ui.workspace)
    except DatasetError as e:
        return {ui.upload: None, ui.message: error_markdown([str(e)], i18n.text("train.upload_refused", lang), lang)}
    return {ui.c["dataset"]: gr.update(choices=dataset_choices(ui.store), value=str(saved)), ui.upload: None,
            ui.message: i18n.text("train.uploaded", lang, name=saved.name)}


def on_start(ui: TrainUI, values: dict, request: gr.Request = None):
    lang = i18n.lang_of(request)
    config = None
    try:
        config = ui.form.config_from(values)
        run = jobs.submit_run(ui.store, config)
    except ConfigError as e:
        # settings refused before submit_run's own check: check the model and dataset too
        errors = e.errors + (source_errors(ui, values, e.errors) if config is None else [])
        gr.Warning(i18n.text("train.cannot_start_warning", lang, errors="; ".join(errors)[:400]))
        return {ui.message: error_markdown(errors, lang=lang), ui.started: None}
    except Exception as e:  # never a traceback in the page; the log has it
        log.exception("starting a run failed")
        return {ui.message: error_markdown([f"{type(e).__name__}: {e}"], i18n.text("train.could_not_start", lang),
                                           lang), ui.started: None}
    html = progress_html(run, lang=lang)
    queued = i18n.text("train.queued", lang) if run.status == "queued" else ""
    return {ui.message: i18n.text("train.started", lang, name=run.name, id=run.id, queued=queued),
            ui.session: TrainSession(run.id, html), ui.status: html, ui.started: run.id}


def source_errors(ui: TrainUI, values: dict, errors: list[str]) -> list[str]:
    """When other settings are wrong, still check the model and dataset, so one click lists every
    problem (submit_run checks them only once the settings are valid)."""
    data, _ = forms.data_from_values(ui.form.pack(values))
    given = {k: data[k] for k in ("model", "dataset", "mode")}
    if any(line.split(":", 1)[0] in (*given, *forms.paths_under("data"), "seed") for line in errors):
        return []
    try:
        # only these are read, and an RL mode alone would not validate (it needs reward sources)
        settings = build_config({"data": data["data"], "seed": data["seed"]})
        preflight.preflight(RunConfig.model_construct(**given, data=settings.data, seed=settings.seed), ui.workspace)
    except ConfigError as e:
        return e.errors
    except Exception:  # the real start reports these; this is only a courtesy
        log.exception("checking model and dataset failed")
    return []


def stop_target(ui: TrainUI, sess: TrainSession, view) -> str | None:
    for run_id in (sess.run_id, getattr(view, "run_id", None)):
        if run_id:
            try:
                if ui.store.get_run(run_id).active:
                    return run_id
            except KeyError:
                pass
    return None


def on_stop(ui: TrainUI, sess: TrainSession, view, request: gr.Request = None):
    lang = i18n.lang_of(request)
    run_id = stop_target(ui, sess, view)
    if run_id is None:
        gr.Info(i18n.text("train.nothing_to_stop", lang))
        return {ui.message: i18n.text("train.nothing_to_stop", lang)}
    outcome = jobs.stop_run(ui.store, run_id)
    run = ui.store.get_run(run_id)
    text = (i18n.text("train.stopping", lang, name=run.name) if outcome == "stopping"
            else i18n.text("train.outcome", lang, name=run.name, outcome=status_text(outcome, lang)))
    if sess.run_id != run_id:
        return {ui.message: text}
    html = progress_html(run, lang=lang)
    return {ui.status: html, ui.session: replace(sess, shown_status=html), ui.message: text}


def on_tick(ui: TrainUI, sess: TrainSession, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not sess.run_id:  # the empty line too, in the page's language (it is built in English)
        html = progress_html(None, empty=i18n.text("train.no_run", lang))
        if html == (sess.shown_status or progress_html(None, empty=i18n.english("train.no_run"))):
            return gr.skip()
        return {ui.status: html, ui.session: replace(sess, shown_status=html)}
    try:
        html = progress_html(ui.store.get_run(sess.run_id), time.time(), lang=lang)
    except KeyError:
        html = progress_html(None, empty=i18n.text("train.gone", lang, id=sess.run_id))
    if html == sess.shown_status:
        return gr.skip()
    return {ui.status: html, ui.session: replace(sess, shown_status=html)}


def measured_memory(ui: TrainUI, config: RunConfig):
    """The memory estimate, or the ModelError that says why there is none."""
    from backend.models import ModelError

    try:
        return preflight.memory_estimate(config, ui.workspace)
    except ModelError as e:
        return e


def memory_line(estimate, lang: str) -> str:
    if isinstance(estimate, Exception):
        return memory_markdown(None, why_not=str(estimate), lang=lang)
    return memory_markdown(estimate.summary(i18n.memory_texts(lang)), estimate.fits, lang=lang)


def measured_hints(ui: TrainUI, config: RunConfig) -> dict:
    """The data's suggestions by setting path ({} when the data is refused)."""
    try:
        return {s.path: s for s in data_suggestions(config, ui.workspace)}
    except Exception:  # noqa: BLE001 - advice only: a dataset the preview refuses says why there
        log.debug("no data suggestions", exc_info=True)
        return {}


def field_hints(ui: TrainUI, found: dict, lang: str) -> dict:
    """Under each setting the data contradicts, its help then "💡 suggested: …"; every other setting a
    suggestion may name gets its help alone, so none stays once its value agrees, the data changed or the
    settings do not validate. Form events only, never the poll: the measure is kept per model and data."""
    out = {}
    for path in SUGGESTED_PATHS:
        lines = [i18n.setting_text(path, lang)[1]]
        if s := found.get(path):
            lines.append("💡 " + i18n.text(f"train.suggested.{s.key}", lang, value=s.value, **s.params))
        out[ui.c[path]] = gr.update(info="\n".join(filter(None, lines)) or None)  # as the language switch writes it
    return out


def on_memory(ui: TrainUI, values: dict, request: gr.Request = None):
    try:
        config = ui.form.config_from(values)
    except ConfigError as e:
        lang = i18n.lang_of(request)
        why = i18n.text("train.fix_first", lang, error=e.errors[0])
        return {ui.memory: memory_markdown(None, why_not=why, lang=lang)} | field_hints(ui, {}, lang)
    estimate, found = measured_memory(ui, config), measured_hints(ui, config)
    # the language is read once the measuring is done: a switch made meanwhile (whose own estimate may finish
    # first) is the one this answer speaks
    lang = i18n.lang_of(request)
    return {ui.memory: memory_line(estimate, lang)} | field_hints(ui, found, lang)


def on_cli(ui: TrainUI, values: dict, request: gr.Request = None):
    lang = i18n.lang_of(request)
    try:
        config = ui.form.config_from(values)
    except ConfigError as e:
        return {ui.message: error_markdown(e.errors, i18n.text("train.cannot_command", lang), lang)}
    return {ui.cli: gr.update(value=cli_command(config, ui.shown_workspace), visible=True), ui.message: "",
            ui.memory: memory_line(measured_memory(ui, config), lang)}


def on_save(ui: TrainUI, values: dict, request: gr.Request = None):
    lang = i18n.lang_of(request)
    try:
        path = save_preset(ui.workspace, values[ui.preset_name], ui.form.config_from(values))
    except ConfigError as e:
        return {ui.message: error_markdown(e.errors, i18n.text("train.cannot_save", lang), lang)}
    gr.Info(i18n.text("train.saved_info", lang, name=path.stem))
    return {ui.preset: gr.update(choices=preset_choices(ui.workspace), value=str(path)),
            ui.message: i18n.text("train.saved", lang, name=path.stem, path=path)}


def on_load(ui: TrainUI, path, request: gr.Request = None):
    lang = i18n.lang_of(request)
    if not path:
        return {ui.message: i18n.text("train.choose_preset", lang)}
    try:
        config = load_config(path, only_applicable=False)  # the form keeps other modes' settings
    except ConfigError as e:
        return {ui.message: error_markdown(e.errors, i18n.text("train.cannot_load", lang), lang)}
    return ui.form.updates_from(config, lang) | {ui.message: i18n.text("train.loaded", lang, name=Path(path).stem)}


def on_check(ui: TrainUI, values: dict, request: gr.Request = None):
    """The reward probe on the settings on screen, with the model the playground keeps loaded (bounded: one
    group per prompt for a few prompts)."""
    from backend.doctor.probe import check_rewards
    from backend.playground import MODELS

    lang = i18n.lang_of(request)
    hidden = {ui.apply_fix: gr.update(visible=False), ui.pending_fix: {}}
    try:
        config = ui.form.config_from(values)
        if not config.spec.online_rl:
            return {ui.reward_check: gr.update(value=i18n.text("doctor.rl_only", lang), visible=True), **hidden}
        preflight.preflight(config, ui.workspace)
        report = check_rewards(config, ui.workspace, loaded=MODELS.get(config.model))
    except ConfigError as e:
        return {ui.reward_check: gr.update(value=error_markdown(e.errors, lang=lang), visible=True), **hidden}
    except Exception as e:  # noqa: BLE001 - never a traceback in the page; the log has it
        log.exception("the reward check failed")
        failed = i18n.text("doctor.check_failed", lang, error=f"{type(e).__name__}: {e}")
        return {ui.reward_check: gr.update(value=failed, visible=True), **hidden}
    text = report.summary() + "\n\n" + (doctor_render.banner_markdown(report.diagnoses, lang)
                                        or i18n.text("doctor.all_good", lang))
    fix = doctor_render.fixes(report.diagnoses)
    fixable = doctor_render.fixed_config(config, fix) is not None
    return {ui.reward_check: gr.update(value=text, visible=True), ui.apply_fix: gr.update(visible=fixable),
            ui.pending_fix: fix if fixable else {}}


def on_apply(ui: TrainUI, values: dict, request: gr.Request = None):
    """The reward check's suggested settings into the form."""
    lang = i18n.lang_of(request)
    fix = values[ui.pending_fix]
    try:
        fixed = doctor_render.fixed_config(ui.form.config_from(values), fix)
    except ConfigError as e:
        return {ui.message: error_markdown(e.errors, lang=lang)}
    if fixed is None:
        return {ui.apply_fix: gr.update(visible=False)}
    return ui.form.updates_from(fixed, lang) | {ui.message: i18n.text("doctor.applied", lang, fix=fix_text(fix)),
                                                ui.apply_fix: gr.update(visible=False), ui.pending_fix: {}}


def refresh(ui: TrainUI):
    return {ui.c["model"]: gr.update(choices=generation_model_choices(ui.store)),
            ui.c["dataset"]: gr.update(choices=dataset_choices(ui.store)),
            ui.preset: gr.update(choices=preset_choices(ui.workspace))}


# ---- wiring ----

def wire(ui: TrainUI, polls: TabPolls, runs_view: gr.State) -> TrainTab:
    c, form, sources, form_values = ui.c, ui.form, ui.sources, ui.form_values
    # the form's settings reach the server packed into one box (app/events.Packed): ~190 inputs, tracked one by
    # one, made every later event cost the browser a lookup of each in the whole page
    settings, data = Packed(form_values), Packed({c["dataset"], c["mode"], *ui.data_inputs, *sources.inputs})
    memory_outputs = [ui.memory, *(c[p] for p in SUGGESTED_PATHS)]

    def preview(listen, **options):
        return data.on(listen, bind(on_preview, ui), [ui.data_preview, ui.data_format, ui.data_row, ui.memory,
                                                      c["dataset"], *sources.outputs], **options)

    def memory(listen, **options):
        return settings.on(listen, bind(on_memory, ui), memory_outputs, show_progress="hidden", **options)

    previewed = preview(functools.partial(gr.on, [c["dataset"].change, c["mode"].change,
                                                  *forms.edit_events(ui.data_inputs)]),
                        show_progress="minimal", show_progress_on=ui.data_preview, trigger_mode="always_last")
    # every setting counts for memory. A new dataset or mode (and the data settings) may pre-fill the reward
    # sources (an RL mode's from the dataset): the estimate follows the preview that fills them, never runs beside
    # it, or it reads the sources before them ("add at least one source" next to the one just shown)
    memory(previewed.then)
    via_preview = {c["dataset"], c["mode"], *ui.data_inputs}
    memory(functools.partial(gr.on, [c["model"].change, *forms.edit_events([x for x in form.inputs
                                                                            if x not in via_preview])]),
           trigger_mode="always_last")
    # a setting shown only with another (reward sources in SFT / DPO / KTO: with eval.generate) follows both
    c["mode"].change(bind(on_mode, ui), [c["mode"], c["dataset"], *form.switches], [*form.mode_outputs(), ui.swap],
                     show_progress="hidden").then(None, [c["dataset"], ui.swap], c["dataset"], js=SWAP_JS,
                                                  show_progress="hidden")
    gr.on([switch.change for switch in form.switches], lambda mode, *on: form.mode_updates(mode, on),
          [c["mode"], *form.switches], form.mode_outputs(), show_progress="hidden")
    ui.data_preview.select(bind(on_row, ui), {ui.data_preview, c["dataset"], c["mode"], *ui.data_inputs},
                           ui.data_row, show_progress_on=ui.data_row)
    ui.upload.upload(bind(on_upload, ui), ui.upload, [c["dataset"], ui.upload, ui.message])
    start_event = settings.on(ui.start.click, bind(on_start, ui), [ui.message, ui.session, ui.status, ui.started],
                              concurrency_limit=None)
    ui.stop.click(bind(on_stop, ui), [ui.session, runs_view], [ui.status, ui.session, ui.message])
    polls.add("train", bind(on_tick, ui), ui.session, [ui.status, ui.session], show_progress="hidden",
              concurrency_limit=None)
    settings.on(ui.show_cli.click, bind(on_cli, ui), [ui.cli, ui.message, ui.memory])
    settings.on(ui.check.click, bind(on_check, ui), [ui.reward_check, ui.apply_fix, ui.pending_fix],
                show_progress_on=ui.reward_check)
    memory(Packed(form_values | {ui.pending_fix}).on(ui.apply_fix.click, bind(on_apply, ui),
                                                     [*form.outputs, ui.message, ui.apply_fix, ui.pending_fix],
                                                     show_progress="hidden").then)
    ui.show_example.click(bind(on_example, ui), {c["model"], c["dataset"], c["mode"], *ui.data_inputs}, ui.example)
    Packed(form_values | {ui.preset_name}).on(ui.save_btn.click, bind(on_save, ui), [ui.preset, ui.message])
    memory(ui.load_btn.click(bind(on_load, ui), ui.preset, [*form.outputs, ui.message],
                             show_progress_on=ui.message).then)
    return TrainTab(form=form, session=ui.session, started=ui.started, start_event=start_event,
                    refresh_outputs=[c["model"], c["dataset"], ui.preset], refresh=bind(refresh, ui),
                    preview=preview, memory=memory, sources=sources,
                    message=ui.message)


def build(store: RunStore, polls: TabPolls, runs_view: gr.State, words=None) -> TrainTab:
    """`words` (an i18n.Translatable) is given this tab's settings and words to translate."""
    return wire(layout(store, words), polls, runs_view)
