#!/usr/bin/env python
"""The workbench's one entry point: the web UI and the headless CLI.

  python launch.py [ui] [--host 127.0.0.1] [--port 7860] [--workspace DIR] [--auth user:pass]
  python launch.py train [CONFIG.yaml] [--set key=value ...] [--detach]
  python launch.py runs [--status STATUS] [--json]
  python launch.py show RUN_ID [--json]
  python launch.py note RUN_ID "text"
  python launch.py delete RUN_ID [RUN_ID ...] [--yes]
  python launch.py compare RUN_ID RUN_ID [...] [--json]
  python launch.py stop RUN_ID [--force]
  python launch.py labels list [--json]
  python launch.py labels export SESSION_ID --format dpo|kto|sft --out FILE.jsonl|FILE.parquet
  python launch.py export RUN_ID --out DIR [--merge] [--zip] [--overwrite]
  python launch.py sweep start SPEC.yaml | --preset RUN.yaml --param FIELD=KIND:LOW:HIGH ... [--detach]
  python launch.py sweep list|show|stop|resume SWEEP_ID
  python launch.py metrics [--host 127.0.0.1] [--port 9101] [--auth user:pass]
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


def _auth(args):
    """--auth user:password -> (user, password); None without it; False (after saying why) when malformed."""
    if not args.auth:
        return None
    if ":" not in args.auth:
        print("--auth: expected user:password", file=sys.stderr)
        return False
    return tuple(args.auth.split(":", 1))


def cmd_ui(args) -> int:
    from app.main import launch_ui

    auth = _auth(args)
    if auth is False:
        return EXIT_BAD_INPUT
    launch_ui(workspace=_workspace(args), host=args.host, port=args.port, auth=auth)
    return 0


def cmd_metrics(args) -> int:
    from backend.monitoring import serve

    auth = _auth(args)
    if auth is False:
        return EXIT_BAD_INPUT
    try:
        server = serve(_store(args), host=args.host, port=args.port, auth=auth)
    except OSError as e:
        print(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"Prometheus metrics of {_workspace(args)} at http://{args.host}:{args.port}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
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
    runs = store.list_runs(tuple(args.status) if args.status else None)
    if args.json:
        _print_json([{"id": r.id, "name": r.name, "mode": r.mode, "status": r.status, "step": r.step,
                      "total_steps": r.total_steps, "created_at": r.created_at, "started_at": r.started_at,
                      "finished_at": r.finished_at, "adapter": r.adapter_path, "note": r.note} for r in runs])
        return 0
    if not runs:
        print(f"no {'/'.join(args.status)} runs" if args.status else "no runs yet")
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
    if run.note:
        print(f"  note: {run.note}")
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


def cmd_compare(args) -> int:
    from backend.compare import config_differences, final_values, load_runs

    store = _store(args)
    try:
        runs = load_runs(store, args.run_ids)
    except (KeyError, ValueError) as e:
        print(e.args[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    if len(runs) < 2:
        print("compare: give two or more different run ids (see `launch.py runs`)", file=sys.stderr)
        return EXIT_BAD_INPUT
    diffs = config_differences([r.config for r in runs])
    finals = final_values(store, runs)
    if args.json:
        _print_json({"runs": [{"id": r.id, "name": r.name, "status": r.status} for r in runs],
                     "settings": {path: values for path, values in diffs},
                     "final": {name: values for name, values in finals}})
        return 0
    rows = [("run", [r.id for r in runs]), ("status", [r.status for r in runs]), *diffs]
    if not diffs:
        rows.append(("(settings)", ["all the same"] * len(runs)))
    rows += [(name, ["-" if v is None else f"{v:.6g}" for v in values]) for name, values in finals]
    names = [r.name for r in runs]
    width = max(len(name) for name, _ in rows)
    cols = [min(40, max(len(n), *(len(str(vals[i])) for _, vals in rows))) for i, n in enumerate(names)]

    def line(head, values):
        print((head.ljust(width) + "  " + "  ".join(str(v)[:c].ljust(c) for v, c in zip(values, cols))).rstrip())

    line("", names)
    for i, (name, values) in enumerate(rows):
        if i == len(rows) - len(finals):
            print("final values:")
        line(name, values)
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


def cmd_note(args) -> int:
    store = _store(args)
    try:
        note = store.set_note(args.run_id, args.text)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"run {args.run_id}: note {'saved' if note else 'cleared'}")
    return 0


def cmd_delete(args) -> int:
    import backend.sweeps  # noqa: F401 - registers its trials' references, so a run a sweep still scores stays
    from backend.jobs import delete_runs, reconcile
    from backend.store import DeleteRefused

    store = _store(args)
    run_ids = list(dict.fromkeys(args.run_ids))
    reconcile(store)
    if problems := store.deletion_problems(run_ids):
        print("Cannot delete (nothing was deleted):", file=sys.stderr)
        for line in problems:
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runs = [store.get_run(run_id) for run_id in run_ids]
    if not args.yes:
        if not sys.stdin.isatty():
            print("delete: not asking without a terminal; add --yes to delete", file=sys.stderr)
            return EXIT_BAD_INPUT
        for r in runs:
            print(f"  {r.id}  {r.name}  ({r.mode}, {r.status})")
        try:
            answer = input(f"Delete {len(runs)} run(s): their metrics, samples and folders "
                           "(checkpoints, adapter, log)? [y/N] ")
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 0
    try:
        left = delete_runs(store, run_ids)
    except DeleteRefused as e:  # something changed since the check, e.g. a run was started meanwhile
        print("Cannot delete (nothing was deleted):", file=sys.stderr)
        for line in e.errors:
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for r in runs:
        print(f"deleted run {r.id} ({r.name})")
    for line in left:
        print(f"warning: could not remove {line}", file=sys.stderr)
    print(f"exports under {store.workspace / 'exports'} are kept")
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


def cmd_sweep(args) -> int:
    from backend import sweeps
    from backend.config import ConfigError
    from backend.jobs import dispatch

    store = _store(args)
    try:
        if args.sweep_command == "start":
            spec = sweeps.spec_from_cli(args.spec, args.preset, args.set, args.param, args.objective, args.trials,
                                        args.seed, args.name, args.prune)
            sweep = sweeps.start_sweep(store, spec)
        elif args.sweep_command == "resume":
            sweep = sweeps.resume_sweep(store, args.sweep_id, args.trials)
        else:
            dispatch(store)
            sweeps.reconcile_sweeps(store)
            return {"list": _sweep_list, "show": _sweep_show, "stop": _sweep_stop}[args.sweep_command](store, args)
    except ConfigError as e:
        print(f"Cannot {args.sweep_command} the sweep:", file=sys.stderr)
        for line in e.errors:
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"sweep id: {sweep.id} ({sweep.name}, {sweep.spec.n_trials} trials; log: "
          f"{sweeps.driver_log(store, sweep.id)})", flush=True)
    if args.detach:
        return 0
    return _follow_sweep(store, sweep.id)


def _follow_sweep(store, sweep_id) -> int:
    """Print each trial as it ends; Ctrl-C stops the sweep (its current run saves its adapter)."""
    from backend import sweeps

    printed: set[tuple[int, str]] = set()

    def report():
        sweep = sweeps.get_sweep(store, sweep_id)
        trials = sweeps.list_trials(store, sweep_id)
        for t in trials:
            if (t.number, t.status) not in printed and (t.status in sweeps.TRIAL_FINAL or t.run_id):
                printed.add((t.number, t.status))
                params = ", ".join(f"{k}={sweeps.format_value(v)}" for k, v in t.params.items())
                value = f" {sweep.spec.objective.metric} {sweeps.format_value(t.value, 6)}" if t.value is not None else ""
                error = f" ({t.error.splitlines()[0][:160]})" if t.error and t.status != "stopped" else ""
                print(f"trial {t.label} {t.status}{value}  [{params}]  run {t.run_id or '-'}{error}", flush=True)
        return sweep

    try:
        while (sweep := report()).active:
            time.sleep(1.0)
            sweeps.reconcile_sweeps(store)
    except KeyboardInterrupt:
        print("\nstopping the sweep: its current run saves its adapter (Ctrl-C again to leave it running)",
              flush=True)
        sweeps.stop_sweep(store, sweep_id)
        try:
            while (sweep := report()).active:
                time.sleep(1.0)
        except KeyboardInterrupt:
            return EXIT_STOPPED
    summary = sweeps.sweep_summary(sweep, sweeps.list_trials(store, sweep_id))
    print(f"sweep {sweep_id}: {sweep.status}, {summary['trials_done']}/{summary['n_trials']} trials")
    if summary["best_trial"]:
        print(f"best: trial #{summary['best_trial']} {summary['metric']} {summary['best_value']:.6g} "
              f"{summary['best_params']}\ntrain it: launch.py sweep show {sweep_id} --best-config > best.yaml "
              "&& launch.py train best.yaml")
    if sweep.status == "failed":
        print(f"error: {sweep.error}", file=sys.stderr)
        return EXIT_FAILED
    return 0 if sweep.status == "completed" else EXIT_STOPPED


def _sweep_list(store, args) -> int:
    from backend import sweeps

    rows = [sweeps.sweep_summary(s, sweeps.list_trials(store, s.id)) for s in sweeps.list_sweeps(store)]
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print("no sweeps yet")
        return 0
    print(f"{'id':26} {'name':24} {'status':10} {'trials':>7}  {'objective':24} {'best':>10}  started")
    for r in rows:
        objective = f"{r['metric']} ({r['direction'][:3]})"
        print(f"{r['id']:26} {r['name'][:24]:24} {r['status']:10} {str(r['trials_done']) + '/' + str(r['n_trials']):>7}"
              f"  {objective[:24]:24} {sweeps.format_value(r['best_value'], 6):>10}  {_fmt_time(r['started_at'])}")
    return 0


def _sweep_show(store, args) -> int:
    from backend import sweeps
    from backend.config import to_yaml

    sweep = sweeps.get_sweep(store, args.sweep_id)
    trials = sweeps.list_trials(store, sweep.id)
    if args.best_config:
        config = sweeps.best_config(store, sweep.id)
        if config is None:
            print(f"sweep {sweep.id} has no completed trial yet", file=sys.stderr)
            return EXIT_FAILED
        print(to_yaml(config), end="")
        return 0
    if args.json:
        _print_json({**sweeps.sweep_summary(sweep, trials), "spec": sweep.spec.model_dump(),
                     "importances": sweeps.param_importances(store, sweep),
                     "trials": [{"trial": t.number + 1, "run_id": t.run_id, "status": t.status, "params": t.params,
                                 "value": t.value, "error": t.error} for t in trials]})
        return 0
    o = sweep.spec.objective
    print(f"sweep {sweep.id} ({sweep.name})\n  status: {sweep.status}\n  trials: {len(sweeps.counted(trials))}/"
          f"{sweep.spec.n_trials}\n  objective: {o.direction} {o.metric} ({o.reduce}"
          f"{f' {o.last_k}' if o.reduce == 'mean_last' else ''})\n  started: {_fmt_time(sweep.started_at)}"
          f"\n  finished: {_fmt_time(sweep.finished_at)}")
    if sweep.error:
        print(f"  error: {sweep.error}")
    columns = sweeps.trial_columns(sweep.spec)
    rows = sweeps.trial_rows(store, sweep, trials)
    if not rows:
        print("  no trials yet")
        return 0
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for r in rows:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)))
    for t in trials:
        if t.error and t.status == "failed":
            print(f"  trial {t.label} error: {t.error.splitlines()[0][:300]}")
    if importances := sweeps.param_importances(store, sweep):
        print("  what mattered (fANOVA): " + ", ".join(f"{k} {v:.0%}" for k, v in importances.items()))
    return 0


def _sweep_stop(store, args) -> int:
    from backend import sweeps

    outcome = sweeps.stop_sweep(store, args.sweep_id)
    print(f"sweep {args.sweep_id}: {outcome}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from backend.store import STATUSES

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

    me = sub.add_parser("metrics", parents=[common],
                        help="serve only /metrics (Prometheus) for the workspace, without the web UI")
    me.add_argument("--host", default="127.0.0.1")
    me.add_argument("--port", type=int, default=9101)
    me.add_argument("--auth", default=os.environ.get("WORKBENCH_AUTH"),
                    help="user:password, asked of scrapers as HTTP basic auth")
    me.set_defaults(func=cmd_metrics)

    tr = sub.add_parser("train", parents=[common], help="run training in the foreground")
    tr.add_argument("config", nargs="?", help="run config YAML (e.g. presets/sft_demo.yaml)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting, e.g. --set lora.r=16 --set max_steps=20")
    tr.add_argument("--detach", action="store_true", help="start the run and return at once")
    tr.set_defaults(func=cmd_train)

    rs = sub.add_parser("runs", parents=[common], help="list runs")
    rs.add_argument("--status", action="append", choices=STATUSES, help="only runs with this status (repeatable)")
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(func=cmd_runs)

    nt = sub.add_parser("note", parents=[common], help="set a run's note (\"\" clears it)")
    nt.add_argument("run_id")
    nt.add_argument("text")
    nt.set_defaults(func=cmd_note)

    de = sub.add_parser("delete", parents=[common],
                        help="delete ended runs: their rows and folders (exports under workspace/exports are kept)")
    de.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    de.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    de.set_defaults(func=cmd_delete)

    sh = sub.add_parser("show", parents=[common], help="show one run")
    sh.add_argument("run_id")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=cmd_show)

    cp = sub.add_parser("compare", parents=[common],
                        help="compare runs: the settings that differ and their final metric values")
    cp.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    cp.add_argument("--json", action="store_true")
    cp.set_defaults(func=cmd_compare)

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

    sw = sub.add_parser("sweep", parents=[common], help="Optuna (Bayesian) hyperparameter sweeps")
    swsub = sw.add_subparsers(dest="sweep_command", required=True)
    ss = swsub.add_parser("start", parents=[common], help="start a sweep (its driver runs detached)")
    ss.add_argument("spec", nargs="?", help="sweep spec YAML (e.g. presets/sweeps/sft_lr_rank.yaml)")
    ss.add_argument("--preset", help="run config YAML to use as the base (instead of, or replacing, the spec's)")
    ss.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a base setting")
    ss.add_argument("--param", action="append", default=[], metavar="FIELD=KIND:LOW:HIGH",
                    help="a setting to search: learning_rate=log_float:1e-5:1e-3, lora.r=int:4:16, "
                         "dpo.loss_type=categorical:sigmoid,ipo")
    ss.add_argument("--objective", metavar="METRIC:min|max", help="e.g. loss:min, reward:max, loss:min:mean_last")
    ss.add_argument("--trials", type=int, help="number of trials")
    ss.add_argument("--seed", type=int, help="sampler seed")
    ss.add_argument("--name", help="sweep name (trial runs are named NAME #1, NAME #2, ...)")
    ss.add_argument("--prune", action="store_true", help="stop trials worse than the median early")
    ss.add_argument("--detach", action="store_true", help="start the sweep and return at once")
    sr = swsub.add_parser("resume", parents=[common], help="go on with an ended sweep (finished trials are kept)")
    sr.add_argument("sweep_id")
    sr.add_argument("--trials", type=int, help="raise the number of trials")
    sr.add_argument("--detach", action="store_true")
    sl = swsub.add_parser("list", parents=[common], help="list sweeps")
    sl.add_argument("--json", action="store_true")
    sh2 = swsub.add_parser("show", parents=[common], help="a sweep's trials, the best marked ★")
    sh2.add_argument("sweep_id")
    sh2.add_argument("--json", action="store_true")
    sh2.add_argument("--best-config", action="store_true", help="print the best trial's run config YAML")
    sp = swsub.add_parser("stop", parents=[common], help="stop a sweep and its current trial")
    sp.add_argument("sweep_id")
    sw.set_defaults(func=cmd_sweep)
    return p


def with_default_command(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`launch.py --port 7861` starts the UI, as `launch.py` alone does: `ui` when no command is named."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return argv if any(a in commands or a in ("-h", "--help") for a in argv) else ["ui", *argv]


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(with_default_command(parser, sys.argv[1:] if argv is None else list(argv)))
    args.workspace = getattr(args, "workspace", None)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
