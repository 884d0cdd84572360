"""Answers an agent can afford: each hit's passage, and a result list cut to a token budget (issue 24).

A section of a daily note is a dozen items; the answer to a question is one of them.  Every hit names
its *passage* — the list item (with its continuation lines) or paragraph that holds its focus line —
as file lines.  Asked with ``max_tokens``, the answer is built best first from passages, each under
its section heading and file (which carries a daily note's date); once every passage that fits is
in, a result whose whole section still fits is given whole, best first.  What did not fit is left
out and counted.  Costs are :func:`layers.common.textcost.estimate_tokens`, the estimate the L1 core bundle
is cut with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from layers.common.textcost import char_counts, estimate_tokens, tokens_of
from layers.local.text.turns import named, speakers
from protocol.answers import Budget, LocalHit

_ITEM_START = re.compile(r"^(?:[-*+]|\d+[.)])\s")
_HEADING = re.compile(r"^#{1,6}\s")


def passage_span(text: str, offset: int | None) -> tuple[int, int]:
    """The first and last line (offsets in ``text``) of the item or paragraph holding line ``offset``;
    with no offset, the chunk's first item (its heading lines left out)."""
    lines = text.split("\n")
    if not lines:
        return 0, 0
    if offset is None or not 0 <= offset < len(lines):
        offset = next((i for i, line in enumerate(lines) if line.strip() and not _HEADING.match(line)), 0)
    if _HEADING.match(lines[offset]) or not lines[offset].strip():
        return offset, offset
    start = offset
    while start > 0 and not _ITEM_START.match(lines[start]) and _continues(lines[start - 1]):
        start -= 1
    end = offset
    while end + 1 < len(lines) and _continues(lines[end + 1]) and not _ITEM_START.match(lines[end + 1]):
        end += 1
    return start, end


MAX_REPLY_TURNS = 3  # how far after the focus turn the answer is looked for


def answer_span(
    text: str, offset: int | None, question: str = "", chosen: str = "the item holding the focus"
) -> tuple[int, int, str]:
    """The passage that answers (first and last line, offsets in ``text``) and why it is that one.

    Outside a conversation it is the item holding the focus (:func:`passage_span`).  In a conversation
    (:mod:`layers.local.text.turns`) the focus is the turn that repeats the question's words and the
    answer is a reply: the passage runs on to the next turn of the speaker the question names when the
    focus is another's, else to the focus speaker's own next turn (taking in the reply between), else to
    the first reply, within :data:`MAX_REPLY_TURNS` turns.  Measured on bench/recall_set_chat's dev part
    (fts, share of gold lines within 200/400/800 tokens): the item alone 51/53/64, the reply 53/59/68,
    the named speaker's reply or the focus speaker's next turn 64/74/82, any three turns 58/72/80.
    """
    lines = text.split("\n")
    if offset is not None and 0 <= offset < len(lines) and _HEADING.match(lines[offset]):
        offset = None  # a heading says which note, not what was said in it: the first item instead
    start, end = passage_span(text, offset)
    said = speakers(lines)
    if said is None or said[start] is None:
        return start, end, chosen if offset is not None else "the first item (no focus)"
    who = said[start]
    names = named(question, said)
    reply: tuple[int, str] | None = None
    turns = 0
    for i in range(end + 1, len(lines)):
        other = said[i]
        if other is None:
            if not _continues(lines[i]):
                break
            continue
        turns += 1
        if turns > MAX_REPLY_TURNS:
            break
        if names and who not in names:
            if other in names:
                return start, passage_span(text, i)[1], f"the turn, then the reply of {other} (named)"
        elif other == who:
            return start, passage_span(text, i)[1], f"the turn, the reply and {who}'s next turn"
        if reply is None and other != who:
            reply = i, other
    if reply is not None:
        return start, passage_span(text, reply[0])[1], f"the turn and the reply of {reply[1]}"
    return start, end, "the turn holding the focus"


def _continues(line: str) -> bool:
    return bool(line.strip()) and not _HEADING.match(line)


def _cost(result: LocalHit, text: str) -> int:
    return estimate_tokens(f"{result['path']}:{result['lines'][0]} {result.get('heading') or ''}\n{text}")


def fit(results: list[LocalHit], max_tokens: int, after: Sequence[LocalHit] = ()) -> tuple[list[LocalHit], Budget]:
    """``results`` (best first, each with ``passage``) as they fit in ``max_tokens``: each one's
    ``text`` its passage or, where room is left, its whole section (``whole``); no snippet (the text is
    what is paid for).

    Room left once every passage that fits is in goes first to whole sections, best first, then to
    growing the passages that are not whole, best first: the lines after a passage (an answer follows
    the words that repeat the question), then those before it, while they fit.  A grown passage's
    ``passage`` names the lines its text holds.

    ``after`` are results that get only the room ``results`` leave once they are in and grown, the same
    way (a hybrid answer's results only the vectors found, below its lexical matches: issue 50 item 2).

    The first :data:`NEXT_ITEM_TOP` passages of each list (``results``, then ``after``) outside a
    conversation take in the item after them from the start (:func:`with_next_item`): in notes the answer
    is often the item after the one that repeats the question's words, and growing with the room left came
    too late for it, after every lower result's passage was in.
    """
    kept, budget = _fit(results, max_tokens)
    if not after:
        return kept, budget
    more, rest = _fit(list(after), max_tokens - budget["used"])
    return kept + more, Budget(
        max_tokens=max_tokens,
        used=budget["used"] + rest["used"],
        whole=budget["whole"] + rest["whole"],
        left_out=budget["left_out"] + rest["left_out"],
    )


def _fit(results: list[LocalHit], max_tokens: int) -> tuple[list[LocalHit], Budget]:
    left = max_tokens
    chosen: list[tuple[LocalHit, tuple[int, int], int]] = []  # (result, passage as offsets, cost)
    left_out = 0
    for rank, result in enumerate(results):
        first, last = result.get("passage") or result["lines"]
        offset = result["lines"][0]
        span = (first - offset, last - offset)
        if rank < NEXT_ITEM_TOP:
            wider = with_next_item(result["text"], span)
            if wider != span and "passage_why" in result:
                result = {**result, "passage_why": f"{result['passage_why']}, and the item after it"}  # type: ignore[assignment]
            span = wider
        cost = _cost(result, _lines(result, span))
        if cost <= left:
            chosen.append((result, span, cost))
            left -= cost
        else:
            left_out += 1
    wholes = []
    for result, span, cost in chosen:
        extra = _cost(result, result["text"]) - cost
        fits = _lines(result, span) != result["text"] and extra <= left
        if fits:
            left -= extra
        wholes.append(fits)
    kept: list[LocalHit] = []
    whole = 0
    for (result, span, cost), given_whole in zip(chosen, wholes, strict=True):
        given: LocalHit = {k: v for k, v in result.items() if k != "snippet"}  # type: ignore[assignment]
        if given_whole:
            given["whole"] = True
        else:
            span, left = _grow(result, span, cost, left)
            given["text"] = _lines(result, span)
            given["passage"] = [result["lines"][0] + span[0], result["lines"][0] + span[1]]
            given["whole"] = given["text"] == result["text"]
        whole += given["whole"]
        kept.append(given)
    return kept, Budget(max_tokens=max_tokens, used=max_tokens - left, whole=whole, left_out=left_out)


# How many of the best results take in the item after their passage under a budget.  Chosen on the tuned
# set's dev part, the one dev part of notes (chat is conversations, where the reply is chosen instead): fts
# within 200/400/800 tokens 67.1/78.5/87.3 with none, 65.8/78.5/87.3 with 1, 70.9/82.3/87.3 with 2,
# 72.2/82.3/88.6 with 3, 74.7/82.3/88.6 with 4, 72.2/81.0/88.6 with 5, 72.2/81.0/87.3 with all.
NEXT_ITEM_TOP = 4


def with_next_item(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """``span`` (offsets in ``text``) with the item or paragraph after it, when the chunk has one and this
    is not a conversation's turn (there :func:`answer_span` chose the reply already)."""
    lines = text.split("\n")
    said = speakers(lines)
    if said is not None and said[span[0]] is not None:
        return span
    after = span[1] + 1
    if after >= len(lines) or not _continues(lines[after]):
        return span
    return span[0], passage_span(text, after)[1]


def _lines(result: LocalHit, span: tuple[int, int]) -> str:
    return "\n".join(result["text"].split("\n")[span[0] : span[1] + 1])


def _grow(result: LocalHit, span: tuple[int, int], cost: int, left: int) -> tuple[tuple[int, int], int]:
    """``span`` grown by the lines after it, then those before it, while the cost fits in ``left``.

    Costs are added up from each line's character counts (each line and its newline counted once), so a
    long section is read once, not once a line."""
    lines = result["text"].split("\n")
    counts = [char_counts(line + "\n") for line in lines]
    first, last = span
    cjk, other = char_counts(f"{result['path']}:{result['lines'][0]} {result.get('heading') or ''}\n")
    for line in range(first, last + 1):
        cjk, other = cjk + counts[line][0], other + counts[line][1]
    other -= 1  # the last line has no newline after it
    for step in (1, -1):
        while (last + 1 < len(lines)) if step == 1 else (first > 0):
            added = counts[last + 1] if step == 1 else counts[first - 1]
            wider = tokens_of(cjk + added[0], other + added[1])
            if wider - cost > left:
                break
            left -= wider - cost
            cjk, other, cost = cjk + added[0], other + added[1], wider
            first, last = (first, last + 1) if step == 1 else (first - 1, last)
    return (first, last), left
