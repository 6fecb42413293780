"""A user's function runs in a child process with a time limit: a hang or a busy loop ends at the limit, the next
call starts afresh, TRL's callbacks are replayed, and what cannot cross the pipe is said."""
import time

import pytest

from backend.core.usercode import UserCodeError, UserCodeTimeout, UserFunction
from backend.rewards import build_reward_funcs
from backend.rewards.base import RewardSourceError
from backend.rewards.custom import RewardTimeout


@pytest.fixture
def code(tmp_path):
    path = tmp_path / "r.py"
    path.write_text(
        "import time\n"
        "calls = 0\n"
        "def hang(completions, **kw):\n    time.sleep(3600)\n"
        "def spin(completions, **kw):\n    while True:\n        pass\n"
        "def count(completions, log_metric=None, trainer_state=None, **kw):\n"
        "    global calls\n    calls += 1\n    log_metric('calls', calls)\n"
        "    return [trainer_state.global_step] * len(completions)\n"
        "def gen(completions, **kw):\n    return (c for c in completions)\n")
    return path


def test_a_hang_and_a_busy_loop_end_at_the_limit_and_the_next_call_starts_afresh(code):
    logged = []
    for name in ("hang", "spin"):
        f = UserFunction(code, name, f"{name}()")
        t0 = time.monotonic()
        with pytest.raises(UserCodeTimeout, match=rf"{name}\(\) took longer than 1 s"):
            f(1.0, completions=["a"])
        assert time.monotonic() - t0 < 5
        f.close()

    class State:  # like TRL's TrainerState: its plain attributes cross, not the object (nor its lock)
        def __init__(self):
            self.global_step, self.lock = 7, __import__("threading").Lock()

    f = UserFunction(code, "count", "count()")
    assert f(5.0, completions=["a", "b"], trainer_state=State(), log_metric=lambda *a: logged.append(a)) == [7, 7]
    assert f(5.0, completions=["a"], trainer_state=State(), log_metric=lambda *a: logged.append(a)) == [7]
    assert logged == [("calls", 1), ("calls", 2)]  # one process kept between calls: module state lives on
    with pytest.raises(UserCodeError, match="returned generator, which cannot be sent back"):
        UserFunction(code, "gen", "gen()")(5.0, completions=["a"])


def test_a_python_reward_past_its_limit_fails_naming_source_and_step_or_scores_missing(code, tmp_path):
    class State:
        global_step = 13

    def source(on_timeout):
        return [{"type": "python", "name": "slow", "params": {"file": str(code), "function": "hang", "timeout_s": 1,
                                                              "on_timeout": on_timeout}}]

    [f] = build_reward_funcs(source("fail"), tmp_path)
    with pytest.raises(RewardTimeout, match=r"reward source 'slow' \(r.py:hang\) took longer than 1 s on "
                                            r"step 14; the run was stopped"):
        f(["p"], ["c"], trainer_state=State())
    [f] = build_reward_funcs(source("missing"), tmp_path)
    assert f(["p", "p"], ["c", "d"], trainer_state=State()) == [None, None]


def test_a_reward_file_that_is_not_utf8_is_refused_with_the_byte(tmp_path):
    (tmp_path / "latin.py").write_bytes(b"# caf\xe9\ndef reward(completions, **kw):\n    return [1.0]\n")
    from backend.rewards import validate_sources

    [error] = validate_sources([{"type": "python", "params": {"file": "latin.py"}}], [], tmp_path)
    assert "latin.py is not UTF-8 text (byte 5 is 0xe9)" in error
    with pytest.raises(RewardSourceError, match="is not UTF-8 text"):
        build_reward_funcs([{"type": "python", "params": {"file": "latin.py"}}], tmp_path)


def test_a_timeout_also_ends_what_the_function_started(tmp_path):
    import os

    pidfile = tmp_path / "child.pid"
    path = tmp_path / "r.py"
    path.write_text("import subprocess, time\n"
                    "def spawn(completions, **kw):\n"
                    f"    p = subprocess.Popen(['sleep', '313'])\n    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
                    "    time.sleep(3600)\n")
    f = UserFunction(path, "spawn", "spawn()")
    with pytest.raises(UserCodeTimeout):
        f(2.0, completions=["a"])
    pid = int(pidfile.read_text())

    def alive():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return state != "Z"  # a zombie waiting for init to reap it is gone

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive()


def test_an_evaluation_scorer_past_its_limit_stops_the_evaluation_once_not_per_row(code, tmp_path):
    from backend.evals.scorers import build_scorers
    from backend.evals.spec import EvalError, ScorerConfig

    [scorer] = build_scorers([ScorerConfig(type="python", name="slow",
                                           params={"file": str(code), "function": "hang", "timeout_s": 1})],
                             "answer", tmp_path)
    t0 = time.monotonic()
    with pytest.raises(EvalError, match=r"scorer slow: reward source 'slow' \(r.py:hang\) took longer than 1 s "
                                        r"\(raise params.timeout_s.*; the evaluation was stopped"):
        scorer(["p"] * 4, ["a"] * 4, {})
    assert time.monotonic() - t0 < 5  # one limit, not one per row
