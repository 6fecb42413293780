"""How a run's processes ended when they could not say so themselves: which process died first (a rank, the
launcher, the worker), by which signal or exit code, and whether memory running out is more than a guess.

With several ranks the first to die is rarely the one that records an error: the others then fail on a closed
connection ("Connection closed by peer … GLHF"). torchrun's own report names the first observed failure (its
"Root Cause" block); that is what the run's error leads with.
"""
from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

# accelerate launch reports a worker it lost to a signal as "... died with <Signals.SIGKILL: 9>."
_DIED_WITH = re.compile(r"died with <Signals\.(SIG[A-Z0-9]+)")
_ERROR_LINE = re.compile(r"^\w*(Error|Exception|Interrupt)\b.*")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={20,}|\Z)", re.S)
_RANK = re.compile(r"rank\s*:\s*(\d+)")
_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
OOM_NEAR = 0.9  # a resident size at this share of the memory limit counts as evidence of running out


@dataclass(frozen=True)
class RankDeath:
    rank: int
    pid: int
    exit_code: int

    @property
    def signal_name(self) -> str | None:
        return _signal_name(-self.exit_code) if self.exit_code < 0 else None

    def describe(self) -> str:
        how = f"was killed by {self.signal_name}" if self.signal_name else f"exited with code {self.exit_code}"
        return f"rank {self.rank} (pid {self.pid}) {how}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def first_rank_death(log_text: str) -> RankDeath | None:
    """The first observed failure of torchrun's last report in the log, or None (one process, or no report)."""
    blocks = _ROOT_CAUSE.findall(log_text)
    if not blocks:
        return None
    rank, code = _RANK.search(blocks[-1]), _EXIT.search(blocks[-1])
    if not rank or not code:
        return None
    return RankDeath(rank=int(rank.group(1)), pid=int(code.group(2)), exit_code=int(code.group(1)))


# ---- out of memory: said only with evidence ----

def _cgroup_dir() -> Path | None:
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    rel = line.rsplit(":", 1)[-1].lstrip("/")
    for root in (Path("/sys/fs/cgroup") / rel, Path("/sys/fs/cgroup")):
        if (root / "memory.events").exists():
            return root
    return None


def oom_kills() -> int | None:
    """The memory cgroup's count of processes its OOM killer ended (cgroup v2), or None where unreadable."""
    folder = _cgroup_dir()
    try:
        text = (folder / "memory.events").read_text() if folder else ""
    except OSError:
        return None
    found = re.search(r"^oom_kill (\d+)$", text, re.M)
    return int(found.group(1)) if found else None


def memory_limit_gb() -> float | None:
    """The cgroup's memory limit, else the machine's memory, in GB."""
    folder = _cgroup_dir()
    try:
        raw = (folder / "memory.max").read_text().strip() if folder else "max"
        if raw != "max":
            return int(raw) / 1e9
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) * 1024 / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _kernel_oom_record(pid: int) -> bool:
    """Whether the kernel's log, where this process may read it, says its OOM killer ended `pid`."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    needle = re.compile(rf"(Killed process|oom-kill:.*pid=){pid}\b")
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                return False
            except OSError:  # a record overwritten while read: go on
                continue
            if not record:
                return False
            if needle.search(record):
                return True
    finally:
        os.close(fd)


def oom_evidence(pid: int | None, kills_before: int | None, rss_gb: float | None) -> str | None:
    """Why a process killed by SIGKILL probably ran out of memory, or None when nothing points there."""
    if pid and _kernel_oom_record(pid):
        return "the kernel's OOM killer ended it"
    now = oom_kills()
    if kills_before is not None and now is not None and now > kills_before:
        return f"the memory cgroup's OOM killer ended a process (oom_kill {kills_before} → {now})"
    limit = memory_limit_gb()
    if rss_gb and limit and rss_gb >= OOM_NEAR * limit:
        return f"its memory was {rss_gb:.1f} of {limit:.1f} GB at its last report"
    return None


def death_message(rc: int, worker_pid: int | None, log_tail_text: str, launcher_pid: int | None = None,
                  oom: str | None = None) -> str:
    """How a run's processes ended when the worker did not record it: the first rank to die (torchrun's report),
    the launcher itself when it was killed (`launcher_pid`: the process `rc` is from), else the worker, with its
    signal or the last error line of its log. `oom`: the evidence that memory ran out (oom_evidence)."""
    first = first_rank_death(log_tail_text)
    lines = log_tail_text.splitlines()
    died = [m.group(1) for line in lines if (m := _DIED_WITH.search(line))]
    hint = f" (out of memory: {oom})" if oom else ""
    if first is not None:
        return first.describe() + (hint if first.signal_name == "SIGKILL" else "")
    if rc < 0 and launcher_pid:
        return f"accelerate's launcher (pid {launcher_pid}) was killed by {_signal_name(-rc)}; its ranks were ended"
    who = f"the worker (pid {worker_pid})" if worker_pid else "the worker"
    name = _signal_name(-rc) if rc < 0 else (died[-1] if died else None)
    if name:
        native = " (a crash in native code)" if name == "SIGSEGV" else ""
        return f"{who} was killed by {name}{hint if name == 'SIGKILL' else native}"
    errors = [line.strip() for line in lines if _ERROR_LINE.match(line.strip())
              and not line.strip().startswith("subprocess.CalledProcessError")]
    return f"{who} exited with code {rc}" + (f": {errors[-1]}" if errors else " before finishing")


def blamed_rank(error: str | None, log_tail_text: str, oom: str | None = None) -> str | None:
    """The run's error led by the rank that died first, when a rank other than the recording one died (its
    error is then only the consequence); None when the stored error stands."""
    first = first_rank_death(log_tail_text)
    if first is None or first.rank == 0 and first.exit_code > 0:
        return None  # rank 0 records its own error: that one is the cause
    lead = first.describe() + (f" (out of memory: {oom})" if oom and first.signal_name == "SIGKILL" else "")
    if (error or "").startswith(first.describe()):
        return None  # said already
    then = (error or "").split("\n", 1)[0]
    return lead + (f"; then rank 0 failed: {then}" if then else "")
