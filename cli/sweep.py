"""sweep start|resume|list|show|stop: Optuna hyperparameter sweeps, followed in the foreground or detached."""
from __future__ import annotations

import sys
import time

from cli.common import EXIT_FAILED, EXIT_STOPPED, bad_input, fmt_time, open_store, print_json, print_table


def add_parsers(sub, common) -> None:
    sw = sub.add_parser("sweep", parents=[common], help="Optuna (Bayesian) hyperparameter sweeps")
    swsub = sw.add_subparsers(dest="sweep_command", required=True)
    ss = swsub.add_parser("start", parents=[common], help="start a sweep (its driver runs detached)")
    ss.add_argument("spec", nargs="?", help="sweep spec YAML (e.g. presets/sweeps/sft_lr_rank.yaml)")
    ss.add_argument("--preset", help="run config YAML to use as the base (instead of, or replacing, the spec's)")
    ss.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a base setting (or --KEY VALUE, as TRL's CLI takes it, e.g. --max_steps 20)")
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
    sh = swsub.add_parser("show", parents=[common], help="a sweep's trials, the best marked ★")
    sh.add_argument("sweep_id")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--best-config", action="store_true",
                    help="print the best trial's run config YAML (with --json: as JSON)")
    sp = swsub.add_parser("stop", parents=[common], help="stop a sweep and its current trial")
    sp.add_argument("sweep_id")
    sw.set_defaults(func=cmd_sweep)


def cmd_sweep(args) -> int:
    from backend import sweeps
    from backend.config import ConfigError
    from backend.runs.jobs import dispatch

    store = open_store(args)
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
            return {"list": _list, "show": _show, "stop": _stop}[args.sweep_command](store, args)
    except ConfigError as e:
        return bad_input(f"Cannot {args.sweep_command} the sweep:", e.errors)
    except KeyError as e:
        return bad_input(e.args[0])
    print(f"sweep id: {sweep.id} ({sweep.name}, {sweep.spec.n_trials} trials; log: "
          f"{sweeps.driver_log(store, sweep.id)})", flush=True)
    if args.detach:
        return 0
    return follow_sweep(store, sweep.id)


def follow_sweep(store, sweep_id) -> int:
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


def _list(store, args) -> int:
    from backend import sweeps

    rows = [sweeps.sweep_summary(s, sweeps.list_trials(store, s.id)) for s in sweeps.list_sweeps(store)]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no sweeps yet")
        return 0
    print_table("{:26} {:24} {:10} {:>7}  {:24} {:>10}  {}",
                ("id", "name", "status", "trials", "objective", "best", "started"),
                [(r["id"], r["name"][:24], r["status"], f"{r['trials_done']}/{r['n_trials']}",
                  f"{r['metric']} ({r['direction'][:3]})"[:24], sweeps.format_value(r["best_value"], 6),
                  fmt_time(r["started_at"])) for r in rows])
    return 0


def _show(store, args) -> int:
    from backend import sweeps
    from backend.config import to_yaml

    sweep = sweeps.get_sweep(store, args.sweep_id)
    trials = sweeps.list_trials(store, sweep.id)
    if args.best_config:
        config = sweeps.best_config(store, sweep.id)
        if config is None:
            return bad_input(f"sweep {sweep.id} has no completed trial yet", code=EXIT_FAILED)
        if args.json:
            print_json(config.model_dump())
        else:
            print(to_yaml(config), end="")
        return 0
    if args.json:
        print_json({**sweeps.sweep_summary(sweep, trials), "spec": sweep.spec.model_dump(),
                    "importances": sweeps.param_importances(store, sweep),
                    "trials": [{"trial": t.number + 1, "run_id": t.run_id, "status": t.status, "params": t.params,
                                "value": t.value, "error": t.error} for t in trials]})
        return 0
    o = sweep.spec.objective
    print(f"sweep {sweep.id} ({sweep.name})\n  status: {sweep.status}\n  trials: {len(sweeps.counted(trials))}/"
          f"{sweep.spec.n_trials}\n  objective: {o.direction} {o.metric} ({o.reduce}"
          f"{f' {o.last_k}' if o.reduce == 'mean_last' else ''})\n  started: {fmt_time(sweep.started_at)}"
          f"\n  finished: {fmt_time(sweep.finished_at)}")
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


def _stop(store, args) -> int:
    from backend import sweeps

    outcome = sweeps.stop_sweep(store, args.sweep_id)
    print(f"sweep {args.sweep_id}: {outcome}")
    return 0
