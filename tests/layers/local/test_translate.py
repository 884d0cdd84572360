"""layers/local/text/translate.py: a question's words in the other language, from the real CC-CEDICT wheel,
and the "fts:translated" list they make in an L3 search."""

from __future__ import annotations

import hashlib

import apsw
import pytest

from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex
from layers.local.text.translate import Dictionary, DictionaryUnavailableError, build


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


def _indexed(tmp_path, notes: dict[str, str]) -> LocalIndex:
    """An index of ``notes`` (path → text), open for writing: use it in a with-block."""
    index = LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=""))
    for path, text in notes.items():
        index.update_document(_doc(path, text))
    return index


def test_an_english_question_finds_the_chinese_note_through_its_translation(tmp_path, dictionary):
    notes = {
        "memory/2026-07-07.md": "## 标点数据\n- 第一批抽检 200 张，准确率 96.3%，高于验收线。\n",
        "memory/2026-07-08.md": "## 日常\n- 今天整理了机房的网线。\n",
        "memory/2026-07-09.md": "## deploy\n- the web nodes got the new kernel\n",
    }
    with _indexed(tmp_path, notes) as index:
        question = "What accuracy did the spot check find?"
        plain = search(index, question, mode="fts")
        assert "memory/2026-07-07.md" not in [r["path"] for r in plain.results]
        translated = search(index, question, mode="fts", translate=dictionary.translate)
        assert "fts:translated" in translated.lists
        assert translated.results[0]["path"] == "memory/2026-07-07.md"
        back = search(index, "内核升级到了哪些节点？", mode="fts", translate=dictionary.translate)
        assert "memory/2026-07-09.md" in [r["path"] for r in back.results], "Chinese question, English note"


def test_a_chinese_persons_name_is_spelled_as_latin_letters_write_it(dictionary):
    assert dictionary.romanize("李娜") == "li na", "a surname's reading (李 Li), then the given name"
    assert dictionary.romanize("单强") == "shan qiang", "单 read as the surname Shan, not dan"
    assert dictionary.romanize("张三丰") == "zhang sanfeng", "a two-character given name is written as one word"
    assert dictionary.romanize("吕布") == "lu bu"
    for not_a_name in ("数据库", "李", "李娜娜娜", "Li Na", "产品"):
        assert dictionary.romanize(not_a_name) is None, not_a_name


def test_a_question_describing_a_role_finds_the_english_note_naming_its_holder(tmp_path, dictionary):
    """MEMORY.md says who holds which role in Chinese (产品和发布节奏：李娜); the note of the meeting calls her
    Li Na. A Chinese question about the product owner reaches it through the role and the name's spelling."""
    notes = {
        "MEMORY.md": "# MEMORY\n## 负责人\n- 数据库：王磊（DBA）。安全审计：Tom Becker。产品和发布节奏：李娜。\n"
        + "## 主机\n"
        + "".join(f"- box-{i:02d} — spare CPU box number {i}.\n" for i in range(17)),  # 20 definitions
        "memory/2026-10-29.md": "## Cost review\n- Li Na wants a monthly cost line in the ops report from now on.\n",
        "memory/2026-10-28.md": "## 周报\n- 运维报告本周照常发出，内容没有变化。\n",
    }
    with _indexed(tmp_path, notes) as index:
        question = "负责产品的同事希望运维报告里以后多加哪一项？"
        unspelled = search(index, question, mode="fts", translate=dictionary.translate, explain=True)
        assert not any("fts:entity" in r["ranks"] for r in unspelled.results if r["path"] == "memory/2026-10-29.md"), (
            "李娜 is not on that note"
        )
        spelled = search(
            index, question, mode="fts", translate=dictionary.translate, romanize=dictionary.romanize, explain=True
        )
        hit = next(r for r in spelled.results if r["path"] == "memory/2026-10-29.md")
        assert "fts:entity" in hit["ranks"], "found as the note naming the role's holder, spelled in Latin letters"
