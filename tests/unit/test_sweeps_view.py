"""What the Sweeps tab offers and shows, as plain functions: searchable settings, default ranges, tables, chart."""
import pytest

from app.sweep_render import (default_param, history_figure, param_from_row, row_values, searchable_fields,
                              spec_data, status_html, trials_frame)
from backend import sweeps
from backend.config import build_config
from backend.runs.store import RunStore

SFT_BASE = build_config({"mode": "sft", "max_steps": 2}).model_dump()


def paths(mode):
    return [path for _, path in searchable_fields(mode)]


def test_the_settings_offered_are_the_modes_numbers_switches_and_named_choices():
    sft = paths("sft")
    assert {"learning_rate", "lora.r", "lora.dropout", "lr_scheduler_type", "packing", "warmup_steps"} <= set(sft)
    assert not {"name", "mode", "model", "dataset", "lora.target_modules", "reward_sources", "dpo.beta"} & set(sft)
    assert "dpo.beta" in paths("dpo") and "packing" not in paths("dpo")
    assert "rl.temperature" in paths("grpo")


def test_default_ranges_sit_around_the_base_value_inside_the_schema():
    assert default_param("learning_rate", SFT_BASE) == {"field": "learning_rate", "kind": "log_float",
                                                        "low": 2e-5, "high": 2e-3}
    assert default_param("lora.r", SFT_BASE) == {"field": "lora.r", "kind": "int", "low": 4, "high": 16}
    assert default_param("gradient_checkpointing", SFT_BASE)["choices"] == [True, False]
    assert default_param("lr_scheduler_type", SFT_BASE)["choices"][0] == "linear"


@pytest.mark.parametrize("path", paths("sft"))
def test_every_default_row_is_a_valid_search_space(path):
    spec = sweeps.build_sweep_spec({"base": SFT_BASE, "space": [default_param(path, SFT_BASE)]})
    assert spec.space[0].field == path


def test_rows_round_trip_and_make_a_spec():
    param = {"field": "lora.r", "kind": "categorical", "choices": [4, 8, 16]}
    assert row_values(param) == ["lora.r", "categorical", None, None, "4, 8, 16"]
    assert param_from_row(*row_values(param)) == param
    assert param_from_row(*row_values({"field": "packing", "kind": "categorical", "choices": [True, False]})) == \
        {"field": "packing", "kind": "categorical", "choices": [True, False]}
    assert param_from_row(*row_values(None)) is None
    data = spec_data("mode: sft\nmax_steps: 2\n", [param, None], "loss", "minimize", "last", 5, 3, 1, True, " s ")
    spec = sweeps.build_sweep_spec(data)
    assert spec.name == "s" and spec.n_trials == 3 and spec.pruning.enabled and len(spec.space) == 1


def test_the_trials_table_marks_the_best_and_the_chart_tracks_the_best_so_far(tmp_path):
    store = RunStore(tmp_path)
    spec = sweeps.build_sweep_spec({"name": "s", "base": SFT_BASE, "space": [
        {"field": "lora.r", "kind": "categorical", "choices": [4, 8]}]})
    sweep = sweeps.create_sweep(store, spec)
    trials = [sweeps.Trial(sweep.id, 0, None, "completed", {"lora.r": 4}, 2.0),
              sweeps.Trial(sweep.id, 1, None, "pruned", {"lora.r": 8}, 3.0),
              sweeps.Trial(sweep.id, 2, None, "completed", {"lora.r": 8}, 1.0),
              sweeps.Trial(sweep.id, 3, None, "failed", {"lora.r": 4}, None, error="boom")]
    styler = trials_frame(store, sweep, trials)
    frame = styler.data
    assert list(frame.columns) == ["trial", "status", "lora.r", "loss", "best", "run"]
    assert frame["best"].tolist() == ["", "", "★", ""] and frame["trial"].tolist() == ["#1", "#2", "#3", "#4"]
    assert "rgba(22, 163, 74, 0.16)" in styler.to_html()
    fig = history_figure(sweep, trials)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["completed"].x) == [1, 3] and list(by_name["pruned"].y) == [3.0]
    assert list(by_name["best so far"].x) == [1, 2, 3] and list(by_name["best so far"].y) == [2.0, 2.0, 1.0]
    status = status_html(sweep, trials, {"lora.r": 0.75})
    assert "4/8 trials · best loss <b>1</b> (trial #3)" in status  # completed, pruned and failed trials count
    assert "<code>lora.r</code> 75%" in status
    zh = trials_frame(store, sweep, trials, "zh")  # headers and status words in Chinese, paths and metric as they are
    assert list(zh.data.columns) == ["试验", "状态", "lora.r", "loss", "最佳", "运行"]
    assert zh.data["状态"].tolist()[:2] == ["已完成", "已剪枝"] and "rgba(22, 163, 74, 0.16)" in zh.to_html()
    assert "4/8 次试验 · 最佳 loss <b>1</b>（试验 #3）" in status_html(sweep, trials, None, "zh")
    assert {t.name for t in history_figure(sweep, trials, "zh").data} == {"已完成", "已剪枝", "目前最佳"}
