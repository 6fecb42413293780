"""The run doctor's findings as the page shows them: the Runs tab's banner (the top diagnosis, the others under
it) and the Train tab's reward check; the settings a "Fix" applies."""
from __future__ import annotations

import html

from app import i18n
from backend.config import ConfigError, RunConfig, build_config, set_path
from backend.doctor import Diagnosis, describe, fix_text, stored_diagnoses, with_stall
from backend.doctor.texts import severity


def _lang(lang: str) -> str:
    return "zh" if lang == "zh" else "en"


def _line(d: Diagnosis, lang: str) -> tuple[str, str]:
    what, action = describe(d.check, d.params, _lang(lang))
    return html.escape(what), html.escape(action)


def run_diagnoses(run) -> list[Diagnosis]:
    """What the banner shows for a run: a stalled worker first, then what its worker last stored."""
    return with_stall(run, stored_diagnoses(run))


def banner_markdown(found: list[Diagnosis], lang: str = i18n.DEFAULT) -> str:
    """The top diagnosis in bold with what to do, the others as a list; "" when there is none."""
    if not found:
        return ""
    top, *rest = found
    what, action = _line(top, lang)
    icon = "✖" if top.severity == "error" else "⚠"  # in every font (an emoji one may be missing)
    text = f"{icon} **{i18n.text('doctor.title', lang)} — {severity(top.severity, _lang(lang))}:** {what}"
    if action:
        text += f"  \n→ {action}"
    if top.fix:
        text += f"  \n`{html.escape(fix_text(top.fix))}`"
    for d in rest:
        w, a = _line(d, lang)
        text += f"\n- {severity(d.severity, _lang(lang))}: {w}" + (f" → {a}" if a else "")
    return text


def fixes(found: list[Diagnosis]) -> dict:
    """Every suggested setting of the diagnoses, the most serious one's first when two name the same setting."""
    out: dict = {}
    for d in reversed(found):
        out.update(d.fix)
    return out


def fixed_config(config: RunConfig, fix: dict) -> RunConfig | None:
    """`config` with the suggested settings; None when nothing changes or the result is not a valid config."""
    if not fix:
        return None
    data = config.model_dump()
    for path, value in fix.items():
        set_path(data, path, value)
    try:
        fixed = build_config(data)
    except ConfigError:
        return None
    return fixed if fixed != config else None
