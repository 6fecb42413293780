"""The Train tab's layout: the settings form and every control beside it, with the elem_ids the tests rely on,
gathered in a TrainUI so handlers name the components they read and update (app/train_tab.py wires them)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from app import forms, i18n
from app.choices import UPLOAD_TYPES, dataset_choices, generation_model_choices, preset_choices
from app.formatting import progress_html
from app.reward_editor import RewardSourcesEditor
from app.train_render import PREVIEW_CHARS
from backend.config import choices
from backend.modes import available_modes
from backend.runs.store import RunStore, default_workspace

DATA_PATHS = [*forms.paths_under("data"), "seed"]  # what the preview reads besides the dataset and mode


@dataclass
class TrainSession:
    """Per browser session: the run this tab started, and the status last sent to the page."""

    run_id: str | None = None
    shown_status: str | None = None


@dataclass
class TrainUI:
    """The tab's components, and what its handlers reach beyond them."""
    store: RunStore
    c: dict  # setting path -> its component (the reward sources: their editor)
    form: forms.SettingsForm
    sources: RewardSourcesEditor
    session: gr.State  # a TrainSession
    pending_fix: gr.State  # the last reward check's suggested settings, for "Apply"
    started: gr.State  # the id of a run the last Start created, else None
    # {"from": dataset, "to": the built-in set for the mode}, from the server; the browser swaps only while the field
    # still shows "from" (a path typed while the answer was on its way stays)
    swap: gr.JSON
    upload: gr.File
    preset: gr.Dropdown
    load_btn: gr.Button
    preset_name: gr.Textbox
    save_btn: gr.Button
    start: gr.Button
    stop: gr.Button
    memory: gr.Markdown
    status: gr.HTML
    message: gr.Markdown
    data_format: gr.Markdown
    data_preview: gr.Dataframe
    data_row: gr.HTML  # a clicked row in full (the cells show the start)
    show_example: gr.Button
    example: gr.HTML
    check: gr.Button
    apply_fix: gr.Button
    reward_check: gr.Markdown
    show_cli: gr.Button
    cli: gr.Code

    @property
    def workspace(self) -> Path:
        return self.store.workspace

    @property
    def shown_workspace(self) -> Path | None:
        """The workspace as the CLI command names it: None for the default one."""
        return None if self.workspace == default_workspace() else self.workspace

    @property
    def data_inputs(self) -> list:
        return [self.c[p] for p in DATA_PATHS]

    @property
    def form_values(self) -> set:
        """Every setting: handlers read them by component (form.config_from(values))."""
        return set(self.form.inputs)


def mode_choices() -> list[str]:
    """The schema's modes that have a trainer yet (the list grows as mode modules are added)."""
    return [m for m in choices(forms.FIELDS["mode"]) if m in available_modes()]


def layout(store: RunStore, words=None) -> TrainUI:
    """`words` (an i18n.Translatable) is given this tab's settings and words to translate."""
    words = i18n.given(words)
    session, pending_fix, started = gr.State(TrainSession()), gr.State({}), gr.State(None)
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
                    preset = words.add(gr.Dropdown(choices=preset_choices(store.workspace), value=None,
                                                   elem_id="preset", scale=3), "train.preset")
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
            data_row = gr.HTML("", elem_id="dataset-row")
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
    sources = next(x for x in form.components.values() if isinstance(x, RewardSourcesEditor))
    return TrainUI(store=store, c=c, form=form, sources=sources, session=session, pending_fix=pending_fix,
                   started=started, swap=swap, upload=upload, preset=preset, load_btn=load_btn,
                   preset_name=preset_name, save_btn=save_btn, start=start, stop=stop, memory=memory, status=status,
                   message=message, data_format=data_format, data_preview=data_preview, data_row=data_row,
                   show_example=show_example, example=example, check=check, apply_fix=apply_fix,
                   reward_check=reward_check, show_cli=show_cli, cli=cli)
