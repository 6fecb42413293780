"""Metric charts: one subplot per logged metric, raw and EMA-smoothed, non-finite values left out."""
import math

import pandas as pd
import pytest

from app.plots import (MAX_POINTS, add_rows, build_metrics_figure, ema, figure_from_series, metric_order,
                       overlay_figure)


def rows(name, values, start_step=1):
    return [{"id": i, "step": start_step + i, "name": name, "value": v, "time": 0.0} for i, v in enumerate(values)]


def traces_of(fig, metric):
    return [t for t in fig.data if metric in t.hovertemplate]


def test_every_metric_gets_a_raw_and_a_smoothed_trace_in_its_own_subplot():
    fig = build_metrics_figure(rows("loss", [3, 2, 1]) + rows("grad_norm", [1, 1, 1]) + rows("entropy", [5, 4, 3]))
    assert len(fig.data) == 6
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["loss", "grad_norm", "entropy"]
    for metric in ("loss", "grad_norm", "entropy"):
        raw, smooth = traces_of(fig, metric)
        assert raw.mode == "lines+markers" and smooth.mode == "lines"
        assert raw.line.width < smooth.line.width
        assert (raw.xaxis, raw.yaxis) == (smooth.xaxis, smooth.yaxis)  # same subplot
    assert len({t.xaxis for t in fig.data}) == 3  # three subplots


def test_loss_comes_first_and_other_metrics_keep_their_logged_order():
    fig = build_metrics_figure(rows("learning_rate", [1e-4]) + rows("entropy", [2.0]) + rows("loss", [1.0]))
    assert [a.text for a in fig.layout.annotations] == ["loss", "learning_rate", "entropy"]


def test_none_and_nan_values_are_skipped_not_plotted():
    fig = build_metrics_figure(rows("loss", [3.0, None, float("nan"), 1.0, float("inf")]))
    raw, smooth = fig.data
    assert list(raw.x) == [1, 4] and list(raw.y) == [3.0, 1.0]
    assert list(smooth.x) == [1, 4] and all(math.isfinite(v) for v in smooth.y)


def test_a_metric_with_no_finite_value_still_shows_up_empty():
    fig = build_metrics_figure(rows("loss", [1.0, 2.0]) + rows("kl", [None, float("nan")]))
    assert "kl (no finite values)" in [a.text for a in fig.layout.annotations]
    assert all(len(t.x) == 0 for t in traces_of(fig, "kl"))


def test_end_of_training_summary_is_a_title_line_not_a_subplot():
    summary = rows("train_runtime", [12.5], 2) + rows("train_loss", [1.5], 2)
    fig = build_metrics_figure(rows("loss", [2.0, 1.0]) + summary)
    assert [a.text for a in fig.layout.annotations] == ["loss"]
    assert "train_loss 1.5" in fig.layout.title.text and "train_runtime 12.5" in fig.layout.title.text


def test_no_rows_gives_a_placeholder_figure():
    fig = build_metrics_figure([])
    assert len(fig.data) == 0
    assert fig.layout.annotations[0].text == "No metrics yet"


def test_rows_can_be_added_incrementally():
    series = add_rows({}, rows("loss", [3.0, 2.0]))
    add_rows(series, rows("loss", [1.0], start_step=3))
    assert series["loss"] == ([1, 2, 3], [3.0, 2.0, 1.0])
    fig = figure_from_series(series)
    assert list(fig.data[0].x) == [1, 2, 3]


def test_long_runs_are_thinned_on_screen_but_keep_the_latest_point():
    n = 3 * MAX_POINTS + 7
    fig = build_metrics_figure(rows("loss", [float(i) for i in range(n)]))
    raw = fig.data[0]
    assert len(raw.x) <= MAX_POINTS + 1
    assert raw.x[-1] == n and raw.y[-1] == n - 1


def test_ema_is_bias_corrected_like_pandas_ewm():
    values = [4.0, 1.0, 3.0, 8.0, 2.0]
    expected = pd.Series(values).ewm(alpha=0.3, adjust=True).mean().tolist()
    assert ema(values, 0.3) == pytest.approx(expected)


def test_ema_starts_at_the_first_value_and_keeps_constants_constant():
    assert ema([5.0, 5.0, 5.0], 0.1) == pytest.approx([5.0, 5.0, 5.0])
    assert ema([2.0, 10.0], 0.5)[0] == 2.0
    assert ema([1.0, 2.0, 3.0], 1.0) == [1.0, 2.0, 3.0]  # alpha 1: no smoothing
    assert ema([], 0.3) == []


def test_ema_rejects_an_alpha_outside_0_1():
    with pytest.raises(ValueError):
        ema([1.0], 0.0)


def test_cost_lambda_and_violations_follow_the_rewards_and_a_cost_chart_draws_its_budget():
    names = ["loss", "kl", "lambda/unsafe", "rewards/unsafe/mean", "cost/unsafe/mean", "constraint/violation_rate",
             "reward"]
    assert metric_order(names) == ["loss", "reward", "rewards/unsafe/mean", "cost/unsafe/mean", "lambda/unsafe",
                                   "constraint/violation_rate", "kl"]
    series = add_rows({}, rows("cost/unsafe/mean", [0.5, 0.2, 0.1]) + rows("lambda/unsafe", [0, 0.4, 0.5]))
    fig = figure_from_series(series, budgets={"unsafe": 0.05})
    (budget,) = [t for t in fig.data if t.name == "budget"]
    assert list(budget.y) == [0.05, 0.05] and list(budget.x) == [1, 3]
    assert budget.xaxis == next(t for t in fig.data if t.hovertemplate.startswith("cost/")).xaxis
    assert not any(t.legendgroup == "reward" for t in fig.data)  # no reward logged: the cost alone


def test_the_reward_is_drawn_on_its_costs_chart_on_a_right_hand_axis():
    series = add_rows({}, rows("reward", [0.2, 0.5, 0.9]) + rows("cost/unsafe/mean", [0.5, 0.2, 0.1]))
    fig = figure_from_series(series, budgets={"unsafe": 0.05})
    titles = [a.text for a in fig.layout.annotations]
    assert "cost/unsafe/mean and reward (right axis)" in titles and "reward" in titles
    cost = next(t for t in fig.data if t.hovertemplate.startswith("cost/") and t.mode == "lines")
    (reward,) = [t for t in fig.data if t.legendgroup == "reward"]
    assert reward.xaxis == cost.xaxis and reward.yaxis != cost.yaxis  # same chart, its own axis
    assert fig.layout[reward.yaxis.replace("y", "yaxis")].side == "right"
    assert list(reward.y) == pytest.approx(ema([0.2, 0.5, 0.9], 0.3))


def test_a_run_leads_with_its_modes_charts_folds_the_rest_by_prefix_and_lists_the_flat_ones():
    from app.plots import GROUP_SLOTS, STEP_TIME, chart_layout, flat_text
    from backend.core.mode_registry import mode_spec

    logged = {"loss": [1, 0.8], "reward": [0.1, 0.5], "rewards/len/mean": [0.1, 0.3], "rewards/len/std": [0.1, 0.2],
              "kl": [0.0, 0.02], "clip_ratio/low_mean": [0, 0], "clip_ratio/high_mean": [0, 0],
              "completions/mean_length": [5, 7], "completions/max_length": [8, 9], "memory/peak_rss_gb": [1, 1.2],
              "timing/generate_s": [1, 2], "learning_rate": [1e-4, 9e-5], "eval_reward": [0.5]}
    series = add_rows({}, [r for name, values in logged.items() for r in rows(name, values)])
    layout = chart_layout(series, mode_spec("grpo").charts)
    assert layout.lead == ["reward", "rewards/len/mean", "eval_reward", "kl", "completions/mean_length", STEP_TIME]
    assert layout.flat == ["clip_ratio/low_mean", "clip_ratio/high_mean"]  # all zero: listed, not drawn
    assert flat_text(series, layout.flat) == "`clip_ratio/low_mean` = 0 · `clip_ratio/high_mean` = 0"
    assert layout.groups == [("other", ["loss", "learning_rate"]), ("rewards/*", ["rewards/len/std"]),
                             ("completions/*", ["completions/max_length"]), ("memory/*", ["memory/peak_rss_gb"])]
    sft = chart_layout(series, mode_spec("sft").charts)
    assert sft.lead == ["loss", "learning_rate", STEP_TIME] and "eval_reward" not in sft.lead
    assert chart_layout(series).lead == [n for n in metric_order(series) if n not in layout.flat]  # no mode: all
    stuck = add_rows({}, rows("reward", [0, 0, 0]) + rows("clip_ratio/low_mean", [0, 0, 0]))
    assert chart_layout(stuck, mode_spec("grpo").charts).lead == ["reward"]  # a flat reward still leads
    many = add_rows({}, [r for g in range(GROUP_SLOTS + 3) for r in rows(f"g{g}/m", [g, g + 1])])
    groups = chart_layout(many, ("nothing",)).groups
    assert len(groups) == GROUP_SLOTS and groups[-1][0] == "more" and len(groups[-1][1]) == 4


def test_short_runs_get_whole_step_ticks_and_a_learning_rate_axis_in_exponent_form():
    fig = figure_from_series(add_rows({}, rows("loss", [2.0]) + rows("learning_rate", [1e-4, 5e-5, 1e-5])))
    loss_axis = fig.layout[traces_of(fig, "loss")[0].xaxis.replace("x", "xaxis")]
    assert loss_axis.dtick == 1 and list(loss_axis.range) == [0.5, 2.5]  # one point at step 1, not at 0.5 steps
    lr = traces_of(fig, "learning_rate")[0]
    assert fig.layout[lr.xaxis.replace("x", "xaxis")].dtick == 1
    assert fig.layout[lr.yaxis.replace("y", "yaxis")].tickformat == ".1e"




def test_the_learning_rate_is_a_schedule_drawn_as_logged_without_an_ema():
    schedule = [0.0, 1e-4, 1e-4, 5e-5, 0.0]  # warm-up then decay: an EMA would lag and round its corners
    fig = build_metrics_figure(rows("learning_rate", schedule) + rows("entropy", [3, 2, 1, 1, 1]))
    (lr,) = traces_of(fig, "learning_rate")  # one line, no smoothed twin
    assert lr.mode == "lines" and list(lr.y) == schedule and list(lr.x) == [1, 2, 3, 4, 5]
    assert "EMA" not in lr.hovertemplate
    assert len(traces_of(fig, "entropy")) == 2  # a measured metric keeps its raw points and its EMA
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == ["raw", "smoothed (EMA α=0.3)"]  # named by the first smoothed chart (the schedule's is first)
    # comparing runs: the schedule is one line per run, the logged values themselves
    two = overlay_figure([("a", add_rows({}, rows("learning_rate", schedule))),
                          ("b", add_rows({}, rows("learning_rate", [1e-4] * 5)))])
    assert [list(t.y) for t in two.data] == [schedule, [1e-4] * 5] and {t.mode for t in two.data} == {"lines"}


def test_an_rl_steps_time_is_one_chart_of_stacked_bars_after_the_rewards():
    timings = {"timing/generate_s": [3.0, 2.5, 2.75], "timing/score_s": [0.25, 0.5, 0.25],
               "timing/update_s": [1.0, 1.25, 1.5]}
    logged = rows("loss", [1, 1, 1]) + rows("kl", [0, 0.1, 0.2]) + rows("reward", [0, 1, 1]) \
        + rows("rewards/correct/mean", [0, 1, 1]) + [r for k, v in timings.items() for r in rows(k, v)]
    fig = build_metrics_figure(logged)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["loss", "reward", "rewards/correct/mean", "step time (s): generate · score · update", "kl"]
    bars = [t for t in fig.data if t.type == "bar"]
    assert [b.name for b in bars] == ["generate", "score", "update"] and fig.layout.barmode == "stack"
    for bar, values in zip(bars, timings.values()):
        assert list(bar.x) == [1, 2, 3] and list(bar.y) == values
    assert {(b.xaxis, b.yaxis) for b in bars} == {("x4", "y4")}  # the fourth subplot, one stack per step
    # a step that logged only some of the three has no bar: a partial stack would misstate the step time
    partial = build_metrics_figure(logged + rows("timing/generate_s", [9.0], start_step=4))
    assert all(list(b.x) == [1, 2, 3] for b in partial.data if b.type == "bar")
