"""The Reward playground tab: reward sources tried on a few completions before a run trains with them.

Pick sources (the same editor as the Train tab, or a copy of its rows), a dataset and a few of its prompts,
then generate completions with a model or paste your own, and Score: a table of every completion's score
per source and total, a per-source summary, and warnings about sources that would teach nothing.
The logic is in backend/playground.py; handlers here only read the page and format what comes back.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from app import forms, i18n, reward_editor
from app.events import Packed
from app.choices import REPO_PRESETS, dataset_choices, model_choices
from app.formatting import error_markdown, score_table_widths
from app.reward_editor import RewardSourcesEditor
from backend import playground
from backend.config import ConfigError, load_config
from backend.runs.store import RunStore

log = logging.getLogger(__name__)
DEFAULT_DATASET = "demo-math"
DEFAULT_PROMPTS = 4
EXAMPLE_PRESET = REPO_PRESETS / "grpo_demo.yaml"  # its sources fit demo-math: the tab starts ready to score


@dataclass
class PlaygroundTab:
    sources: RewardSourcesEditor
    load: tuple  # (fn, {inputs, outputs}) that fills the prompt list, for the page's load event


def default_sources() -> list:
    try:
        return list(load_config(EXAMPLE_PRESET).reward_sources)
    except (ConfigError, OSError):
        return []


def prompts_html(rows: list[playground.PromptRow], limit: int = 160) -> str:
    items = []
    for r in rows:
        text = " ".join(r.text.split())
        text = text if len(text) <= limit else text[:limit - 1] + "…"
        extra = ", ".join(f"{k}: {str(v)[:40]}" for k, v in r.columns.items())
        items.append(f'<li value="{r.index}">{html.escape(text)}'
                     + (f' <span class="wb-dim">({html.escape(extra)})</span>' if extra else "") + "</li>")
    return f'<ol class="wb-prompts">{"".join(items)}</ol>'


def _score_cell(value) -> str:
    return "–" if value is None else f"{value:.4g}"


def result_frame(result: playground.PlaygroundResult, lang: str = i18n.DEFAULT) -> pd.DataFrame:
    names = [s.name for s in result.stats]
    rows = [[r.prompt, r.completion, *[_score_cell(r.scores[n]) for n in names], _score_cell(r.total)]
            for r in result.rows]
    return pd.DataFrame(rows, columns=[i18n.text("col.prompt", lang), i18n.text("col.completion", lang), *names,
                                       i18n.text("col.total", lang)])


def summary_markdown(result: playground.PlaygroundResult, lang: str = i18n.DEFAULT) -> str:
    """The app's words in `lang`; the per-source line and the warnings are the backend's, in English."""
    lines = [i18n.text("play.scored", lang, n=len(result.rows)) + " "
             + playground.summary_line(result.stats, result.total)]
    if result.penalty is not None:
        lines += ["", i18n.text("play.penalty", lang, lam=result.lam, penalty=result.penalty)]
    if result.warnings:
        lines += [""] + [f"- ⚠ {w}" for w in result.warnings]
    else:
        lines += ["", i18n.text("play.all_vary", lang)]
    return "\n".join(lines)


def build(store: RunStore, train_sources: RewardSourcesEditor | None = None, words=None) -> PlaygroundTab:
    """The tab's layout and events; `words` (an i18n.Translatable) is given its words."""
    words = i18n.given(words)
    t = words.add
    workspace = store.workspace
    t(gr.Markdown(elem_classes=["wb-intro"]), "play.intro", "value")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=420):
            with gr.Row(equal_height=True):
                t(gr.Markdown(elem_classes=["wb-section"]), "play.sources", "value", bold=True)
                use_train = t(gr.Button(elem_id="playground-use-train", size="sm", visible=train_sources is not None,
                                        scale=0, min_width=220), "common.use_train_sources", "value")
            editor = reward_editor.build(prefix="playground-reward", sources=default_sources(),
                                         container_id="playground-sources", words=words)
        with gr.Column(scale=2, min_width=340):
            t(gr.Markdown(elem_classes=["wb-section"]), "play.prompts", "value", bold=True)
            with gr.Row(equal_height=True):
                dataset = t(gr.Dropdown(choices=dataset_choices(store), value=DEFAULT_DATASET, allow_custom_value=True,
                                        filterable=True, elem_id="playground-dataset", scale=3, min_width=180),
                            "common.dataset")
                first = t(gr.Number(value=1, minimum=1, precision=0, elem_id="playground-first", scale=1,
                                    min_width=90), "play.first")
                count = t(gr.Number(value=DEFAULT_PROMPTS, minimum=1, maximum=playground.MAX_PROMPTS, precision=0,
                                    elem_id="playground-count", scale=1, min_width=90), "play.count")
            prompt_list = gr.HTML("", elem_id="playground-prompts")
            t(gr.Markdown(elem_classes=["wb-section"]), "play.completions", "value", bold=True)
            with t(gr.Accordion(open=True, elem_id="playground-generation"), "play.generate_with"):
                with gr.Row(equal_height=True):
                    model = _like("model", words, choices=model_choices(store), allow_custom_value=True,
                                  filterable=True, elem_id="playground-model", scale=3)
                with gr.Row(equal_height=True):
                    num = _like("rl.num_generations", words, elem_id="playground-num-completions", minimum=1,
                                info="play.num_help")
                    max_new = _like("rl.max_completion_length", words, elem_id="playground-max-new-tokens",
                                    label="common.max_new_tokens", maximum=4096, info="play.max_new_help")
                    temperature = _like("rl.temperature", words, elem_id="playground-temperature", minimum=0,
                                        info="play.temperature_help")
                tools = forms.tool_controls(words, "playground")  # answers through calls, as GRPO with tools
                generate = t(gr.Button(elem_id="playground-generate", variant="secondary"), "play.generate", "value")
                status = gr.Markdown("", elem_id="playground-status")
            completions = t(gr.Textbox(lines=6, max_lines=16, elem_id="playground-completions",
                                       placeholder="<answer>50464</answer>\n<answer>146</answer>\n…"),
                            "play.completions", info="play.completions_help", fmt={"sep": playground.SEPARATOR})
            with gr.Row(equal_height=True):
                lam = _like("constraint.lambda_init", words, elem_id="playground-lambda", label="play.lambda",
                            info="play.lambda_help", scale=1)
                score = t(gr.Button(variant="primary", elem_id="playground-score", scale=3), "play.score", "value")
    summary = t(gr.Markdown(elem_id="playground-summary"), "play.summary_empty", "value")
    table = gr.Dataframe(pd.DataFrame(columns=["prompt", "completion", "total"]), interactive=False, wrap=True,
                         max_height=520, elem_id="playground-table", show_label=False)

    # ---- handlers ----

    def on_prompts(spec, first_row, n):
        try:
            return prompts_html(playground.select_prompts(spec, workspace, first_row, n))
        except ValueError as e:  # PlaygroundError, DatasetError
            return f'<div class="wb-help-error">{html.escape(str(e))}</div>'

    def on_generate(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        try:
            prompts = playground.select_prompts(values[dataset], workspace, values[first], values[count])
            temp = values[temperature]
            listed, template, turns, error = tools.read(*(values[c] for c in tools.components))
            if error:
                raise playground.PlaygroundError(error)
            setting = playground.ToolSetting(listed, template, turns, workspace) if listed else None
            steps = playground.generate_completions([p.prompt for p in prompts], values[model], values[num] or 1,
                                                    values[max_new] or 1, 1.0 if temp is None else temp,
                                                    tools=setting)
            for p in steps:
                done = p.done == p.total and p.completions
                text = p.message + (i18n.text("play.now_score", lang) if done else "…")
                yield {status: text} | ({completions: playground.join_completions(p.completions)}
                                        if p.completions else {})
        except ValueError as e:  # PlaygroundError, DatasetError, ModelError
            yield {status: error_markdown([str(e)], i18n.text("play.cannot_generate", lang), lang)}
        except Exception as e:  # never a traceback in the page; the log has it
            log.exception("generating completions failed")
            yield {status: error_markdown([f"{type(e).__name__}: {e}"], i18n.text("chat.generation_failed", lang),
                                          lang)}

    def on_model(model_spec, request: gr.Request = None):
        if playground.MODELS.release(keep=model_spec):
            return i18n.text("play.released", i18n.lang_of(request))
        return gr.skip()

    def on_score(values: dict, request: gr.Request = None):
        lang = i18n.lang_of(request)
        cannot = i18n.text("chat.cannot_score", lang)
        configs, errors = reward_editor.configs_from_values(editor.read(values))
        if errors:
            return {summary: error_markdown(errors, cannot, lang)}
        try:
            from backend.rewards import validate_sources

            prompts = playground.select_prompts(values[dataset], workspace, values[first], values[count])
            texts = playground.split_completions(values[completions])
            groups = playground.assign_completions(len(texts), len(prompts))
            columns = ["prompt", *prompts[0].columns] if prompts else []
            if problems := validate_sources(configs, columns, workspace):
                return {summary: error_markdown(problems, cannot, lang)}
            result = playground.score(configs, prompts, texts, workspace, groups, lam=values[lam] or 0.0)
        except ValueError as e:  # PlaygroundError, DatasetError, RewardSourceError
            return {summary: error_markdown([str(e)], cannot, lang)}
        except Exception as e:
            log.exception("scoring completions failed")
            return {summary: error_markdown([f"{type(e).__name__}: {e}"], i18n.text("chat.scoring_failed", lang), lang)}
        widths = score_table_widths(len(result.stats), step_column=False)
        return {summary: summary_markdown(result, lang),
                table: gr.update(value=result_frame(result, lang), column_widths=widths)}

    # ---- wiring ----

    prompt_io = dict(inputs=[dataset, first, count], outputs=prompt_list)
    gr.on([dataset.change, first.change, count.change], on_prompts, **prompt_io, show_progress="hidden",
          trigger_mode="always_last")
    generate.click(on_generate, {dataset, first, count, model, num, max_new, temperature, *tools.components},
                   [status, completions],
                   concurrency_limit=1, concurrency_id="playground-generate")
    model.change(on_model, model, status, show_progress="hidden")
    Packed({dataset, first, count, completions, lam, *editor.inputs}).on(score.click, on_score, [summary, table])
    if train_sources is not None:
        def on_use_train(values: dict, request: gr.Request = None):
            return editor.copy_from(train_sources.read(values), i18n.lang_of(request))

        Packed(set(train_sources.inputs)).on(use_train.click, on_use_train, editor.outputs, show_progress="hidden")
    return PlaygroundTab(sources=editor, load=(on_prompts, prompt_io))


def _like(path: str, words, label: str | None = None, info: str | None = None, **overrides) -> gr.Component:
    """A control with the label, default and range of the run setting it mirrors; `label` (a UI key) names it
    otherwise, `info` (a UI key) is its help, if any."""
    overrides.setdefault("min_width", 110)
    component = forms.build_component(path, visible=True, info=None, **overrides)
    words.add(component, label or (lambda lang: i18n.setting_text(path, lang)[0]))
    return words.add(component, info=info) if info else component
