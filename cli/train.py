"""train, resume: start (or resume) a run, then follow it in the foreground (Ctrl-C stops it) unless --detach;
train --dry-run checks a run and shows its settings and memory estimate without starting it."""
from __future__ import annotations

import signal
import sys
import time

from cli.common import EXIT_FAILED, EXIT_STOPPED, bad_input, open_store


def add_parsers(sub, common) -> None:
    import argparse

    from cli.settings import settings_text

    tr = sub.add_parser("train", parents=[common], help="run training in the foreground",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog="settings (--set KEY=VALUE or --KEY VALUE, or keys of the config YAML; TRL's names "
                               "are accepted too):\n" + settings_text())
    tr.add_argument("config", nargs="?", help="run config YAML (e.g. presets/sft_demo.yaml)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting, e.g. --set lora.r=16 --set max_steps=20 (or --max_steps 20, as "
                         "TRL's CLI takes it; --set data.columns.prompt=question sets one entry of a mapping)")
    tr.add_argument("--detach", action="store_true", help="start the run and return at once")
    tr.add_argument("--dry-run", action="store_true",
                    help="check everything a start checks, print the settings and the memory estimate (RL modes: "
                         "also run the reward probe), and start nothing (exit 0; 2 naming each problem; 3 when the "
                         "probe finds no learning signal and the run would stop itself)")
    tr.add_argument("--resume", metavar="RUN_ID",
                    help="resume this failed, stopped or interrupted run from its last checkpoint instead "
                         "(like `launch.py resume RUN_ID`)")
    tr.set_defaults(func=cmd_train)

    ru = sub.add_parser("resume", parents=[common],
                        help="resume a failed, stopped or interrupted run from its last checkpoint (same id)")
    ru.add_argument("run_id")
    ru.add_argument("--detach", action="store_true", help="queue it and return at once")
    ru.set_defaults(func=cmd_resume)


def cmd_train(args) -> int:
    from backend.config import ConfigError, load_config
    from backend.runs.jobs import submit_run
    from backend.runs.preflight import preflight

    if args.resume:
        if args.config or args.set:
            return bad_input("train --resume: the run keeps its own settings; give no config file or --set")
        args.run_id = args.resume
        return cmd_resume(args)

    try:
        config = load_config(args.config, args.set)
        store = open_store(args)
        dataset = preflight(config, store.workspace, keep_data=not args.dry_run)
        if args.dry_run:
            return dry_run(config, dataset, store.workspace)
        run = submit_run(store, config, check=False)
    except ConfigError as e:
        return bad_input("Cannot start the run:", e.errors)
    print(f"dataset: {dataset.summary()}", flush=True)  # what was read, and how a converted format was read
    print(f"run id: {run.id}", flush=True)
    if args.detach:
        return 0
    return follow_run(store, run.id)


def dry_run(config, dataset, workspace) -> int:
    """What a start would run, once preflight has passed: the settings that differ from the defaults (the
    defaults are `launch.py settings`), the dataset as read, and the memory lines the run's log would begin with."""
    from backend.config import to_yaml
    from backend.runs.jobs import pin_paths
    from backend.runs.preflight import memory_lines

    config = pin_paths(config, workspace)
    print(f"dry run: the settings are valid; nothing was started\nmode: {config.mode}  model: {config.model}  "
          f"dataset: {config.dataset}")
    print("settings (those not at their defaults):")
    print("\n".join(f"  {line}" for line in to_yaml(config, only_changed=True).splitlines()))
    print(f"dataset: {dataset.summary()}")
    from backend.data import reachable_note

    if note := reachable_note(dataset.num_rows, config.reachable_rows(), config.seed):
        print(note)
    print("\n".join(memory_lines(config, workspace)), flush=True)
    from backend.doctor.defaults import data_suggestions
    from backend.doctor.texts import suggestion_text

    for s in data_suggestions(config, workspace):
        print(f"{suggestion_text(s.key, s.value, s.params)}  [--set {s.path}={s.value}]")
    return probe_before_start(config, workspace)


def probe_before_start(config, workspace) -> int:
    """The reward probe of an RL run's dry run (rl.probe): generate one group for a few prompts, score it, and say
    what would keep the run from learning. Exit 0: nothing that stops it; 3 (as a stopped run): the run would stop
    itself at once."""
    from backend.doctor import fix_text, report_lines
    from backend.doctor.probe import check_rewards, not_probed
    from backend.core.mode_registry import mode_spec

    if not mode_spec(config.mode).online_rl or config.rl.probe == "off":
        return 0
    if why := not_probed(config):
        print(f"reward probe: not run, {why}")
        return 0
    print("reward probe: loading the model and sampling (rl.probe: off skips this)...", flush=True)
    try:
        report = check_rewards(config, workspace)
    except Exception as e:  # noqa: BLE001 - advice only: the settings passed every check
        print(f"reward probe: could not run ({type(e).__name__}: {e})", file=sys.stderr)
        return 0
    print(report.summary())
    for d, line in zip(report.diagnoses, report_lines(report.diagnoses)):
        print(f"  {line}" + (f"  [--set {fix_text(d.fix).replace(' ', ' --set ')}]" if d.fix else ""))
    if not report.diagnoses:
        print("  the rewards vary within groups: the run has a learning signal")
    return EXIT_STOPPED if report.no_signal and config.rl.probe == "stop" else 0


class _Signalled(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a closed terminal, `timeout`) while following a run: the same clean stop as Ctrl-C."""


def _stop_on_signal(signum, _frame):
    raise _Signalled(signal.Signals(signum).name)


def _say(text: str, file=None) -> None:
    """Print, unless the terminal is gone (after SIGHUP a write fails): the run's record says it all anyway."""
    try:
        print(text, file=file or sys.stdout, flush=True)
    except OSError:
        pass


def follow_run(store, run_id) -> int:
    """A progress bar until the run ends; the exit code says how it ended. Ctrl-C, SIGTERM and SIGHUP stop the
    run cleanly (it saves its adapter); a second Ctrl-C leaves it running."""
    from tqdm import tqdm

    from backend.runs.jobs import dispatch, stop_run
    from backend.runs.logs import log_tail
    from backend.runs.supervisor import resuming_itself

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    bar = None
    announced_queue = False
    attempt = store.get_run(run_id).attempt
    told = _DiagnosisPrinter()
    try:
        while True:
            dispatch(store)
            run = store.get_run(run_id)
            if run.attempt > attempt:  # its supervisor resumed it (auto_resume)
                tqdm.write(f"the worker died; attempt {run.attempt} resumes from step {run.resumed_step}")
            attempt = run.attempt
            if run.status == "queued" and not announced_queue:
                print("queued: waiting for the running run to finish", flush=True)
                announced_queue = True
            if run.total_steps and bar is None:
                bar = tqdm(total=run.total_steps, unit="step", desc=run.name, dynamic_ncols=True)
            told.say(run, tqdm.write)
            if bar is not None:
                bar.update(max(0, run.step - bar.n))
                loss = store.last_metrics(run_id).get("loss")
                if loss is not None:
                    bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if not run.active and not resuming_itself(run):
                break
            time.sleep(1.0)
    except KeyboardInterrupt as e:
        why = f"{e.args[0]}: " if isinstance(e, _Signalled) else ""
        grace = store.get_run(run_id).config.stop_grace_s
        _say(f"\n{why}stopping: the run saves its adapter and exits, or is killed if it has not in {grace} s "
             "(stop_grace_s; Ctrl-C again to leave it running)")
        stop_run(store, run_id)
        try:
            while store.get_run(run_id).active:
                time.sleep(1.0)
        except KeyboardInterrupt:
            return EXIT_STOPPED
    finally:
        if bar is not None:
            try:
                bar.close()
            except OSError:
                pass
    run = store.get_run(run_id)
    told.say(run, _say)
    from backend.doctor import status_words

    _say(f"run {run.id}: {status_words(run)}")
    if run.adapter_path:
        _say(f"adapter: {run.adapter_path}")
    if run.status == "failed":
        _say(f"error: {run.error}", file=sys.stderr)
        if "last log lines" not in (run.error or ""):
            _say("--- last log lines ---\n" + log_tail(store, run_id), file=sys.stderr)
        return EXIT_FAILED
    return 0 if run.status == "completed" else EXIT_STOPPED


class _DiagnosisPrinter:
    """Prints each new diagnosis of the run doctor (and a stall) once while a run is followed."""

    def __init__(self):
        self.said: set[tuple[str, str]] = set()

    def say(self, run, write) -> None:
        from backend.doctor import report_lines, stored_diagnoses

        found = stored_diagnoses(run)
        if run.stalled and run.status == "running" and ("stalled", run.stalled) not in self.said:
            self.said.add(("stalled", run.stalled))
            write(f"stalled: {run.stalled} (stall_action: {run.config.stall_action})")
        for d, line in zip(found, report_lines(found)):
            if (d.check, d.severity) not in self.said:
                self.said.add((d.check, d.severity))
                write(f"doctor: {line} (`launch.py doctor {run.id}`)")


def cmd_resume(args) -> int:
    from backend.runs.jobs import resume_run

    store = open_store(args)
    try:
        run = resume_run(store, args.run_id)
    except (KeyError, ValueError) as e:
        return bad_input(f"Cannot resume: {e.args[0]}")
    print(f"run {run.id}: attempt {run.attempt}, resuming from step {run.step}", flush=True)
    if args.detach:
        return 0
    return follow_run(store, run.id)
