"""Detached processes and how the store tells whether one still lives.

A run's supervisor, a labeling session's generator and a sweep's driver are each `python -m ...` in its own
session, so it outlives the UI and the CLI that started it. The store keeps its pid and a heartbeat it writes;
anyone reading the store decides with one rule (`is_dead`) whether the process is gone.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 2.0  # how often a live process writes its heartbeat
HEARTBEAT_STALE_S = 60.0  # no heartbeat for this long: the process is hung or gone (a loaded machine lags)
LAUNCH_GRACE_S = 30.0  # a start claimed this recently counts as alive while its pid is not recorded yet

# Our own detached children: polled on each spawn and liveness check, so finished ones do not linger as zombies.
_children: list[subprocess.Popen] = []


def reap() -> None:
    _children[:] = [c for c in _children if c.poll() is None]


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `spawn_detached` gives a child: this process's, the repository importable, unbuffered
    output, no progress bars; `env` adds variables."""
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PYTHONUNBUFFERED="1", HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false", **(env or {}))


def spawn_detached(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python ARGS` from the repository root in its own session, output appended to `log`: it survives a UI
    restart and a closed terminal, and is found again (and stopped) through the store. `env` adds variables."""
    reap()
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = child_env(env)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    _children.append(proc)
    return proc


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    reap()  # our own finished child is a zombie until waited for
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # someone else's zombie answers kill(0) but is gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def processes_of(*argv_items: str) -> list[int]:
    """Pids of this machine's live processes whose command line holds every one of `argv_items` (e.g. the
    worker module, a run id and its workspace). How a job's processes are found when some left its process
    group: torchrun starts each rank in a session of its own. Linux (/proc); elsewhere none are found."""
    found = []
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc").is_dir() else ():
        args = set(argv_of(int(entry.name)))
        if all(item in args for item in argv_items) and (pid := int(entry.name)) != os.getpid() and pid_alive(pid):
            found.append(pid)
    return found


def argv_of(pid: int) -> list[str]:
    """A live process's command line (Linux's /proc); [] when it is gone or unreadable."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def descendants(pids: list[int]) -> list[int]:
    """Every live child, grandchild … of `pids` (Linux's /proc; elsewhere none): a process started without a
    group of its own (a user's reward function in backend/core/usercode.py) is not reached by its parent's group."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc").is_dir() else ():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def kill_groups(pids: list[int], wait_s: float = 10.0) -> list[int]:
    """SIGKILL each process with its process group (the group it leads, else the process alone) and every process
    it started, then wait up to `wait_s` for them to go. Returns the pids still alive."""
    import signal

    pids = [*pids, *(p for p in descendants(pids) if p not in pids and p != os.getpid())]
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.time() + wait_s
    while (alive := [p for p in pids if pid_alive(p)]) and time.time() < end:
        time.sleep(0.1)
    return alive


def is_dead(pid: int | None, beat: float | None, started: float | None, grace: float = LAUNCH_GRACE_S,
            stale: float = HEARTBEAT_STALE_S, now: float | None = None) -> bool:
    """Whether a process the store records is gone. Without a pid yet it lives for `grace` after its start
    was claimed; with one, while the pid runs and its last heartbeat (else its start) is under `stale` old."""
    now = time.time() if now is None else now
    last = beat or started
    if not pid:
        return last is None or now - last > grace
    return last is None or now - last > stale or not pid_alive(pid)


class Heartbeat:
    """Calls `owner` (which writes the beat, e.g. `lambda: store.heartbeat(run_id)`, or does any periodic chore)
    now and every `interval` seconds on a daemon thread, until `stop()` or the end of the `with` block."""

    def __init__(self, owner: Callable[[], object], interval: float = HEARTBEAT_S, name: str = "heartbeat"):
        self.owner, self.interval = owner, interval
        self._done = threading.Event()
        self._lock = threading.Lock()  # held during a beat
        self.thread = threading.Thread(target=self._beat, daemon=True, name=name)

    def start(self) -> Heartbeat:
        self.thread.start()
        return self

    def _beat(self) -> None:
        while not self._done.is_set():
            try:
                with self._lock:
                    self.owner()
            except Exception:  # noqa: BLE001 - e.g. a locked database: a missed beat, not a dead process
                try:
                    traceback.print_exc()
                except OSError:  # a full disk under the log too: the thread beats on
                    pass
            self._done.wait(self.interval)

    def held(self) -> threading.Lock:
        """Inside `with beat.held():` no beat runs (e.g. across a fork, so that no thread is inside SQLite)."""
        return self._lock

    def stop(self) -> None:
        self._done.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=max(5.0, self.interval))  # a beat in flight ends; none starts after

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def job_args(description: str, argv=None, command: str | None = None) -> tuple[str, str]:
    """(id, workspace) from `[COMMAND] ID --workspace DIR`: the command line every detached process of the
    workbench is started with (spawn_detached's args)."""
    import argparse

    p = argparse.ArgumentParser(description=description)
    if command:
        p.add_argument("cmd", choices=[command])
    p.add_argument("id")
    p.add_argument("--workspace", required=True)
    a = p.parse_args(argv)
    return a.id, a.workspace
