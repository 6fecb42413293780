"""Every catalogued bad input (bad_input_cases.py) is refused the same way at the command line: exit code 2,
its own message naming what is wrong, no traceback, and nothing started or saved."""
import pytest

import launch
from tests.reliability.bad_input_cases import CASES, _files


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    _files(tmp)
    return tmp


def test_the_catalogue_holds_at_least_forty_distinct_cases():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("argv,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_its_message_and_exit_2(argv, expected, bad_files, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(bad_files)) for a in argv]
    if "--workspace" not in argv:
        argv += ["--workspace", str(tmp_path / "ws")]
    assert launch.main(argv) == 2
    out = capsys.readouterr()
    assert expected in out.err, out.err
    assert "Traceback" not in out.err + out.out
    for noise in ("Map:", "examples/s", "Retrying"):  # progress bars, Hub retries: the message alone
        assert noise not in out.err, out.err
    db = tmp_path / "ws" / "workbench.db"
    if db.exists():
        from backend.runs.store import RunStore

        assert RunStore(tmp_path / "ws").list_runs() == []
