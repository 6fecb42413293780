"""The doctor inside the worker: diagnoses the run on every logged step from the metrics it has seen, stores them
when they change (the Runs tab's banner, Prometheus) and says so in the run log; at the end, the verdict."""
from __future__ import annotations

import time

from transformers import TrainerCallback

from backend.doctor import THRESHOLDS, Diagnosis, Series, describe, diagnose, series_of, to_json, verdict_of


def log_lines(diagnoses: list[Diagnosis]) -> list[str]:
    """`doctor: <severity>: what -> action`, the run log's form (grep-able by severity)."""
    out = []
    for d in diagnoses:
        what, action = describe(d.check, d.params)
        out.append(f"doctor: {d.severity}: {what}" + (f" -> {action}" if action else ""))
    return out


class DoctorCallback(TrainerCallback):
    """Main process only. Keeps the run's series in memory (read from the store once, for a resumed run)."""

    EVERY_S = 1.0  # the most often it diagnoses (fast steps of a long run: not on every one)

    def __init__(self, store, run_id: str, config):
        self.store, self.run_id, self.config = store, run_id, config
        self.series: Series = {}
        self.said: set[tuple[str, str]] = set()
        self.found: list[Diagnosis] = []
        self.pinned: list[Diagnosis] = []  # the reward probe's, shown until the run has its own evidence
        self.hints: dict = {}  # what the probe measured (the longest reference answer)
        self.last = 0.0

    def pin(self, diagnoses: list[Diagnosis]) -> None:
        self.pinned = list(diagnoses)
        refs = [d.params["ref_max"] for d in diagnoses if d.params.get("ref_max")]
        if refs:
            self.hints["reference_max"] = max(refs)
        self.found = list(diagnoses)
        self.said |= {(d.check, d.severity) for d in diagnoses}

    def on_train_begin(self, args, state, control, **kwargs):
        self.series = series_of(self.store, self.run_id)

    def on_log(self, args, state, control, logs=None, **kwargs):
        for name, value in (logs or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.series.setdefault(name, []).append((state.global_step, float(value)))
        if time.monotonic() - self.last >= self.EVERY_S:
            self.update(ended=False)

    def update(self, ended: bool) -> list[Diagnosis]:
        self.last = time.monotonic()
        found = diagnose(self.series, self.config, ended=ended, hints=self.hints)
        if self.pinned and not ended and max((len(v) for v in self.series.values()), default=0) < THRESHOLDS["min_points"]:
            found = self.pinned + found
        key = {(d.check, d.severity) for d in found}
        if key != {(d.check, d.severity) for d in self.found} or ended:
            self.store.update_run(self.run_id, diagnoses=to_json(found))
            for line in log_lines([d for d in found if (d.check, d.severity) not in self.said]):
                print(line, flush=True)
            self.said |= key
        self.found = found
        return found

    def finish(self) -> str:
        """The final diagnoses and the run's verdict (stored; returned)."""
        verdict = verdict_of(self.update(ended=True))
        self.store.update_run(self.run_id, verdict=verdict)
        return verdict
