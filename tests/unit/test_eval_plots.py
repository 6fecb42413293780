"""Evaluation metrics are logged at other steps than training ones; each keeps its own steps on its chart,
eval_loss next to loss, and the evaluation's bookkeeping (runtime, samples per second) comes last."""
from app.plots import build_metrics_figure
from backend.metrics_plot import pick_metrics


def rows(name, points):
    return [{"id": 0, "step": s, "name": name, "value": v, "time": 0.0} for s, v in points]


def test_eval_loss_is_charted_next_to_loss_at_its_own_steps():
    fig = build_metrics_figure(rows("loss", [(1, 3.0), (2, 2.8), (3, 2.7), (4, 2.5)])
                               + rows("grad_norm", [(s, 1.0) for s in range(1, 5)])
                               + rows("eval_runtime", [(2, 1.1), (4, 1.2)])
                               + rows("eval_loss", [(2, 2.9), (4, 2.6)]))
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["loss", "eval_loss", "grad_norm", "eval_runtime"]
    eval_raw = fig.data[2]  # each chart: a raw trace, then the smoothed one
    assert list(eval_raw.x) == [2, 4] and list(eval_raw.y) == [2.9, 2.6]


def test_the_model_card_picture_shows_eval_loss_after_loss_and_skips_eval_bookkeeping():
    assert pick_metrics(["eval_runtime", "grad_norm", "eval_loss", "loss", "eval_samples_per_second"]) == \
        ["loss", "eval_loss", "grad_norm"]
