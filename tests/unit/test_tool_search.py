"""The search tool (backend/tools/search.py): BM25 passages from a workspace folder, indexed once."""
import os

import pytest

from backend.tools import search as search_mod
from backend.tools.search import DocumentSearch, split_passages

DOCS = {
    "solar.md": "The Sun is a star at the centre of the solar system. Planets orbit the Sun on elliptical paths.",
    "notes/bread.txt": "To bake sourdough bread, feed the starter, mix flour and water, knead, proof overnight, "
                       "then bake in a hot oven.",
    "notes/rivers.txt": "The Nile and the Amazon are the longest rivers on Earth; the Amazon carries the most water.",
}


@pytest.fixture
def workspace(tmp_path):
    for rel, text in DOCS.items():
        path = tmp_path / "docs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (tmp_path / "docs" / "ignored.py").write_text("sourdough = 1\n")  # not a .txt or .md: never indexed
    return tmp_path


@pytest.fixture
def builds(monkeypatch):
    """Counts the indexes built; each test starts with an empty cache."""
    monkeypatch.setattr(search_mod, "_CACHE", {})
    count = []
    real = search_mod._build

    def counted(*args):
        count.append(args)
        return real(*args)

    monkeypatch.setattr(search_mod, "_build", counted)
    return count


def test_the_query_words_find_the_right_passage_first(workspace, builds):
    tool = DocumentSearch("docs", 120, workspace)
    assert tool.search("how do I bake sourdough bread", 3).startswith("[notes/bread.txt#1] To bake sourdough")
    assert tool.search("longest river on earth", 1) == "[notes/rivers.txt#1] " + DOCS["notes/rivers.txt"]
    # Several hits: one per passage, a blank line between them, best first.
    hits = tool.search("sun water", 3).split("\n\n")
    assert len(hits) == 3 and hits[0].startswith("[solar.md#1]")
    assert all(h.startswith("[") and "#1] " in h for h in hits)
    assert "ignored.py" not in tool.search("sourdough", 5)


def test_passages_are_split_as_set(workspace, builds):
    text = " ".join(f"w{i}" for i in range(50))
    assert [len(p.split()) for p in split_passages(text, 20)] == [20, 20, 10]
    assert split_passages("one  two\nthree", 2) == ["one two", "three"]  # whitespace collapsed
    (workspace / "docs" / "long.txt").write_text(text)
    tool = DocumentSearch("docs", 20, workspace)
    assert tool.search("w45", 1) == "[long.txt#3] " + " ".join(f"w{i}" for i in range(40, 50))
    assert tool.search("w20", 1).startswith("[long.txt#2] w20 w21")


@pytest.mark.parametrize("folder, words", [("missing", "not found"), ("../outside", "outside the workspace"),
                                           ("empty", "no .txt or .md documents")])
def test_a_folder_missing_outside_or_empty_is_refused_by_name(workspace, builds, folder, words):
    (workspace / "empty").mkdir()
    (workspace / "empty" / "data.csv").write_text("a,b\n")
    (workspace.parent / "outside").mkdir(exist_ok=True)
    (workspace.parent / "outside" / "doc.txt").write_text("secret")
    with pytest.raises(ValueError, match=words) as e:
        DocumentSearch(folder, 120, workspace)
    assert folder in str(e.value)


def test_a_link_out_of_the_workspace_is_refused(workspace, tmp_path_factory, builds):
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "doc.txt").write_text("secret words")
    (workspace / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="link is outside the workspace"):
        DocumentSearch("link", 120, workspace)
    (workspace / "docs" / "leak.txt").symlink_to(outside / "doc.txt")  # a file link inside the folder: skipped
    assert "no passages match" in DocumentSearch("docs", 120, workspace).search("secret", 3)


def test_the_index_is_built_once_for_many_searches(workspace, builds):
    tool = DocumentSearch(workspace / "docs", 120, workspace)  # an absolute path inside the workspace
    for i in range(200):
        tool.search(f"sun planets {i}", 2)
    DocumentSearch("docs", 120, workspace).search("bread", 1)  # a second tool on the same folder shares it
    assert len(builds) == 1
    DocumentSearch("docs", 30, workspace)  # another passage size: its own index
    assert len(builds) == 2


def test_an_edited_document_is_reindexed(workspace, builds):
    tool = DocumentSearch("docs", 120, workspace)
    assert "no passages match" in tool.search("volcano", 3)
    path = workspace / "docs" / "solar.md"
    before = path.stat().st_mtime_ns
    path.write_text("Etna is an active volcano in Sicily.")
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))  # a coarse clock still sees the edit
    assert tool.search("volcano", 3) == "[solar.md#1] Etna is an active volcano in Sicily."
    assert DocumentSearch("docs", 120, workspace).search("Sicily", 1).startswith("[solar.md#1]")
    assert len(builds) == 2
    (workspace / "docs" / "notes" / "rivers.txt").unlink()  # a removed file too
    assert "no passages match" in tool.search("Amazon", 3)
    assert len(builds) == 3


def test_empty_stopword_and_unmatched_queries_answer_in_words(workspace, builds):
    tool = DocumentSearch("docs", 120, workspace)
    assert tool.search("", 3).startswith("no passages match an empty query")
    assert tool.search("  ?! ", 3).startswith("no passages match an empty query")
    assert tool.search("the of and", 3) == "no passages match 'the of and' in docs"
    assert tool.search("zebra quantum", 3) == "no passages match 'zebra quantum' in docs"


def test_chinese_and_accented_queries_return_text(workspace, builds):
    (workspace / "docs" / "zh.md").write_text("北京是中国的首都。长城在北京的北边。", encoding="utf-8")
    (workspace / "docs" / "fr.txt").write_text("Le café de Paris est célèbre.", encoding="utf-8")
    tool = DocumentSearch("docs", 120, workspace)
    assert tool.search("中国的首都是哪里？", 1).startswith("[zh.md#1] 北京是中国的首都")
    assert tool.search("CAFE celebre", 1).startswith("[fr.txt#1]")  # accents and case do not matter
    assert tool.search("café", 1).startswith("[fr.txt#1]")
    for query in ("日本語のテキスト", "Ünïcödé ñ", "한국어", "😀"):
        assert isinstance(tool.search(query, 3), str)
