"""The Evaluate tab: does a run help? Pick models (the base, runs, checkpoints, exports), a set and scorers, and
start an evaluation; it runs in the background like a run (closing the page never stops it), and this tab
follows it: a progress bar saying what it is doing, the line under Start following it to its end, the results
table with 95% intervals and win rates (said what they are), the examples that changed (one card each, A and B
side by side), and the predictions to download. Next to the set, a note says what it is to the chosen runs (their
held-out rows, or the data they trained on). The work is backend/evals/; handlers here read the form and format
results.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass

import gradio as gr

from app import i18n
from app.forms import ToolControls, tool_controls
from app.choices import dataset_choices, generation_model_choices
from app.eval_render import (EXAMPLES_CSS, dataset_note, eval_choices, examples_html, model_b_choices,
                             parse_scorer_lines, prefill, progress_html, results_frame, results_widths,
                             status_message, win_figure, win_note)
from app.formatting import error_markdown, status_text
from app.tab_polls import TabPolls
from backend import evals
from backend.runs.checkpoints import checkpoints
from backend.runs.store import RUN_PREFIX, RunStore
from backend.tools.spec import BUILTIN_ENVIRONMENTS

log = logging.getLogger(__name__)
GEN = evals.Generation()  # the form's defaults are the schema's


@dataclass
class EvalTab:
    models: gr.Dropdown
    dataset: gr.Dropdown
    scorers: gr.Textbox
    max_new_tokens: gr.Number
    tools: ToolControls
    environment: gr.Dropdown
    select: gr.Dropdown


def model_options(store: RunStore, lang: str = i18n.DEFAULT) -> list[tuple[str, str]]:
    """The base, every model that writes answers, then each ended run's checkpoints (run:ID@STEP): how a run
    did part-way, e.g. before it overfitted."""
    out = [(i18n.text("eval.base_choice", lang), evals.BASE)] + generation_model_choices(store)
    for run in store.list_runs():
        if run.active or not run.config.spec.writes_answers:
            continue
        out += [(i18n.text("eval.checkpoint_choice", lang, name=run.name, step=step, id=run.id),
                 f"{RUN_PREFIX}{run.id}@{step}") for step, _ in checkpoints(store, run.id)]
    return out


def heldout_choices(store: RunStore, lang: str = i18n.DEFAULT) -> list[tuple[str, str]]:
    return [(i18n.text("eval.heldout_choice", lang, name=r.name, id=r.id), f"heldout:{r.id}")
            for r in store.list_runs() if r.config.eval.split > 0]


def dataset_options(store: RunStore, lang: str = i18n.DEFAULT) -> list[tuple[str, str]]:
    return heldout_choices(store, lang) + dataset_choices(store, labels=False)


def build(store: RunStore, polls: TabPolls, words=None) -> EvalTab:
    """The tab's layout and events; `words` (an i18n.Translatable) is given its words."""
    t = i18n.given(words).add
    t(gr.Markdown(elem_classes=["wb-intro"]), "eval.intro", "value")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2):
            models = t(gr.Dropdown(value=[], multiselect=True, allow_custom_value=True, elem_id="eval-models"),
                       "eval.models", choices=lambda lang: model_options(store, lang))
            dataset = t(gr.Dropdown(value="demo-math", allow_custom_value=True, elem_id="eval-dataset"),
                        "eval.dataset", choices=lambda lang: dataset_options(store, lang))
            note = gr.HTML("", elem_id="eval-dataset-note")
            with gr.Row():
                prompt_column = t(gr.Textbox(elem_id="eval-prompt-column"), "eval.prompt_column",
                                  placeholder="eval.auto")
                reference_column = t(gr.Textbox(elem_id="eval-reference-column"), "eval.reference_column",
                                     placeholder="eval.auto")
            scorers = t(gr.Textbox(value="numeric_match:answer", lines=3, elem_id="eval-scorers"), "eval.scorers",
                        info="eval.scorers_help")
            with t(gr.Accordion(open=False), "eval.generation"):
                with gr.Row():
                    limit = t(gr.Number(value=32, precision=0, elem_id="eval-limit"), "eval.limit")
                    max_new_tokens = t(gr.Number(value=GEN.max_new_tokens, precision=0, elem_id="eval-max-new-tokens"),
                                       "common.max_new_tokens")
                    batch_size = t(gr.Number(value=GEN.batch_size, precision=0, elem_id="eval-batch-size"),
                                   "eval.batch_size")
                with gr.Row():
                    sample = t(gr.Checkbox(value=GEN.do_sample), "eval.sample")
                    temperature = t(gr.Number(value=GEN.temperature), "common.temperature")
                    top_p = t(gr.Number(value=GEN.top_p), "common.top_p")
                    samples = t(gr.Number(value=GEN.samples, precision=0), "eval.samples")
                    seed = t(gr.Number(value=GEN.seed, precision=0), "common.seed")
                tools = tool_controls(i18n.given(words), "eval")  # a GRPO run's, filled in by its Evaluate
                environment = t(gr.Dropdown(choices=sorted(BUILTIN_ENVIRONMENTS), value="", allow_custom_value=True,
                                            filterable=True, elem_id="eval-environment"), "eval.environment",
                                info="eval.environment_help")
            name = t(gr.Textbox(elem_id="eval-name"), "eval.name")
            with gr.Row():
                start = t(gr.Button(variant="primary", elem_id="eval-start"), "eval.start", "value")
                stop = t(gr.Button(variant="stop", elem_id="eval-stop"), "common.stop", "value")
            message = gr.Markdown("", elem_id="eval-message")
        with gr.Column(scale=3):
            select = t(gr.Dropdown(choices=eval_choices(store), value=None, elem_id="eval-select"), "eval.select")
            progress = gr.HTML(progress_html(None), elem_id="eval-progress")
            results = t(gr.Dataframe(interactive=False, wrap=True, elem_id="eval-results"), "eval.results")
            explained = gr.Markdown("", elem_id="eval-win-note", elem_classes=["wb-help"])
            wins = gr.Plot(show_label=False, elem_id="eval-wins")
            with gr.Row():
                category = t(gr.Radio(list(evals.CATEGORIES), value="all", elem_id="eval-category"), "eval.examples",
                             choices=[(f"eval.category.{c.replace(' ', '_')}", c) for c in evals.CATEGORIES])
                other = t(gr.Dropdown(choices=[], value=None, elem_id="eval-other"), "eval.model_b")
            table = gr.HTML("", css_template=EXAMPLES_CSS, elem_id="eval-examples")
            with gr.Row():
                jsonl = t(gr.Button(elem_id="eval-download-jsonl"), "eval.predictions_jsonl", "value")
                parquet = t(gr.Button(elem_id="eval-download-parquet"), "eval.predictions_parquet", "value")
            file = t(gr.File(interactive=False, visible=False, elem_id="eval-file"), "common.download")
    shown = gr.State(None)  # (id, status, done, ...) last rendered: the poll skips an unchanged evaluation
    announced = gr.State(None)  # the evaluation the line under Start is about: it follows it to its end

    def on_start(models_v, dataset_v, prompt_v, ref_v, scorers_v, limit_v, mnt, bs, sample_v, t, p, k_v, seed_v,
                 tools_v, template_v, turns_v, environment_v, name_v, request: gr.Request = None):
        lang = i18n.lang_of(request)
        cannot = i18n.text("eval.cannot_start", lang)
        listed, template, turns, tools_error = tools.read(tools_v, template_v, turns_v)
        if tools_error:
            return {message: error_markdown([tools_error], cannot, lang), announced: None}
        try:
            data = {"name": name_v or "", "models": list(models_v or []), "dataset": dataset_v or "",
                    "prompt_column": prompt_v or "", "reference_column": ref_v or "",
                    "scorers": parse_scorer_lines(scorers_v), "limit": int(limit_v) if limit_v else None,
                    # an emptied box falls back to the schema's default (backend/evals/spec.py)
                    "generation": {k: v for k, v in {"max_new_tokens": mnt, "batch_size": bs, "do_sample": sample_v,
                                                     "temperature": t, "top_p": p, "samples": k_v,
                                                     "seed": seed_v}.items() if v is not None},
                    "tools": listed, "chat_template": template, "max_tool_calling_iterations": turns,
                    "environment": (environment_v or "").strip()}
            if not data["models"]:
                raise evals.EvalError("models: choose at least one model (e.g. base and a run)")
            e = evals.submit_eval(store, evals.build_spec(data))
        except evals.EvalError as err:
            return {message: error_markdown(err.errors, cannot, lang), announced: None}
        except ValueError as err:
            return {message: error_markdown([str(err)], cannot, lang), announced: None}
        except Exception as err:  # never a traceback in the page; the log has it
            log.exception("starting an evaluation failed")
            return {message: error_markdown([html.escape(f"{type(err).__name__}: {err}")],
                                                  i18n.text("eval.could_not_start", lang), lang), announced: None}
        return {message: status_message(e, lang), announced: e.id,
                select: gr.update(choices=eval_choices(store), value=e.id)}

    def render(eval_id, category_v, other_v, last, about=None, lang=i18n.DEFAULT):
        if not eval_id:
            return {progress: progress_html(None, lang), shown: None}
        try:
            e = evals.get_eval(store, eval_id)
        except KeyError:
            return {progress: progress_html(None, lang), shown: None}
        key = (e.id, e.status, e.done, e.message, category_v, other_v, lang)
        if key == last:
            return {shown: last}
        rows = evals.answers(store, e.id)
        summary = evals.summary_of(store, e, rows)
        choices = model_b_choices(e)
        b = other_v if other_v in {v for _, v in choices} else (choices[0][1] if choices else 1)
        frame = results_frame(summary, lang)
        # the line under Start follows the evaluation it started (and only that one)
        said = {message: status_message(e, lang)} if about == e.id else {}
        return {progress: progress_html(e, lang),
                results: gr.update(value=frame, column_widths=results_widths(frame)),
                explained: win_note(summary, lang),
                wins: win_figure(summary, lang),
                other: gr.update(choices=choices, value=b if choices else None),
                table: examples_html(rows, summary, category_v, b, lang), shown: key, **said}

    def on_view(eval_id, category_v, other_v, about, request: gr.Request = None):
        return render(eval_id, category_v, other_v, None, about, i18n.lang_of(request))

    def on_note(models_v, dataset_v, request: gr.Request = None):
        return dataset_note(store, models_v, dataset_v, i18n.lang_of(request))

    def on_stop(eval_id, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not eval_id:
            return {message: i18n.text("eval.select_first", lang)}
        outcome = evals.stop_eval(store, eval_id)
        return {message: i18n.text("eval.stopped", lang, id=eval_id, outcome=status_text(outcome, lang)),
                announced: None}

    def poll(eval_id, category_v, other_v, last, about, request: gr.Request = None):
        lang = i18n.lang_of(request)
        if not eval_id:  # "No evaluation selected", once per language (the page is built in English)
            return {shown: last} if last == ("", lang) else {progress: progress_html(None, lang), shown: ("", lang)}
        # a finished evaluation is drawn once, unless the session's language changed since
        if last and last[0] == eval_id and last[1] in evals.FINAL and last[-1] == lang:
            return {shown: last}
        return render(eval_id, category_v, other_v, last, about, lang)

    def download(kind):
        def handler(eval_id, request: gr.Request = None):
            lang = i18n.lang_of(request)
            if not eval_id:
                return {message: i18n.text("eval.select_first", lang), file: gr.update(visible=False)}
            e = evals.get_eval(store, eval_id)
            out = store.workspace / "evals" / f"{e.id}-predictions.{kind}"
            evals.write_predictions(evals.answers(store, e.id), e.info.get("models") or e.spec.models, out)
            return {file: gr.update(value=str(out), visible=True), message: i18n.text("eval.written", lang, path=out),
                    announced: None}
        return handler

    view_outputs = [progress, results, explained, wins, other, table, shown, message]
    start.click(on_start, [models, dataset, prompt_column, reference_column, scorers, limit, max_new_tokens,
                           batch_size, sample, temperature, top_p, samples, seed, *tools.components, environment,
                           name],
                [message, select, announced])
    stop.click(on_stop, select, [message, announced])
    for trigger in (select.change, category.change, other.input):
        trigger(on_view, [select, category, other, announced], view_outputs, show_progress="hidden")
    polls.add("evaluate", poll, [select, category, other, shown, announced], view_outputs, show_progress="hidden")
    # the note next to the set: on either field's change (an "Evaluate" from a run fills both), and once more
    # when the tab is opened or the language changes
    for trigger in (models.change, dataset.change):
        trigger(on_note, [models, dataset], note, show_progress="hidden")
    polls.add("evaluate", on_note, [models, dataset], note, show_progress="hidden")
    jsonl.click(download("jsonl"), select, [file, message, announced])
    parquet.click(download("parquet"), select, [file, message, announced])
    return EvalTab(models=models, dataset=dataset, scorers=scorers, max_new_tokens=max_new_tokens, tools=tools,
                   environment=environment, select=select)


def open_for_run(store: RunStore, tab: EvalTab, run_id: str | None, lang: str = i18n.DEFAULT) -> dict:
    """Updates that fill the form to evaluate `run_id` against its base."""
    if not run_id:
        return {}
    p = prefill(store, run_id)
    return {tab.models: gr.update(choices=model_options(store, lang), value=p["models"]),
            tab.dataset: gr.update(choices=dataset_options(store, lang), value=p["dataset"]),
            tab.scorers: p["scorers"], tab.max_new_tokens: p["max_new_tokens"],
            **tab.tools.filled(p["tools"], p["chat_template"], p["tool_turns"]), tab.environment: p["environment"]}
