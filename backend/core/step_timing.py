"""Where an online RL step's time goes: generating completions, scoring them with the reward sources, and the
update (everything else: log-probs of the policy and the reference, the backward pass, the optimizer).

Logged per step as `timing/generate_s`, `timing/score_s` and `timing/update_s`; the three add up to the step's
`step_time` (TRL's name, which GRPO, RLOO and the project's PPO all log).
"""
from __future__ import annotations

import time
from contextlib import contextmanager

TIMING_KEYS = ("timing/generate_s", "timing/score_s", "timing/update_s")


class PhaseTimer:
    """Seconds spent generating and scoring since the last `take`."""

    def __init__(self):
        self.generate = self.score = 0.0

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.perf_counter() - start)

    def take(self, step_time: float) -> dict[str, float]:
        """The step's three timings (update = the rest of `step_time`), and a fresh start for the next step."""
        out = {"timing/generate_s": self.generate, "timing/score_s": self.score,
               "timing/update_s": max(0.0, step_time - self.generate - self.score)}
        self.generate = self.score = 0.0
        return out


class TimedPhases:
    """Mixed into TRL's GRPOTrainer / RLOOTrainer (1.16): times their `_generate` (the generate call, and vLLM's
    weight sync) and `_calculate_rewards` (every reward source, reward models included), and adds the three
    timings to the train metrics whenever TRL appends an optimizer step's `step_time` (generation happens inside
    the step, in `_prepare_inputs`, so the step time includes it)."""

    def _phase_timer(self) -> PhaseTimer:
        if not hasattr(self, "_phases"):
            self._phases = PhaseTimer()
        return self._phases

    def _generate(self, *args, **kwargs):
        with self._phase_timer().phase("generate"):
            return super()._generate(*args, **kwargs)

    def _calculate_rewards(self, *args, **kwargs):
        with self._phase_timer().phase("score"):
            return super()._calculate_rewards(*args, **kwargs)

    def training_step(self, *args, **kwargs):
        before = len(self._metrics["train"]["step_time"])
        out = super().training_step(*args, **kwargs)
        steps = self._metrics["train"]["step_time"]
        if len(steps) > before:  # the last micro-batch of an optimizer step
            for key, value in self._phase_timer().take(steps[-1]).items():
                self._metrics["train"][key].append(value)
        return out


def timed(trainer_cls: type) -> type:
    """`trainer_cls` with its step time split into generate / score / update."""
    return type(trainer_cls.__name__, (TimedPhases, trainer_cls), {"__module__": __name__,
                                                                  "__doc__": trainer_cls.__doc__})
