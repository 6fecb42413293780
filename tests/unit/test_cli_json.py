"""--json: stdout is JSON alone (`| jq` must work) for every command that takes it, found in the parser so that a
new one is covered too; on success and on failure ({"error": ...} and a non-zero exit). What else a command says
goes to stderr."""
import argparse
import json

import pytest

import launch
from cli.common import subcommands

EXPECTED = {("runs",), ("show",), ("compare",), ("doctor",), ("settings",), ("labels", "list"), ("sweep", "list"),
            ("sweep", "show"), ("serve", "list"), ("eval", "start"), ("eval", "list"), ("eval", "show")}


def json_commands(parser, path=()):
    """(command words, its parser) for every (sub)command with a --json option."""
    for name, sub in subcommands(parser).items():
        if "--json" in sub._option_string_actions:
            yield (*path, name), sub
        yield from json_commands(sub, (*path, name))


COMMANDS = dict(json_commands(launch.build_parser()))


def required_words(parser: argparse.ArgumentParser, run_ids: list[str]) -> list[str]:
    """The cheapest words a command parses with: run ids where it wants runs, an id that exists nowhere for
    anything else (a sweep, an evaluation, a model, a dataset: the command fails, and must say so in JSON)."""
    words = []
    for a in parser._actions:
        if (a.option_strings and not a.required) or isinstance(a, (argparse._HelpAction,
                                                                     argparse._SubParsersAction)):
            continue
        values = run_ids if "run" in a.dest else [str(a.choices[0])] if a.choices else ["nonexistent", "missing"]
        values = values[:2 if a.nargs == "+" else 0 if a.nargs in ("?", "*") else 1]
        words += [w for v in values for w in ([a.option_strings[-1], v] if a.option_strings else [v])]
    return words


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A workspace with two ended runs, made without training (show, doctor and compare then succeed)."""
    from backend.config import build_config
    from backend.runs.store import RunStore

    ws = tmp_path_factory.mktemp("json-ws")
    store = RunStore(ws)
    ids = []
    for name, steps in (("a", 2), ("b", 3)):
        run = store.create_run(build_config({"name": name, "max_steps": steps}))
        store.finish_run(run.id, "completed")
        ids.append(run.id)
    return ws, ids


def test_every_command_with_json_is_found():
    assert EXPECTED <= set(COMMANDS), sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=" ".join)
def test_json_output_is_json_alone_on_stdout(command, two_runs, capsys):
    ws, run_ids = two_runs
    code = launch.main([*command, *required_words(COMMANDS[command], run_ids), "--json", "--workspace", str(ws)])
    out = capsys.readouterr().out
    data = json.loads(out)  # the whole of stdout: no "evaluation id: ..." before it
    if code:
        assert isinstance(data, dict) and data["error"] and data["exit_code"] == code, data
    else:
        assert not (isinstance(data, dict) and data.get("exit_code")), data  # no error object on success


def test_errors_are_json_too_and_still_said_on_stderr(tmp_path, capsys):
    assert launch.main(["show", "nonexistent", "--json", "--workspace", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "no run with id 'nonexistent'", "errors": [], "exit_code": 2}
    assert err.strip() == "no run with id 'nonexistent'"

    (tmp_path / "a-file").write_text("")
    assert launch.main(["runs", "--json", "--workspace", str(tmp_path / "a-file")]) == 2
    out, err = capsys.readouterr()
    assert "it is a file, not a folder" in json.loads(out)["error"] and "it is a file" in err

    # without --json nothing changes: the message on stderr, nothing on stdout; and stdout is stdout again
    assert launch.main(["show", "nonexistent", "--workspace", str(tmp_path)]) == 2
    assert capsys.readouterr() == ("", "no run with id 'nonexistent'\n")
    assert launch.main(["runs", "--workspace", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "no runs yet\n"


def test_eval_start_prints_its_id_and_progress_on_stderr_with_json(tmp_path, monkeypatch, capsys):
    from backend import evals
    from cli import evaluate
    from cli.common import print_json

    class Queued:
        id, status = "20260101-000000-eval", "queued"

    monkeypatch.setattr(evals, "build_spec", lambda data: data)
    monkeypatch.setattr(evals, "submit_eval", lambda store, spec: Queued())
    start = ["eval", "--model", "base", "--dataset", "demo-math", "--json", "--workspace", str(tmp_path)]

    assert launch.main([*start, "--detach"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"id": Queued.id, "status": "queued"}
    assert f"evaluation id: {Queued.id}" in err

    def follow(store, eval_id, as_json):  # what following prints: progress, then the results
        print("50/100 answers")
        print_json({"id": eval_id, "done": as_json})
        return 0

    monkeypatch.setattr(evaluate, "follow_eval", follow)
    assert launch.main(start) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"id": Queued.id, "done": True}
    assert err == f"evaluation id: {Queued.id}\n50/100 answers\n"
