#!/usr/bin/env python
"""The workbench's one entry point: the web UI and the headless CLI.

  python launch.py [ui] [--host 127.0.0.1] [--port 7860] [--workspace DIR] [--auth user:pass]
  python launch.py train [CONFIG.yaml] [--set key=value ...] [--detach]
  python launch.py runs [--json]
  python launch.py show RUN_ID [--json]
  python launch.py stop RUN_ID [--force]
  python launch.py labels list [--json]
  python launch.py labels export SESSION_ID --format dpo|kto|sft --out FILE.jsonl|FILE.parquet
  python launch.py export RUN_ID --out DIR [--merge] [--zip] [--overwrite]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_STOPPED = 1, 2, 3


def _workspace(args):
    from backend.store import default_workspace

    return args.workspace or str(default_workspace())


def _store(args):
    from backend.store import RunStore

    return RunStore(_workspace(args))


def _clean(value):
    """JSON that browsers and jq accept: NaN/inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _print_json(obj) -> None:
    print(json.dumps(_clean(obj), indent=2, allow_nan=False, default=str))


def _fmt_time(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def cmd_ui(args) -> int:
    from app.main import launch_ui

    auth = None
    if args.auth:
        if ":" not in args.auth:
            print("--auth: expected user:password", file=sys.stderr)
            return EXIT_BAD_INPUT
        auth = tuple(args.auth.split(":", 1))
    launch_ui(workspace=_workspace(args), host=args.host, port=args.port, auth=auth)
    return 0


def cmd_train(args) -> int:
    from backend.config import ConfigError, apply_overrides, build_config, load_config
    from backend.jobs import log_tail, stop_run, submit_run

    try:
        if args.config:
            config = load_config(args.config, args.set)
        else:
            config = build_config(apply_overrides({}, args.set))
        store = _store(args)
        run = submit_run(store, config)
    except ConfigError as e:
        print("Cannot start the run:", file=sys.stderr)
        for line in e.errors:
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"run id: {run.id}", flush=True)
    if args.detach:
        return 0
    return _follow(store, run.id, stop_run, log_tail)


def _follow(store, run_id, stop_run, log_tail) -> int:
    from tqdm import tqdm

    from backend.jobs import dispatch

    bar = None
    announced_queue = False
    try:
        while True:
            dispatch(store)
            run = store.get_run(run_id)
            if run.status == "queued" and not announced_queue:
                print("queued: waiting for the running run to finish", flush=True)
                announced_queue = True
            if run.total_steps and bar is None:
                bar = tqdm(total=run.total_steps, unit="step", desc=run.name, dynamic_ncols=True)
            if bar is not None:
                bar.update(max(0, run.step - bar.n))
                loss = store.last_metrics(run_id).get("loss")
                if loss is not None:
                    bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if not run.active:
                break
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("\nstopping: the run saves its adapter and exits (Ctrl-C again to leave it running)", flush=True)
        stop_run(store, run_id)
        try:
            while store.get_run(run_id).active:
                time.sleep(1.0)
        except KeyboardInterrupt:
            return EXIT_STOPPED
    finally:
        if bar is not None:
            bar.close()
    run = store.get_run(run_id)
    print(f"run {run.id}: {run.status}")
    if run.adapter_path:
        print(f"adapter: {run.adapter_path}")
    if run.status == "failed":
        print(f"error: {run.error}", file=sys.stderr)
        if "last log lines" not in (run.error or ""):
            print("--- last log lines ---\n" + log_tail(store, run_id), file=sys.stderr)
        return EXIT_FAILED
    return 0 if run.status == "completed" else EXIT_STOPPED


def cmd_runs(args) -> int:
    from backend.jobs import dispatch

    store = _store(args)
    dispatch(store)
    runs = store.list_runs()
    if args.json:
        _print_json([{"id": r.id, "name": r.name, "mode": r.mode, "status": r.status, "step": r.step,
                      "total_steps": r.total_steps, "created_at": r.created_at, "started_at": r.started_at,
                      "finished_at": r.finished_at, "adapter": r.adapter_path} for r in runs])
        return 0
    if not runs:
        print("no runs yet")
        return 0
    print(f"{'id':22} {'name':24} {'mode':5} {'status':10} {'progress':>10}  started")
    for r in runs:
        prog = f"{r.step}/{r.total_steps}" if r.total_steps else "-"
        print(f"{r.id:22} {r.name[:24]:24} {r.mode:5} {r.status:10} {prog:>10}  {_fmt_time(r.started_at)}")
    return 0


def cmd_show(args) -> int:
    from backend.jobs import dispatch, log_tail

    store = _store(args)
    dispatch(store)
    try:
        run = store.get_run(args.run_id)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    rows = store.metrics_since(run.id)
    if args.json:
        _print_json({**run.to_dict(), "adapter": run.adapter_path,
                     "metrics": [{"step": m["step"], "name": m["name"], "value": m["value"]} for m in rows],
                     "last_metrics": store.last_metrics(run.id), "log_tail": log_tail(store, run.id)})
        return 0
    print(f"run {run.id} ({run.name})\n  mode: {run.mode}\n  status: {run.status}")
    print(f"  progress: {run.step}/{run.total_steps or '?'}\n  started: {_fmt_time(run.started_at)}"
          f"\n  finished: {_fmt_time(run.finished_at)}\n  adapter: {run.adapter_path or '-'}")
    if run.error:
        print(f"  error: {run.error}")
    last = store.last_metrics(run.id)
    if last:
        print("  last metrics:")
        for k, v in last.items():
            print(f"    {k}: {v if v is None else f'{v:.6g}'}")
    from backend.config import to_yaml

    print("  config:\n" + "\n".join("    " + line for line in to_yaml(run.config).splitlines()))
    return 0


def cmd_stop(args) -> int:
    from backend.jobs import stop_run

    store = _store(args)
    try:
        outcome = stop_run(store, args.run_id, force=args.force)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"run {args.run_id}: {outcome}")
    return 0


def cmd_export(args) -> int:
    from backend.export import ExportError, export_run

    last = {"message": None, "tenth": -1}

    def progress(fraction: float, message: str) -> None:
        # one line per step, and per tenth within a long one (zipping a merged model reports every 8 MB)
        step = message.split(" (")[0]
        tenth = int(fraction * 10)
        if step != last["message"] or tenth != last["tenth"]:
            print(f"[{fraction:4.0%}] {message}", flush=True)
            last.update(message=step, tenth=tenth)

    try:
        result = export_run(_store(args), args.run_id, args.out, merge=args.merge, make_zip=args.zip,
                            overwrite=args.overwrite, progress=progress)
    except ExportError as e:
        print(f"Cannot export: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in result.notes:
        print(f"note: {note}")
    print(f"{result.kind}: {result.folder}")
    if result.zip_path:
        print(f"zip: {result.zip_path}")
    return 0


def cmd_labels(args) -> int:
    from backend import labeling

    store = _store(args)
    if args.labels_command == "export":
        try:
            summary = labeling.write_export(store, args.session_id, args.out, fmt=args.format,
                                            conversational=not args.plain, ties=args.ties, both_bad=args.both_bad)
        except labeling.LabelError as e:
            print(e, file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"{summary.path}: {summary.text()}")
        return 0
    sessions = [labeling.session_counts(store, s) for s in labeling.list_sessions(store)]
    if args.json:
        _print_json(sessions)
        return 0
    if not sessions:
        print("no labeling sessions yet")
        return 0
    print(f"{'id':26} {'name':28} {'mode':6} {'labels':>6} {'remaining':>9} {'generated':>10}  status")
    for s in sessions:
        print(f"{s['id']:26} {s['name'][:28]:28} {s['mode']:6} {s['labels']:>6} {s['remaining']:>9} "
              f"{str(s['generated']) + '/' + str(s['items']):>10}  {s['status']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", default=argparse.SUPPRESS,
                        help="workspace folder (default: $WORKBENCH_WORKSPACE or ./workspace)")
    p = argparse.ArgumentParser(prog="launch.py", description="RL post-training workbench", parents=[common])
    sub = p.add_subparsers(dest="command")

    ui = sub.add_parser("ui", parents=[common], help="start the web UI (default)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=7860)
    ui.add_argument("--auth", default=os.environ.get("WORKBENCH_AUTH"), help="user:password")
    ui.set_defaults(func=cmd_ui)

    tr = sub.add_parser("train", parents=[common], help="run training in the foreground")
    tr.add_argument("config", nargs="?", help="run config YAML (e.g. presets/sft_demo.yaml)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting, e.g. --set lora.r=16 --set max_steps=20")
    tr.add_argument("--detach", action="store_true", help="start the run and return at once")
    tr.set_defaults(func=cmd_train)

    rs = sub.add_parser("runs", parents=[common], help="list runs")
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(func=cmd_runs)

    sh = sub.add_parser("show", parents=[common], help="show one run")
    sh.add_argument("run_id")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=cmd_show)

    st = sub.add_parser("stop", parents=[common], help="stop a run (it saves its adapter)")
    st.add_argument("run_id")
    st.add_argument("--force", action="store_true", help="kill at once, without saving")
    st.set_defaults(func=cmd_stop)

    ex = sub.add_parser("export", parents=[common], help="export a run's adapter or merged model, with a model card")
    ex.add_argument("run_id")
    ex.add_argument("--out", required=True, help="folder to write (created; must be empty or an earlier export)")
    ex.add_argument("--merge", action="store_true",
                    help="fold the LoRA adapter into the base weights (a model for plain AutoModelForCausalLM)")
    ex.add_argument("--zip", action="store_true", help="also write OUT.zip")
    ex.add_argument("--overwrite", action="store_true", help="replace an earlier export in OUT")
    ex.set_defaults(func=cmd_export)

    lb = sub.add_parser("labels", parents=[common], help="preference labeling sessions: list, export")
    lsub = lb.add_subparsers(dest="labels_command", required=True)
    ll = lsub.add_parser("list", parents=[common], help="sessions with their label counts")
    ll.add_argument("--json", action="store_true")
    ll.set_defaults(func=cmd_labels)
    le = lsub.add_parser("export", parents=[common], help="export a session's labels as a training dataset")
    le.add_argument("session_id")
    le.add_argument("--format", choices=["dpo", "kto", "sft"], default="dpo",
                    help="dpo: prompt/chosen/rejected (DPO and reward models); kto: prompt/completion/label")
    le.add_argument("--out", required=True, help="output file, .jsonl or .parquet")
    le.add_argument("--plain", action="store_true", help="plain strings instead of chat messages")
    le.add_argument("--ties", choices=["drop", "keep"], default="drop", help="kto: keep ties as two good answers")
    le.add_argument("--both-bad", choices=["drop", "keep"], default="drop",
                    help="kto: keep both-bad as two bad answers; dpo: pairs with the labeler's edited answer")
    le.set_defaults(func=cmd_labels)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.workspace = getattr(args, "workspace", None)
    if args.command is None:
        args = parser.parse_args(["ui", *argv])
        args.workspace = getattr(args, "workspace", None)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
