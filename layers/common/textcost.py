"""What a text costs in an LLM's context: one estimate for every budget (the core bundle, search answers).

Shared by L1 (layers/core/bundle.py, the session-start bundle) and L3 (layers/local/ranking/budget.py, answers cut
to ``max_tokens``), so a budget means the same wherever an agent sets one.
"""

from __future__ import annotations

import math

_CJK_RANGES = (
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # full-width forms
    (0x20000, 0x2FA1F),  # extensions B-F, compatibility supplement
)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def estimate_tokens(text: str) -> int:
    """Estimate how many tokens ``text`` costs in a typical LLM tokenizer.

    BPE tokenizers spend roughly one token per CJK character but only one per
    ~4 characters of English; counting bytes or characters alone would
    under-count Chinese four-fold or over-count English four-fold.
    """
    return tokens_of(*char_counts(text))


def char_counts(text: str) -> tuple[int, int]:
    """(CJK characters, other characters weighted: ASCII 1, anything else 2) of ``text``: counts that add
    up over pieces, so a passage grown line by line is costed without reading it again."""
    if text.isascii():
        return 0, len(text)
    cjk = 0
    other = 0
    for ch in text:
        if ch.isascii():
            other += 1
        elif _is_cjk(ch):
            cjk += 1
        else:
            other += 2  # accented Latin, Cyrillic, emoji: dearer than ASCII
    return cjk, other


def tokens_of(cjk: int, other: int) -> int:
    """What :func:`char_counts`' counts cost: :func:`estimate_tokens` of the text they count."""
    return cjk + math.ceil(other / 4)
