"""The command line as README.md and docs/*.md document it: every command shown there is one the parser takes,
the parser has no command they leave out, and the headless commands start without gradio."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import launch
from cli.common import subcommands

REPO = Path(__file__).resolve().parents[2]


def documented_commands() -> set[tuple[str, ...]]:
    """`launch.py labels export ...` -> ("labels", "export"); `sweep list|show` names both."""
    parser = launch.build_parser()
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = [b for page in pages for b in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)]
    found = set()
    for words in re.findall(r"launch\.py((?: [a-z][a-z|-]*)*)", "\n".join(blocks)):
        words = words.split()
        if not words:
            found.add(())
            continue
        command = subcommands(parser).get(words[0])
        nested = subcommands(command) if command else {}
        if not nested:
            found.add((words[0],))
        for name in words[1].split("|") if nested else ():
            found.add((words[0], name))
    return found


def parser_commands() -> set[tuple[str, ...]]:
    commands = {()}
    for name, sub in subcommands(launch.build_parser()).items():
        commands |= {(name, nested) for nested in subcommands(sub)} or {(name,)}
    return commands


def test_the_docs_document_exactly_the_commands_the_parser_has():
    assert documented_commands() == parser_commands()
    assert {("train",), ("sweep", "resume"), ("labels", "export"), ("ui",), ("metrics",)} <= documented_commands()


@pytest.mark.parametrize("command", sorted(documented_commands()), ids=lambda c: " ".join(c) or "(none)")
def test_each_documented_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        launch.main([*command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: launch.py {' '.join(command)}".rstrip())


def test_headless_commands_start_without_gradio(tmp_path):
    probe = ("import sys, launch; code = launch.main(['runs', '--workspace', sys.argv[1]]); "
             "print(code, 'gradio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.stdout.split()[-2:] == ["0", "False"], out.stderr


def test_output_cut_short_by_the_reader_is_no_error(tmp_path):
    from backend.config import build_config
    from backend.runs.store import RunStore

    store = RunStore(tmp_path)
    run = store.create_run(build_config({"name": "long"}))
    store.finish_run(run.id, "stopped")
    for step in range(1, 2001):
        store.add_metrics(run.id, step, {"loss": 1.0 / step, "learning_rate": 1e-4})
    proc = subprocess.Popen([sys.executable, str(REPO / "launch.py"), "show", run.id, "--workspace", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout.readline().startswith(b"run ")  # like `| head -1`: read a line, then hang up
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_settings_lists_every_setting_with_its_range_and_trl_names():
    import json

    out = subprocess.run([sys.executable, str(REPO / "launch.py"), "settings", "--mode", "dpo", "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    rows = {r["path"]: r for r in json.loads(out.stdout)}
    assert rows["dpo.beta"]["aliases"] == ["beta"] and rows["dpo.beta"]["max"] == 100
    assert "ppo.kl_coef" not in rows and "learning_rate" in rows
    text = launch.build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "lora.r  [1..1024]  (default 8; also lora_r)" in text  # train --help lists the settings too


def _launch(*args, timeout=60):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def test_bad_input_at_the_cli_is_one_clear_line_and_exit_2(tmp_path):
    import socket

    (tmp_path / "a-file").write_text("")
    out = _launch("runs", "--workspace", str(tmp_path / "a-file"))
    assert out.returncode == 2 and "it is a file, not a folder" in out.stderr and "Traceback" not in out.stderr
    out = _launch("train", "presets/sft_demo.yaml", "--set", "learning_rate=nan", "--workspace", str(tmp_path))
    assert out.returncode == 2 and "--set learning_rate=nan: not a finite number" in out.stderr, out.stderr
    assert "presets/sft_demo.yaml: learning_rate" not in out.stderr  # the value came from --set, not the file
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = _launch("ui", "--port", str(port), "--workspace", str(tmp_path))
    assert out.returncode == 2 and f"port {port} on 127.0.0.1 is taken" in out.stderr and "--port" in out.stderr
    assert "Traceback" not in out.stderr


def test_commands_that_read_make_no_store_and_a_start_makes_it_at_first_use(tmp_path, capsys):
    from argparse import Namespace

    from backend.config import build_config
    from cli.common import open_store

    ws = tmp_path / "ws"
    for argv in (["runs"], ["sweep", "list"], ["eval", "list"], ["labels", "list"]):
        assert launch.main([*argv, "--workspace", str(ws)]) == 0
    assert launch.main(["note", "20260101-000000-abcd", "x", "--workspace", str(ws)]) == 2
    assert capsys.readouterr().err == "no run with id '20260101-000000-abcd'\n"
    assert not ws.exists()  # nor workbench.db, nor its 2 MB reserve

    store = open_store(Namespace(command="train", resume=None, workspace=str(ws)))
    assert not ws.exists()  # a train refused by its checks leaves nothing
    run = store.create_run(build_config({}))
    assert (ws / "workbench.db").is_file() and [r.id for r in open_store(Namespace(
        command="runs", workspace=str(ws))).list_runs()] == [run.id]


def test_an_open_server_is_warned_about_once(tmp_path, monkeypatch, capsys, caplog):
    """cli/serve.py prints the warning; launch_ui only shows it on the page (it logged it a second time)."""
    import app.main

    shown = []

    class Demo:
        def queue(self, **kw):
            pass

        def launch(self, **kw):
            pass

    import socket

    monkeypatch.setattr(app.main, "build_app", lambda workspace, warning, lang, auth: shown.append(warning) or Demo())
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port = s.getsockname()[1]
    assert launch.main(["ui", "--host", "0.0.0.0", "--port", str(port), "--workspace", str(tmp_path)]) == 0
    said = capsys.readouterr().err + caplog.text
    assert said.count("serving on 0.0.0.0 without --auth") == 1 and said.startswith("WARNING: serving on 0.0.0.0")
    assert shown and "without --auth" in shown[0]  # the page's banner


def test_train_says_how_the_dataset_was_read_before_the_run_starts(tmp_path, monkeypatch, capsys):
    from backend.data import FormatInfo
    from backend.runs import jobs, preflight

    info = FormatInfo("prompt_completion", ["prompt", "completion"], True, 2, adapter="alpaca → prompt + completion")
    submitted = []
    monkeypatch.setattr(preflight, "preflight", lambda config, workspace, **_: info)
    monkeypatch.setattr(jobs, "submit_run", lambda store, config, check=True: submitted.append(check) or
                        type("Run", (), {"id": "20260101-000000-abcd"})())
    assert launch.main(["train", "--detach", "--workspace", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dataset: 2 rows, prompt_completion format (prompt + completion, conversational); "
                          "converted: alpaca → prompt + completion\nrun id: 20260101-000000-abcd")
    assert submitted == [False]  # checked once, not twice


def test_a_dry_run_checks_everything_a_start_checks_shows_settings_and_memory_and_starts_nothing(
        tmp_path, tiny_model, capsys):
    from backend.runs.store import RunStore

    args = ["train", "presets/sft_demo.yaml", "--set", f"model={tiny_model}", "--set", "max_length=64",
            "--workspace", str(tmp_path), "--dry-run"]
    assert launch.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: the settings are valid; nothing was started\nmode: sft  model: ")
    assert "settings (those not at their defaults):\n  name: sft-demo\n" in out and "  max_length: 64\n" in out
    assert "dataset: 201 rows, messages format" in out
    assert "memory: Estimated memory per process: " in out and " — fits in the " in out
    assert RunStore(tmp_path).list_runs() == [] and not (tmp_path / "runs").exists()

    # what only preflight finds (the settings themselves are valid): exit 2, naming it
    assert launch.main([*args, "--set", f"dataset={tmp_path / 'missing.jsonl'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Cannot start the run: dataset: ") and "missing.jsonl" in err and err.count("\n") == 1
    assert RunStore(tmp_path).list_runs() == []
