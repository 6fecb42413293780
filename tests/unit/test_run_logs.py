"""A run's whole log, readable: repeated library warnings collapsed with their count (backend/runs/logs.py),
`launch.py logs RUN_ID [-f] [--lines N]`, and the Runs tab's Full log accordion."""
import gradio as gr
import pytest

import launch
from backend.config import RunConfig
from backend.runs.logs import log_path
from backend.runs.logs import RepeatFilter, collapse_repeats, follow_log, read_log, split_lines
from backend.runs.store import RunStore

FUTURE = ("/venv/transformers/modeling_utils.py:3312: FutureWarning: `is_gradient_checkpointing` is deprecated "
          "and will be removed in v6.")
ECHO = "  warnings.warn("
USER = "/venv/torch/utils/checkpoint.py:87: UserWarning: None of the inputs have requires_grad=True."


def step(n: int) -> str:
    return f"step {n}/3: loss=0.5, grad_norm=1"


# a real training log's shape: transformers warns at every step, between the step lines
TRAINING = ["run r1: mode=sft", FUTURE, ECHO, step(1), FUTURE, ECHO, USER, ECHO, step(2), FUTURE, ECHO, USER, ECHO,
            step(3), "run r1 completed"]


def test_a_warning_repeated_every_step_is_shown_once_where_it_first_came_with_its_count():
    assert collapse_repeats(TRAINING) == [
        "run r1: mode=sft", f"{FUTURE}  (repeated 3 times)", ECHO, step(1), f"{USER}  (repeated 2 times)", ECHO,
        step(2), step(3), "run r1 completed"]


def test_back_to_back_repeats_are_one_line_with_a_count_and_other_lines_stay_as_they_are():
    lines = ["a", "a", "a", "b", "", "", "a", "Traceback (most recent call last):", '  File "x.py", line 1',
             '  File "x.py", line 1', "ValueError: bad"]
    assert collapse_repeats(lines) == ["a  (repeated 3 times)", "b", "", "", "a",
                                       "Traceback (most recent call last):",
                                       '  File "x.py", line 1  (repeated 2 times)', "ValueError: bad"]
    assert collapse_repeats(["x", "y", "x"]) == ["x", "y", "x"]  # not a warning: every occurrence kept
    assert collapse_repeats([]) == []


def test_logging_style_warnings_collapse_too_and_a_progress_bar_shows_its_last_state():
    warn = "WARNING:root:the tokenizer has no pad token, using eos"
    assert collapse_repeats([warn, step(1), warn, step(2)]) == [f"{warn}  (repeated 2 times)", step(1), step(2)]
    assert split_lines("a\r 10%|#  | 1/10\r100%|###| 10/10\nb") == ["100%|###| 10/10", "b"]


def test_a_stream_drops_warnings_seen_before_and_counts_back_to_back_repeats():
    f = RepeatFilter([FUTURE, ECHO, step(1)])
    out = [line for item in (FUTURE, ECHO, step(2), step(2), step(2), USER, ECHO, USER, ECHO, "done")
           for line in f.feed(item)] + f.flush()
    assert out == [step(2), "(the line above repeated 2 more times)", USER, ECHO, "done"]


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path)


def write_log(store, lines):
    run = store.create_run(RunConfig())
    log_path(store, run.id).write_text("".join(f"{line}\n" for line in lines))
    return run


def test_read_log_is_the_whole_collapsed_log_or_its_last_lines(store):
    run = write_log(store, TRAINING)
    assert read_log(store, run.id).splitlines() == collapse_repeats(TRAINING)
    assert read_log(store, run.id, lines=2).splitlines() == [step(3), "run r1 completed"]
    with pytest.raises(KeyError, match="no run with id 'nope'"):
        read_log(store, "nope")


def test_read_log_of_a_huge_file_reads_its_end_from_a_line_start(store):
    run = write_log(store, [f"line {i}" for i in range(1000)])
    assert read_log(store, run.id, max_bytes=30).splitlines() == ["line 997", "line 998", "line 999"]


def test_follow_log_prints_what_is_there_then_new_lines_until_the_run_has_ended(store):
    run = write_log(store, ["first", FUTURE, ECHO])
    assert store.get_run(run.id).active  # queued: its worker is yet to write
    writes = [[step(1), FUTURE, ECHO, "partial"], [" line", step(2)]]

    def sleep(_):  # each pause: the worker writes more, and after the last write the run ends
        if writes:
            with open(log_path(store, run.id), "a") as f:
                f.write("\n".join(writes.pop(0)))
        else:
            store.finish_run(run.id, "completed")

    lines = list(follow_log(store, run.id, poll_s=0, settle_s=0, sleep=sleep))
    assert lines == ["first", FUTURE, ECHO, step(1), "partial line", step(2)]


def test_launch_logs_prints_the_log_the_last_lines_and_refuses_an_unknown_run(store, capsys):
    run = write_log(store, TRAINING)
    store.finish_run(run.id, "completed")
    assert launch.main(["logs", run.id, "--workspace", str(store.workspace)]) == 0
    assert capsys.readouterr().out.splitlines() == collapse_repeats(TRAINING)
    assert launch.main(["logs", run.id, "--lines", "1", "--workspace", str(store.workspace)]) == 0
    assert capsys.readouterr().out == "run r1 completed\n"
    assert launch.main(["logs", "nope", "--workspace", str(store.workspace)]) == 2
    assert capsys.readouterr().err == "no run with id 'nope'\n"
    assert launch.main(["logs", run.id, "--lines", "0", "--workspace", str(store.workspace)]) == 2


def test_launch_logs_follow_ends_by_itself_once_the_run_has_ended(store, capsys, monkeypatch):
    import backend.runs.logs as logs

    run = write_log(store, TRAINING)
    store.finish_run(run.id, "completed")
    monkeypatch.setattr(logs, "SETTLE_S", 0.0)
    assert launch.main(["logs", run.id, "-f", "--workspace", str(store.workspace)]) == 0
    assert capsys.readouterr().out.splitlines() == collapse_repeats(TRAINING)


def test_the_full_log_accordion_is_closed_and_its_events_show_no_progress(store):
    from app import log_panel
    from app.tab_polls import TabPolls

    with gr.Blocks() as demo:
        select = gr.Dropdown(choices=[], value=None)
        log_panel.build(store, TabPolls(1.5, ("runs",)), select)
    config = demo.config
    ids = {c["props"].get("elem_id"): c for c in config["components"]}
    assert {"full-log", "full-log-path", "full-log-search", "full-log-text"} <= set(ids)
    assert ids["full-log"]["props"]["open"] is False
    assert all(d["show_progress"] == "hidden" for d in config["dependencies"])


def test_the_full_log_shows_the_search_matches_with_their_count_marked(store):
    from app.log_panel import render_log

    run = write_log(store, TRAINING)
    box, info = render_log(store, run.id, "STEP 2", "en")
    assert "<mark>step 2</mark>/3" in box and "step 1/3" not in box
    assert info == "1 of 9 lines contain “STEP 2”"
    box, info = render_log(store, run.id, "", "zh")
    assert "(repeated 3 times)" in box and info.startswith("共 9 行")


def test_the_runs_tab_log_tail_collapses_the_warnings_too(store):
    from backend.runs.logs import log_tail

    run = write_log(store, TRAINING)
    assert log_tail(store, run.id, 3).splitlines() == [step(2), step(3), "run r1 completed"]
