"""Comparing runs: the settings that differ (from the schema's own field list), final values, overlay charts,
and the `compare` command."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.plots import add_rows, overlay_figure
from backend.runs.compare import MAX_COMPARED, config_differences, final_values, load_runs
from backend.config import build_config
from backend.runs.store import RunStore

REPO = Path(__file__).resolve().parents[2]


def test_only_settings_that_differ_are_listed_in_schema_order_without_the_name():
    a = build_config({"name": "a", "learning_rate": 1e-4, "lora": {"r": 8}})
    b = build_config({"name": "b", "learning_rate": 3e-4, "lora": {"r": 8}})
    c = build_config({"name": "c", "learning_rate": 1e-4, "lora": {"r": 16}})
    diffs = dict(config_differences([a, b, c]))
    assert diffs == {"learning_rate": ["0.0001", "0.0003", "0.0001"], "lora.r": ["8", "8", "16"]}
    assert config_differences([a, build_config({"name": "other", "lora": {"r": 8}, "learning_rate": 1e-4})]) == []


def test_list_settings_such_as_reward_sources_are_compared_whole():
    base = {"mode": "grpo", "dataset": "demo-math"}
    one = build_config({**base, "reward_sources": [{"type": "length", "params": {"target": 50}}]})
    two = build_config({**base, "reward_sources": [{"type": "length", "params": {"target": 80}}]})
    (path, values), = config_differences([one, two])
    assert path == "reward_sources" and '"target": 50' in values[0] and '"target": 80' in values[1]


def test_final_values_put_key_metrics_first_and_leave_gaps_for_metrics_a_run_did_not_log(tmp_path):
    store = RunStore(tmp_path)
    r1 = store.create_run(build_config({"name": "one"}))
    r2 = store.create_run(build_config({"name": "two"}))
    store.add_metrics(r1.id, 1, {"grad_norm": 3.0, "loss": 2.0})
    store.add_metrics(r1.id, 2, {"loss": 1.5})
    store.add_metrics(r2.id, 1, {"loss": 1.0, "reward": 0.5})
    rows = final_values(store, [r1, r2])
    assert rows == [("loss", [1.5, 1.0]), ("reward", [None, 0.5]), ("grad_norm", [3.0, None])]


def test_load_runs_keeps_order_drops_duplicates_and_names_unknown_ids(tmp_path):
    store = RunStore(tmp_path)
    a, b = (store.create_run(build_config({})) for _ in range(2))
    assert [r.id for r in load_runs(store, [b.id, a.id, b.id])] == [b.id, a.id]
    with pytest.raises(KeyError, match="nope"):
        load_runs(store, [a.id, "nope"])
    many = [store.create_run(build_config({})).id for _ in range(MAX_COMPARED + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_COMPARED}"):
        load_runs(store, many)


def test_overlay_has_one_subplot_per_metric_and_one_legend_entry_per_run():
    s1 = add_rows({}, [{"step": i, "name": "loss", "value": 2.0 - i / 10} for i in range(5)])
    s2 = add_rows({}, [{"step": i, "name": n, "value": float(i)} for i in range(5) for n in ("loss", "reward")])
    fig = overlay_figure([("run one", s1), ("run two", s2)])
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["loss", "reward"]
    legend = [t.name for t in fig.data if t.showlegend]
    assert legend == ["run one", "run two"]
    colors = {t.legendgroup: t.line.color for t in fig.data if t.mode == "lines"}
    assert colors["run one"] != colors["run two"]
    # run one logged no reward: no trace of it on that subplot
    assert sum(1 for t in fig.data if t.legendgroup == "run one") == 2


def test_overlay_with_nothing_picked_says_what_to_do():
    fig = overlay_figure([])
    assert "Pick two or more runs" in fig.layout.annotations[0].text


def test_cli_compare_prints_differences_and_final_values_and_refuses_bad_ids(tmp_path):
    store = RunStore(tmp_path)
    a = store.create_run(build_config({"name": "low-lr", "learning_rate": 1e-5}))
    b = store.create_run(build_config({"name": "high-lr", "learning_rate": 1e-3}))
    store.add_metrics(a.id, 3, {"loss": 2.25})
    store.add_metrics(b.id, 3, {"loss": 1.125})

    def cli(*args):
        return subprocess.run([sys.executable, str(REPO / "launch.py"), "compare", *args, "--workspace",
                               str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=120)

    out = cli(a.id, b.id)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "low-lr" in lines[0] and "high-lr" in lines[0]
    lr = next(line for line in lines if line.startswith("learning_rate"))
    assert "1e-05" in lr and "0.001" in lr
    assert "final values:" in lines
    assert any(line.startswith("loss") and "2.25" in line and "1.125" in line for line in lines)

    data = json.loads(cli(a.id, b.id, "--json").stdout)
    assert data["settings"] == {"learning_rate": ["1e-05", "0.001"]}
    assert data["final"] == {"loss": [2.25, 1.125]}

    bad = cli(a.id, "20990101-000000-beef")
    assert bad.returncode == 2 and "20990101-000000-beef" in bad.stderr and "Traceback" not in bad.stderr
    one = cli(a.id, a.id)
    assert one.returncode == 2 and "two or more" in one.stderr


def test_options_without_a_command_start_the_ui():
    import launch

    parser = launch.build_parser()
    route = lambda *argv: parser.parse_args(launch.with_default_command(parser, list(argv))).command  # noqa: E731
    assert route() == "ui" and route("--port", "7861") == "ui"
    assert route("--workspace", "/tmp/w", "runs") == "runs" and route("compare", "a", "b") == "compare"


def test_compared_runs_show_their_latest_evaluation_with_intervals_and_win_rates(tmp_path):
    from backend import evals
    from backend.evals.store import Answer, create_eval, finish_eval, save_answers

    store = RunStore(tmp_path)
    a, b, c = (store.create_run(build_config({"name": n})) for n in ("a", "b", "never-evaluated"))

    def evaluation(models, labels, scores, status="completed"):
        spec = evals.build_spec({"models": models, "dataset": "demo-math",
                                 "scorers": [{"type": "exact_match", "name": "ok"}]})
        e = create_eval(store, spec, {"models": labels}, total=len(scores))
        save_answers(store, e.id, [Answer(m, r, 0, f"p{r}", "ref", "x", {"ok": s}, {})
                                   for (m, r), s in scores.items()])
        finish_eval(store, e.id, status)
        return e

    evaluation(["base", f"run:{a.id}"], ["base", "a"], {(0, 0): 0, (1, 0): 0})  # older: not shown
    latest = evaluation(["base", f"run:{a.id}@4", f"run:{b.id}"], ["base", "a@4", "b"],
                        {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 1, (2, 0): 0, (2, 1): 0})
    evaluation(["base", f"run:{b.id}"], ["base", "b"], {(0, 0): 1}, status="failed")  # no results to read
    found = evals.latest_evaluations(store, [a.id, b.id, c.id])
    assert [f.evaluation.id if f else None for f in found] == [latest.id, latest.id, None]
    rows = dict(evals.comparison_rows(found))
    assert rows["evaluated model"] == ["a@4", "b", "—"]
    assert rows["ok"][0] == "1.000 [1.000, 1.000]" and rows["ok"][1].startswith("0.000 [")
    assert rows["win rate (win / tie / loss)"][:2] == ["0.75 (1 / 1 / 0) vs base, by ok",
                                                       "0.25 (0 / 1 / 1) vs base, by ok"]
    assert evals.comparison_rows(evals.latest_evaluations(store, [c.id])) == []  # nothing to show at all

    data = json.loads(subprocess.run([sys.executable, str(REPO / "launch.py"), "compare", a.id, b.id, c.id, "--json",
                                      "--workspace", str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                                     timeout=120).stdout)
    first, second, none = data["evaluations"]
    assert none is None and first["id"] == second["id"] == latest.id
    assert first["model"] == "a@4" and first["scores"]["ok"]["mean"] == 1.0 and first["win_rate"] == 0.75
    assert (second["wins"], second["ties"], second["losses"]) == (0, 1, 1)
    text = subprocess.run([sys.executable, str(REPO / "launch.py"), "compare", a.id, c.id, "--workspace",
                           str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=120).stdout
    assert "latest evaluation (mean [95% interval]" in text
    assert any(line.startswith("ok") and "1.000 [1.000, 1.000]" in line and "—" in line for line in text.splitlines())


def test_compare_says_no_learning_signal_and_stalled_in_the_cli_and_the_panel(tmp_path, capsys):
    import gradio as gr

    import launch
    from app import compare_panel
    from app.tab_polls import TabPolls
    from tests.unit.test_cli_doctor import no_signal_run, stalled_run

    store = RunStore(tmp_path)
    flat, stuck = no_signal_run(store), stalled_run(store)
    assert launch.main(["compare", flat.id, stuck.id, "--workspace", str(tmp_path)]) == 0
    status = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("status"))
    assert status.split(None, 1)[1].split("  ")[0] == "completed — no learning signal"
    assert status.rstrip().endswith("  running — stalled")

    with gr.Blocks() as demo:  # the Runs tab's Compare accordion, its handler called as a pick would call it
        compare_panel.build(store, TabPolls(1.5, ("runs",)))
    on_pick = next(f.fn for f in demo.fns.values() if f.name == "on_pick")
    out = on_pick([flat.id, stuck.id], compare_panel.CompareView())
    settings = next(v for c, v in out.items() if getattr(c, "elem_id", None) == "compare-settings")
    assert settings.iloc[0].tolist() == ["status", "completed — no learning signal", "running — stalled"]
