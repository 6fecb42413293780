"""eval: generate with one or more models on an evaluation set, score the answers, compare with the first."""
from __future__ import annotations

import sys
import time

from cli.common import EXIT_FAILED, EXIT_STOPPED, bad_input, fmt_time, open_store, print_json, print_table


def add_parsers(sub, common) -> None:
    ev = sub.add_parser("eval", parents=[common], help="evaluate models: start, list, show, stop, restart, delete",
                        description="launch.py eval start --model run:ID --against base --dataset FILE "
                                    "--scorer numeric_match:answer [--scorer rouge_l] [--limit 64] "
                                    "[--tool calculator --chat-template chatml-tools]")
    esub = ev.add_subparsers(dest="eval_command", required=True)
    st = esub.add_parser("start", parents=[common], help="evaluate models on a set (and follow it)")
    st.add_argument("--model", action="append", required=True,
                    help="a model to evaluate (repeatable): run:ID[@STEP], an export or folder, a Hub id, the "
                         "embedded smollm2-135m-instruct, or `base`")
    st.add_argument("--against", help="the baseline, listed first (e.g. `base`: the base model of the others)")
    st.add_argument("--dataset", required=True,
                    help="a built-in set, a file, a Hub id, or heldout:RUN_ID (the rows that run held out)")
    st.add_argument("--prompt-column", default="")
    st.add_argument("--reference-column", default="")
    st.add_argument("--scorer", action="append", default=[],
                    help="KIND or KIND:VALUE, repeatable: rouge_l, bleu, chrf, math, numeric_match:answer, "
                         "exact_match:answer, regex:PATTERN, blocklist:a,b, reward_model:run:ID, length:50, "
                         "or a JSON/YAML mapping {type: ..., params: {...}}")
    st.add_argument("--tool", action="append", default=[],
                    help="a tool every model may call (repeatable): calculator, python, search:folder=DOCS[,top_k=5], "
                         "function:file=F.py,function=NAME, or a JSON/YAML mapping; the tool use is scored beside "
                         "(used_tool, tool_calls, tool_errors)")
    st.add_argument("--chat-template", help="the chat template every model gets (model: its own; chatml-tools "
                                            "carries tool calls for ChatML models)")
    st.add_argument("--tool-turns", type=int, help="with --tool: at most N rounds of calls before the answer "
                                                   "(default 4)")
    st.add_argument("--environment", help="an environment every answer plays (an instance each, reset from its "
                                          "row; its methods the tools): guess_number, or FILE.py:CLASS in the "
                                          "workspace; score it with --scorer environment")
    st.add_argument("--limit", type=int, help="the first N rows only")
    st.add_argument("--max-new-tokens", type=int)
    st.add_argument("--batch-size", type=int)
    st.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    st.add_argument("--temperature", type=float)
    st.add_argument("--top-p", type=float)
    st.add_argument("--samples", type=int, help="answers per prompt (with --sample): pass@k and mean@k")
    st.add_argument("--seed", type=int)
    st.add_argument("--name", default="")
    st.add_argument("--detach", action="store_true", help="queue it and return at once")
    st.add_argument("--json", action="store_true",
                    help="print the results as JSON when done (with --detach: the id), progress on stderr")
    st.set_defaults(func=cmd_eval)
    ls = esub.add_parser("list", parents=[common], help="evaluations, newest first")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_eval)
    for name, what in (("show", "an evaluation's results table"), ("stop", "stop an evaluation, keeping its rows"),
                       ("restart", "carry on a stopped, failed or interrupted evaluation"),
                       ("delete", "delete an evaluation and its rows")):
        p = esub.add_parser(name, parents=[common], help=what)
        p.add_argument("eval_id")
        if name == "show":
            p.add_argument("--json", action="store_true")
            p.add_argument("--examples", type=int, default=0, help="also print N examples side by side")
            p.add_argument("--predictions", help="write the predictions to FILE.jsonl or FILE.parquet")
        if name == "restart":
            p.add_argument("--detach", action="store_true")
        p.set_defaults(func=cmd_eval)


SUBCOMMANDS = ("start", "list", "show", "stop", "restart", "delete")


def with_default_subcommand(argv: list[str]) -> list[str]:
    """`launch.py eval --model ...` is `eval start --model ...`."""
    if "eval" not in argv:
        return argv
    i = argv.index("eval")
    rest = argv[i + 1:]
    if rest and rest[0] not in SUBCOMMANDS and rest[0] not in ("-h", "--help") and rest[0].startswith("--"):
        return argv[:i + 1] + ["start"] + rest
    return argv


def _spec_data(args) -> dict:
    from backend.evals import parse_scorer
    from backend.evals.spec import parse_tool

    models = ([args.against] if args.against else []) + list(args.model)
    gen = {k: v for k, v in {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
                             "temperature": args.temperature, "top_p": args.top_p, "samples": args.samples,
                             "seed": args.seed}.items() if v is not None}
    if args.sample:
        gen["do_sample"] = True
    scorers, tools = _each("--scorer", args.scorer, parse_scorer), _each("--tool", args.tool, parse_tool)
    data = {"name": args.name, "models": models, "dataset": args.dataset, "prompt_column": args.prompt_column,
            "reference_column": args.reference_column, "scorers": scorers, "limit": args.limit, "generation": gen}
    extra = {"tools": tools, "chat_template": args.chat_template, "max_tool_calling_iterations": args.tool_turns,
             "environment": args.environment}
    return data | {k: v for k, v in extra.items() if v not in (None, [])}


def cmd_eval(args) -> int:
    from backend import evals

    store = open_store(args)
    command = args.eval_command
    if command == "start":
        try:
            spec = evals.build_spec(_spec_data(args))
            evaluation = evals.submit_eval(store, spec)
        except evals.EvalError as e:
            return bad_input("Cannot start the evaluation:", e.errors)
        except ValueError as e:
            return bad_input(f"Cannot start the evaluation: {e}")
        print(f"evaluation id: {evaluation.id}", flush=True)  # with --json on stderr: stdout is the JSON alone
        if args.detach and args.json:
            print_json({"id": evaluation.id, "status": evaluation.status})
        return 0 if args.detach else follow_eval(store, evaluation.id, args.json)
    if command == "list":
        items = evals.list_evals(store)
        if args.json:
            print_json([{"id": e.id, "name": e.name, "status": e.status, "models": e.info.get("models"),
                         "dataset": e.spec.dataset, "done": e.done, "total": e.total, "created": e.created_at}
                        for e in items])
            return 0
        if not items:
            print("no evaluations yet")
            return 0
        print_table("{:27} {:20} {:11} {:>11}  {:19}  {}", ("id", "name", "status", "answers", "created", "models"),
                    [(e.id, e.name[:20], e.status, f"{e.done}/{e.total}", fmt_time(e.created_at),
                      " vs ".join(e.info.get("models") or e.spec.models)) for e in items])
        return 0
    try:
        evaluation = evals.get_eval(store, args.eval_id)
    except KeyError as e:
        return bad_input(e.args[0])
    if command == "show":
        return show_eval(store, evaluation, args.json, args.examples, args.predictions)
    if command == "stop":
        print(f"evaluation {evaluation.id}: {evals.stop_eval(store, evaluation.id)}")
        return 0
    if command == "delete":
        try:
            evals.delete_eval(store, evaluation.id)
        except ValueError as e:
            return bad_input(str(e))
        print(f"deleted {evaluation.id}")
        return 0
    try:
        evals.restart_eval(store, evaluation.id)
    except evals.EvalError as e:
        return bad_input(str(e))
    return 0 if args.detach else follow_eval(store, evaluation.id, False)


def follow_eval(store, eval_id: str, as_json: bool) -> int:
    from tqdm import tqdm

    from backend import evals
    from backend.runs.jobs import dispatch

    bar = None
    try:
        while True:
            dispatch(store)
            e = evals.get_eval(store, eval_id)
            if e.status == "running" and bar is None and e.total:
                bar = tqdm(total=e.total, initial=e.done, unit="answer", desc=e.name, dynamic_ncols=True,
                           file=sys.stderr)
            if bar is not None:
                bar.update(max(0, e.done - bar.n))
            if not e.active:
                break
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("\nstopping: the answers scored so far are kept", file=sys.stderr, flush=True)
        evals.stop_eval(store, eval_id)
    finally:
        if bar is not None:
            bar.close()
    e = evals.get_eval(store, eval_id)
    code = show_eval(store, e, as_json, 0, None)
    if e.status == "failed":
        print(f"error: {e.error}", file=sys.stderr)
        return EXIT_FAILED
    return code if e.status == "completed" else EXIT_STOPPED


def show_eval(store, e, as_json: bool, n_examples: int, predictions: str | None) -> int:
    from pathlib import Path

    from backend import evals

    summary = evals.summary_of(store, e)
    labels = e.info.get("models") or e.spec.models
    if predictions:
        path = evals.write_predictions(evals.answers(store, e.id), labels, Path(predictions))
        print(f"predictions: {path}", file=sys.stderr)
    if as_json:
        header, rows = evals.table_rows(summary)
        print_json({"id": e.id, "status": e.status, "message": e.message, "error": e.error, "dataset": e.spec.dataset,
                    "judge": summary.judge, "models": [
                        {"label": m.label, "answered": m.answered, "wins": m.wins, "ties": m.ties,
                         "losses": m.losses, "win_rate": m.win_rate,
                         "scores": {c: vars(cell) for c, cell in m.cells.items()}} for m in summary.models],
                    "scorer_errors": summary.scorer_errors})
        return 0
    print(f"evaluation {e.id} ({e.name}): {e.status} — {e.message or ''}")
    print(f"set: {e.spec.dataset}, {e.info.get('rows', '?')} rows, prompt column '{e.info.get('prompt_column')}'" +
          (f", reference '{e.info['reference_column']}'" if e.info.get("reference_column") else ""))
    if e.error:
        print(f"error: {e.error}")
    if summary.columns:
        print(evals.format_table(summary))
    else:
        print("no scorers: the answers are stored (show --predictions FILE)")
    for x in evals.examples(evals.answers(store, e.id), labels, summary.judge, summary.judge in summary.binary,
                            limit=n_examples) if n_examples else []:
        print(f"\n#{x['row']} [{x['verdict']}] {x['prompt'][:200]}\n  reference: {x['reference'][:200]}\n"
              f"  A: {x['A'][:300]}\n     {x['scores A']}" +
              (f"\n  B: {x['B'][:300]}\n     {x['scores B']}" if len(labels) > 1 else ""))
    return 0


def _each(flag: str, texts: list[str], parse) -> list[dict]:
    """Each given option parsed, a refusal naming the option as typed."""
    out = []
    for text in texts:
        try:
            out.append(parse(text).model_dump())
        except ValueError as e:
            raise ValueError(f"{flag} {text}: {str(e).splitlines()[0]}") from None
    return out
