"""The search tool: BM25 over a folder of .txt and .md documents in the workspace.

A policy calls `search(query)` and gets the best passages, each as "[path#n] text". The index is built by bm25s
(numpy only) and kept per (folder, passage_words) until a file is added, removed or edited, so a run that calls
the tool thousands of times pays the indexing once.
"""
from __future__ import annotations

import os
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

SUFFIXES = (".txt", ".md")
# Chinese, Japanese and Korean are written without spaces: each character is one token (and counts as one word
# when splitting), so a CJK document neither becomes one giant passage nor one giant token.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
_WORD = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
_STOPWORDS = frozenset(STOPWORDS_EN)


def workspace_folder(folder: str | Path, workspace: Path) -> Path:
    """The real path of `folder` (relative to the workspace, or absolute), refused unless it is a folder inside
    the workspace."""
    from backend.core.usercode import in_workspace

    try:
        real, root = in_workspace(folder, workspace)
    except ValueError as e:
        raise ValueError(f"search folder {e}: the search tool only reads documents you put in the workspace") \
            from None
    if not real.is_dir():
        raise ValueError(f"search folder {folder} not found in the workspace {root}")
    return real


def tokenize(text: str) -> list[str]:
    """Lower-case words without accents (so "café" finds "cafe"), CJK characters one by one."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return _TOKEN.findall(unicodedata.normalize("NFC", bare).casefold())  # NFC: Hangul syllables back together


def split_passages(text: str, passage_words: int) -> list[str]:
    """Consecutive runs of `passage_words` words, whitespace collapsed; text between words is kept as written
    (no spaces put between CJK characters)."""
    words = list(_WORD.finditer(text))
    return [" ".join(text[words[i].start():words[min(i + passage_words, len(words)) - 1].end()].split())
            for i in range(0, len(words), passage_words)]


@dataclass(frozen=True)
class Passage:
    path: str  # relative to the searched folder, with forward slashes
    number: int  # 1-based within its file
    text: str


@dataclass
class _Index:
    passages: list[Passage]
    retriever: bm25s.BM25


def _documents(folder: Path, root: Path) -> list[Path]:
    """Every .txt and .md file under the folder, hidden ones and links leading out of the workspace left out."""
    found = []
    for here, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(here, name)
            if name.startswith(".") or path.suffix.lower() not in SUFFIXES:
                continue
            if path.resolve().is_relative_to(root) and path.is_file():
                found.append(path)
    return found


def _signature(files: list[Path]) -> tuple:
    """What changes when a file is edited, added or removed: newest mtime, count and total size."""
    stats = [f.stat() for f in files]
    return (max((s.st_mtime_ns for s in stats), default=0), len(stats), sum(s.st_size for s in stats))


def _build(folder: Path, files: list[Path], passage_words: int) -> _Index:
    passages = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")  # one odd byte should not stop a run
        rel = path.relative_to(folder).as_posix()
        passages += [Passage(rel, n, p) for n, p in enumerate(split_passages(text, passage_words), 1)]
    tokens = [tokenize(p.text) for p in passages]
    if not any(tokens):  # bm25s cannot index an empty vocabulary
        raise ValueError(f"search folder {folder} has no words in its .txt and .md documents")
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)  # a passage of punctuation still gets its row: row i is passage i
    return _Index(passages, retriever)


_CACHE: dict[tuple[Path, int], tuple[tuple, _Index]] = {}  # one index per folder and passage size: the newest
_LOCK = threading.Lock()  # tool calls may come from several threads; build each index once


class DocumentSearch:
    """BM25 search over the .txt and .md files in a workspace folder (and its subfolders)."""

    def __init__(self, folder: str | Path, passage_words: int, workspace: Path):
        self.root = Path(workspace).resolve()
        self.folder = workspace_folder(folder, self.root)
        self.name = str(folder)
        self.passage_words = int(passage_words)
        if self.passage_words < 1:
            raise ValueError(f"passage_words must be at least 1, not {passage_words}")
        self._index()  # refuse an empty folder now, not at the policy's first call

    def _index(self) -> _Index:
        """The cached index, rebuilt when a document changed since it was built."""
        files = _documents(self.folder, self.root)
        if not files:
            raise ValueError(f"search folder {self.name} has no .txt or .md documents")
        key, signature = (self.folder, self.passage_words), _signature(files)
        with _LOCK:
            cached = _CACHE.get(key)
            if cached is None or cached[0] != signature:
                cached = _CACHE[key] = (signature, _build(self.folder, files, self.passage_words))
        return cached[1]

    def search(self, query: str, top_k: int = 3) -> str:
        """The `top_k` best passages for `query`, for a language model to read: "[path#n] text", one blank line
        between them; a short "no passages match ..." when nothing matches."""
        if not tokenize(query or ""):
            return f"no passages match an empty query (give some words to search {self.name} for)"
        # Stopwords are left out of the query only: they would match nearly every passage.
        tokens = [t for t in tokenize(query) if t not in _STOPWORDS]
        index = self._index()
        ids = index.retriever.get_tokens_ids(tokens)  # words no document has are dropped
        if not ids:
            return f"no passages match {query.strip()!r} in {self.name}"
        scores = index.retriever.get_scores_from_ids(ids)
        order = np.argsort(-scores, kind="stable")[:max(1, int(top_k))]  # ties: earlier passage first
        hits = [index.passages[i] for i in order if scores[i] > 0]
        if not hits:
            return f"no passages match {query.strip()!r} in {self.name}"
        return "\n\n".join(f"[{p.path}#{p.number}] {p.text}" for p in hits)
