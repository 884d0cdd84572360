"""Time words read in their note's time (issue 50 item 3).

A question's "recently", "last week", "yesterday", 上周, 最近 are read by
:func:`~layers.local.text.dates.find_dates` against the memory's present, the
newest note: an agent asking "what happened yesterday" means the day before its
last note.  In notes that record conversations the same words mean something
else as well: "what did Theo do recently" asks about what Theo called recent
when he said it.  A line says its own time words ("I gave my notice last
week", "上周二发布了 v2.3") in the time of the note it is in, the note's day
from its file name, its title or a date in its heading.

So both sides are read from that day: the question's date words give one day
range (relative words count from the note's day, named days are the same
everywhere), the line's own date words give another, and a line that holds the
question's words and whose range lies inside the question's is *told* of the
question's time.  Such results join the fusion as the "told" list, the line is
their focus, and ``--explain`` says which words of the line were read as which
days.  A line with no date words of its own is left to the note's day (the
``@date`` lists): "today" in its note is that day.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import date

from layers.local.storage.index import Hit
from layers.local.text.dates import LATELY, MAY_NAME_DAYS, DateRange, find_dates
from layers.local.text.tokenizer import token_spans

_NEWLINE = re.compile("\n")
LINE_SHARE = 0.5  # a told line's question terms weigh at least this share of the chunk's best line's


@dataclass(frozen=True)
class Told:
    """A result's line whose own date words, read in its note's time, name days inside the question's."""

    line: int  # offset in the chunk
    terms: frozenset[str]  # the question's terms on the line
    weight: float  # theirs, as the focus weighs them
    said: DateRange  # the line's date words, read from its note's day (``reference``)
    asked: DateRange  # the question's, read from the same day

    def why(self, first_line: int) -> str:
        note = self.said.reference.isoformat()
        return (
            f"line {first_line + self.line} says {' / '.join(repr(w) for w in self.said.words)}: "
            f"{_span(self.said)} in its note's time ({note}), within the question's "
            f"{' / '.join(repr(w) for w in self.asked.words)} read from the same day ({_span(self.asked)})"
        )


def _span(found: DateRange) -> str:
    since, until = found.since.isoformat(), found.until.isoformat()
    return since if since == until else f"{since}..{until}"


def _line_terms(text: str, spans: list[tuple[int, int, str]], weights: dict[str, float]) -> dict[int, set[str]]:
    """line offset → the question's terms on it."""
    newlines = [m.start() for m in _NEWLINE.finditer(text)]
    held: dict[int, set[str]] = {}
    for start, _end, term in spans:
        if term in weights:
            held.setdefault(bisect.bisect_left(newlines, start), set()).add(term)
    return held


def told_lines(
    hits: list[Hit],
    note_days: dict[int, date],
    question: str,
    weights: dict[str, float],
    spans: dict[int, list[tuple[int, int, str]]],
) -> dict[int, Told]:
    """chunk id → its told line, for the ``hits`` (with their ``note_days``) that have one.

    Of a chunk's lines that hold a question term and whose date words name days inside the question's (other
    than the note's own day, which the ``@date`` lists read), the one whose
    terms weigh most (``weights``: each term's weight, as the focus weighs them) is told, the first of equals,
    when they weigh at least :data:`LINE_SHARE` of the chunk's best line's.  ``spans`` (chunk id → its term
    spans, :func:`token_spans`) is read and filled: the focus reads the same.
    """
    asked: dict[date, DateRange | None] = {}
    told: dict[int, Told] = {}
    for hit in hits:
        day = note_days.get(hit.chunk_id)
        lower = hit.text.lower()
        if day is None or not MAY_NAME_DAYS.search(lower):
            continue
        if day not in asked:
            asked[day] = find_dates(question, day)[0]
        question_days = asked[day]
        if question_days is None:
            continue
        # "recently" alone reaches a month back, where nearly every line of a chat says some day: a line is
        # told of it when it says so itself ("we recently adopted", "lately I've been running")
        vague = all(LATELY.fullmatch(word) for word in question_days.words)
        if hit.chunk_id not in spans:
            spans[hit.chunk_id] = token_spans(hit.text)
        weighed = {
            offset: (sum(weights[t] for t in held), held)
            for offset, held in _line_terms(hit.text, spans[hit.chunk_id], weights).items()
        }
        # a line holding only a word every turn has (the speaker's name) is not the chunk's answer
        least = LINE_SHARE * max((weight for weight, _ in weighed.values()), default=0.0)
        lines, lowered = hit.text.split("\n"), lower.split("\n")
        best: Told | None = None
        for offset, (weight, held) in sorted(weighed.items(), key=lambda item: (-item[1][0], item[0])):
            if weight <= 0 or weight < least or (best is not None and weight < best.weight):
                break  # the heaviest lines first: the first told one of them is the chunk's
            if offset >= len(lines) or lines[offset].startswith("#") or not MAY_NAME_DAYS.search(lowered[offset]):
                continue  # a heading dates the note: the @date lists read it
            said = find_dates(lines[offset], day)[0]
            if said is None or said.since < question_days.since or said.until > question_days.until:
                continue  # told of days inside the question's ("October / September" is not "early September")
            if said.since == said.until == day:
                continue  # "today", its own date: the note's day, which the @date lists read
            if vague and not any(LATELY.fullmatch(word) for word in said.words):
                continue
            best = Told(offset, frozenset(held), weight, said, question_days)
            break
        if best is not None:
            told[hit.chunk_id] = best
    return told
