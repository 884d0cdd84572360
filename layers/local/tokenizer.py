"""Tokens for the L3 index: one per CJK character, whole words for everything else.

Why this shape (FACTS.md, measured on 20k mixed chunks):
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
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

TOKENIZER_VERSION = 1

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


def _normalise(token: str) -> list[str]:
    if token.isascii():
        return [token.lower()]
    folded = unicodedata.normalize("NFKC", token).lower()
    if folded == token:
        return [folded]
    return _TOKEN_RE.findall(folded)  # NFKC can expand (㍿ → 株式会社)


def tokens(text: str) -> list[str]:
    """The index tokens of ``text``, in order; punctuation and spaces are dropped."""
    if text.isascii():
        return _TOKEN_RE.findall(text.lower())
    out: list[str] = []
    for token in _TOKEN_RE.findall(text):
        out.extend(_normalise(token))
    return out


def token_string(text: str) -> str:
    """Tokens joined by single spaces: what the contentless FTS5 table stores."""
    return " ".join(tokens(text))


def token_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, normalised token) over the original text, for highlighting."""
    for match in _TOKEN_RE.finditer(text):
        for token in _normalise(match.group()):
            yield match.start(), match.end(), token
