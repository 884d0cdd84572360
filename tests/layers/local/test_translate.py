"""layers/local/translate.py: a question's words in the other language, from the real CC-CEDICT wheel,
and the "fts:translated" list they make in an L3 search."""

from __future__ import annotations

import hashlib

import apsw
import pytest

from layers.local.index import Document, Identity, LocalIndex
from layers.local.search import search
from layers.local.translate import Dictionary, DictionaryUnavailableError, build


@pytest.fixture(scope="module")
def dictionary(tmp_path_factory):
    path = tmp_path_factory.mktemp("dictionary") / "dictionary.sqlite"
    assert build(path) > 50_000, "the wheel's CC-CEDICT, not a sample"
    d = Dictionary(path)
    yield d
    d.close()


def test_english_words_and_pairs_become_chinese_words_and_chinese_words_english(dictionary):
    english = dictionary.translate("What accuracy did the vendor's first batch get in the spot check?")
    assert "抽 检" in english, "the pair 'spot check' is looked up as one meaning"
    assert "准 确 性" in english or "精 确 度" in english
    chinese = dictionary.translate("上线如果出问题，怎么回滚，要多久？")
    assert "roll back" in chinese and "rollback" in chinese, "glosses are index terms: 'to roll back' → 'roll back'"
    assert all(not any(w in p.split() for w in ("how", "what", "the")) for p in chinese), "question words stay out"


def test_question_words_alone_and_unknown_words_translate_to_nothing(dictionary):
    assert dictionary.translate("what is it?") == []
    assert dictionary.translate("什么？") == []
    assert dictionary.translate("zxqvw 6333") == []


def test_a_missing_damaged_or_older_file_is_a_clear_error(tmp_path, dictionary):
    with pytest.raises(DictionaryUnavailableError, match="no dictionary at"):
        Dictionary(tmp_path / "none.sqlite")
    (tmp_path / "bad.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(DictionaryUnavailableError, match="cannot be read"):
        Dictionary(tmp_path / "bad.sqlite")
    old = tmp_path / "old.sqlite"
    build(old, ["中文 中文 [Zhong1 wen2] /Chinese language/\n"])
    db = apsw.Connection(str(old))
    db.execute("UPDATE meta SET version = '0'")
    db.close()
    with pytest.raises(DictionaryUnavailableError, match="version 0"):
        Dictionary(old)


def test_a_planted_gloss_never_reaches_fts5_as_syntax(tmp_path):
    """Whatever the file says, what a search asks FTS5 for is index terms (quotes and operators gone)."""
    path = tmp_path / "d.sqlite"
    build(path, ["回滚 回滚 [hui2 gun3] /to roll back/\n"])
    db = apsw.Connection(str(path))
    db.execute("""UPDATE zh SET glosses = 'roll" OR back*' WHERE word = '回滚'""")
    db.close()
    d = Dictionary(path)
    assert d.translate("回滚") == ["roll or back"]
    d.close()


def _doc(path: str, text: str) -> Document:
    day = path[7:17] if path.startswith("memory/") else None
    return Document(path, text, hashlib.sha256(text.encode()).hexdigest(), "daily" if day else "core", day)


def test_an_english_question_finds_the_chinese_note_through_its_translation(tmp_path, dictionary):
    notes = {
        "memory/2026-07-07.md": "## 标点数据\n- 第一批抽检 200 张，准确率 96.3%，高于验收线。\n",
        "memory/2026-07-08.md": "## 日常\n- 今天整理了机房的网线。\n",
        "memory/2026-07-09.md": "## deploy\n- the web nodes got the new kernel\n",
    }
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model="")) as index:
        for path, text in notes.items():
            index.update_document(_doc(path, text))
        question = "What accuracy did the spot check find?"
        plain = search(index, question, mode="fts")
        assert "memory/2026-07-07.md" not in [r["path"] for r in plain.results]
        translated = search(index, question, mode="fts", translate=dictionary.translate)
        assert "fts:translated" in translated.lists
        assert translated.results[0]["path"] == "memory/2026-07-07.md"
        back = search(index, "内核升级到了哪些节点？", mode="fts", translate=dictionary.translate)
        assert "memory/2026-07-09.md" in [r["path"] for r in back.results], "Chinese question, English note"
