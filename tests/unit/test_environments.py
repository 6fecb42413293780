"""Environments (issue: agentic RL): a user's class played episode by episode in processes of its own, each call
time-limited; what the run config accepts; what the check before a run says of a class that cannot be played."""
import textwrap

import pytest
from transformers.utils import get_json_schema

from backend.config import ConfigError, build_config
from backend.rewards import build_reward_funcs
from backend.tools.environment import LOST, EnvironmentProblem, environment_factory, validate_environment

GAME = '''
import time


class Counter:
    """Counts to a target."""

    def reset(self, target=3, **row):
        self.target, self.count = int(target), 0
        return f"(count to {self.target})"

    def add(self, amount: int) -> str:
        """Adds to the count.

        Args:
            amount: How much to add.
        """
        self.count += amount
        return str(self.count)

    def wait(self, seconds: float) -> str:
        """Waits.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "done"

    def get_reward(self) -> float:
        return float(self.count == self.target)
'''


def write(workspace, name, text):
    (workspace / name).write_text(textwrap.dedent(text))
    return name


def test_an_episode_is_played_in_its_own_process_and_a_call_past_its_limit_loses_only_that_episode(workspace):
    factory = environment_factory(f"{write(workspace, 'game.py', GAME)}:Counter", workspace, timeout_s=2)
    one, two = factory(), factory()
    # the tools TRL finds on the class, with the schema the user's own method gives
    assert sorted(n for n in vars(type(one)) if not n.startswith("_")) == ["add", "reset", "wait"]
    assert get_json_schema(one.add)["function"]["parameters"]["properties"]["amount"] == {
        "type": "integer", "description": "How much to add."}

    assert one.reset(target=3, prompt=[{"role": "user", "content": "go"}]) == "(count to 3)"  # the row's columns
    assert two.reset(target=1) == "(count to 1)"
    assert one.add(amount=2) == "2" and one.add(amount=1) == "3"
    assert two.add(amount=1) == "1"
    assert (one._episode_reward(), two._episode_reward()) == (1.0, 1.0)  # each instance kept its own count

    with pytest.raises(TimeoutError, match="longer than 2 s"):
        two.wait(seconds=30)
    with pytest.raises(RuntimeError, match="state is gone"):  # the episode cannot go on where it was
        two.add(amount=1)
    assert two._episode_reward() == 0.0
    assert one.add(amount=0) == "3"  # the other episode never noticed
    assert two.reset(target=2) == "(count to 2)" and two.add(amount=2) == "2"  # the next episode starts afresh
    assert two._episode_reward() == 1.0
    assert LOST.startswith("the environment was restarted")


def test_the_environment_source_scores_each_episode_and_nothing_where_none_was_played(workspace):
    factory = environment_factory("guess_number", workspace, timeout_s=10)
    won, lost = factory(), factory()
    won.reset(secret=6, high=10)
    lost.reset(secret=2, high=10)
    assert "too low" in won.guess(number=5) and "correct" in won.guess(number=6)
    assert "too high" in lost.guess(number=9)
    [source] = build_reward_funcs([{"type": "environment", "name": "won"}], workspace)
    scored = dict(prompts=["p", "p"], completions=["a", "b"])
    assert source(**scored, environments=[won, lost]) == [1.0, 0.0]
    assert source(**scored) == [None, None]  # the playground: no episode was played


def test_a_class_that_cannot_be_played_is_refused_with_its_file_method_and_line(workspace):
    check = lambda spec, row=None, owns=False: validate_environment(spec, workspace, 5, row, owns)  # noqa: E731
    write(workspace, "untyped.py", '''
        class Game:
            def reset(self, **row):
                return None

            def move(self, where):
                """Moves."""
                return where
    ''')
    [problem] = check("untyped.py:Game")
    assert "untyped.py:Game" in problem and "method move" in problem and "line 6" in problem, problem
    write(workspace, "odd.py", '''
        class NoReset:
            def step(self, x: int) -> int:
                """Steps.

                Args:
                    x: A number.
                """
                return x

        class BadReset:
            def reset(self, **row):
                return 1 / 0

            def step(self, x: int) -> int:
                """Steps.

                Args:
                    x: A number.
                """
                return x
    ''')
    assert "has no reset method" in check("odd.py:NoReset")[0]
    [problem] = check("odd.py:BadReset", row={"x": 1})
    assert "ZeroDivisionError" in problem and "line 13" in problem and "first row" in problem, problem
    assert "get_reward, which it does not define" in check("odd.py:BadReset", owns=True)[0]
    assert "defines no class 'Missing' (it defines: NoReset, BadReset)" in check("odd.py:Missing")[0]
    assert "outside the workspace" in check("/etc/passwd.py:X")[0]
    assert check("guess_number", row={"secret": 3, "high": 10}, owns=True) == []
    with pytest.raises(EnvironmentProblem, match="no shipped example is called `chess`"):
        environment_factory("chess", workspace, 5)


def test_the_run_config_takes_an_environment_where_grpo_plays_it():
    base = {"mode": "grpo", "dataset": "demo-guess-number", "environment": "guess_number",
            "reward_sources": [{"type": "environment"}]}
    assert build_config(base).environment == "guess_number"
    for change, said in [({"mode": "rloo"}, "RLOO runs play no environment"),
                         ({"environment": "games/x.txt"}, "neither a file and class"),
                         ({"environment": ""}, "an environment source scores with the run's environment")]:
        with pytest.raises(ConfigError, match=said):
            build_config(base | change)
