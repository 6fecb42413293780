"""The interface language (English / 中文): one catalogue per language, locales/en.yaml and locales/zh.yaml.

The page's own words (every tab's labels, help texts, buttons, section titles, intros and Radio choice labels) are
in the catalogues by key (`text(key, lang)`), and each tab builds its components with their words from there. A
setting's label and help come from the run-config schema in English (each field's title and description, defined
once) and from zh.yaml's `settings` in Chinese, keyed by the setting's path; the reward sources' descriptions and
parameters likewise from backend/rewards/spec.py and zh.yaml's `reward_kinds` / `reward_params`. Each Chinese
entry keeps a hash of the English it translates: `tests/unit/test_i18n.py` names the stale and missing ones, and
`python -m app.i18n --rehash KEY...` accepts a re-translated entry (docs/guide.md, "Languages").
`tests/unit/test_page_language.py` checks that no word on the page stays English. Errors keep naming settings by
their path, which is the same in both.

The page is built once, in English; choosing a language (the header's selector, remembered per browser, or
`launch.py ui --lang zh` for browsers that have not chosen) sends each registered component its words. Messages
that handlers write later (status lines, progress, notifications, confirmations, table headers) follow the
language too: the selector and the page's load remember it for the browser session (`remember`), and a handler
that declares `request: gr.Request` asks for it (`lang_of`), so no event needs an extra input. Messages that come
from the backend (a setting's validation error, a dataset's missing column) stay English inside the app's
translated words around them: they name fields by path.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import gradio as gr

from backend.config.build import field_paths
from backend.core import locales
from backend.doctor import texts as doctor_texts
from backend.models import memory
from backend.rewards.spec import KIND_DESCRIPTIONS, PARAM_MODELS, RewardSourceConfig

LANGUAGES = {"en": "English", "zh": "中文"}
DEFAULT = "en"


def _derived_english() -> dict[str, str]:
    """The page's words that are the schema's own: the reward editor's field labels are RewardSourceConfig's
    field titles (not repeated in en.yaml)."""
    fields = RewardSourceConfig.model_fields
    return {f"reward.field.{name}": fields[name].title + (" (YAML)" if name == "params" else "")
            for name in ("type", "name", "weight", "params", "role", "budget", "when")}


def _ui() -> dict[str, tuple[str, str]]:
    """key -> (English, Chinese); a key with no Chinese yet shows its English (the test names it)."""
    english = {**locales.catalogue("en")["ui"], **_derived_english()}
    chinese = locales.catalogue("zh").get("ui", {})
    return {key: (words, chinese[key]["text"] if key in chinese else words) for key, words in english.items()}


UI: dict[str, tuple[str, str]] = _ui()


@functools.cache
def _english() -> dict[str, tuple[str, str]]:
    return {path: (info.title or path, info.description or "") for path, info in field_paths()}


def _translated(section: str, key: str, english: tuple[str, str]) -> tuple[str, str]:
    entry = locales.catalogue("zh").get(section, {}).get(key)
    return (entry["title"], entry.get("help") or "") if entry else english


def setting_text(path: str, lang: str) -> tuple[str, str]:
    """(label, help) of a setting in `lang`; English where the catalogue has no entry."""
    english = _english()[path]
    return _translated("settings", path, english) if lang == "zh" else english


def kind_description(kind: str, lang: str) -> str:
    """What a reward source kind scores, in `lang` (its English is spec.KIND_DESCRIPTIONS)."""
    english = KIND_DESCRIPTIONS.get(kind, "")
    entry = locales.catalogue("zh").get("reward_kinds", {}).get(kind) if lang == "zh" else None
    return entry["text"] if entry else english


def reward_param_text(kind: str, name: str, lang: str) -> tuple[str, str]:
    """(title, help) of a reward source kind's parameter in `lang` (its English is the param model's Field)."""
    info = PARAM_MODELS[kind].model_fields[name]
    english = (info.title or name, info.description or "")
    return _translated("reward_params", f"{kind}.{name}", english) if lang == "zh" else english


def memory_texts(lang: str) -> dict[str, str] | None:
    """The memory estimate's templates in `lang` for MemoryEstimate.summary (None: its own English)."""
    if lang != "zh":
        return None
    return {key: entry["text"] for key, entry in locales.catalogue("zh").get("memory", {}).items()}


def english_sources() -> dict[str, dict[str, str]]:
    """Every English text a Chinese entry translates, by catalogue section and key: what its `source` hash is of."""
    return {
        "ui": {key: en for key, (en, _) in UI.items()},
        "settings": {path: locales.setting_source(*words) for path, words in _english().items()},
        "reward_kinds": dict(KIND_DESCRIPTIONS),
        "reward_params": {f"{kind}.{name}": locales.setting_source(info.title or name, info.description or "")
                          for kind, model in PARAM_MODELS.items() for name, info in model.model_fields.items()},
        "memory": dict(memory.TEXTS),
        "doctor": dict(doctor_texts.ENGLISH),
    }


def text(key: str, lang: str, **values) -> str:
    """`key`'s words in `lang`, with `values` filled into its {names}."""
    en, zh = UI[key]
    words = zh if lang == "zh" else en
    return words.format(**values) if values else words


# The language each browser session shows, by Gradio's session hash: set by the selector and the page's load,
# read by handlers. Bounded: sessions come and go, and one forgotten falls back to the server's default.
SESSIONS_KEPT = 4096
_sessions: OrderedDict[str, str] = OrderedDict()
_sessions_lock = threading.Lock()
_fallback = [DEFAULT]  # the server's default (`launch.py ui --lang`), for sessions not (or no longer) known


def serve_default(lang: str) -> None:
    """The language of a session that has not told its own (build_app sets it from --lang)."""
    _fallback[0] = pick(lang)


def _session(request) -> str | None:
    return getattr(request, "session_hash", None) if request is not None else None


def remember(request, lang: str) -> str:
    """This browser session shows `lang` from now on; returns the language kept."""
    lang = pick(lang)
    if (key := _session(request)) is not None:
        with _sessions_lock:
            _sessions[key] = lang
            _sessions.move_to_end(key)
            while len(_sessions) > SESSIONS_KEPT:
                _sessions.popitem(last=False)
    return lang


def lang_of(request) -> str:
    """The language the session behind `request` shows (a handler's `request: gr.Request`; None: the default)."""
    key = _session(request)
    with _sessions_lock:
        return _sessions.get(key, _fallback[0]) if key is not None else _fallback[0]


def pick(lang) -> str:
    return lang if lang in LANGUAGES else DEFAULT


def english(key: str) -> str:
    return UI[key][0]


@dataclass
class Translatable:
    """The page's components with words to change: settings by path, the rest by UI key and property.

    `add` gives a component its English words at once (the page is built in English from UI, never from a
    second copy of the text) and remembers them for `updates`."""

    settings: dict[str, gr.Component] = field(default_factory=dict)
    # (component, property, UI key | [(UI key, value), ...] for choices | callable(lang) -> text, bold, format)
    words: list[tuple] = field(default_factory=list)

    def add(self, component, key=None, prop: str = "label", bold: bool = False, fmt: dict | None = None, **more):
        """`key`'s words as the component's `prop` (a section title is Markdown: bold=True gives "**Data**");
        `more` names further properties, prop=key (info=..., placeholder=..., value=...), or for a Radio
        choices=[(key, value), ...]: the shown labels change, the values stay. `fmt` fills {names} in the words;
        a callable key is called with the language (text built around values, e.g. the header)."""
        for p, k in ([(prop, key)] if key is not None else []) + list(more.items()):
            entry = (component, p, k, bold and p == prop, fmt or {})
            self.words.append(entry)
            setattr(component, p, self._words(entry, DEFAULT))
        return component

    @staticmethod
    def _words(entry, lang: str):
        _, prop, key, bold, fmt = entry
        if callable(key):
            return key(lang)
        if prop == "choices":
            return [(text(k, lang), value) for k, value in key]
        words = text(key, lang).format(**fmt) if fmt else text(key, lang)
        return f"**{words}**" if bold else words

    @property
    def components(self) -> list:
        return list(dict.fromkeys([*self.settings.values(), *(entry[0] for entry in self.words)]))

    def updates(self, lang: str) -> dict:
        lang = pick(lang)
        out: dict = {}
        for path, component in self.settings.items():
            label, help_text = setting_text(path, lang)
            out[component] = gr.update(label=label, info=help_text or None)
        for entry in self.words:
            component, prop = entry[0], entry[1]
            out[component] = {**out.get(component, gr.update()), prop: self._words(entry, lang)}
        return out


def given(words: Translatable | None) -> Translatable:
    """A tab built on its own (tests) still gets its English words: from a Translatable nobody reads."""
    return words if words is not None else Translatable()


if __name__ == "__main__":  # python -m app.i18n [--rehash KEY...]
    raise SystemExit(locales.main(english_sources()))
