"""When two memories say the same thing: the guard consolidation applies beyond cosine.

On multilingual-e5-small (the store's embedder) distinct facts in near-identical words score as
high as restatements (the measured pairs are in layers/conversation/consolidation/thresholds.py):
"会议改到周三下午三点" / "…周四…" 0.995, "Logs are kept in /var/log/memstrata" / "…/var/lib/…"
0.996, while a restatement with two words added scores 0.948.  No cosine separates them, so a
pair above the threshold is folded only when its words agree too:

- the *anchors* (numbers, dates, weekdays, months, identifiers such as hosts, versions, paths,
  names written with a capital, and negations) are the same on both sides, none added or dropped;
- no word is replaced: words may be added on one side only (a restatement with more detail), never
  swapped for others ("moved to" / "moved from", "北京" / "上海");
- the words both share come in the same order ("A reports to B" is not "B reports to A").

That is deliberately strict: a paraphrase it keeps apart costs a duplicate left in the store,
while a distinct fact folded into another would hide it from search.  Chinese is compared per
character (as L3 indexes it); Chinese numerals count as numbers where they count something
(第三, 三点, 三次, 十五), weekdays in every spelling (周三, 星期三, 礼拜三, Wednesday) as one.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from layers.common.numerals_dates import CN_NUMERAL_CHARS, MONTHS_EN, WEEKDAYS_EN, WEEKDAYS_ZH, cn_numeral

GUARD_VERSION = 1  # written into each consolidation report: a later, different guard is told apart

_CJK = "\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_WORD_CHAR = rf"[^\W{_CJK}]"
_CN_DIGITS = CN_NUMERAL_CHARS
_TOKEN = re.compile(
    rf"(?P<wd>(?:周|星期|礼拜)[一二三四五六日天1-7])"
    rf"|(?P<cn>[{_CN_DIGITS}]+)"
    rf"|(?P<word>{_WORD_CHAR}(?:(?:{_WORD_CHAR}|[.\-/@:_'’])*{_WORD_CHAR})?)"
    rf"|(?P<cjk>[{_CJK}])"
)
_NUMBER = re.compile(r"^\d+(?:[.:,]\d+)*$")
_DATE = re.compile(r"^(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})$")
# What a Chinese numeral counts when it is one (三点, 三次, 第三, 十五楼): a measure word after it.
_CN_MEASURES = set("点号日月年个条次台天周时分秒岁层楼元块倍人份张页行位名组步章节遍件只本种部辆米斤克度")
# The tables are layers/common/numerals_dates.py's (weekdays 1-7, as it numbers them).  "weds" is a
# weekday here; "sat" and "sun" are words of their own in a memory, and so are "may" and "mar".
_WEEKDAYS_ZH = WEEKDAYS_ZH
_WEEKDAYS_EN = {**WEEKDAYS_EN, "weds": 3}
_MONTHS_EN = {name: number for name, number in MONTHS_EN.items() if name not in ("may", "mar")}
_NEGATIONS = {"not", "no", "never", "none", "nothing", "nobody", "nor", "cannot", "without", *"不没无無未非别莫勿否甭"}
# What may set a restatement's added clause apart from the statement, and what may trail it.
_BREAK = re.compile(r"[,，:：;；(（)）\[\]【】「」『』—–…、.。!！?？]|\s-\s")
# What a restatement's added clause may be made of: note markers and confirmations, which say
# nothing of their own ("记一下：…", "Note: …", "…, as before", "…（已确认）", "…, confirmed").
_FILLER_EN = {
    *("note", "notes", "noted", "reminder", "remember", "fyi", "btw", "confirmed", "checked", "verified"),
    *("again", "as", "before", "still", "same", "ok", "okay", "update", "updated", "please", "always", "keep"),
    *("in", "mind", "recap", "so", "yes", "indeed", "also"),
}
_FILLER_ZH = set("记一下备注住已确认经过再次提醒意更新同仍照旧请留知悉收到好嗯对没错")
# Words that carry no fact of their own: articles, the verb "be", Chinese sentence particles.
_STOPWORDS = {"a", "an", "the", "is", "are", "be", "am", *"的了吗呢啊吧呀嘛哦哈"}  # "was" is a fact of its own
_SENTENCE_END = set(".!?:;。！？：；\n\"'“‘(（[【「")

# Anchor kinds, strongest first: which difference the reason names when several differ.
WEEKDAY, DATE, NUMBER, MONTH = "weekday", "date", "number", "month"
IDENT, NEGATION, WORD = "identifier", "negation", "word"
ANCHORS = (WEEKDAY, DATE, NUMBER, MONTH, IDENT, NEGATION)


@dataclass(frozen=True)
class Token:
    key: str  # what is compared: lower-cased, numbers normalised, weekdays canonical
    kind: str
    start: int = 0  # where it is in the NFKC text (for what stands between two tokens)
    end: int = 0


def normalised(text: str) -> str:
    """The exact-duplicate key: NFKC, case-folded, without whitespace or punctuation."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if ch.isalnum())


def _number(text: str) -> str:
    """Leading zeros dropped in each part ("04:00" is "4:00"), "," as a thousands mark dropped."""
    parts = re.split(r"([.:])", text.replace(",", ""))
    return "".join(p if p in ".:" else (p.lstrip("0") or "0") for p in parts)


def _starts_sentence(text: str, start: int) -> bool:
    before = text[:start].rstrip(" \t")
    return not before or before[-1] in _SENTENCE_END


def tokens(text: str) -> Iterator[Token]:
    """The tokens two memories are compared on, stop words left out."""
    text = unicodedata.normalize("NFKC", text)
    for match in _TOKEN.finditer(text):
        raw, start, end = match.group(), match.start(), match.end()
        if match.lastgroup == "wd":
            day = raw[-1]
            yield Token(f"weekday:{_WEEKDAYS_ZH.get(day, day)}", WEEKDAY, start, end)
        elif match.lastgroup == "cn":
            after = text[end : end + 1]
            counted = len(raw) > 1 or after in _CN_MEASURES or text[start - 1 : start] == "第"
            if counted and cn_numeral(raw) != raw:
                yield Token(cn_numeral(raw), NUMBER, start, end)
            else:
                for offset, ch in enumerate(raw):
                    yield Token(ch, NEGATION if ch in _NEGATIONS else WORD, start + offset, start + offset + 1)
        elif match.lastgroup == "cjk":
            if raw not in _STOPWORDS:
                yield Token(raw, NEGATION if raw in _NEGATIONS else WORD, start, end)
        else:
            kind_key = _word(text, start, raw)
            if kind_key is not None:
                yield Token(kind_key[1], kind_key[0], start, end)


def _word(text: str, start: int, raw: str) -> tuple[str, str] | None:
    """(kind, key) of a word, None for a stop word."""
    key = raw.casefold()
    date = _DATE.match(raw)
    if date:
        return DATE, "date:" + "-".join(str(int(part)) for part in date.groups())
    if _NUMBER.match(raw):
        return NUMBER, _number(raw)
    if key in _WEEKDAYS_EN:
        return WEEKDAY, f"weekday:{_WEEKDAYS_EN[key]}"
    if key in _MONTHS_EN:
        return MONTH, f"month:{_MONTHS_EN[key]}"
    if key in _NEGATIONS or key.endswith(("n't", "n’t")):
        return NEGATION, key
    if key in _STOPWORDS:
        return None
    if re.search(r"[\d.\-/@:_]", raw) or any(ch.isupper() for ch in raw[1:]):
        return IDENT, key  # hosts, versions, paths, addresses, CamelCase, ALLCAPS
    if raw[0].isupper() and not _starts_sentence(text, start):
        return IDENT, key  # a name: capitalised inside a sentence
    return WORD, key


# A memory's tokens take ~3 KB: at most ~25 MB kept while a consolidation compares memories.
TOKENS_KEPT = 8192


@functools.lru_cache(maxsize=TOKENS_KEPT)
def _tokens_of(text: str) -> tuple[Token, ...]:
    """A consolidation compares each memory with many: its tokens are made once."""
    return tuple(tokens(text))


def forget() -> None:
    """Drop the memories' tokens kept for a consolidation (its plan is built): they are ~3 KB each, and
    65,536 of them (the bound before) would have stayed resident between the nightly runs."""
    _tokens_of.cache_clear()


def distinct_reason(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` state different facts, or None when the guard sees one fact in both."""
    left, right = _tokens_of(a), _tokens_of(b)
    kinds: dict[str, str] = {}
    for token in (*left, *right):  # a word that is an anchor on either side is one
        if kinds.get(token.key) not in ANCHORS:
            kinds[token.key] = token.kind
    keys_a, keys_b = {t.key for t in left}, {t.key for t in right}
    only_a, only_b = keys_a - keys_b, keys_b - keys_a
    for kind in ANCHORS:
        a_side = sorted(k for k in only_a if kinds[k] == kind)
        b_side = sorted(k for k in only_b if kinds[k] == kind)
        if a_side or b_side:
            return f"{kind} differs: {_show(a_side)} vs {_show(b_side)}"
    if only_a and only_b:
        return f"words differ: {_show(sorted(only_a))} vs {_show(sorted(only_b))}"
    return _added_apart(a, left, b, right)


def _added_apart(a: str, left: tuple[Token, ...], b: str, right: tuple[Token, ...]) -> str | None:
    """None when the longer text is the shorter one with a note or a confirmation set apart.

    Words added *inside* a statement or run on into it change what it says ("服务器以前在北京机房",
    "runs on kestrel only on weekends", "enabled in dev except for billing"), and a clause set
    apart may state a fact of its own ("…；另外用户住在上海", "…; falcon is down") or qualify it
    ("…，但技术问题要详细").  So a restatement may only add, set apart by punctuation, words that
    say nothing of their own (``_FILLER_EN``, ``_FILLER_ZH``: "记一下：", "Note:", ", as before",
    "（已确认）"): folding it into the statement then loses nothing.
    """
    (_, short_tokens), (long, long_tokens) = sorted(((a, left), (b, right)), key=lambda item: len(item[1]))
    core = [t.key for t in short_tokens]
    keys = [t.key for t in long_tokens]
    if core == keys:
        return None
    if not core:
        return "one of them says nothing the other could be compared on"
    for start in range(len(keys) - len(core) + 1):
        if keys[start : start + len(core)] != core:
            continue
        text = unicodedata.normalize("NFKC", long)
        end = start + len(core)  # tokens before ``start`` and from ``end`` are the added clause(s)
        if start and not _BREAK.search(text[long_tokens[start - 1].end : long_tokens[start].start]):
            continue
        if end < len(keys) and not _BREAK.search(text[long_tokens[end - 1].end : long_tokens[end].start]):
            continue
        added = [t.key for t in (*long_tokens[:start], *long_tokens[end:])]
        saying = [k for k in added if k not in _FILLER_EN and k not in _FILLER_ZH]
        if saying:
            return f"the added clause says something of its own: {_show(saying)}"
        return None
    if set(core) == set(keys):
        return "the shared words come in another order"
    return "words are added inside the statement or run on into it"


def _show(keys: list[str], most: int = 4) -> str:
    if not keys:
        return "(none)"
    shown = ", ".join(keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "")
