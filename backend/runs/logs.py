"""A run's whole log (runs/<id>/train.log), readable: what `launch.py logs` prints and the Runs tab's Full log shows.

Libraries repeat themselves: transformers warns `is_gradient_checkpointing is deprecated` at every step, two lines
each time (the warning and the `warnings.warn(` source line Python echoes under it), interleaved with the step
lines. So a library warning, with the indented lines under it, is shown once, where it first appeared, annotated
with how often it came; any other line repeated back to back is shown once with its count. Step lines, tracebacks
and blank lines are kept as they are. A line rewritten in place with carriage returns (a progress bar) shows what a
terminal would: its last part.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from backend.runs.store import RunStore

WARNING = re.compile(r"\w*Warning\b|^\s*WARNING\b|\bwarnings\.warn\(")
SETTLE_S = 3.0  # an ended run's supervisor writes its last lines within seconds (runs_tab's LOG_SETTLE_S: 10)


def log_path(store: RunStore, run_id: str) -> Path:
    """Where a run's worker and supervisor write their output (log_path)."""
    return store.run_dir(run_id) / "train.log"


def repeated(line: str, times: int) -> str:
    """`line` with how many times it came (every occurrence counted, the shown one too)."""
    return f"{line}  (repeated {times} times)" if times > 1 else line


def is_warning(line: str) -> bool:
    return bool(WARNING.search(line))


def _continues(line: str) -> bool:
    """An indented line under a warning: the source line Python echoes, or a wrapped message."""
    return line[:1] in (" ", "\t") and bool(line.strip())


def terminal_line(line: str) -> str:
    """What a terminal shows for a line rewritten with carriage returns: its last non-empty part."""
    if "\r" not in line:
        return line
    return next((part for part in reversed(line.split("\r")) if part.strip()), "")


def split_lines(text: str) -> list[str]:
    return [terminal_line(line) for line in text.split("\n")]


def collapse_repeats(lines: list[str]) -> list[str]:
    """`lines` with each library warning shown once (at its first occurrence, with the indented lines under it and
    its count) and any other non-blank line repeated back to back shown once with its count."""
    out: list[str] = []
    counts: list[int] = []  # per line of `out`: how many times it came
    first: dict[str, int] = {}  # a warning line -> the index in `out` where it was shown
    i = 0
    while i < len(lines):
        line = lines[i]
        if is_warning(line) and not _continues(line):
            j = i + 1
            while j < len(lines) and _continues(lines[j]):
                j += 1
            if line in first:
                counts[first[line]] += 1
            else:
                first[line] = len(out)
                out.extend(lines[i:j])
                counts.extend([1] * (j - i))
            i = j
            continue
        if out and line.strip() and line == out[-1]:
            counts[-1] += 1
        else:
            out.append(line)
            counts.append(1)
        i += 1
    return [repeated(line, n) for line, n in zip(out, counts)]


def read_text(path: Path, max_bytes: int | None = None) -> tuple[str, bool]:
    """The file's text (its last `max_bytes` bytes, from a line start) and whether the start was cut off."""
    if not path.exists():
        return "", False
    size = path.stat().st_size
    with open(path, "rb") as f:
        cut = max_bytes is not None and size > max_bytes
        if cut:
            f.seek(size - max_bytes)
        data = f.read()
    if cut:
        data = data[data.find(b"\n") + 1:]  # a partial first line says nothing
    return data.decode("utf-8", "replace"), cut


def read_log(store: RunStore, run_id: str, lines: int | None = None, max_bytes: int | None = None) -> str:
    """The run's log with repeats collapsed: whole, or its last `lines` lines (after collapsing). `max_bytes` reads
    only the file's end (the UI's bound on a huge log). KeyError for an unknown run."""
    store.get_run(run_id)
    text, _ = read_text(log_path(store, run_id), max_bytes)
    rows = collapse_repeats(split_lines(text.removesuffix("\n")) if text else [])
    return "\n".join(rows[-lines:] if lines else rows)


class RepeatFilter:
    """collapse_repeats for a stream (`follow_log`): what is printed cannot be annotated later, so a warning seen
    before is dropped with the indented lines under it, and a back-to-back repeat is counted and its count said
    once the line changes or the stream pauses. `before`: the raw lines already shown."""

    def __init__(self, before: list[str] = ()):
        self.seen = {line for line in before if is_warning(line) and not _continues(line)}
        self.last: str | None = before[-1] if before else None
        self.repeats = 0
        self.dropping = False

    def feed(self, line: str) -> list[str]:
        if self.dropping and _continues(line):
            return []
        self.dropping = False
        if is_warning(line) and not _continues(line):
            if line in self.seen:
                self.dropping = True
                return []
            self.seen.add(line)
        if line == self.last and line.strip():
            self.repeats += 1
            return []
        out = self.flush()
        self.last = line
        return [*out, line]

    def flush(self) -> list[str]:
        n, self.repeats = self.repeats, 0
        return [f"(the line above repeated {n} more time{'s' if n > 1 else ''})"] if n else []


def follow_log(store: RunStore, run_id: str, lines: int | None = None, poll_s: float = 0.5,
               settle_s: float | None = None, sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """The run's log line by line, like `tail -f`: the collapsed log so far (its last `lines`), then each line
    as it is written, until the run has ended and `settle_s` (SETTLE_S) passed, or it is deleted. KeyError for an unknown
    run."""
    store.get_run(run_id)
    settle_s = SETTLE_S if settle_s is None else settle_s
    path = log_path(store, run_id)
    data = path.read_bytes() if path.exists() else b""
    done = data.rfind(b"\n") + 1  # a last line without its newline is still being written
    raw = split_lines(data[:done - 1].decode("utf-8", "replace")) if done else []
    shown = collapse_repeats(raw)
    yield from shown[-lines:] if lines else shown
    repeats = RepeatFilter(raw)
    ended_at = None
    while True:
        try:
            run = store.get_run(run_id)
        except KeyError:  # deleted while followed
            return
        if not run.active and ended_at is None:
            ended_at = time.monotonic()
        new = b""
        if path.exists():
            with open(path, "rb") as f:
                f.seek(done)
                new = f.read()
        complete = new[:new.rfind(b"\n") + 1]
        done += len(complete)
        for line in split_lines(complete[:-1].decode("utf-8", "replace")) if complete else []:
            yield from repeats.feed(line)
        if ended_at is not None and time.monotonic() - ended_at >= settle_s:
            if rest := new[len(complete):].strip():  # a last line that never got its newline
                yield from repeats.feed(terminal_line(rest.decode("utf-8", "replace")))
            yield from repeats.flush()
            return
        if not complete:
            yield from repeats.flush()
            sleep(poll_s)


def log_tail(store: RunStore, run_id: str, lines: int = 30) -> str:
    """The log's last lines, a library warning repeated at every step shown once (backend/runs/logs.py)."""
    path = log_path(store, run_id)
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 64_000))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(collapse_repeats(text.splitlines())[-lines:])
