"""The `python` tool's sandbox: a model's program run in a child process, its prints returned.

The program runs as `python -I -S -B sandbox.py PROGRAM ...`: isolated mode (no environment variables, no user
site, no current folder on the path), no site-packages (only the standard library imports) and no bytecode writes
(a stale .pyc would be a write outside the working folder). This file is also that child's bootstrap (`_child`):
before the program runs it sets resource limits on itself and installs an audit hook that ends the process on
network use, new processes, native code, writes outside its fresh working folder and reads of the places a program
has no business in (the home folder, the repository, other processes' /proc). The caller bounds the wall time
and kills the whole process group.

What this is not: a security boundary against a program written to escape (an audit hook runs inside the program's
own interpreter). It stops what a model does by accident or naively (requests, subprocess, open('/etc/x', 'w'));
the kernel-enforced bounds are the resource limits, the separate process group and the throwaway folder.
"""
from __future__ import annotations

import json
import math
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The module is also run as the child with the standard library only: imports of the workbench stay in functions.

WORK_PREFIX = "tool-python-"  # each call's temporary folder; tests set their own to find their processes
FILE_LIMIT_MB = 10  # largest file the program may write
OPEN_FILES = 64  # file descriptors the program may hold
STDERR_KEPT = 8192  # bytes of the end of stderr kept: where the traceback is
TRACEBACK_LINES = 12
CUT_NOTE = "… (cut)"
DENIED_EXIT = 86  # the hook's exit code, should its report not get through


class ToolError(RuntimeError):
    """A tool call that failed; its one-line message is what the model reads."""


def run_python(code: str, timeout_s: float = 30.0, cpu_s: float = 5.0, memory_mb: int = 512,
               max_output_chars: int = 2000) -> str:
    """Run `code` in the sandbox and return what it printed (with the end of its traceback when it raised), cut
    to `max_output_chars`; "(no output)" when it printed nothing. ToolError when it ran past a limit, needed more
    memory, did something not allowed or does not compile."""
    base = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
    try:
        work = base / "work"
        work.mkdir()
        program = base / "program.py"  # beside the working folder, not in it: the program lists only its own files
        program.write_bytes(code.encode("utf-8", "replace"))
        settings = {"cpu_s": cpu_s, "memory_mb": memory_mb, "hidden": _hidden_roots(work)}
        report_r, report_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(Path(__file__).resolve()), str(program), str(report_w),
                 json.dumps(settings)],
                cwd=work, env=_child_env(work), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(report_w,),
                start_new_session=True)  # its own group: the kill reaches whatever it started
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
        out, out_cut, err, report, timed_out = _collect(proc, report_r, time.monotonic() + timeout_s,
                                                        max_output_chars * 4 + 16)
    finally:
        _remove(base)
    failure = _failure(report, proc.returncode, timed_out, timeout_s, cpu_s, memory_mb)
    if failure:
        raise ToolError(failure)
    return _output(out, out_cut, err if report.get("kind") == "raised" else "", max_output_chars)


def _hidden_roots(work: Path) -> list[str]:
    """Folders the program may not read: the home folder (tokens, caches), the repository and the caller's current
    folder (the workspace: a data set's answers); none that holds the working folder."""
    from backend.core.procs import REPO_ROOT

    try:
        cwd = os.getcwd()
    except OSError:  # deleted under the caller
        cwd = "/"
    roots = {os.path.realpath(p) for p in (Path.home(), REPO_ROOT, cwd)}
    work = os.path.realpath(work)
    return sorted(r for r in roots if r != "/" and not _inside(work, r))


def _child_env(work: Path) -> dict[str, str]:
    # nothing of the caller's (tokens, proxies); temporary files and ~ land in the working folder
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8"}


def _collect(proc: subprocess.Popen, report_fd: int, deadline: float, out_cap: int):
    """Read the child's stdout (its first `out_cap` bytes), the end of its stderr and its report until it ends or
    the deadline passes; then end its process group. Bounded memory: a program printing in a loop is drained."""
    out, err, report = bytearray(), bytearray(), bytearray()
    out_cut, timed_out = False, False
    sel = selectors.DefaultSelector()
    for fd, name in ((proc.stdout.fileno(), "out"), (proc.stderr.fileno(), "err"), (report_fd, "report")):
        sel.register(fd, selectors.EVENT_READ, name)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    out_cut |= len(out) + len(chunk) > out_cap
                    out += chunk[:max(0, out_cap - len(out))]
                elif key.data == "err":
                    err += chunk
                    del err[:-STDERR_KEPT]
                else:  # its last line counts: what the program itself wrote there comes before
                    report += chunk
                    del report[:-65536]
        if not timed_out:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out:
            from backend.core.procs import kill_groups

            kill_groups([proc.pid], wait_s=5.0)  # its group, and any child that left it, while it is alive
        else:
            _kill_group(proc.pid)  # what it left behind; its pid stays a group id while the group has members
        proc.wait()
    finally:
        if proc.returncode is None:  # the caller was interrupted (KeyboardInterrupt): the child goes too
            _kill_group(proc.pid)
            proc.wait()
        sel.close()
        os.close(report_fd)
        proc.stdout.close()
        proc.stderr.close()
    return bytes(out), out_cut, bytes(err), _last_report(bytes(report)), timed_out


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _last_report(raw: bytes) -> dict:
    for line in reversed(raw.decode("utf-8", "replace").splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and "kind" in report:
            return report
    return {}


_DENIALS = {
    "network": "the program tried to use the network ({}), which is not allowed",
    "process": "the program tried to start or signal another process ({}), which is not allowed",
    "native": "the program tried to load native code ({}), which is not allowed",
    "write": "the program tried to write outside its working folder ({})",
    "read": "the program tried to read outside the standard library and its working folder ({})",
    "import": "the program tried to import from outside the standard library ({})",
}


def _failure(report: dict, returncode: int, timed_out: bool, timeout_s: float, cpu_s: float,
             memory_mb: int) -> str:
    """The one-line ToolError message for how the child ended, or "" when it ran to the end (raised or not)."""
    if timed_out:
        return f"the program ran longer than {timeout_s:g} s (wall time)"
    kind = report.get("kind")
    detail = _one_line(report.get("detail", ""))
    if kind == "denied":
        return _DENIALS.get(report.get("what"), "the program did something not allowed ({})").format(detail)
    if kind == "syntax":
        return detail
    if kind == "memory":
        return f"MemoryError: the program needed more than {memory_mb} MB"
    if kind in ("ok", "raised"):
        return ""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # the soft CPU limit, else the hard one a second later
        return f"the program ran longer than {cpu_s:g} s (CPU time)"
    if returncode == DENIED_EXIT:
        return "the program did something not allowed and was stopped"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:  # a real-time signal
            name = f"signal {-returncode}"
        return f"the program was killed by {name}"
    return ""  # it ended itself (os._exit) before the end: what it printed is the answer


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _output(out: bytes, out_cut: bool, err: bytes, max_chars: int) -> str:
    """stdout, then (when the program raised) the last lines of stderr, within `max_chars` with a note when cut."""
    text = out.decode("utf-8", "replace")
    tail = ""
    if err:
        budget = max(max_chars // 2, max_chars - len(text) - 1)  # half the room at least: its last lines say why
        for line in reversed(err.decode("utf-8", "replace").rstrip("\n").splitlines()[-TRACEBACK_LINES:]):
            if len(tail) + len(line) + 1 > budget:
                tail = tail or line[:budget - len(CUT_NOTE)] + CUT_NOTE  # "ValueError: …" names the error
                break
            tail = line + ("\n" + tail if tail else "")
    room = max_chars - (len(tail) + 1 if tail else 0)
    if out_cut or len(text) > room:
        text = text[:max(0, room - len(CUT_NOTE))] + CUT_NOTE
    if tail:
        text = (text.rstrip("\n") + "\n" + tail) if text.strip() else tail
    return text.rstrip("\n") if text.strip() else "(no output)"


def _remove(path: Path) -> None:
    """Delete the call's folder even where the program took away its own permissions (never through a link)."""
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            if not os.path.islink(os.path.join(root, d)):
                try:
                    os.chmod(os.path.join(root, d), 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


def _inside(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


# ---- the child -------------------------------------------------------------------------------------------------

_PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile",
                   "subprocess.Popen", "pty.spawn")
_NETWORK_EVENTS = ("socket.", "urllib.Request", "http.client.", "ftplib.", "smtplib.", "poplib.", "imaplib.",
                   "nntplib.", "telnetlib.")
# events that change a path: (index of the path, index of its dir_fd or None, whether a final link is followed)
_PATH_EVENTS = {
    "os.remove": [(0, 1, False)], "os.rmdir": [(0, 1, False)], "os.mkdir": [(0, 2, False)],
    "os.chmod": [(0, 2, True)], "os.chown": [(0, 3, True)], "os.utime": [(0, 3, True)],
    "os.truncate": [(0, None, True)], "os.chflags": [(0, None, True)], "os.lchflags": [(0, None, False)],
    "os.setxattr": [(0, None, True)], "os.removexattr": [(0, None, True)],
    "os.rename": [(0, 2, False), (1, 3, False)], "os.link": [(0, 2, True), (1, 3, False)],
    "os.symlink": [(1, 2, False)], "shutil.rmtree": [(0, 1, False)],
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _child() -> None:
    """The bootstrap: limits, compile, guard, run; one JSON line on the report fd says how it ended."""
    import builtins
    import linecache
    import traceback
    import types

    program, report_fd, settings = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])

    def report(**fields) -> None:
        try:
            os.write(report_fd, (json.dumps(fields) + "\n").encode())
        except OSError:  # the program closed it: the exit code speaks
            pass

    with open(program, encoding="utf-8") as f:
        source = f.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _set_limits(settings["cpu_s"], settings["memory_mb"])
    try:
        code = compile(source, "<program>", "exec")
    except SyntaxError as e:
        report(kind="syntax", detail=f"{type(e).__name__}: {e.msg}" + (f" (line {e.lineno})" if e.lineno else ""))
        os._exit(0)
    except ValueError as e:  # null bytes in the source
        report(kind="syntax", detail=f"SyntaxError: {e}")
        os._exit(0)
    except MemoryError:
        report(kind="memory")
        os._exit(0)
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")  # traceback lines
    _guard(os.getcwd(), settings["hidden"], report)

    main = types.ModuleType("__main__")  # a fresh __main__: pickle finds the program's classes there
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = ["<program>"]
    outcome = {"kind": "ok"}
    try:
        exec(code, main.__dict__)  # noqa: S102 - running the model's program is the point
    except MemoryError:
        outcome = {"kind": "memory"}
    except SystemExit as e:
        if e.code not in (None, 0):
            print(e.code if isinstance(e.code, str) else f"(exit code {e.code})", file=sys.stderr)
            outcome = {"kind": "raised"}
    except BaseException as e:  # noqa: BLE001 - the program's error, shown as Python would, its frames only
        try:
            # the program's frames only: looking up this file's lines would be a read the hook refuses
            frames = traceback.StackSummary.extract(
                (f, n) for f, n in traceback.walk_tb(e.__traceback__) if f.f_code.co_filename == "<program>")
            shown = ["Traceback (most recent call last):\n", *traceback.format_list(frames[-3:]),
                     *traceback.format_exception_only(type(e), e)]
            print("".join(shown)[-4000:], end="", file=sys.__stderr__)
        except BaseException:  # noqa: BLE001 - e.g. a __str__ that raises: the type alone
            print(type(e).__name__, file=sys.__stderr__)
        outcome = {"kind": "raised"}
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - replaced or closed by the program
            pass
    report(**outcome)
    os._exit(0)  # now: no atexit handlers, no waiting for the program's threads


def _set_limits(cpu_s: float, memory_mb: int) -> None:
    cpu = max(1, math.ceil(cpu_s))  # whole seconds: SIGXCPU at the soft limit, SIGKILL a second later
    limits = {resource.RLIMIT_CPU: (cpu, cpu + 1), resource.RLIMIT_AS: (memory_mb * 2 ** 20,) * 2,
              resource.RLIMIT_FSIZE: (FILE_LIMIT_MB * 2 ** 20,) * 2, resource.RLIMIT_NOFILE: (OPEN_FILES,) * 2,
              resource.RLIMIT_CORE: (0, 0)}  # no core file from SIGXCPU
    # RLIMIT_NPROC is left alone: it counts every thread of this user (the trainer's too), so a low value breaks
    # threading in the program, and root ignores it; new processes are stopped by the hook and the group kill.
    for which, (soft, hard) in limits.items():
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the limit fails in the program (OSError), no kill


def _guard(work: str, hidden: list[str], report) -> None:
    """Install the audit hook. Every function it uses is bound here, so a program replacing os.* does not blind it."""
    import _posixsubprocess
    import posixpath

    realpath, fsdecode, fspath, readlink = posixpath.realpath, os.fsdecode, os.fspath, os.readlink
    isinstance_, str_, int_, any_, exit_ = isinstance, str, int, any, os._exit
    own = str_(os.getpid())
    stdlib = [realpath(p) for p in sys.path if p]  # -S: the standard library's folders only
    readable = [*stdlib, realpath(sys.base_prefix), realpath(sys.base_exec_prefix)]
    imports_ok = {*stdlib, work}
    checked_paths: list = []

    def deny(what: str, detail) -> None:
        report(kind="denied", what=what, detail=str_(detail)[:200])
        exit_(DENIED_EXIT)  # not an exception: the program could catch that and go on

    def resolve(path, dir_fd=None, follow=True) -> str:
        if isinstance_(path, int_):  # a descriptor: what it points at
            path = f"/proc/self/fd/{path}"
        path = fsdecode(fspath(path))
        if isinstance_(dir_fd, int_) and dir_fd >= 0 and not path.startswith("/"):
            path = readlink(f"/proc/self/fd/{dir_fd}") + "/" + path
        if follow:
            return realpath(path)
        head, tail = posixpath.split(posixpath.abspath(path))
        return posixpath.join(realpath(head), tail)

    def inside_any(path: str, roots) -> bool:
        return any_(_inside(path, r) for r in roots)

    def check_write(path, dir_fd=None, follow=True) -> None:
        p = resolve(path, dir_fd, follow)
        if not (_inside(p, work) or p == "/dev/null" or p.startswith(f"/proc/{own}/fd/pipe:")):
            deny("write", p)

    def check_read(path) -> None:
        p = resolve(path)
        if _inside(p, work):
            return
        parts = p.split("/")
        if "site-packages" in parts or "dist-packages" in parts:
            deny("read", p)
        if inside_any(p, readable):
            return
        if inside_any(p, hidden) or (len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit()
                                     and parts[2] != own):
            deny("read", p)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance_(path, int_):  # a descriptor the program already holds
                return
            if (mode and any_(c in mode for c in "wax+")) or (flags or 0) & _WRITE_FLAGS:
                check_write(path)
            else:
                check_read(path)
        elif event in _PATH_EVENTS:
            for index, fd_index, follow in _PATH_EVENTS[event]:
                check_write(args[index], args[fd_index] if fd_index is not None else None, follow)
        elif event in ("os.listdir", "os.scandir"):
            if args and args[0] is not None and not isinstance_(args[0], int_):
                check_read(args[0])
        elif event == "import":
            path = list(args[2] or ())
            if path != checked_paths:  # sys.path changed since the last import
                for entry in path:
                    if not isinstance_(entry, str_) or not (realpath(entry or ".") in imports_ok
                                                            or _inside(realpath(entry or "."), work)):
                        deny("import", entry)
                checked_paths[:] = path
        elif event.startswith(_NETWORK_EVENTS):
            if event == "socket.__new__" and args[1] == 1:  # AF_UNIX: asyncio's self-pipe, socketpair()
                return
            deny("network", "socket.socket" if event == "socket.__new__" else event)
        elif event.startswith(_PROCESS_EVENTS):
            deny("process", event)
        elif event in ("os.kill", "os.killpg", "resource.prlimit"):
            if str_(args[0]) not in ("0", own):  # itself (and its own group, which it leads) only
                deny("process", event)
        elif event.startswith("ctypes."):
            deny("native", "ctypes")

    def no_fork_exec(*args, **kwargs):  # the one way to start a process that raises no audit event (3.11)
        deny("process", "_posixsubprocess.fork_exec")

    _posixsubprocess.fork_exec = no_fork_exec
    sys.addaudithook(hook)


if __name__ == "__main__":
    _child()
