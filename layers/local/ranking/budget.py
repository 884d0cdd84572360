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

from layers.common.textcost import estimate_tokens
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


def _continues(line: str) -> bool:
    return bool(line.strip()) and not _HEADING.match(line)


def _cost(result: LocalHit, text: str) -> int:
    return estimate_tokens(f"{result['path']}:{result['lines'][0]} {result.get('heading') or ''}\n{text}")


def fit(results: list[LocalHit], max_tokens: int) -> tuple[list[LocalHit], Budget]:
    """``results`` (best first, each with ``passage``) as they fit in ``max_tokens``: each one's
    ``text`` its passage or, where room is left, its whole section (``whole``); no snippet (the text is
    what is paid for)."""
    left = max_tokens
    chosen: list[tuple[LocalHit, str, int]] = []
    left_out = 0
    for result in results:
        first, last = result.get("passage") or result["lines"]
        lines = result["text"].split("\n")
        offset = result["lines"][0]
        passage = "\n".join(lines[first - offset : last - offset + 1])
        cost = _cost(result, passage)
        if cost <= left:
            chosen.append((result, passage, cost))
            left -= cost
        else:
            left_out += 1
    kept: list[LocalHit] = []
    whole = 0
    for result, passage, cost in chosen:
        extra = _cost(result, result["text"]) - cost
        given: LocalHit = {k: v for k, v in result.items() if k != "snippet"}  # type: ignore[assignment]
        if passage != result["text"] and extra <= left:
            left -= extra
            given["whole"] = True
            whole += 1
        else:
            given["text"] = passage
            given["whole"] = passage == result["text"]
            whole += given["whole"]
        kept.append(given)
    return kept, Budget(max_tokens=max_tokens, used=max_tokens - left, whole=whole, left_out=left_out)
