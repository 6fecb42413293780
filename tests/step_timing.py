"""The check the RL runs' tests share: each step's time split into generate / score / update."""
import pytest

from backend.core.step_timing import TIMING_KEYS


def assert_each_step_is_split(metrics: list[dict], steps: list[int]) -> None:
    """timing/generate_s, score_s and update_s logged for every one of `steps`, non-negative, generation
    measured, and together the step's step_time."""
    by_step: dict[int, dict] = {}
    for m in metrics:
        by_step.setdefault(m["step"], {})[m["name"]] = m["value"]
    for step in steps:
        logged = by_step.get(step, {})
        assert set(TIMING_KEYS) <= set(logged), f"step {step} lacks {set(TIMING_KEYS) - set(logged)}"
        assert all(logged[k] >= 0 for k in TIMING_KEYS) and logged["timing/generate_s"] > 0, logged
        assert sum(logged[k] for k in TIMING_KEYS) == pytest.approx(logged["step_time"], rel=1e-3), logged
