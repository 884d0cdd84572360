"""Tokens for the L3 index: one per CJK character, whole words for everything else.

Why this shape (docs/facts.md, "SQLite FTS5 tokenizing", measured on 20k mixed chunks):
- ``unicode61`` makes a run of Chinese one token, so a 1-character query finds 1%
  of the chunks that contain it, and ``6333端口`` / ``使用qdrant`` become single tokens;
- ``trigram`` silently returns nothing for 1–2 character queries;
- one token per CJK character plus whole words gives recall 1.0 on every query class.

Why tokenizing here, in Python, rather than registering a Python tokenizer with
FTS5: a registered tokenizer is called back per token (6.3k chunks/s), while one
regex pass that joins tokens with spaces, stored in a *contentless* FTS5 table
whose C ``ascii`` tokenizer only has to split at those spaces, runs close to
SQLite's own ``unicode61`` speed (the build benchmark prints the ratio).  The
price is no built-in ``snippet()``; :mod:`layers.local.highlight` does that from
the chunk text, for the handful of rows a search returns.

Beyond the seed's rule (CJK ideographs and ASCII alphanumerics only), letters of
any script stay in their words: ``café`` and ``Ärger`` are one token each, not
``caf`` + ``ger``.  Words are lower-cased and NFKC-normalised, so full-width
``ｑｄｒａｎｔ`` finds ``qdrant``.

English words are indexed and searched as their Snowball stems (the "english"
algorithm, Porter's revision of his own stemmer; PyStemmer runs the Snowball C
code): "named" finds "name", "adopted" "adopt", "classes" "class".  Only words of
ASCII letters are stemmed: Chinese characters, digits, ``redis01`` and ``café``
stay as they are, so the per-character search of Chinese is unchanged.  The
past forms of common irregular verbs are read as the verb ("went" as "go",
"bought" as "buy"): no stemmer can derive them.
:func:`tokens` keeps the surface forms (for highlighting); :func:`terms` is what
the index stores and a query asks for.
"""

from __future__ import annotations

import functools
import re
import unicodedata

import Stemmer

TOKENIZER_VERSION = 2  # 2: English words stemmed (Snowball english), irregular past forms as their verb

# Ideographs (unified, extension A, compatibility, extensions B+), kana, hangul.
CJK_CLASS = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0002fa1f"  # extensions B-F, compatibility supplement
)
# A CJK character alone, or a run of letters/digits of any script that are not CJK.
_TOKEN_RE = re.compile(f"[{CJK_CLASS}]|[^\\W_{CJK_CLASS}]+")
# Characters NFKC changes in a way tokens can see: full-width letters and digits,
# half-width kana, compatibility ideographs, ligatures, circled and squared forms.
# Full-width punctuation (，：！) is common in Chinese and dropped either way, so
# text without these skips the normalisation pass, which costs as much as tokenizing.
_NEEDS_NFKC = re.compile(
    "[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a\uff66-\uffdc\uf900-\ufaff\ufb00-\ufb4f"
    "\u2460-\u24ff\u3200-\u33ff\U0002f800-\U0002fa1f]"
)


def _normalise(token: str) -> list[str]:
    """One matched run as index tokens (NFKC can expand it: ㍿ → 株式会社)."""
    return tokens(token)


def tokens(text: str) -> list[str]:
    """The index tokens of ``text``, in order; punctuation and spaces are dropped.

    Normalisation runs once over the whole text (C code) rather than per token:
    per-token work was most of the build time for Chinese, one token per character.
    """
    if not text.isascii() and _NEEDS_NFKC.search(text):
        text = unicodedata.normalize("NFKC", text)
    return _TOKEN_RE.findall(text.lower())


_STEMMER = Stemmer.Stemmer("english")  # keeps a cache of the words it has seen (10,000 by default)
# Irregular past forms no stemmer can reach ("went" is not "go"), read as their verb: the common verbs of
# notes and conversations, leaving out forms that are mostly another word (left, saw, found, felt, lay, rose).
_IRREGULAR = """
ate:eat bought:buy brought:bring began:begin begun:begin broke:break broken:break built:build caught:catch
chose:choose chosen:choose came:come did:do done:do drank:drink drove:drive driven:drive eaten:eat fell:fall
fallen:fall flew:fly flown:fly forgot:forget forgotten:forget gave:give given:give got:get gotten:get went:go
gone:go grew:grow grown:grow had:have heard:hear held:hold kept:keep knew:know known:know led:lead lent:lend
lost:lose made:make meant:mean met:meet paid:pay ran:run rode:ride ridden:ride rang:ring rung:ring said:say
sang:sing sung:sing sold:sell sent:send shook:shake shaken:shake sat:sit slept:sleep spoke:speak spoken:speak
spent:spend stole:steal stolen:steal stood:stand swam:swim swum:swim taught:teach told:tell thought:think
threw:throw thrown:throw took:take taken:take tore:tear torn:tear understood:understand woke:wake woken:wake
wore:wear worn:wear won:win wrote:write written:write
"""
IRREGULAR = dict(pair.split(":") for pair in _IRREGULAR.split())


def stem(token: str) -> str:
    """The index term of one token: an ASCII word's Snowball stem (an irregular past form's verb's),
    anything else itself."""
    if not (token.isascii() and token.isalpha()):
        return token  # a number, an id, a time, a CJK character: never cached, nothing to compute
    return _stem_word(token)


# A highlight or a focus asks for the same words again and again.  8,192 words: a working vocabulary.  Full,
# this cache and the term dict below hold ~4 MB; at 65,536 each, ~15 MB, which a fleet's new words (names, ids
# in prose: the soak's ~8,400 an hour) fill in days (issue 51).
@functools.lru_cache(maxsize=8192)
def _stem_word(word: str) -> str:
    return _STEMMER.stemWord(IRREGULAR.get(word, word))


def terms(text: str) -> list[str]:
    """The index terms of ``text``: :func:`tokens` with English words stemmed."""
    return [stem(token) for token in tokens(text)]


class _TermOf(dict):
    """token → index term, filled on first sight.  Indexing looks up every token of every chunk
    (a million at 20,000 chunks): a dict hit is done in C, where a Python call per word (a regex
    substitution's callback, or :func:`stem`'s cache) was a third of the build's time."""

    # Distinct tokens kept before it starts again.  It was 500,000: ~64 MB of strings at the top, reached
    # by a fleet's notes (times, ports, ids) within hours, and given back all at once: the saw-tooth of
    # the daemon's anonymous memory in issue 51's soak.  A working vocabulary fits in 16,384 (every recall
    # set's notes hold 9,300 terms together): a 20,000-chunk build took the same time as at 65,536, which
    # held ~11 MB more with the stemmer's cache once a fleet's new words had filled both; a miss costs a
    # stem(), itself cached.
    LIMIT = 16_384

    def __missing__(self, token: str) -> str:
        if token.isascii() and not token.isalpha():
            # A number, an id, a time: its own term, and rarely seen twice.  Kept, they filled both caches
            # over hours of a fleet's notes, a slope of the soak's anonymous memory (issue 51).
            return token
        if len(self) >= self.LIMIT:
            self.clear()
        term = self[token] = stem(token)
        return term


_TERM_OF = _TermOf()


def token_string(text: str) -> str:
    """Terms joined by single spaces: what the contentless FTS5 table stores (``" ".join(terms(text))``)."""
    return " ".join(map(_TERM_OF.__getitem__, tokens(text)))


def token_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, index term) over the original text, for highlighting and a result's focus line.

    Every search result is highlighted, so this runs over whole chunks on the request path.  Text
    that NFKC leaves alone and lower-casing keeps the length of (nearly all) is tokenized once,
    lower-cased, and its spans read off that pass: the same characters at the same offsets.  A
    generator calling the tokenizer again per run cost 4.7 µs a token, most of an fts search.
    """
    lower = text.lower()
    if (text.isascii() or not _NEEDS_NFKC.search(text)) and len(lower) == len(text):
        term_of = _TERM_OF
        return [(m.start(), m.end(), term_of[m.group()]) for m in _TOKEN_RE.finditer(lower)]
    return [
        (match.start(), match.end(), stem(token) if token.isascii() else token)
        for match in _TOKEN_RE.finditer(text)
        for token in _normalise(match.group())
    ]
