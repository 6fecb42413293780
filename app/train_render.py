"""What the Train tab shows of a dataset: the preview's column widths, a clicked row in full, the format line."""
from __future__ import annotations

import functools
import html
import json

import pandas as pd

from app import i18n

PREVIEW_CHARS = 300  # per cell; the full text is in the file and in "Show the first example"


def column_widths(df: pd.DataFrame) -> list[str]:
    """Each preview column as wide as its longest shown text needs, within 120-420 px: a table with many
    columns scrolls sideways instead of squeezing each into a sliver."""
    widths = []
    for column in df.columns:
        longest = max([len(str(column)), *(min(len(str(v)), PREVIEW_CHARS) for v in df[column])])
        widths.append(f"{max(120, min(420, 8 * longest))}px")
    return widths


ROW_CHARS = 20_000  # per value of a clicked row shown in full


def _full_text(value) -> str:
    """One value of a dataset row as text: a conversation turn by turn, other lists and mappings as JSON."""
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return "\n\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, indent=1)
    return "" if value is None else str(value)


def row_html(row: dict, n: int, lang: str = i18n.DEFAULT, note: str = "") -> str:
    """A dataset row in full under the preview: each column's whole text, wrapped."""
    parts = []
    for column, value in row.items():
        text = _full_text(value)
        text = text if len(text) <= ROW_CHARS else text[:ROW_CHARS - 1] + "…"
        parts.append(f'<div class="wb-row-col"><b>{html.escape(str(column))}</b>'
                     f'<div style="white-space: pre-wrap; overflow-wrap: anywhere; margin: 2px 0 8px 0">'
                     f'{html.escape(text)}</div></div>')
    tail = f'<div class="wb-dim">{html.escape(note)}</div>' if note else ""
    return (f'<div class="wb-row-full" data-row="{n}"><div class="wb-section"><b>'
            f'{html.escape(i18n.text("train.row_title", lang, n=n))}</b></div>{"".join(parts)}{tail}</div>')


def format_text(info, error: str | None, mode: str, lang: str = i18n.DEFAULT) -> str:
    """The dataset's format line (what the data layer says about it stays English)."""
    t = functools.partial(i18n.text, lang=lang)
    converted = f"\n\n**{t('train.data_settings')}** {'; '.join(info.applied)}" if info is not None and info.applied \
        else ""
    converted += f"\n\n**{t('train.converted')}** {info.adapter}" if info is not None and info.adapter else ""
    if info is not None and error is None:
        kind = t("train.conversational" if info.conversational else "train.plain_text")
        columns = ", ".join(f"`{c}`" for c in info.columns)
        return t("train.ready", name=info.name, columns=columns, kind=kind, rows=info.num_rows,
                 mode=mode.upper()) + converted
    if info is not None:
        return f"**{t('train.cannot_train')}** {t('train.detected_but', name=info.name, error=error)}{converted}"
    return f"**{t('train.cannot_train')}** {error}" if error else ""
