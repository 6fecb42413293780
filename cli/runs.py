"""runs, show, note, delete, compare, stop: the run history and what can be done to one run."""
from __future__ import annotations

import sys

from cli.common import bad_input, fmt_time, open_store, print_json, print_table


def add_parsers(sub, common) -> None:
    from backend.runs.store import STATUSES

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
                        help="compare runs: the settings that differ, their final metric values and each one's "
                             "latest evaluation")
    cp.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    cp.add_argument("--json", action="store_true")
    cp.set_defaults(func=cmd_compare)

    st = sub.add_parser("stop", parents=[common], help="stop a run (it saves its adapter)")
    st.add_argument("run_id")
    st.add_argument("--force", action="store_true", help="kill at once, without saving")
    st.set_defaults(func=cmd_stop)

    add_logs_parser(sub, common)


def cmd_runs(args) -> int:
    from backend.runs.jobs import dispatch

    store = open_store(args)
    if not store.read_only:  # dispatching writes (starts queued runs, marks dead ones)
        dispatch(store)
    runs = store.list_runs(tuple(args.status) if args.status else None)
    if args.json:
        print_json([{"id": r.id, "name": r.name, "mode": r.mode, "status": r.status, "step": r.step,
                     "total_steps": r.total_steps, "created_at": r.created_at, "started_at": r.started_at,
                     "finished_at": r.finished_at, "adapter": r.adapter_path, "note": r.note,
                     "attempt": r.attempt, "verdict": r.verdict, "stalled": r.stalled} for r in runs])
        return 0
    if not runs:
        print(f"no {'/'.join(args.status)} runs" if args.status else "no runs yet")
        return 0
    from backend.doctor import status_words

    statuses = [status_words(r) for r in runs]
    # as wide as the longest status: "completed — no learning signal" must not push its row's columns along
    width = max(10, *map(len, statuses))
    print_table(f"{{:22}} {{:24}} {{:5}} {{:{width}}} {{:>10}}  {{}}",
                ("id", "name", "mode", "status", "progress", "started"),
                [(r.id, r.name[:24], r.mode, status, f"{r.step}/{r.total_steps}" if r.total_steps else "-",
                  fmt_time(r.started_at)) for r, status in zip(runs, statuses)])
    return 0


def cmd_show(args) -> int:
    from backend.config import to_yaml
    from backend.doctor import status_words
    from backend.runs.jobs import dispatch
    from backend.runs.logs import log_tail

    store = open_store(args)
    if not store.read_only:  # dispatching writes (starts queued runs, marks dead ones)
        dispatch(store)
    try:
        run = store.get_run(args.run_id)
    except KeyError as e:
        return bad_input(e.args[0])
    rows = store.metrics_since(run.id)
    if args.json:
        print_json({**run.to_dict(), "adapter": run.adapter_path,
                    "metrics": [{"step": m["step"], "name": m["name"], "value": m["value"]} for m in rows],
                    "last_metrics": store.last_metrics(run.id), "log_tail": log_tail(store, run.id)})
        return 0
    from backend.doctor import report_lines, stored_diagnoses

    print(f"run {run.id} ({run.name})\n  mode: {run.mode}\n  status: {status_words(run)}"
          + (f" (attempt {run.attempt})" if run.attempt > 1 else ""))
    print(f"  progress: {run.step}/{run.total_steps or '?'}\n  started: {fmt_time(run.started_at)}"
          f"\n  finished: {fmt_time(run.finished_at)}\n  adapter: {run.adapter_path or '-'}")
    if run.note:
        print(f"  note: {run.note}")
    if run.error:
        print(f"  error: {run.error}")
    if run.stalled and run.status == "running":
        print(f"  stalled: {run.stalled}")
    if found := stored_diagnoses(run):
        print("  diagnoses (`launch.py doctor " + run.id + "` for evidence and fixes):")
        print("\n".join(f"    {line}" for line in report_lines(found)))
    last = store.last_metrics(run.id)
    if last:
        print("  last metrics:")
        for k, v in last.items():
            print(f"    {k}: {v if v is None else f'{v:.6g}'}")
    print("  config:\n" + "\n".join("    " + line for line in to_yaml(run.config).splitlines()))
    return 0


def cmd_note(args) -> int:
    store = open_store(args)
    try:
        note = store.set_note(args.run_id, args.text)
    except KeyError as e:
        return bad_input(e.args[0])
    print(f"run {args.run_id}: note {'saved' if note else 'cleared'}")
    return 0


def cmd_delete(args) -> int:
    from backend.runs.jobs import delete_runs, reconcile
    from backend.runs.store import DeleteRefused

    store = open_store(args)
    run_ids = list(dict.fromkeys(args.run_ids))
    reconcile(store)
    if problems := store.deletion_problems(run_ids):
        return bad_input("Cannot delete (nothing was deleted):", problems)
    runs = [store.get_run(run_id) for run_id in run_ids]
    if not args.yes:
        if not sys.stdin.isatty():
            return bad_input("delete: not asking without a terminal; add --yes to delete")
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
        return bad_input("Cannot delete (nothing was deleted):", e.errors)
    for r in runs:
        print(f"deleted run {r.id} ({r.name})")
    for line in left:
        print(f"warning: could not remove {line}", file=sys.stderr)
    print(f"exports under {store.workspace / 'exports'} are kept")
    return 0


def cmd_compare(args) -> int:
    from backend import evals
    from backend.runs.compare import config_differences, final_values, load_runs

    store = open_store(args)
    try:
        runs = load_runs(store, args.run_ids)
    except (KeyError, ValueError) as e:
        return bad_input(e.args[0])
    if len(runs) < 2:
        return bad_input("compare: give two or more different run ids (see `launch.py runs`)")
    diffs = config_differences([r.config for r in runs])
    finals = final_values(store, runs)
    latest = evals.latest_evaluations(store, [r.id for r in runs])
    if args.json:
        print_json({"runs": [{"id": r.id, "name": r.name, "status": r.status, "verdict": r.verdict} for r in runs],
                    "settings": {path: values for path, values in diffs},
                    "final": {name: values for name, values in finals},
                    "evaluations": [evals.comparison_record(f) for f in latest]})
        return 0
    from backend.doctor import status_words

    rows = [("run", [r.id for r in runs]), ("status", [status_words(r) for r in runs]), *diffs]
    if not diffs:
        rows.append(("(settings)", ["all the same"] * len(runs)))
    parts = {len(rows): "final values:"}
    rows += [(name, ["-" if v is None else f"{v:.6g}" for v in values]) for name, values in finals]
    if evaluated := evals.comparison_rows(latest):
        parts[len(rows)] = "latest evaluation (mean [95% interval]; `launch.py eval show ID` for the rest):"
        rows += evaluated
    names = [r.name for r in runs]
    width = max(len(name) for name, _ in rows)
    cols = [min(48, max(len(n), *(len(str(vals[i])) for _, vals in rows))) for i, n in enumerate(names)]

    def line(head, values):
        print((head.ljust(width) + "  " + "  ".join(str(v)[:c].ljust(c) for v, c in zip(values, cols))).rstrip())

    line("", names)
    for i, (name, values) in enumerate(rows):
        if i in parts:
            print(parts[i])
        line(name, values)
    return 0


def cmd_stop(args) -> int:
    from backend.runs.jobs import stop_run

    store = open_store(args)
    try:
        outcome = stop_run(store, args.run_id, force=args.force)
    except KeyError as e:
        return bad_input(e.args[0])
    if outcome == "stopping":
        grace = store.get_run(args.run_id).config.stop_grace_s
        outcome += (f" (it saves its adapter at its next step; if it has not ended in {grace} s, its processes are "
                    "killed: stop_grace_s, or stop --force now)")
    print(f"run {args.run_id}: {outcome}")
    return 0


def add_logs_parser(sub, common) -> None:
    lg = sub.add_parser("logs", parents=[common],
                        help="print a run's log (train.log), repeated library warnings shown once with their count")
    lg.add_argument("run_id")
    lg.add_argument("-f", "--follow", action="store_true",
                    help="keep printing new lines until the run has ended (Ctrl-C stops following)")
    lg.add_argument("--lines", "-n", type=int, metavar="N", help="only the last N lines")
    lg.set_defaults(func=cmd_logs)


def cmd_logs(args) -> int:
    from backend.runs.logs import log_path
    from backend.runs.logs import follow_log, read_log

    store = open_store(args)
    if args.lines is not None and args.lines < 1:
        return bad_input(f"--lines {args.lines}: give a number of lines, 1 or more")
    try:
        if not args.follow:
            text = read_log(store, args.run_id, args.lines)
            if text:
                print(text)
            elif not log_path(store, args.run_id).exists():
                print(f"run {args.run_id} has no log yet ({log_path(store, args.run_id)})", file=sys.stderr)
            return 0
        for line in follow_log(store, args.run_id, args.lines):
            print(line, flush=True)
    except KeyError as e:
        return bad_input(e.args[0])
    except KeyboardInterrupt:
        pass
    return 0
