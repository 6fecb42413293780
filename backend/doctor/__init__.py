"""The run doctor: reads a run's metrics and says what keeps it from learning, with the evidence and the fix.

It runs live in the worker (`live.DoctorCallback`: the run's `diagnoses` column, a banner in the Runs tab), at
the end (a completed run that learned nothing gets the verdict `no_signal`), and on demand
(`launch.py doctor RUN_ID`). Before a run, `probe.py` generates and scores one group for a few prompts.
Thresholds: checks.THRESHOLDS (docs/doctor.md).
"""
from __future__ import annotations

import json

from backend.doctor.checks import CHECKS, THRESHOLDS, Diagnosis, Series
from backend.doctor.texts import describe, severity, word

__all__ = ["CHECKS", "THRESHOLDS", "Diagnosis", "Series", "describe", "diagnose", "diagnose_run", "series_of",
           "stored_diagnoses", "parse_diagnoses", "with_stall", "severity", "NO_SIGNAL_VERDICT", "verdict_of", "to_json",
           "status_words", "fix_text", "report_lines"]

NO_SIGNAL_VERDICT = "no_signal"
_ORDER = {"error": 0, "warning": 1}


# a diagnosis that only follows from another one is left out beside it
_CONSEQUENCES = {"grad_zero": ("zero_variance",)}


def diagnose(series: Series, config, ended: bool = False, hints: dict | None = None) -> list[Diagnosis]:
    """Every diagnosis the run's mode checks for, the most serious first. `ended`: the run is over, so checks
    of the whole run (flat reward, gradients never moved) may speak. `hints`: what the reward probe measured
    (reference_max: the longest reference answer's tokens)."""
    found = []
    for name in config.spec.checks:
        try:
            if (d := CHECKS[name](series, config, ended, hints or {})) is not None:
                found.append(d)
        except (ValueError, TypeError, ZeroDivisionError, AttributeError):  # odd metrics never fail a run
            continue
    names = {d.check for d in found}
    found = [d for d in found if not names & set(_CONSEQUENCES.get(d.check, ()))]
    return sorted(found, key=lambda d: _ORDER.get(d.severity, 2))


def series_of(store, run_id: str) -> Series:
    series: Series = {}
    for row in store.metrics_since(run_id, 0):
        series.setdefault(row["name"], []).append((row["step"], row["value"]))
    return series


def diagnose_run(store, run) -> list[Diagnosis]:
    """Diagnoses of a stored run: an ended run's final ones as its worker stored them (it knew what the probe
    measured), else read from all its metrics now; a stalled worker's first."""
    if not run.active and (stored := stored_diagnoses(run)):
        return stored
    return with_stall(run, diagnose(series_of(store, run.id), run.config, ended=not run.active))


def to_json(diagnoses: list[Diagnosis]) -> str:
    return json.dumps([d.to_dict() for d in diagnoses], allow_nan=False, default=str)


def parse_diagnoses(text: str | None) -> list[Diagnosis]:
    """The `runs.diagnoses` column read back ([] when empty or written by another version)."""
    try:
        return [Diagnosis.from_dict(d) for d in json.loads(text or "[]")]
    except (ValueError, TypeError):
        return []


def stored_diagnoses(run) -> list[Diagnosis]:
    """What the worker last stored for a run (the live diagnoses; the final ones once it ended)."""
    return parse_diagnoses(run.diagnoses)


def with_stall(run, found: list[Diagnosis]) -> list[Diagnosis]:
    """`found` with a running run's stall (its supervisor's judgement) first."""
    if run.stalled and run.status == "running":
        return [Diagnosis("stalled", "error", {"why": run.stalled}, {}), *found]
    return found


def verdict_of(diagnoses: list[Diagnosis]) -> str:
    return NO_SIGNAL_VERDICT if any(d.no_signal for d in diagnoses) else ""


def status_words(run, lang: str = "en", status_text=None) -> str:
    """A run's status as the lists show it: "completed — no learning signal", "running — stalled"."""
    shown = status_text(run.status, lang) if status_text else run.status
    if run.status == "completed" and run.verdict == NO_SIGNAL_VERDICT:
        return f"{shown} — {word('no_signal', lang)}"
    if run.status == "running" and run.stalled:
        return f"{shown} — {word('stalled_word', lang)}"
    return shown


def fix_text(fix: dict) -> str:
    """`--set` arguments that apply a diagnosis' fix: `rl.max_completion_length=192 learning_rate=5e-05`."""
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in fix.items())


def report_lines(diagnoses: list[Diagnosis], lang: str = "en") -> list[str]:
    """One line per diagnosis (severity, what, what to do), for the CLI and the run log."""
    out = []
    for d in diagnoses:
        what, action = describe(d.check, d.params, lang)
        out.append(f"[{severity(d.severity, lang)}] {what}"
                   + (f" -> {action}" if action else ""))
    return out
