"""doctor: what keeps a run from learning, with the evidence and the fix (backend/doctor)."""
from __future__ import annotations

from cli.common import bad_input, open_store, print_json


def add_parsers(sub, common) -> None:
    dr = sub.add_parser("doctor", parents=[common],
                        help="diagnose a run from its metrics: what keeps it from learning and what to change")
    dr.add_argument("run_id")
    dr.add_argument("--json", action="store_true")
    dr.add_argument("--lang", choices=("en", "zh"), default="en", help="the diagnoses' language")
    dr.set_defaults(func=cmd_doctor)


def _words(key: str, lang: str, **values) -> str:
    from backend.core.locales import ui_text  # not app.i18n: it would load Gradio

    return ui_text(key, lang, **values)


def _status_word(status: str, lang: str) -> str:
    try:
        return _words(f"status.{status}", lang)
    except KeyError:  # a status the catalogue does not know: as stored
        return status


def cmd_doctor(args) -> int:
    from backend.doctor import diagnose_run, fix_text, report_lines, status_words, stored_diagnoses
    from backend.runs.jobs import reconcile

    store = open_store(args)
    reconcile(store)
    try:
        run = store.get_run(args.run_id)
    except KeyError as e:
        return bad_input(f"{e.args[0]} (see `launch.py runs`)")
    found = diagnose_run(store, run)
    if not found and run.step == 0:  # no metrics yet: what the reward probe found before the first step
        found = stored_diagnoses(run)
    if args.json:
        print_json({"run_id": run.id, "status": run.status, "verdict": run.verdict, "stalled": run.stalled,
                    "diagnoses": [d.to_dict() for d in found]})
        return 0
    lang = args.lang
    progress = _words("status.steps", lang, step=run.step, total=run.total_steps or "?")
    print(f"run {run.id} ({run.name}, {run.mode}): {status_words(run, lang, _status_word)}, {progress}")
    if not found:
        print(_words("doctor.none_yet" if run.active else "doctor.none_found", lang))
        return 0
    for d, line in zip(found, report_lines(found, lang)):
        print(f"  {line}")
        if d.evidence.get("metric"):
            steps = d.evidence.get("steps") or []
            where = _words("doctor.evidence_steps", lang, first=steps[0], last=steps[-1]) if len(steps) == 2 else ""
            values = _words("doctor.evidence_values", lang, values=d.evidence["values"]) \
                if d.evidence.get("values") else ""
            print(f"      {_words('doctor.evidence', lang, metric=d.evidence['metric'])}{where}{values}")
        if d.fix:
            print(f"      {_words('doctor.fix_line', lang, args=fix_text(d.fix).replace(' ', ' --set '))}")
    return 0
