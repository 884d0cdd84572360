"""L3 tokenizer and chunker: per-character CJK, whole words of any script, markdown structure."""

from __future__ import annotations

from layers.local.text.chunker import HARD_LIMIT, chunk_markdown
from layers.local.text.tokenizer import terms, token_spans, token_string, tokens


def test_every_cjk_character_is_a_token_and_words_stay_whole():
    assert tokens("Qdrant 部署在6333端口") == ["qdrant", "部", "署", "在", "6333", "端", "口"]
    assert tokens("使用qdrant") == ["使", "用", "qdrant"]
    assert tokens("café Ärger naïve") == ["café", "ärger", "naïve"]


def test_cjk_blocks_kana_hangul_and_fullwidth():
    assert tokens("㐀豈𠀀") == ["㐀", "豈", "𠀀"]  # extension A, compatibility, extension B
    assert tokens("かなカナ한글") == ["か", "な", "カ", "ナ", "한", "글"]
    assert tokens("ｑｄｒａｎｔ") == ["qdrant"]  # full-width folds to ASCII


def test_punctuation_is_dropped():
    assert token_string("「记忆」，检索。引擎！ max_tokens=127.0.0.1") == "记 忆 检 索 引 擎 max token 127 0 0 1"
    assert tokens('" * NEAR( a:b )') == ["near", "a", "b"]


def test_english_words_are_stored_as_their_stems_and_everything_else_as_it_is():
    """Issue 29: "name" must find "named", "adopt" "adopted"; Chinese stays one term per character."""
    assert terms("Maya named her cats; Theo adopted Rocket") == [
        "maya", "name", "her", "cat", "theo", "adopt", "rocket"
    ]  # fmt: skip
    assert terms("classes class") == ["class", "class"]
    assert terms("使用qdrant部署在6333端口 redis01 café") == [
        "使", "用", "qdrant", "部", "署", "在", "6333", "端", "口", "redis01", "café"
    ]  # fmt: skip
    assert tokens("Maya named") == ["maya", "named"]  # the surface forms stay for highlighting


def test_highlight_spans_name_the_terms_the_index_stores_over_the_original_text():
    # the spans' quick path (a run lower-cased in place) and the full one (NFKC, a case change that splits)
    for text in (
        "Hello Wörld ｑｄｒａｎｔ 6333端口 İstanbul ÄRGER café",
        "纯中文的文本，没有别的。We NAMED it; they went home.",
        "plain ascii redis-01 Adopted",
    ):
        spans = list(token_spans(text))
        assert [term for _, _, term in spans] == terms(text)
        for start, end, term in spans:
            assert term in terms(text[start:end])  # each span covers the run its term came from


def test_chunks_follow_headings_and_keep_line_ranges():
    text = "intro\n# A\none\n## B\ntwo\nthree\n# C\nfour\n"
    chunks = chunk_markdown(text)
    assert [(c.heading, c.line_start, c.line_end) for c in chunks] == [
        ("", 1, 1),
        ("A", 2, 3),
        ("A > B", 4, 6),
        ("C", 7, 8),
    ]
    assert chunks[2].text == "## B\ntwo\nthree\n"


def test_a_heading_alone_joins_the_section_below_it():
    text = "# 2026-09-08 星期二\n\n## 事故\n- log-01 磁盘写满\n\n## 其他\n- 无\n"
    chunks = chunk_markdown(text)
    assert [(c.heading, c.line_start, c.line_end) for c in chunks] == [
        ("2026-09-08 星期二 > 事故", 1, 5),
        ("2026-09-08 星期二 > 其他", 6, 7),
    ]
    assert chunks[0].text.startswith("# 2026-09-08 星期二\n")
    # not a subsection below it, or nothing below: it stays on its own
    assert [c.line_start for c in chunk_markdown("## A\n# B\ntext\n")] == [1, 2]
    assert [c.heading for c in chunk_markdown("text\n# Last\n")] == ["", "Last"]


def test_a_heading_inside_a_code_fence_is_not_a_heading():
    text = "# Real\n```bash\n# not a heading\necho hi\n```\nafter\n"
    chunks = chunk_markdown(text)
    assert len(chunks) == 1 and chunks[0].heading == "Real"


def test_long_sections_split_at_blank_lines_never_inside_a_fitting_fence():
    para = "word " * 50 + "\n"
    fence = "```\n" + "x = 1\n" * 150 + "```\n"
    text = "# S\n" + (para * 3 + "\n") * 3 + fence + "tail\n"
    chunks = chunk_markdown(text)
    assert all(len(c.text) <= HARD_LIMIT for c in chunks)
    holding = [c for c in chunks if "x = 1" in c.text]
    assert len(holding) == 1 and holding[0].text.count("```") == 2, "the fence stays whole"


def test_a_fence_longer_than_the_hard_cap_is_cut_into_valid_fenced_pieces():
    text = "```python\n" + "print('memstrata')\n" * 400 + "```\n"
    chunks = chunk_markdown(text)
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk.text) <= HARD_LIMIT
        assert chunk.text.startswith("```python\n") and chunk.text.rstrip().endswith("```")


def test_a_huge_single_line_is_capped():
    chunks = chunk_markdown("x" * 7000 + "\n")
    assert len(chunks) == 4 and all(len(c.text) <= HARD_LIMIT for c in chunks)


def test_chunk_hash_changes_with_content_or_heading():
    a = chunk_markdown("# H\nbody\n")[0]
    b = chunk_markdown("# H\nbody!\n")[0]
    c = chunk_markdown("# G\nbody\n")[0]
    assert len({a.hash, b.hash, c.hash}) == 3
    assert a.hash == chunk_markdown("# H\nbody\n")[0].hash


def test_the_quick_path_gives_exactly_the_chunks_of_the_full_walk():
    import random

    from layers.local.text.chunker import _quick_chunks, _walk

    rng = random.Random(1)
    pieces = [
        "# Title\n",
        "## Sub\n",
        "### Deep ###\n",
        "text line\n",
        "\n",
        "中文内容，句子。\n",
        "#not heading\n",
        "    # indented\n",
        "- item\n",
        "x" * 120 + "\n",
        "tail without newline",
    ]
    checked = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces[:-1]) for _ in range(rng.randint(0, 25)))
        if rng.random() < 0.2:
            text += pieces[-1]
        quick = _quick_chunks(text)
        if quick is not None:
            assert quick == _walk(text), text
            checked += 1
    assert checked > 1000


def test_the_term_cache_holds_at_most_its_limit_of_tokens_however_many_distinct_ones_pass():
    """Issue 51: a fleet's notes (times, ports, ids) filled it towards 500,000 tokens, ~64 MB; at 65,536
    tokens, with the stemmer's cache at as many words, both held ~15 MB full, now ~4 MB."""
    from layers.local.text.tokenizer import _TERM_OF, _stem_word, _TermOf

    assert _TermOf.LIMIT <= 16_384 and (_stem_word.cache_info().maxsize or 0) <= 8_192
    letters = "abcdefghijklmnopqrstuvwxyz"

    def word(n: int) -> str:  # a distinct word of letters alone for each n
        out = ""
        while True:
            n, digit = divmod(n, 26)
            out += letters[digit]
            if not n:
                return "zq" + out

    for start in range(0, _TermOf.LIMIT + 5_000, 1_000):
        token_string(" ".join(word(n) for n in range(start, start + 1_000)))
        assert len(_TERM_OF) <= _TermOf.LIMIT
    assert token_string("the pumps were checked") == "the pump were check"


def test_numbers_ids_and_times_pass_through_and_are_kept_in_no_cache():
    """Issue 51: tokens with digits are their own terms and rarely seen twice; a fleet's notes brought
    thousands an hour, and both caches (the term dict and the stemmer's) grew with them for hours."""
    from layers.local.text import tokenizer

    token_string("warm the caches: pumps")
    held, stemmed = len(tokenizer._TERM_OF), tokenizer._stem_word.cache_info().currsize
    text = " ".join(f"job{n} 10:{n % 60:02d} port {7000 + n} 0x{n:06x} 2026-12-{1 + n % 28:02d}" for n in range(5_000))
    terms = token_string(text).split()
    assert "job4999" in terms and "7999" in terms and "0x001387" in terms and "port" in terms
    assert len(tokenizer._TERM_OF) <= held + 1  # "port", once
    assert tokenizer._stem_word.cache_info().currsize <= stemmed + 1
    assert tokenizer.stem("job42") == "job42" and tokenizer.terms("pumps 42") == ["pump", "42"]
