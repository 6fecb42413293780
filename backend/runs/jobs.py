"""Starting, queueing, watching and stopping runs.

A run's processes: a detached supervisor (its own session, so it outlives the UI and the CLI), which runs
`accelerate launch -m backend.runs.worker` and records how the worker ended. The UI and the CLI only talk to the
store; `dispatch` starts the oldest queued run when no run is running, and is called on submit, by a supervisor
when its run ends and, in the UI server, by one background thread (`start_dispatcher`), so the queue moves
without a UI and no browser's poll writes to the store.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from backend.config import ConfigError, RunConfig
from backend.core.procs import (REPO_ROOT, Heartbeat, is_dead, job_args, kill_groups, pid_alive, processes_of,
                                spawn_detached)
from backend.runs import gpus
from backend.runs.deaths import oom_kills
from backend.runs.logs import collapse_repeats, log_path
from backend.runs.store import RUN_PREFIX, Run, RunStore, StoreFull, other_dispatchers, slot_holders

if TYPE_CHECKING:
    from backend.data import FormatInfo
    from backend.models.memory import MemoryEstimate

MAX_CONCURRENT = int(os.environ.get("WORKBENCH_MAX_CONCURRENT", "1"))
# On a GPU machine the free GPUs bound the runs side by side; the count above binds them there only when it is
# set, or while an evaluation holds the slot.
_COUNT_SET = "WORKBENCH_MAX_CONCURRENT" in os.environ
log = logging.getLogger(__name__)


def log_tail(store: RunStore, run_id: str, lines: int = 30) -> str:
    """The log's last lines, a library warning repeated at every step shown once (backend/runs/logs.py)."""
    path = log_path(store, run_id)
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 64_000))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(collapse_repeats(text.splitlines())[-lines:])


def preflight(config: RunConfig, workspace: Path) -> FormatInfo:
    """Refuse a run before any process starts: the model must be reachable and the dataset trainable.
    Returns the training dataset's format (what the CLI reports)."""
    from backend.data import DataOptions, DatasetError, generation_rows, prepare_dataset, prepare_eval_dataset
    from backend.data.templates import template_problem
    from backend.models import ModelError, check_model, local_folder, unknown_modules
    from backend.models.from_run import check_run_model
    from backend.rewards import validate_sources

    errors = []
    try:
        model, tokenizer_folder = config.model, local_folder(config.model)
        if config.model.strip().startswith(RUN_PREFIX):  # training on from a run: it must have saved a causal LM
            art = check_run_model(config.model, workspace)  # its base's modules, its own saved tokenizer
            model, tokenizer_folder = (art.base_model if art.kind == "lora" else str(art.folder)), art.folder
        else:
            check_model(config.model)
    except ModelError as e:
        errors.append(f"model: {e}")
    else:
        if config.finetuning == "lora" and (why := unknown_modules(model, config.lora.target_modules)):
            errors.append(f"lora.target_modules: {why}")
        if why := template_problem(config.data.chat_template, tokenizer_folder):
            errors.append(f"data.chat_template: {why}")
    try:
        dataset, info = prepare_dataset(config.dataset, config.mode, workspace=workspace,
                                        options=DataOptions.of(config))
    except DatasetError as e:
        dataset = None
        errors.append(f"dataset: {e}")
    else:
        if config.reward_sources and config.spec.online_rl:
            errors += validate_sources(config.reward_sources, dataset.column_names, workspace)
    e = config.eval
    try:  # the evaluation dataset is checked even when the training one failed
        eval_dataset = prepare_eval_dataset(e.dataset, e.split, config.seed, config.mode, dataset,
                                            workspace=workspace, options=DataOptions.of(config))[1]
    except DatasetError as err:
        eval_dataset = None
        errors.append(f"{'eval.dataset' if e.dataset else 'eval.split'}: {err}")
    if e.generate and eval_dataset is not None and not config.spec.online_rl:
        try:  # sft / dpo / kto score only what they generate at evaluation: the sources read those rows
            rows = generation_rows(eval_dataset, config.mode)
        except DatasetError as err:
            errors.append(f"eval.generate: {err}")
        else:
            errors += validate_sources(config.reward_sources, ["prompt", *rows.columns], workspace)
    if "ppo" in config.spec.sections and config.ppo.value_init_run:
        from backend.rewards import RewardSourceError
        from backend.rewards.model import locate_reward_model

        try:
            locate_reward_model(config.ppo.value_init_run, Path(workspace))
        except RewardSourceError as e:
            errors.append(f"ppo.value_init_run: {e}")
    from backend.runs.distributed import check

    errors += check(config, workspace)
    if why := disk_problem(config, workspace):
        errors.append(why)
    if errors:
        raise ConfigError(errors)
    return info


def memory_estimate(config: RunConfig, workspace: Path, here: gpus.Machine | None = None) -> MemoryEstimate:
    """The memory one process of the run needs (backend/models/memory.py), against this machine's: available RAM
    on a CPU, each GPU's memory on GPUs. ModelError when the model's config.json is not on this machine."""
    from backend.models.memory import estimate_memory, read_shape

    device, available = gpus.memory_here(here)
    return estimate_memory(config, read_shape(config.model, workspace), device, available=available)


def memory_lines(config: RunConfig, workspace: Path) -> list[str]:
    """The run log's memory lines: the estimate and, when it does not fit, a warning. Only a warning: the
    estimate is approximate, and memory another process holds now may be free when the run starts."""
    from backend.models import ModelError

    try:
        estimate = memory_estimate(config, workspace)
    except ModelError as e:
        return [f"memory: no estimate before the start ({e})"]
    except Exception as e:  # noqa: BLE001 - the estimate is advice: it never keeps a run from starting
        log.exception("estimating a run's memory failed")
        return [f"memory: no estimate before the start ({type(e).__name__}: {e})"]
    lines = [f"memory: {estimate.summary()}"]
    if estimate.fits is False:
        lines.append("warning: the memory estimate exceeds this machine's memory; the run may be killed for "
                     "memory. Lower per_device_train_batch_size, max_length or rl.max_completion_length, turn on "
                     "gradient_checkpointing, or train a LoRA adapter instead")
    return lines


def disk_problem(config: RunConfig, workspace: Path, free: int | None = None) -> str | None:
    """Why the run's checkpoints and final adapter would not fit on the workspace's disk, or None (also when
    the model's size cannot be read here: the check does not guess). free: the disk's free bytes; None
    measures them."""
    from backend.models import ModelError
    from backend.models.memory import run_disk_need, size_text

    try:
        need = run_disk_need(config, workspace)
    except ModelError:
        return None
    except Exception:  # noqa: BLE001 - an estimate that fails never keeps a run from starting
        log.exception("estimating a run's disk need failed")
        return None
    if free is None:
        folder = Path(workspace).resolve() / "runs"  # where checkpoints go
        while not folder.exists():  # not made yet: the disk it will be made on
            folder = folder.parent
        free = shutil.disk_usage(folder).free
    if need <= free:
        return None
    kept = config.checkpoints_kept()
    final = "the adapter" if config.finetuning == "lora" else "the model"
    what = f"{kept} checkpoint{'s' if kept > 1 else ''} and {final}" if kept else final
    return (f"disk: the run needs about {size_text(need)} for {what}, the workspace disk has {size_text(free)} free; "
            "free some space, keep fewer checkpoints (save_total_limit) or use a workspace on a larger disk")


_NEARLY_FULL = 64 * 2**20  # less free than this on a run's disk after a failure: the disk is why


def disk_nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < _NEARLY_FULL
    except OSError:
        return False


def disk_full_message(store: RunStore, run_id: str, error: str) -> str:
    """A run that failed writing to a full disk: which disk, how full, and what is left to resume from."""
    from backend.models.memory import size_text

    folder = store.run_dir(run_id)
    free = shutil.disk_usage(folder).free
    kept = last_checkpoint(store, run_id)
    left = f"the last complete checkpoint (step {kept[1]}) is kept: free some space, then resume the run" if kept \
        else "no complete checkpoint was saved"
    return f"the disk holding {folder} is full ({size_text(free)} free): {error}; {left}"


def submit_run(store: RunStore, config: RunConfig, check: bool = True) -> Run:
    if check:
        preflight(config, store.workspace)
    run = store.create_run(pin_paths(config, store.workspace))
    (store.run_dir(run.id) / "config.yaml").write_text(_config_yaml(run.config))
    # before the supervisor appends the worker's output
    log_path(store, run.id).write_text("".join(f"{line}\n" for line in memory_lines(run.config, store.workspace)))
    dispatch(store)
    return store.get_run(run.id)


def pin_paths(config: RunConfig, workspace: Path) -> RunConfig:
    """The config with dataset files given relative to the current directory made absolute, as preflight found
    them: the worker runs from the repository root."""
    from backend.data import pinned_spec

    dataset, eval_dataset = pinned_spec(config.dataset, workspace), pinned_spec(config.eval.dataset, workspace)
    if (dataset, eval_dataset) == (config.dataset, config.eval.dataset):
        return config
    return config.model_copy(update={"dataset": dataset,
                                     "eval": config.eval.model_copy(update={"dataset": eval_dataset})})


def _config_yaml(config: RunConfig) -> str:
    from backend.config import to_yaml

    return to_yaml(config)


def reconcile(store: RunStore) -> list[str]:
    """Mark running runs whose processes are all gone (the supervisor too, so nothing recorded how the worker
    ended: a machine restart, every process killed) as interrupted, with the step they can resume from.
    Returns the ids it changed."""
    now, changed = time.time(), []
    for run in store.list_runs(("running",)):
        if is_dead(run.pid, run.heartbeat_at, run.started_at or run.created_at, now=now):
            why = "the worker never started" if run.pid is None else \
                f"every process of the run is gone (supervisor pid {run.pid})"
            checkpoint = last_checkpoint(store, run.id)
            why += f"; resume from step {checkpoint[1]}" if checkpoint else "; no checkpoint to resume from"
            tail = log_tail(store, run.id)
            if store.finish_run(run.id, "interrupted",
                                error=why + (f"\n--- last log lines ---\n{tail}" if tail else "")):
                changed.append(run.id)
    return changed


# ---- resuming ----

def checkpoints(store: RunStore, run_id: str) -> list[tuple[int, Path]]:
    """The run's complete checkpoints as (step, folder), oldest first. transformers (and the PPO loop) write a
    checkpoint in place, not atomically, trainer_state.json last: a folder without a readable one was cut off
    mid-save (a kill, a full disk) and is skipped, and the older ones are only deleted after it is written."""
    folder = store.run_dir(run_id) / "checkpoints"
    found = []
    for path in folder.glob("checkpoint-*") if folder.is_dir() else ():
        try:
            step = json.loads((path / "trainer_state.json").read_text())["global_step"]
        except (OSError, ValueError, KeyError):
            continue
        found.append((int(step), path))
    return sorted(found)


def last_checkpoint(store: RunStore, run_id: str) -> tuple[Path, int] | None:
    """The run's newest complete checkpoint and its step, or None."""
    found = checkpoints(store, run_id)
    if not found:
        return None
    step, path = found[-1]
    return path, step


def resume_run(store: RunStore, run_id: str, wait_s: float = 10.0) -> Run:
    """Queue a failed, stopped or interrupted run again from its last checkpoint, as its next attempt; the
    worker resumes the trainer (optimizer, scheduler, RNG, data order; PPO also its KL coefficient; the cost
    multipliers λ) from there. Raises ValueError, with why, when it cannot."""
    reconcile(store)
    run = store.get_run(run_id)
    if run.active:
        raise ValueError(f"run {run_id} is {run.status}: only an ended run can be resumed")
    if run.status == "completed":
        raise ValueError(f"run {run_id} has completed; there is nothing to resume")
    # the last attempt's supervisor may still be ending it, or a worker outlived its supervisor: never two
    def alive() -> list[str]:  # a pid with a fresh heartbeat: an old pid reused by another process is not it
        r = store.get_run(run_id)
        return [f"its {what}, pid {pid}," for what, pid, beat in (("supervisor", r.pid, r.heartbeat_at),
                                                                 ("worker", r.worker_pid, r.worker_beat_at))
                if pid and not is_dead(pid, beat, r.finished_at)]

    deadline = time.time() + wait_s
    while alive() and time.time() < deadline:
        time.sleep(0.2)
    if running := alive():
        raise ValueError(f"run {run_id} is still shutting down ({running[0]} is running); try again in a few "
                         "seconds")
    checkpoint = last_checkpoint(store, run_id)
    if checkpoint is None:
        every = run.config.save_steps
        why = "its checkpoint interval was 0" if every == 0 and not run.config.save_minutes else \
            "it ended before its first checkpoint"
        raise ValueError(f"run {run_id} has no checkpoint to resume from; {why}")
    run = store.requeue_for_resume(run_id, checkpoint[1])
    dispatch(store)
    return store.get_run(run_id)


def resume_checkpoint(store: RunStore, run: Run) -> str | None:
    """What the worker passes as `resume_from_checkpoint`: the last checkpoint, on a resumed attempt."""
    if run.attempt <= 1:
        return None
    found = last_checkpoint(store, run.id)
    return str(found[0]) if found else None


def _claim_next(store: RunStore) -> str | None:
    gpu_ids = gpus.machine().gpu_ids
    with store.transaction() as db:
        others = slot_holders(db)
        running = db.execute("SELECT COUNT(*) FROM runs WHERE status='running'").fetchone()[0] + others
        if running >= MAX_CONCURRENT and (not gpu_ids or others or _COUNT_SET):
            return None
        if gpu_ids:
            return _claim_gpus(store, db, gpu_ids)
        row = db.execute("SELECT id FROM runs WHERE status='queued' ORDER BY created_at LIMIT 1").fetchone()
        if row is None:
            return None
        _mark_started(db, row[0], ())
        return row[0]


def _mark_started(db, run_id: str, held: tuple[str, ...]) -> None:
    now = time.time()
    db.execute("UPDATE runs SET status='running', started_at=?, heartbeat_at=?, gpus=?, waiting='' WHERE id=?",
               (now, now, ",".join(held), run_id))


def _claim_gpus(store: RunStore, db, gpu_ids: tuple[str, ...]) -> str | None:
    """The oldest queued run that can start, with the lowest free GPUs it needs. Runs start in order: while the
    oldest waits for GPUs the younger ones wait behind it (a stream of small runs cannot starve a large one),
    each with why. A run that needs more GPUs than the machine has fails at once, so it holds up no queue."""
    holders = {g: row["name"] for row in db.execute("SELECT name, gpus FROM runs WHERE status='running'")
               for g in row["gpus"].split(",") if g}
    queued = []
    for row in db.execute("SELECT * FROM runs WHERE status='queued' ORDER BY created_at").fetchall():
        run = RunStore._row_to_run(row)
        if (need := gpus.gpus_needed(run.config)) > len(gpu_ids):
            db.execute("UPDATE runs SET status='failed', finished_at=?, error=? WHERE id=?",
                       (time.time(), f"the run {gpus.waiting_reason(need, gpu_ids, holders)}", run.id))
        else:
            queued.append(run)
    for i, run in enumerate(queued):
        need = gpus.gpus_needed(run.config)
        got = gpus.allocate(need, gpu_ids, set(holders))
        if got is not None:
            _mark_started(db, run.id, got)
            return run.id
        why = gpus.waiting_reason(need, gpu_ids, holders)
        for waiting, text in [(run, why), *((r, f"queued behind {run.name}, which is {why}") for r in queued[i + 1:])]:
            db.execute("UPDATE runs SET waiting=? WHERE id=? AND waiting<>?", (text, waiting.id, text))
        return None
    return None


def dispatch(store: RunStore) -> list[str]:
    """Start queued runs while there is room; returns the ids started."""
    reconcile(store)
    started = []
    while (run_id := _claim_next(store)) is not None:
        _spawn_supervisor(store, run_id)
        started.append(run_id)
    for other in other_dispatchers():  # queued evaluations take the slot when no run wants it
        other(store)
    return started


def start_dispatcher(store: RunStore, every_s: float = 2.0,
                     also: Sequence[Callable[[RunStore], object]] = ()) -> Heartbeat:
    """One thread per server process, however many browsers are open, that calls `dispatch(store)` (and each of
    `also`) now and every `every_s` seconds; `.stop()` it at shutdown."""
    def once() -> None:
        for step in (dispatch, *also, _keep_warm):
            try:
                step(store)
            except Exception:  # a locked store or a bad row must not end the thread, nor skip the other steps
                log.exception("dispatching queued runs failed")

    return Heartbeat(once, every_s, name="workbench-dispatcher").start()


def _keep_warm(store: RunStore) -> None:
    """A warm supervisor waiting for the next run (backend/runs/warm.py), started while no run trains."""
    from backend.runs import warm

    with store.connect() as db:
        busy = db.execute("SELECT 1 FROM runs WHERE status='running' LIMIT 1").fetchone() is not None
    warm.ensure_warm(store.workspace, busy=busy)


def _spawn_supervisor(store: RunStore, run_id: str) -> None:
    from backend.runs import warm

    if pid := warm.claim(store.workspace, run_id):  # a supervisor started earlier, its imports done
        store.update_run(run_id, pid=pid)
        return
    proc = spawn_detached(["-m", "backend.runs.jobs", "supervise", run_id, "--workspace", str(store.workspace)],
                          log_path(store, run_id))
    store.update_run(run_id, pid=proc.pid)


def stop_run(store: RunStore, run_id: str, force: bool = False) -> str:
    """Ask a run to stop. Queued: stopped at once. Running: it saves its adapter and exits (force: killed)."""
    run = store.get_run(run_id)
    if run.status == "queued":
        store.finish_run(run_id, "stopped")
        return "stopped"
    if run.status != "running":
        return run.status
    store.request_stop(run_id)
    if not force:
        return "stopping"
    left = kill_groups(run_processes(store, run))
    why = "killed on request before it could save"
    if left:
        why += f"; processes {', '.join(map(str, left))} did not end"
    store.finish_run(run_id, "stopped", error=why)
    return "stopped"


def run_processes(store: RunStore, run: Run) -> list[int]:
    """Every process of a run on this machine: the supervisor (its group holds accelerate's launcher) and each
    rank of the worker, which torchrun starts in sessions of their own."""
    ranks = processes_of("backend.runs.worker", run.id, str(store.workspace))
    return [p for p in [run.pid, run.worker_pid, *ranks] if p and pid_alive(p)]


def delete_runs(store: RunStore, run_ids: list[str]) -> list[str]:
    """Delete ended runs (rows, then folders); a queued or running run is refused (DeleteRefused): stop it
    first. Runs whose worker died are marked failed first, so they can go. Returns folders left behind."""
    reconcile(store)
    return store.delete_runs(run_ids)


# ---- the supervisor process ----

def launch_command(config: RunConfig, run_id: str, workspace: Path) -> list[str]:
    import torch

    from backend.runs.distributed import launch_flags

    return [sys.executable, "-m", "accelerate.commands.launch",
            *launch_flags(config, workspace, cuda=torch.cuda.is_available()),
            "-m", "backend.runs.worker", run_id, "--workspace", str(workspace)]


def supervise(run_id: str, workspace: str, fork: Callable[[str, str], int] | None = None) -> int:
    """Start the run's worker (again, for each auto-resume) and record how it ended. `fork`: this process was
    started before the run with the worker's imports done (backend/runs/warm.py), and `fork(run_id, workspace)`
    is the worker's run: a single-process run on a CPU runs it in a forked child rather than through
    `accelerate launch`."""
    store = RunStore(workspace)
    store.update_run(run_id, pid=os.getpid(), heartbeat_at=time.time())
    run = store.get_run(run_id)
    watch = StallWatch(store, run_id)
    beat = Heartbeat(watch.beat).start()
    rc, server, resumed = 1, None, 0
    try:
        plan = gpus.plan_launch(run.config, run.gpu_ids)
        with open(log_path(store, run_id), "ab") as log:
            def say(line: str) -> None:
                try:
                    log.write(f"{line}\n".encode())
                    log.flush()
                except OSError:  # the run's disk is full: the store still says how the run ended
                    pass

            if plan.server_gpus:
                try:
                    server = _start_server(store, run, plan)
                except Exception as e:  # noqa: BLE001 - e.g. the model is gone: the run fails saying so
                    store.finish_run(run_id, "failed", error=f"the vLLM server could not start: {e}")
                    raise
            if line := plan.describe():
                say(line)
            signal.signal(signal.SIGTERM, lambda *_: store.request_stop(run_id))
            forked = fork is not None and _fork_refusal(run.config, plan, say) is None
            while True:
                if forked:
                    from backend.runs.warm import fork_worker, launcher_env

                    try:
                        env = {**launcher_env(launch_command(run.config, run_id, store.workspace)),
                               **plan.train_env()}
                        proc = fork_worker(partial(fork, run_id, str(store.workspace)), env, beat)
                    except Exception as e:  # noqa: BLE001 - e.g. accelerate's launcher code changed: start cold
                        say(f"warm start failed ({type(e).__name__}: {e}); starting through accelerate launch")
                        forked = False
                if not forked:
                    proc = subprocess.Popen(launch_command(run.config, run_id, store.workspace), stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
                                            env=dict(os.environ, **plan.train_env()))
                watch.proc, kills = proc, oom_kills()
                rc = gpus.wait_for(proc, server, on_server_exit=lambda: store.finish_run(
                    run_id, "failed", error=server.death_message()))
                watch.proc = None
                if rc < 0 and (left := processes_of("backend.runs.worker", run_id, str(store.workspace))):
                    kill_groups(left, wait_s=5)  # the launcher was killed: torchrun's ranks outlive it
                _record_death(store, run, rc, launcher_pid=None if forked else proc.pid, oom_kills=kills)
                step, why = auto_resume_from(store.get_run(run_id), resumed, last_checkpoint(store, run_id),
                                             server_alive=server is None or server.exit_code() is None,
                                             limit=watch.restart_limit(run.config))
                if why:
                    say(why)
                if step is None:
                    if resumed:
                        _note_resumes(store, run_id, resumed)
                    break
                resumed += 1
                run = store.requeue_for_resume(run_id, step, in_place=True)
    finally:
        if server is not None:
            server.stop()
        beat.stop()
        _record_death(store, run, rc)
        dispatch(store)
    return rc


class StallWatch:
    """The supervisor's beat: its heartbeat, and the stall rule (backend/runs/stall.py) applied to its worker.
    A stalled worker is marked (runs.stalled) and, by stall_action, left alone, ended (the run fails saying
    why) or ended to be resumed from its last checkpoint."""

    RESTARTS = 3  # stall_action restart: resumes at most this many (or auto_resume's, when more)

    def __init__(self, store: RunStore, run_id: str):
        self.store, self.run_id = store, run_id
        self.proc: subprocess.Popen | None = None  # the worker's launcher (or forked worker) while it runs
        self.restarting = False

    def restart_limit(self, config: RunConfig) -> int | None:
        if not self.restarting:
            return None
        self.restarting = False
        return max(config.auto_resume, self.RESTARTS)

    def beat(self) -> None:
        from backend.runs.stall import overdue_stop, stall_reason

        self.store.heartbeat(self.run_id)
        run = self.store.get_run(self.run_id)
        now = time.time()
        if (forced := overdue_stop(run, now)) and self.proc is not None:
            print(f"stop: {forced}", flush=True)
            self.store.finish_run(self.run_id, "stopped", error=forced)
            self._end_worker(run)
            return
        why = stall_reason(run, now) or ""
        if bool(why) == bool(run.stalled):  # unchanged (still stalled: the mark stays as first written)
            return
        self.store.update_run(self.run_id, stalled=why)
        print(f"stalled: {why}; stall_action: {run.config.stall_action}" if why else
              "the worker progresses again: no longer stalled", flush=True)
        if not why or run.config.stall_action == "warn" or self.proc is None:
            return
        action = run.config.stall_action
        self.restarting = action == "restart"
        self.store.finish_run(self.run_id, "failed", error=f"stalled: {why}; " + (
            "the worker was ended to resume from its last checkpoint (stall_action: restart)" if self.restarting
            else "the worker was ended (stall_action: stop)"), exit_code=None if self.restarting else EXIT_REPEATS)
        self._end_worker(run)

    def _end_worker(self, run: Run) -> None:
        """Kill the worker's launcher and every rank (never this supervisor): gpus.wait_for then returns."""
        workers = processes_of("backend.runs.worker", run.id, str(self.store.workspace))
        kill_groups([p for p in {self.proc.pid, run.worker_pid, *workers} if p and p != os.getpid()], wait_s=5)


def _fork_refusal(config: RunConfig, plan: gpus.LaunchPlan, say: Callable[[str], None]) -> str | None:
    """Why a warm supervisor starts this run's worker cold after all (said in the run log), or None."""
    import torch

    from backend.runs.warm import fork_refusal

    why = fork_refusal(config, cuda=torch.cuda.is_available(), server=bool(plan.server_gpus or plan.vllm_url))
    say(f"warm start: {why}; starting the worker through accelerate launch" if why else
        "warm start: the worker is forked from a supervisor that had imported torch, transformers and TRL")
    return why


def _record_death(store: RunStore, run: Run, rc: int, launcher_pid: int | None = None,
                  oom_kills: int | None = None) -> None:
    """Fail an attempt whose worker ended without recording how, saying how it died; lead a multi-process run's
    error with the rank that died first. `launcher_pid`: `rc` is accelerate's launcher's; `oom_kills`: the
    cgroup's OOM count when the attempt started (memory is named only with evidence)."""
    from backend.runs.deaths import blamed_rank, death_message, first_rank_death, oom_evidence

    ended = store.get_run(run.id)
    if ended.attempt != run.attempt or ended.status not in ("running", "failed"):
        return  # a later attempt's to judge, or an end the run recorded itself
    tail = log_tail(store, run.id, lines=60)
    # the kernel's log and the cgroup are read only for a death by a signal the worker could not record
    first = first_rank_death(tail)
    killed = ended.status == "running" or (first is not None and first.signal_name == "SIGKILL")
    oom = oom_evidence(ended.worker_pid, oom_kills, store.last_metrics(run.id).get("memory/peak_rss_gb")) \
        if rc != 0 and killed else None
    if ended.status == "failed":
        if why := blamed_rank(ended.error, tail, oom):
            store.update_run(run.id, error=why)
        return
    why = death_message(rc, ended.worker_pid, tail, launcher_pid=launcher_pid, oom=oom)
    full = disk_nearly_full(store.run_dir(run.id))  # the worker could not even record why: say it
    if full:
        why = disk_full_message(store, run.id, why)
    try:
        shown = "\n".join(tail.splitlines()[-30:])
        store.finish_run(run.id, "failed", error=why + (f"\n--- last log lines ---\n{shown}" if shown else ""),
                         exit_code=EXIT_REPEATS if full else None)
    except StoreFull:  # not even the reserve was left: the run shows as interrupted once its beat is old
        log.warning("run %s: its end could not be recorded, the store's disk is full", run.id)


# The worker's exit code for a failure a resume would meet again: refused settings or data (a dataset file deleted
# since the submit, a model gone) or a full disk. accelerate's launcher exits 1 whatever its worker's code, so the
# worker records it in the store too (runs.exit_code).
EXIT_REPEATS = 2


def _note_resumes(store: RunStore, run_id: str, resumed: int) -> None:
    """A run that failed after auto-resumes says so on its error's first line."""
    ended = store.get_run(run_id)
    if ended.status == "failed":
        first, sep, rest = (ended.error or "").partition("\n")
        store.update_run(run_id, error=f"{first} (after {resumed} auto-resume{'s' if resumed > 1 else ''}){sep}{rest}")


def resuming_itself(run: Run) -> bool:
    """A failed run whose supervisor is alive and may still resume it (auto_resume): whoever waits for the run to
    end waits on. The worker records its failure before it exits, seconds before the supervisor decides."""
    return (run.status == "failed" and run.config.auto_resume > 0 and run.exit_code != EXIT_REPEATS
            and not run.stop_requested and not is_dead(run.pid, run.heartbeat_at, run.finished_at))


def auto_resume_from(ended: Run, resumed: int, checkpoint: tuple[Path, int] | None,
                     server_alive: bool = True, limit: int | None = None) -> tuple[int | None, str]:
    """Whether the supervisor resumes a run whose attempt has just ended (auto_resume): (the checkpoint step to
    resume from, or None; the run log line saying so, or ""). Only a failure is resumed: never a stop, nor a
    worker that exited with EXIT_REPEATS (refused settings or data, a full disk: it would fail the same way).
    `limit`: resumes allowed in all (default auto_resume; a stalled worker restarted counts against its own)."""
    limit = ended.config.auto_resume if limit is None else limit
    if not limit or ended.status != "failed" or ended.stop_requested:
        return None, ""
    if ended.exit_code == EXIT_REPEATS:
        return None, "auto-resume: not resumed, a resume would fail the same way"
    if not server_alive:
        return None, "auto-resume: not resumed, the vLLM server has ended"
    if resumed >= limit:
        return None, f"auto-resume: gave up after {resumed}/{limit}"
    if checkpoint is None:
        return None, "auto-resume: not resumed, no complete checkpoint yet"
    return checkpoint[1], f"auto-resume {resumed + 1}/{limit} from step {checkpoint[1]}"


def _start_server(store: RunStore, run: Run, plan: gpus.LaunchPlan) -> gpus.ServerProcess:
    """The run's vLLM server (`trl vllm-serve`) on its own GPUs; the trainer waits for it to answer."""
    from backend.models.from_run import training_model

    command = plan.server_command(run.config, training_model(run.config.model, store.workspace))
    return gpus.ServerProcess(command, plan.server_env(), store.run_dir(run.id) / "vllm.log").start()


def main(argv=None) -> int:
    return supervise(*job_args("Supervise one run's worker (started by the workbench).", argv, "supervise"))


if __name__ == "__main__":
    sys.exit(main())
