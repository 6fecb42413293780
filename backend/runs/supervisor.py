"""The supervisor process of a run: a detached process (its own session, so it outlives the UI and the CLI)
that runs `accelerate launch -m backend.runs.worker` (a single process: the worker itself, or forked from a warm
process), watches it for stalls and stops, records how it ended, resumes it by itself (auto_resume), and moves the
queue on when it ends.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from backend.config import RunConfig
from backend.core.procs import REPO_ROOT, Heartbeat, is_dead, job_args, kill_groups, processes_of
from backend.runs import gpus
from backend.runs.checkpoints import last_checkpoint
from backend.runs.deaths import oom_kills
from backend.runs.jobs import dispatch
from backend.runs.logs import log_path, log_tail
from backend.runs.preflight import disk_full_message, disk_nearly_full
from backend.core.database import StoreFull
from backend.runs.store import Run, RunStore

log = logging.getLogger(__name__)


def launch_command(config: RunConfig, run_id: str, workspace: Path) -> list[str]:
    import torch

    from backend.runs.distributed import launch_flags

    return [sys.executable, "-m", "accelerate.commands.launch",
            *launch_flags(config, workspace, cuda=torch.cuda.is_available()),
            "-m", "backend.runs.worker", run_id, "--workspace", str(workspace)]


def direct_command(run_id: str, workspace: Path) -> list[str]:
    """The worker of a single-process run started without accelerate's launcher, which would only import torch
    and accelerate again in a process of its own before it (seconds of every cold start): the worker sets the
    environment the launcher would have given it, as a forked one does (backend/runs/warm.py)."""
    return [sys.executable, "-m", "backend.runs.worker", "--direct", run_id, "--workspace", str(workspace)]


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
            from backend.runs.warm import fork_refusal

            # what needs accelerate's launcher: the fork's reasons but CUDA, which a new process may use
            direct = fork_refusal(run.config, cuda=False, server=plan.serves) is None
            while True:
                if store.stop_requested(run_id):  # asked while a vLLM server started (or between attempts)
                    store.finish_run(run_id, "stopped", error="stopped before its worker started")
                    rc = 0
                    break
                if forked:
                    from backend.runs.warm import fork_worker, launcher_env

                    try:
                        env = {**launcher_env(launch_command(run.config, run_id, store.workspace)),
                               **plan.train_env()}
                        proc = fork_worker(partial(fork, run_id, str(store.workspace)), env, beat)
                    except Exception as e:  # noqa: BLE001 - e.g. accelerate's launcher code changed: start cold
                        say(f"warm start failed ({type(e).__name__}: {e}); starting the worker cold")
                        forked = False
                if not forked:
                    command = (direct_command(run_id, store.workspace) if direct
                               else launch_command(run.config, run_id, store.workspace))
                    proc = subprocess.Popen(command, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
                                            env=dict(os.environ, **plan.train_env()))
                watch.proc, kills = proc, oom_kills()
                rc = gpus.wait_for(proc, server, on_server_exit=lambda: store.finish_run(
                    run_id, "failed", error=server.death_message()))
                watch.proc = None
                if rc < 0 and (left := processes_of("backend.runs.worker", run_id, str(store.workspace))):
                    kill_groups(left, wait_s=5)  # the launcher was killed: torchrun's ranks outlive it
                _record_death(store, run, rc, launcher_pid=None if forked or direct else proc.pid, oom_kills=kills)
                restarting = watch.restarting
                step, why = auto_resume_from(store.get_run(run_id), resumed, last_checkpoint(store, run_id),
                                             server_alive=server is None or server.exit_code() is None,
                                             limit=watch.restart_limit(run.config), from_scratch=restarting)
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

    why = fork_refusal(config, cuda=torch.cuda.is_available(), server=plan.serves)
    say(f"warm start: {why}; starting the worker cold" if why else
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
    # the kernel names the pid it killed: the rank that died first where one is known
    oom = oom_evidence(first.pid if first is not None else ended.worker_pid, oom_kills,
                       store.last_metrics(run.id).get("memory/peak_rss_gb")) \
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
                     server_alive: bool = True, limit: int | None = None,
                     from_scratch: bool = False) -> tuple[int | None, str]:
    """Whether the supervisor resumes a run whose attempt has just ended (auto_resume): (the checkpoint step to
    resume from, or None; the run log line saying so, or ""). Only a failure is resumed: never a stop, nor a
    worker that exited with EXIT_REPEATS (refused settings or data, a full disk: it would fail the same way).
    `limit`: resumes allowed in all (default auto_resume; a stalled worker restarted counts against its own).
    `from_scratch`: with no checkpoint yet, start again at step 0 (stall_action restart: the run was ended by its
    supervisor, not by a failure a new attempt would meet again)."""
    limit = ended.config.auto_resume if limit is None else limit
    if not limit or ended.status != "failed" or ended.stop_requested:
        return None, ""
    if ended.exit_code == EXIT_REPEATS:
        return None, "auto-resume: not resumed, a resume would fail the same way"
    if not server_alive:
        return None, "auto-resume: not resumed, the vLLM server has ended"
    if resumed >= limit:
        return None, f"auto-resume: gave up after {resumed}/{limit}"
    if checkpoint is None and from_scratch:
        return 0, f"auto-resume {resumed + 1}/{limit} from scratch: no complete checkpoint yet"
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
    from backend.workspace import load_providers  # a process's entry point: see there

    load_providers()
    sys.exit(main())
