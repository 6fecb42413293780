"""Every catalogued bad input (bad_input_cases.py) is refused the same way at the command line: exit code 2, one
line on stderr naming what is wrong, no traceback, and nothing written: a workspace that was not there is still
not there, and no file appears or changes in one that was (nor beside the bad files)."""
import os
import time
from pathlib import Path

import pytest

import launch
from tests.reliability.bad_input_cases import CASES, ENV, NOT_AS_ROOT, TIME_LIMIT_S, _files


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    _files(tmp)
    return tmp


def listing(path: Path) -> dict | None:
    """Each file under `path` (or `path` itself) with its size and time of change, each folder by name; None when
    there is nothing. Folders' own times are left out: a check that a folder takes new files makes and removes one
    in it."""
    if not os.path.lexists(path):
        return None
    found = {}
    for p in [path, *(path.rglob("*") if path.is_dir() and not path.is_symlink() else ())]:
        st = p.lstat()
        found[str(p.relative_to(path))] = None if p.is_dir() else (st.st_size, st.st_mtime_ns)
    return found


def test_the_catalogue_holds_at_least_forty_distinct_cases():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)
    assert set(ENV) | NOT_AS_ROOT | set(TIME_LIMIT_S) <= {c[0] for c in CASES}


@pytest.mark.parametrize("case,argv,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_with_exit_2_writing_nothing(case, argv, expected, bad_files, tmp_path,
                                                                     capfd, monkeypatch):
    if case in NOT_AS_ROOT and os.geteuid() == 0:
        pytest.skip("root writes into any folder whatever its mode")
    for name, value in ENV.get(case, {}).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    default = tmp_path / "default-ws"  # where a command given an empty --workspace must not fall back to
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(default))
    argv = [a.replace("{tmp}", str(bad_files)) for a in argv]
    expected = expected.replace("{tmp}", str(bad_files))
    if "--workspace" not in argv:
        argv += ["--workspace", str(tmp_path / "ws")]
    workspace = argv[argv.index("--workspace") + 1]
    watched = [Path(p) for p in (workspace, bad_files, default) if p]
    before = [listing(p) for p in watched]

    started = time.monotonic()
    assert launch.main(argv) == 2
    took = time.monotonic() - started

    out = capfd.readouterr()  # the file descriptors: a library's logger writes there, not to sys.stderr
    assert out.out == "" and len(out.err.splitlines()) == 1, out.out + out.err  # the message alone, one line
    assert expected in out.err, out.err
    assert "Traceback" not in out.err
    assert [listing(p) for p in watched] == before
    assert took < TIME_LIMIT_S.get(case, float("inf")), f"took {took:.1f} s"
