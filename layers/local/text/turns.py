"""The turns of a conversation written into a note: who says each line (issue 50).

A daily note that records a chat is a list of turns, ``- **Maya:** I signed up for a pottery class!``.
A question repeats the words of one turn and is answered by another: the reply that follows it, often
the next line of the speaker the question names ("What did Maya make…" is answered by Maya).  The
passage a search hands out is chosen with that in mind (:mod:`layers.local.ranking.budget`), so this
module only reads who speaks: it never guesses a speaker from anything but the line's own label.

A chunk is a conversation when most of its items open with a speaker's label and a few speakers take
turns (ops notes of ``- key: value`` items have many keys, each once, and are not).
"""

from __future__ import annotations

import re

from layers.local.text.tokenizer import tokens

# "- **Maya:** text", "- **Maya**: text", "Maya: text", "- 张伟：text"; a label of at most three words
_TURN = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:\*\*|__)?(?P<who>[^\s*_:：\d][^*_:：\n]{0,30}?)(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?\s*\S"
)
MAX_SPEAKERS = 6  # more distinct labels than this: the keys of a list of facts, not people taking turns
MIN_TURNS = 4
TURN_SHARE = 0.6  # of a chunk's non-empty lines, at least this many are turns


def speaker(line: str) -> str | None:
    """The label a line opens with (``Maya``), or None."""
    m = _TURN.match(line)
    if not m:
        return None
    who = m.group("who").strip()
    return who if 0 < len(who.split()) <= 3 else None


def speakers(lines: list[str]) -> list[str | None] | None:
    """Who says each of ``lines`` (None for a line that is no turn), or None when they are no conversation."""
    said = [speaker(line) for line in lines]
    turns = [who for who in said if who]
    body = sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if len(turns) < MIN_TURNS or len(turns) < TURN_SHARE * body:
        return None
    counts: dict[str, int] = {}
    for who in turns:
        counts[who] = counts.get(who, 0) + 1
    if len(counts) > MAX_SPEAKERS or sum(1 for n in counts.values() if n >= 2) < 2:
        return None
    return said


def named(question: str, said: list[str | None]) -> frozenset[str]:
    """The speakers of a conversation a question names ("What did Maya's cat…" names Maya)."""
    asked = set(tokens(question))
    return frozenset(who for who in set(said) if who and set(tokens(who)) <= asked)
