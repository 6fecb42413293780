"""A user's function from a .py file, run in a child process with a time limit.

A reward function (later: a tool, an environment) is code the workbench does not control: it may sleep forever,
spin in a loop or sit in native code. A thread cannot be interrupted, so the function lives in a child process
of its own (`python -m backend.core.usercode`), loaded once and called over a pipe; a call that outlives its
limit kills the child, and the next call starts a fresh one. The child writes to the caller's stdout / stderr
(the run's log), so the user's prints show where they used to.

Arguments cross the pipe by pickle: callables (TRL's `log_extra`, `log_metric`) become recorders in the child
whose calls are replayed in the caller, and an object that cannot be sent is replaced by a summary of it.
"""
from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
import weakref
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace

DESCRIBE = "describe"  # the request for the function's tool schema instead of a call
START_TIMEOUT_S = 120.0  # loading the file: its imports (numpy, a tokenizer) may take a while on a loaded machine


class UserCodeError(RuntimeError):
    """The user's code could not be loaded, raised, timed out or returned something that cannot be sent back."""


class UserCodeTimeout(UserCodeError):
    """A call took longer than its limit; the child that ran it was killed."""


def in_workspace(given: str | Path, workspace: str | Path) -> tuple[Path, Path]:
    """(the real path of `given`, relative to the workspace or absolute, links followed; the workspace's real
    path); ValueError when it lies outside the workspace (the callers say what they only read there)."""
    root = Path(workspace).resolve()
    path = Path(given).expanduser()
    real = (path if path.is_absolute() else root / path).resolve()
    if not real.is_relative_to(root):
        raise ValueError(f"{given} is outside the workspace {root}")
    return real, root


def read_source(path: Path) -> str:
    """The file's text; UserCodeError naming the first byte that is not UTF-8."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserCodeError(f"{path} is not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x}): save it as "
                            "UTF-8") from None


def load_function(path: Path, function: str, what: str = "function"):
    """Run the file as a fresh module (edits are picked up on the next load) and return the function (`what`:
    "class" for a class)."""
    name = "workbench_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look a module up here
    source = read_source(path)
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the user's own file, by design
    except Exception as e:  # noqa: BLE001 - any error in user code
        sys.modules.pop(name, None)
        raise UserCodeError(f"loading {path} failed: {type(e).__name__}: {e}{where(e, path)}") from e
    fn = getattr(module, function, None)
    kind = inspect.isclass if what == "class" else inspect.isfunction
    if fn is None:
        found = [k for k, v in vars(module).items()
                 if kind(v) and v.__module__ == name and not k.startswith("_")]
        raise UserCodeError(f"{path} defines no {what} '{function}'"
                            + (f" (it defines: {', '.join(found)})" if found else ""))
    if not callable(fn) or (what == "class" and not inspect.isclass(fn)):
        raise UserCodeError(f"'{function}' in {path} is a {type(fn).__name__}, not a {what}")
    return fn


def where(error: BaseException, path: Path) -> str:
    """" (line N)": the last line of `path` in the error's traceback, or ""."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == Path(path)]
    return f" (line {lines[-1]})" if lines else ""


def sendable(value):
    """`value` when it is built of Python's own types; else a namespace of its plain attributes (TRL's TrainerState:
    global_step, epoch, max_steps …: unpickling the object itself would import transformers in the child, seconds
    of a call's time limit), else its repr."""
    if type(value).__module__ == "builtins":
        return value
    plain = {k: v for k, v in vars(value).items() if isinstance(v, (int, float, str, bool, type(None)))} \
        if hasattr(value, "__dict__") else {}
    return SimpleNamespace(**plain) if plain else repr(value)


class UserFunction:
    """`function` of the .py file `path`, called in a child process. `label` names it in every message, e.g.
    "reward source 'x' (r.py:reward)"."""

    what = "function"

    def __init__(self, path: Path, function: str, label: str, doing: str = "scoring"):
        self.path, self.function, self.label, self.doing = Path(path), function, label, doing
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._finalizer = None
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                         os.environ.get("PYTHONPATH")])))
        try:
            # the file in the command line: `ps` shows whose code a process runs
            proc = subprocess.Popen([sys.executable, "-m", "backend.core.usercode", str(theirs.fileno()),
                                     str(self.path)],
                                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)  # its own group: a kill reaches what it started
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        self._proc, self._conn = proc, conn
        self._finalizer = weakref.finalize(self, _end, proc, conn)
        conn.send((str(self.path), self.function, self.what))
        reply = self._receive(START_TIMEOUT_S, f"loading {self.path.name}")
        if reply[0] != "ready":
            self.close()
            raise UserCodeError(reply[1])

    def _receive(self, timeout_s: float, doing: str):
        deadline = time.monotonic() + timeout_s
        while not self._conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.close()
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                raise UserCodeError(f"{self.label}: its process {how} while {doing}")
            if time.monotonic() >= deadline:
                self.close()
                raise UserCodeTimeout(f"{self.label} took longer than {timeout_s:g} s")
        try:
            return self._conn.recv()
        except (EOFError, OSError) as e:
            self.close()
            raise UserCodeError(f"{self.label}: its process ended while {doing}") from e

    def __call__(self, timeout_s: float, **kwargs):
        """The function's result for `kwargs`, within `timeout_s` (UserCodeTimeout past it; the next call starts
        a fresh process). Callables among the arguments are called back here with what the function passed them."""
        return self._call(None, timeout_s, kwargs)

    def _call(self, method: str | None, timeout_s: float, kwargs: dict):
        if self._proc is None:
            self._start()
        hooks = {k: v for k, v in kwargs.items() if callable(v)}
        sent = {k: sendable(v) for k, v in kwargs.items() if k not in hooks}
        try:
            self._conn.send((method, sent, sorted(hooks)))
        except (OSError, EOFError) as e:
            self.close()
            raise UserCodeError(f"{self.label}: its process ended before the call") from e
        reply = self._receive(timeout_s, self.doing)
        kind = reply[0]
        if kind == "raised":
            raise UserCodeError(f"{self.label} raised {reply[1]}")
        if kind == "unsendable":
            raise UserCodeError(f"{self.label} returned {reply[1]}, which cannot be sent back; return plain numbers")
        _, result, calls = reply
        for name, args in calls:
            hooks[name](*args)
        return result

    def describe(self, timeout_s: float = START_TIMEOUT_S) -> dict:
        """The function's JSON schema as a chat template shows a tool (transformers' get_json_schema, read in the
        child: its signature and docstring); UserCodeError saying what is missing, with the function's line. For
        a UserObject: {"tools": [schema of each public method], "reset": bool, "get_reward": bool}."""
        if self._proc is None:
            self._start()
        try:
            self._conn.send(DESCRIBE)
        except (OSError, EOFError) as e:
            self.close()
            raise UserCodeError(f"{self.label}: its process ended before it was described") from e
        reply = self._receive(timeout_s, "reading its signature")
        if reply[0] != "ok":
            raise UserCodeError(f"{self.label}: {reply[1]}")
        return reply[1]

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._proc = self._conn = self._finalizer = None


class UserObject(UserFunction):
    """An instance of the class `name` of the .py file `path`, made (`name()`) in a child process of its own and
    called there method by method. A call past its limit kills the process: the next call makes a fresh
    instance, whose state starts over."""

    what = "class"

    def call(self, method: str, timeout_s: float, **kwargs):
        """`method`'s result for `kwargs`, within `timeout_s` (UserCodeTimeout past it)."""
        return self._call(method, timeout_s, kwargs)

    @property
    def running(self) -> bool:
        """Whether the instance made at the start (or after the last restart) is still alive."""
        return self._proc is not None


# what an environment's class has besides its tools (TRL's GRPOTrainer reads the same names)
OBJECT_HOOKS = ("reset", "get_reward")


def _end(proc: subprocess.Popen, conn: Connection) -> None:
    try:
        conn.close()
    except OSError:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and whatever it started that did not leave its group
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _plain(value):
    if hasattr(value, "tolist"):  # numpy array, torch tensor
        value = value.tolist()
    return value


def _serve(fd: int) -> None:
    """The child: load the function, then answer calls until the pipe closes."""
    conn = Connection(fd)
    path, function, what = conn.recv()
    try:
        fn = load_function(Path(path), function, what)
        if what == "class":
            fn = _made(fn, Path(path))
    except UserCodeError as e:
        conn.send(("failed", str(e)))
        return
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request == DESCRIBE:
            conn.send(_describe_object(fn, Path(path)) if what == "class" else _describe(fn, Path(path)))
            continue
        method, kwargs, hook_names = request
        calls: list = []
        for name in hook_names:
            kwargs[name] = (lambda n: lambda *args: calls.append((n, args)))(name)
        try:
            target = fn if method is None else getattr(fn, method)
            out = target(**kwargs)
            if inspect.isawaitable(out):
                out = asyncio.run(_wait(out))
            out = _plain(out)
            if isinstance(out, (list, tuple)):
                out = [_plain(x) for x in out]
        except Exception as e:  # noqa: BLE001 - any error in user code goes back with its line
            conn.send(("raised", f"{type(e).__name__}: {e}{where(e, Path(path))}"))
            continue
        try:
            conn.send(("ok", out, calls))
        except Exception:  # noqa: BLE001 - e.g. a generator, a lock
            conn.send(("unsendable", type(out).__name__))


def _made(cls, path: Path):
    """An instance of the user's class, made with no arguments."""
    try:
        return cls()
    except Exception as e:  # noqa: BLE001 - any error in user code
        raise UserCodeError(f"making {cls.__name__}() from {path} failed: {type(e).__name__}: {e}"
                            f"{where(e, path)}") from e


def _describe_object(obj, path: Path) -> tuple:
    """Its public methods as tools (their schemas), and which of reset / get_reward it defines."""
    members = dict(inspect.getmembers(type(obj), predicate=inspect.isfunction))
    tools = []
    for name, fn in members.items():
        if name.startswith("_") or name in OBJECT_HOOKS:
            continue
        kind, schema = _describe(getattr(obj, name), path)[:2]
        if kind != "ok":
            return "raised", f"method {name}: {schema}"
        tools.append(schema)
    return "ok", {"tools": tools, **{hook: hook in members for hook in OBJECT_HOOKS}}, []


def _describe(fn, path: Path) -> tuple:
    try:
        from transformers.utils import get_json_schema

        return "ok", get_json_schema(fn), []
    except Exception as e:  # noqa: BLE001 - a missing type hint or argument description, said with the line
        line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        return "raised", f"{e}" + (f" ({path.name}, line {line})" if line else "")


async def _wait(awaitable):
    return await awaitable


def _orphan_watch(parent: int) -> None:
    """End this process when its caller is gone (killed outright: nobody else would end it)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.killpg(0, signal.SIGKILL)  # this process and what it started


if __name__ == "__main__":
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when this process ends
    threading.Thread(target=_orphan_watch, args=(os.getppid(),), daemon=True).start()
    _serve(int(sys.argv[1]))
