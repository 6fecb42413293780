"""The interface's words, one catalogue per language: locales/en.yaml and locales/zh.yaml at the repository root.

Plain data read once (cached), so the UI, the backend and the CLI read the same words. en.yaml holds the page's
English by key (section `ui`); a setting's English is not in it: it is the setting's Field title and description in
backend/config, defined once. zh.yaml has one entry per key and section (`ui`, `settings`, `reward_kinds`,
`reward_params`), each with the Chinese and `source`: `source_hash` of the English it translates, so an English
text changed after its translation shows as stale (`check`). Who knows every English source (app/i18n.py's
`english_sources`) passes it in; this module knows no schema. `rehash` records that an entry was re-translated.
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

import yaml

LOCALES_DIR = Path(__file__).resolve().parents[2] / "locales"
HASH_LEN = 8


def source_hash(english: str) -> str:
    """The short hash a translation keeps of its English source: the first 8 hex digits of its sha1."""
    return hashlib.sha1(english.encode("utf-8")).hexdigest()[:HASH_LEN]


def setting_source(title: str, help_text: str) -> str:
    """The English a setting's (or a reward parameter's) translation covers: its title and help together."""
    return f"{title}\n{help_text}"


@functools.cache
def catalogue(lang: str, directory: Path | None = None) -> dict[str, dict]:
    """`lang`'s catalogue: {section: {key: entry}}; en's `ui` entries are texts, zh's are mappings with `source`.
    Cached: the files are read once per process (tests pass another directory, a temporary copy)."""
    data = yaml.safe_load((Path(directory or LOCALES_DIR) / f"{lang}.yaml").read_text(encoding="utf-8")) or {}
    return {section: dict(entries or {}) for section, entries in data.items()}


def ui_text(key: str, lang: str, **values) -> str:
    """`key`'s words from the `ui` section in `lang` (its English where there is no translation), filled in; for
    processes without the app (the CLI): app/i18n.py serves the page the same words."""
    entry = catalogue("zh").get("ui", {}).get(key) if lang == "zh" else None
    words = entry["text"] if entry else catalogue("en")["ui"][key]
    return words.format(**values) if values else words


def check(english: dict[str, dict[str, str]], lang: str = "zh",
          directory: Path | None = None) -> dict[str, list[str]]:
    """How `lang`'s catalogue stands against `english` ({section: {key: English source}}): `stale`, the
    "section/key" entries whose English changed since they were translated; `missing`, those with no entry;
    `extra`, entries whose key no longer exists."""
    found = catalogue(lang, directory)
    out: dict[str, list[str]] = {"stale": [], "missing": [], "extra": []}
    for section, sources in english.items():
        entries = found.get(section, {})
        for key, text in sources.items():
            if key not in entries:
                out["missing"].append(f"{section}/{key}")
            elif str(entries[key].get("source")) != source_hash(text):
                out["stale"].append(f"{section}/{key}")
        out["extra"] += [f"{section}/{key}" for key in entries if key not in sources]
    out["extra"] += [f"{section}/" for section in found if section not in english]
    return out


def rehash(english: dict[str, dict[str, str]], keys: list[str], lang: str = "zh",
           directory: Path | None = None) -> list[str]:
    """Record that the entries `keys` ("key" or "section/key") translate their English as it is now: their
    `source` line in `lang`.yaml gets the current hash; the rest of the file stays as written. Returns the
    "section/key" entries changed; raises KeyError naming a key that has no entry."""
    path = Path(directory or LOCALES_DIR) / f"{lang}.yaml"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    changed = []
    for wanted in keys:
        section, key = _locate(english, wanted)
        index = _source_line(lines, section, key)
        lines[index] = re.sub(r"source:.*", f"source: '{source_hash(english[section][key])}'", lines[index])
        changed.append(f"{section}/{key}")
    path.write_text("".join(lines), encoding="utf-8")
    catalogue.cache_clear()
    return changed


def _locate(english: dict[str, dict[str, str]], wanted: str) -> tuple[str, str]:
    if "/" in wanted:
        section, key = wanted.split("/", 1)
        if key in english.get(section, {}):
            return section, key
    else:
        sections = [s for s, sources in english.items() if wanted in sources]
        if len(sections) == 1:
            return sections[0], wanted
        if sections:
            raise KeyError(f"{wanted} is in several sections ({', '.join(sections)}): name it as section/key")
    raise KeyError(f"{wanted}: no such key")


def _source_line(lines: list[str], section: str, key: str) -> int:
    """The index of the `source:` line of `section`/`key` (the catalogue's layout: sections at column 0, keys
    indented 2, fields 4)."""
    in_section, in_key = False, False
    for i, line in enumerate(lines):
        if not line.startswith(" ") and line.strip() and not line.startswith("#"):
            in_section, in_key = line.rstrip() == f"{section}:", False
        elif in_section and re.match(r"^  \S", line) and not line.startswith("  #"):
            in_key = line.rstrip() in (f"  {key}:", f"  '{key}':", f'  "{key}":')
        elif in_key and re.match(r"^    source:", line):
            return i
    raise KeyError(f"{section}/{key}: no entry with a `source:` line in the catalogue; add it first")


def main(english: dict[str, dict[str, str]], argv: list[str] | None = None) -> int:
    """`--check` (the default): list stale, missing and extra entries; `--rehash KEY...`: accept the current
    English of re-translated entries."""
    import argparse

    parser = argparse.ArgumentParser(description="The zh catalogue against its English sources.")
    parser.add_argument("--rehash", nargs="+", metavar="KEY",
                        help="record that these entries (key or section/key) are translated from the current English")
    parser.add_argument("--lang", default="zh")
    args = parser.parse_args(argv)
    if args.rehash:
        try:
            for entry in rehash(english, args.rehash, args.lang):
                print(f"rehashed {entry}")
        except KeyError as e:
            print(e.args[0])
            return 2
        return 0
    problems = check(english, args.lang)
    for kind, entries in problems.items():
        for entry in entries:
            print(f"{kind}: {entry}")
    return 1 if any(problems.values()) else 0
