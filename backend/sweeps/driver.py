"""The detached sweep driver (`python -m backend.sweeps drive ID`) and starting, stopping, resuming and
reconciling it. The driver asks Optuna for each trial's settings, submits the trial as an ordinary run, reports
its metric as it is logged (for pruning) and tells Optuna the result; the study file under workspace/sweeps/ID
is the sampler's memory, so a new driver resumes where the last one stopped."""
from __future__ import annotations

import math
import os
import signal
import time
import traceback

from backend.runs import jobs
from backend.runs.preflight import preflight
from backend.runs.supervisor import resuming_itself
from backend.config import ConfigError
from backend.core.procs import Heartbeat, is_dead, job_args, spawn_detached
from backend.runs.store import RunStore
from backend.sweeps.spec import SearchParam, SweepSpec, reduce_series, trial_config
from backend.sweeps.store import (ACTIVE, TRIAL_FINAL, Sweep, Trial, best_trial, counted, create_sweep, driver_log,
                                  finish_sweep, get_sweep, list_sweeps, list_trials, save_trial, sweep_dir,
                                  update_sweep)
from backend.sweeps.views import format_value

POLL_S = 1.0
FAILURES_IN_A_ROW = 3  # then the sweep ends `failed` instead of spending every trial on the same error


def _spawn_driver(store: RunStore, sweep_id: str) -> None:
    proc = spawn_detached(["-m", "backend.sweeps", "drive", sweep_id, "--workspace", str(store.workspace)],
                          driver_log(store, sweep_id))
    update_sweep(store, sweep_id, pid=proc.pid, heartbeat_at=time.time())


def start_sweep(store: RunStore, spec: SweepSpec, check: bool = True) -> Sweep:
    """Record the sweep and start its detached driver. The base config is checked once here (model
    reachable, dataset trainable), so a bad base fails now rather than in every trial."""
    if check:
        preflight(spec.base_config(), store.workspace)
    sweep = create_sweep(store, spec)
    _spawn_driver(store, sweep.id)
    return get_sweep(store, sweep.id)


def resume_sweep(store: RunStore, sweep_id: str, n_trials: int | None = None) -> Sweep:
    """Start a new driver for an ended sweep: finished trials are kept, a trial whose run is still going is
    waited for, and the sweep goes on to n_trials (raised to `n_trials` when given)."""
    reconcile_sweeps(store)
    sweep = get_sweep(store, sweep_id)
    if sweep.active:
        raise ConfigError([f"sweep {sweep_id} is {sweep.status}; stop it first or let it run"])
    spec = sweep.spec
    if n_trials is not None:
        if n_trials < 1:
            raise ConfigError(["n_trials: at least 1"])
        spec = spec.model_copy(update={"n_trials": n_trials})
    if len(counted(list_trials(store, sweep_id))) >= spec.n_trials:
        raise ConfigError([f"sweep {sweep_id} already ran its {spec.n_trials} trials; resume it with more "
                           "(`sweep resume ID --trials N`, or trials to add in the Sweeps tab)"])
    update_sweep(store, sweep_id, status="queued", spec=spec.model_dump_json(), stop_requested=0, error=None,
                 finished_at=None, pid=None, heartbeat_at=time.time())
    _spawn_driver(store, sweep_id)
    return get_sweep(store, sweep_id)


def stop_sweep(store: RunStore, sweep_id: str) -> str:
    """Ask a sweep to stop: its driver stops the current trial's run (which saves its adapter) and ends
    `stopped`. A sweep whose driver is gone has its trial runs stopped here."""
    reconcile_sweeps(store)
    sweep = get_sweep(store, sweep_id)
    if sweep.active:
        update_sweep(store, sweep_id, stop_requested=1)
        return "stopping"
    for t in list_trials(store, sweep_id):
        if t.run_id and store.get_run(t.run_id).active:
            jobs.stop_run(store, t.run_id)
    return sweep.status


def reconcile_sweeps(store: RunStore) -> list[str]:
    """Mark active sweeps whose driver is gone as failed (their trials are kept; resume goes on)."""
    now, changed = time.time(), []
    for s in list_sweeps(store, ACTIVE):
        why = "the sweep driver never started" if s.pid is None else f"the sweep driver (pid {s.pid}) is gone"
        if not is_dead(s.pid, s.heartbeat_at, s.started_at or s.created_at, now=now):
            continue
        if finish_sweep(store, s.id, "failed", error=f"{why}; its finished trials are kept, and "
                        f"`launch.py sweep resume {s.id}` goes on from there"):
            changed.append(s.id)
    return changed


# ---- the driver ----

class SweepDriver:
    """Runs one sweep's trials one after another. `submit`, `stop`, `dispatch` and `sleep` default to the real
    job plumbing; tests pass fakes to drive a sweep in-process."""

    def __init__(self, store: RunStore, sweep_id: str, submit=None, stop=None, dispatch=None, sleep=time.sleep,
                 poll_s: float = POLL_S, out=print):
        self.store, self.sweep_id = store, sweep_id
        self.submit = submit or (lambda store, config: jobs.submit_run(store, config, check=False))
        self.stop = stop or jobs.stop_run
        self.dispatch = dispatch or jobs.dispatch
        self.sleep, self.poll_s, self.out = sleep, poll_s, out
        self.spec = get_sweep(store, sweep_id).spec

    # ---- Optuna ----

    def study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        path = sweep_dir(self.store, self.sweep_id) / "optuna.db"
        storage = f"sqlite:///{path}"
        # A fresh seed per resume: a restarted sampler must not replay the random start-up suggestions.
        try:
            started = len(optuna.load_study(study_name=self.sweep_id, storage=storage).trials)
        except KeyError:
            started = 0
        n = self.spec.n_trials
        sampler = optuna.samplers.TPESampler(seed=self.spec.seed + started,
                                             n_startup_trials=max(2, min(10, n // 3)))
        p = self.spec.pruning
        pruner = optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_steps) \
            if p.enabled else optuna.pruners.NopPruner()
        return optuna.create_study(storage=storage, study_name=self.sweep_id, sampler=sampler, pruner=pruner,
                                   direction=self.spec.objective.direction, load_if_exists=True)

    @staticmethod
    def suggest(trial, p: SearchParam):
        if p.kind == "categorical":
            return trial.suggest_categorical(p.field, p.choices)
        if p.kind == "int":
            return trial.suggest_int(p.field, int(p.low), int(p.high))
        return trial.suggest_float(p.field, p.low, p.high, log=p.kind == "log_float")

    # ---- the loop ----

    def stop_requested(self) -> bool:
        return get_sweep(self.store, self.sweep_id).stop_requested

    def run(self) -> int:
        store, sweep_id = self.store, self.sweep_id
        now = time.time()
        with store.connect() as db:
            claimed = db.execute("UPDATE sweeps SET status='running', pid=?, heartbeat_at=?, "
                                 "started_at=COALESCE(started_at, ?) WHERE id=? AND status IN ('queued','running')",
                                 (os.getpid(), now, now, sweep_id)).rowcount
        if not claimed:
            self.out(f"sweep {sweep_id} has already ended; resume it to go on", flush=True)
            return 1
        beat = Heartbeat(lambda: update_sweep(store, sweep_id, heartbeat_at=time.time())).start()
        try:
            study = self.study()
            self.finish_interrupted(study)
            error = None
            while not self.stop_requested() and len(counted(list_trials(store, sweep_id))) < self.spec.n_trials:
                trial = study.ask()
                params = {p.field: self.suggest(trial, p) for p in self.spec.space}
                self.execute(study, trial.number, params, trial)
                if error := self.failing(list_trials(store, sweep_id)):
                    break
            status = "failed" if error else "stopped" if self.stop_requested() else "completed"
            finish_sweep(store, sweep_id, status, error=error)
            best = best_trial(self.spec, list_trials(store, sweep_id))
            self.out(f"sweep {sweep_id} {status}" + (f"; best trial {best.label}: {self.spec.objective.metric} "
                                                     f"{best.value:.6g} {best.params}" if best else ""), flush=True)
            return 0
        except BaseException as e:  # noqa: BLE001 - every failure must reach the store
            traceback.print_exc()
            finish_sweep(store, sweep_id, "failed", error=f"{type(e).__name__}: {e}")
            return 1
        finally:
            beat.stop()

    @staticmethod
    def failing(trials: list[Trial]) -> str | None:
        """Why to give up: the last FAILURES_IN_A_ROW trials failed (a broken base fails every trial alike)."""
        ended = counted(trials)
        last = ended[-FAILURES_IN_A_ROW:]
        if len(last) == FAILURES_IN_A_ROW and all(t.status == "failed" for t in last):
            return (f"{FAILURES_IN_A_ROW} trials in a row failed, the last with: {last[-1].error}\nFix the base "
                    "config or the search space, then resume the sweep")
        return None

    def finish_interrupted(self, study) -> None:
        """Trials a previous driver asked for but did not finish: wait for (or start) their runs and tell."""
        from optuna.trial import TrialState

        rows = {t.number: t for t in list_trials(self.store, self.sweep_id)}
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            row = rows.get(frozen.number)
            if row and row.status in TRIAL_FINAL:  # recorded, but the driver died before telling Optuna
                self.tell(study, row, row.value)
            elif row and row.run_id:
                self.out(f"trial {row.label}: waiting again for run {row.run_id}", flush=True)
                self.tell(study, *self.watch(row, None))
            else:
                self.execute(study, frozen.number, dict(frozen.params), None)

    def execute(self, study, number: int, params: dict, trial) -> None:
        row = Trial(self.sweep_id, number, None, "running", params, created_at=time.time())
        shown = ", ".join(f"{k}={format_value(v)}" for k, v in params.items())
        try:
            config = trial_config(self.spec, params, number)
            run = self.submit(self.store, config)
        except ConfigError as e:
            row.status, row.error, row.finished_at = "failed", "; ".join(e.errors), time.time()
            save_trial(self.store, row)
            self.out(f"trial {row.label} ({shown}): refused: {row.error}", flush=True)
            self.tell(study, row, None)
            return
        row.run_id = run.id
        if trial is not None:  # the study read alone (optuna-dashboard) names each trial's run
            trial.set_user_attr("run_id", run.id)
        save_trial(self.store, row)
        self.out(f"trial {row.label} ({shown}): run {run.id}", flush=True)
        self.tell(study, *self.watch(row, trial))

    def watch(self, row: Trial, trial) -> tuple[Trial, float | None]:
        """Wait for the trial's run to end, reporting its metric to Optuna as it is logged (for pruning)."""
        spec, store = self.spec, self.store
        metric, prune = spec.objective.metric, trial is not None and spec.pruning.enabled
        by_step, reported, last_id, logged = {}, set(), 0, set()  # a resumed attempt logs its steps again
        pruned = stop_sent = False
        while True:
            run = store.get_run(row.run_id)  # the status first: once it is final, every metric row is in
            for m in store.metrics_since(row.run_id, last_id):
                last_id = m["id"]
                logged.add(m["name"])
                if m["name"] != metric:
                    continue
                by_step[m["step"]] = m["value"]
                if prune and m["value"] is not None and math.isfinite(m["value"]) and m["step"] not in reported:
                    trial.report(m["value"], m["step"])
                    reported.add(m["step"])
            if not run.active and not resuming_itself(run):
                break
            if prune and not pruned and run.status == "running" and reported and trial.should_prune():
                pruned = True
                self.out(f"trial {row.label}: pruned at step {max(reported)} ({metric} worse than the median "
                         "of earlier trials there)", flush=True)
                self.stop(store, row.run_id)
            if not stop_sent and self.stop_requested():
                stop_sent = True
                self.stop(store, row.run_id)
            self.sleep(self.poll_s)
            self.dispatch(store)  # reconciles a dead worker and moves the run queue, even with no UI open
        row.finished_at = time.time()
        values = [by_step[step] for step in sorted(by_step)]
        value = reduce_series(values, spec.objective)
        if run.status == "completed":
            if value is None:
                row.status = "failed"
                row.error = (f"the run never logged a finite '{metric}'; it logged: "
                             f"{', '.join(sorted(logged)) or 'nothing'}")
            else:
                row.status, row.value = "completed", value
        elif run.status == "stopped" and pruned:
            finite = [v for v in values if v is not None and math.isfinite(v)]
            row.status, row.value = "pruned", finite[-1] if finite else None
        elif run.status == "stopped":
            row.status, row.error = "stopped", "stopped before it finished; the sweep runs another trial instead"
        else:
            row.status, row.error = "failed", (run.error or "the run failed")[-2000:]
        save_trial(store, row)
        outcome = f"{metric} {value:.6g}" if row.status == "completed" else row.status
        self.out(f"trial {row.label}: {outcome}" + (f" ({row.error.splitlines()[0]})" if row.error else ""),
                 flush=True)
        return row, row.value

    def tell(self, study, row: Trial, value: float | None) -> None:
        from optuna.trial import TrialState

        if row.status == "completed":
            study.tell(row.number, value, skip_if_finished=True)
        elif row.status == "pruned":
            study.tell(row.number, state=TrialState.PRUNED, skip_if_finished=True)
        else:
            study.tell(row.number, state=TrialState.FAIL, skip_if_finished=True)


def drive(sweep_id: str, workspace: str) -> int:
    store = RunStore(workspace)
    signal.signal(signal.SIGTERM, lambda *_: update_sweep(store, sweep_id, stop_requested=1))
    return SweepDriver(store, sweep_id).run()


def main(argv=None) -> int:
    return drive(*job_args("Drive one sweep's trials (started by the workbench).", argv, "drive"))
