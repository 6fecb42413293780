"""A warm supervisor: a run's supervisor started before the run (`python -m backend.runs.worker --warm`), with
torch, transformers, TRL, peft and every mode already imported (most of a cold start on a CPU: the worker's
imports). The server's dispatcher keeps one waiting per workspace (`ensure_warm`); the next run it starts is
handed to it (`claim`) instead of a cold supervisor, and it forks the worker, which inherits the
imports and runs with the environment `accelerate launch` would have given it.

Only a single-process run on a machine without CUDA forks (`fork_refusal`): several processes need accelerate's
launcher, and CUDA must not be initialised before a fork (not yet tried on GPU hardware). Anything else starts
cold as before. WORKBENCH_WARM_WORKER=0 turns it off. A warm process whose code or interpreter is not the
current one is not used; one ends itself when the server that started it has gone, or after WARM_IDLE_S idle.
The next one is started once no run is training (its imports would slow the run down).

Files in <workspace>/warm/: `<pid>.ready` (content: its fingerprint) while it waits; the dispatcher claims
it by renaming it to `<pid>.run-<run id>` (atomic: of two dispatchers one wins); `warm.log` its output before.
"""
from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

from backend.config import RunConfig
from backend.core.procs import REPO_ROOT, argv_of, child_env, pid_alive, spawn_detached

WARM_IDLE_S = 3600.0
POLL_S = 0.02
RETRY_S = 300.0  # a warm process that died before it was ready is not started again for this long
_VOLATILE = {"_", "OLDPWD", "SHLVL"}  # shell bookkeeping that differs between equal environments
_ENV = "WORKBENCH_WARM_WORKER"


def enabled() -> bool:
    # forking a process that has imported torch is only safe where fork is the usual way (not macOS, not Windows)
    return os.environ.get(_ENV, "1") != "0" and sys.platform == "linux"


def warm_dir(workspace) -> Path:
    return Path(workspace) / "warm"


def fingerprint(environ: Mapping[str, str] | None = None) -> str:
    """What a warm process runs: the interpreter, the newest source file of the workbench's backend and the
    environment (a warm process has its own; `environ` None: the one a process started from here would have).
    A run is only handed to a warm process that would run it as a cold start would."""
    newest = max((p.stat().st_mtime_ns for p in (REPO_ROOT / "backend").rglob("*.py")), default=0)
    env = child_env() if environ is None else environ
    digest = hashlib.sha1(repr(sorted((k, v) for k, v in env.items() if k not in _VOLATILE)).encode()).hexdigest()
    return hashlib.sha1(f"{sys.executable}|{newest}|{digest}".encode()).hexdigest()[:16]


def _is_warm(pid: int, workspace) -> bool:
    """`pid` is a live warm process of this workspace (a pid in a file that outlived a reboot may be anyone's)."""
    argv = argv_of(pid)
    if "--warm" not in argv or "--workspace" not in argv[:-1]:
        return False
    return Path(argv[argv.index("--workspace") + 1]).resolve() == Path(workspace).resolve() and pid_alive(pid)


def fork_refusal(config: RunConfig, cuda: bool, server: bool) -> str | None:
    """Why this run starts cold rather than forked from a warm supervisor (None: it can fork)."""
    if config.world_size > 1:
        return "several processes start through accelerate's launcher"
    if config.distributed.accelerate_config:
        return "an accelerate config file is launched as it says"
    if config.distributed.strategy != "ddp":
        return f"{config.distributed.strategy} starts through accelerate's launcher"
    if server:
        return "a vLLM server starts beside the trainer"
    if cuda:
        return "CUDA is not initialised in a forked process"
    return None


# ---- the dispatcher's side ----

def _entries(workspace) -> list[tuple[int, Path]]:
    out = []
    for path in warm_dir(workspace).glob("*.ready"):
        try:
            out.append((int(path.stem), path))
        except ValueError:
            continue
    return out


def ensure_warm(workspace, busy: bool = False) -> int | None:
    """One warm process waiting (or starting) for this workspace; stale ones (other code) are ended. `busy`: a run
    is training, so none is started now. Returns the pid started, if one was."""
    if not enabled():
        return None
    from backend.runs import gpus

    if gpus.machine().gpus:  # never forked there (fork_refusal): a warm process would only cost memory
        return None
    folder = warm_dir(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    current = fingerprint()
    starting = folder / "starting"
    started = _read(starting).split()  # read before the entries: one that turns ready meanwhile is counted
    waiting = False
    for pid, path in _entries(workspace):
        alive = _is_warm(pid, workspace)
        if alive and _read(path) == current:
            waiting = True
            continue
        try:  # take it back from the pool before ending it: no dispatcher can claim it meanwhile
            path.rename(path.with_suffix(".gone"))
        except OSError:
            continue
        if alive:
            _terminate(pid)
    for gone in folder.glob("*.gone"):
        if not pid_alive(int(gone.stem) if gone.stem.isdigit() else None):
            gone.unlink(missing_ok=True)
    if waiting:
        return None
    if len(started) == 3 and started[1] == current and (
            _is_warm(int(started[0]), workspace) or time.time() - float(started[2]) < RETRY_S):
        return None  # still importing, or it died before it was ready (warm.log says why): not in a loop
    if busy:  # its imports would take CPU from the run that trains; the next one starts when this one ends
        return None
    proc = spawn_detached(["-m", "backend.runs.worker", "--warm", "--workspace", str(Path(workspace))],
                          folder / "warm.log")
    starting.write_text(f"{proc.pid} {current} {time.time():.0f}")
    return proc.pid


def claim(workspace, run_id: str) -> int | None:
    """Hand `run_id` to a waiting warm process of the current code; its pid, or None (then start cold)."""
    if not enabled():
        return None
    current = fingerprint()
    for pid, path in _entries(workspace):
        if _read(path) != current or not _is_warm(pid, workspace):
            continue
        try:
            path.rename(path.with_name(f"{pid}.run-{run_id}"))
        except OSError:  # another dispatcher took it first
            continue
        return pid
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


# ---- the warm process ----

def wait_for_run(workspace: str, code: str, parent: int, idle_s: float = WARM_IDLE_S) -> str | None:
    """Announce this process as ready for `code` (the fingerprint taken before its imports: a file edited while
    it imported makes it stale) and wait until a dispatcher claims it (the run id), `idle_s` passes or the
    process that started it (`parent`, read before the imports) is gone."""
    folder, pid = warm_dir(workspace), os.getpid()
    ready = folder / f"{pid}.ready"
    tmp = folder / f"{pid}.tmp"
    tmp.write_text(code)
    tmp.rename(ready)
    starting = folder / "starting"
    if _read(starting).split()[:1] == [str(pid)]:
        starting.unlink(missing_ok=True)  # waiting now: a claim of this one lets the dispatcher start the next
    deadline = time.monotonic() + idle_s
    while True:
        if claimed := next(folder.glob(f"{pid}.run-*"), None):
            claimed.unlink(missing_ok=True)
            return claimed.name.split(".run-", 1)[1]
        if not ready.exists() and not next(folder.glob(f"{pid}.run-*"), None):
            return None  # ended by ensure_warm (another fingerprint)
        if time.monotonic() > deadline or os.getppid() != parent:  # idle, or the server that started it is gone
            try:
                ready.rename(ready.with_suffix(".gone"))  # atomic: a claim made just now wins over the timeout
            except OSError:
                continue
            return None
        time.sleep(POLL_S)


def launcher_env(command: list[str]) -> dict[str, str]:
    """The environment `accelerate launch` gives the single-process worker of `command` (`python -m
    accelerate.commands.launch FLAGS -m MODULE ARGS`), computed by accelerate's own code."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    args = launch_command_parser().parse_args(command[3:])
    args, _, _ = _validate_launch_command(args)
    return prepare_simple_launcher_cmd_env(args)[1]


class ForkedWorker:
    """A worker forked from this warm supervisor, waited for as `subprocess.Popen` is."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None and self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        end = time.monotonic() + (timeout or 0)
        while self.poll() is None:
            if time.monotonic() > end:
                import subprocess

                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def terminate(self) -> None:
        _terminate(self.pid)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fork_worker(work: Callable[[], int], env: dict[str, str], beat) -> ForkedWorker:
    """`work()` (the worker's run) in a child of this process, in `env` (the launcher's, plus the plan's), ending
    with its exit code. `beat` (the supervisor's Heartbeat) is held across the fork, so that no thread is inside
    SQLite when it happens."""
    import torch

    with beat.held():
        pid = os.fork()
    if pid:
        return ForkedWorker(pid)
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the worker installs its own (a clean stop)
        os.environ.clear()
        os.environ.update(env)
        torch.set_num_threads(max(1, int(env.get("OMP_NUM_THREADS") or 1)))
        code = work()
    except BaseException:  # noqa: BLE001 - the supervisor reads the log and the exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
