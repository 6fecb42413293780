"""The process toolkit: detached children that leave no zombie, a heartbeat that stops, and the one rule that
says a recorded process is gone."""
import os
import time

from backend.core import procs
from backend.core.procs import HEARTBEAT_STALE_S, LAUNCH_GRACE_S, Heartbeat, is_dead, pid_alive, spawn_detached
from tests.waiting import wait_for


def test_a_detached_child_runs_in_its_own_session_and_is_gone_once_it_exits(tmp_path):
    log = tmp_path / "logs" / "child.log"
    gate = tmp_path / "go"
    proc = spawn_detached(["-c", f"import os, time, pathlib\nprint('pid', os.getpid(), 'sid', os.getsid(0))\n"
                                 f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.05)"], log)
    assert pid_alive(proc.pid)
    wait_for(lambda: "sid" in log.read_text(), timeout=30, what="the child's first line")
    assert log.read_text().split() == ["pid", str(proc.pid), "sid", str(proc.pid)]  # its own session leader
    gate.touch()
    wait_for(lambda: not pid_alive(proc.pid), timeout=30, what="the child to exit")
    assert proc.returncode == 0 and not os.path.exists(f"/proc/{proc.pid}")  # reaped: no zombie left
    assert proc not in procs._children


def test_a_child_sees_the_repository_on_its_path_and_unbuffered_output(tmp_path):
    log = tmp_path / "child.log"
    proc = spawn_detached(["-c", "import os, backend.core.procs as p; print(os.environ['PYTHONUNBUFFERED'], "
                                 "os.environ['EXTRA'], p.REPO_ROOT == __import__('pathlib').Path.cwd())"],
                          log, env={"EXTRA": "yes"})
    wait_for(lambda: not pid_alive(proc.pid), timeout=30, what="the child to exit")
    assert log.read_text().split() == ["1", "yes", "True"]


def test_no_pid_is_never_alive():
    assert not pid_alive(None) and not pid_alive(0)
    assert pid_alive(os.getpid())


def test_a_heartbeat_beats_until_stopped():
    beats = []
    with Heartbeat(lambda: beats.append(time.time()), interval=0.01) as beat:
        wait_for(lambda: len(beats) >= 3, timeout=10, what="three beats")
    assert not beat.thread.is_alive()
    after = len(beats)
    time.sleep(0.05)
    assert len(beats) == after  # none after the block ended


def test_a_failing_beat_is_a_missed_beat_not_the_end_of_the_heartbeat(capsys):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database is locked")

    beat = Heartbeat(flaky, interval=0.01).start()
    wait_for(lambda: len(calls) >= 3, timeout=10, what="beats after the failure")
    beat.stop()
    assert "database is locked" in capsys.readouterr().err
    assert not beat.thread.is_alive()


def test_a_process_without_a_pid_lives_only_for_the_launch_grace():
    now = 1000.0
    assert not is_dead(None, None, now - LAUNCH_GRACE_S + 1, now=now)
    assert is_dead(None, None, now - LAUNCH_GRACE_S - 1, now=now)
    assert is_dead(None, None, None, now=now)  # no start was ever claimed


def test_a_dead_pid_is_dead_even_with_a_fresh_heartbeat():
    now = time.time()
    proc = spawn_detached(["-c", "pass"], os.devnull)
    proc.wait()
    assert is_dead(proc.pid, now, now, now=now)


def test_a_live_pid_is_dead_once_its_heartbeat_is_stale():
    now = time.time()
    me = os.getpid()
    assert not is_dead(me, now - 1, now - 3600, now=now)  # a fresh beat, however old the start
    assert is_dead(me, now - HEARTBEAT_STALE_S - 1, now - 3600, now=now)
    assert not is_dead(me, None, now - 1, now=now)  # no beat yet: its start counts
    assert is_dead(me, None, now - HEARTBEAT_STALE_S - 1, now=now)


def test_the_limits_can_be_given():
    now = 1000.0
    assert is_dead(os.getpid(), now - 5, now - 5, stale=2, now=now)
    assert not is_dead(None, None, now - 5, grace=10, now=now)
