"""Dates named in a query: the daily files a question is about.

An agent asks "what happened on 2026-09-08", "9月23日出了什么事", "what did we ship
last Tuesday", "上周三", "九月中旬": the answer sits in the daily notes of those
days, whose text seldom repeats the date (it is in the file name and the title).
:func:`find_dates` turns such an expression into a day range, and says which
words it read, so search can boost the notes of that range and leave the date
words out of the lexical query.

Relative expressions (yesterday, last Tuesday, 上周三, this week) count from a
reference day: the newest daily note of the index, which for an agent that
writes every day is today, and for an archive is the last day it describes.
Nothing here guesses a year that is not named: a month or day without one is
the latest such day on or before the reference.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

from layers.common.numerals_dates import MONTHS_EN, WEEKDAYS_EN, WEEKDAYS_ZH, day_number
from protocol.answers import NamedDays

# The tables are layers/common/numerals_dates.py's; here weekdays count from Monday 0 (``date.weekday()``),
# and "sat"/"sun" name days in a question about dates.
_MONTHS_EN = MONTHS_EN
_WEEKDAYS_EN = {name: iso - 1 for name, iso in {**WEEKDAYS_EN, "sat": 6, "sun": 7}.items()}
_WEEKDAYS_ZH = {ch: iso - 1 for ch, iso in WEEKDAYS_ZH.items()}
_ORDINALS_EN = {"first": 1, "second": 2, "third": 3, "fourth": 4, "last": 5}

_MONTH_EN = "|".join(sorted(_MONTHS_EN, key=len, reverse=True))
_WEEKDAY_EN = "|".join(sorted(_WEEKDAYS_EN, key=len, reverse=True))
_NUM_ZH = r"[0-9]{1,2}|[一二两三四五六七八九十〇零]{1,3}"

_ISO = re.compile(r"\b(20\d\d)[-/.](\d{1,2})[-/.](\d{1,2})\b")
_ZH_DAY = re.compile(rf"(?:(20\d\d)年)?({_NUM_ZH})月({_NUM_ZH})[日号]")
_EN_DAY = re.compile(
    rf"\b(?:({_MONTH_EN})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_EN})\b\.?)"
    rf"(?:,?\s+(20\d\d))?\b",
    re.IGNORECASE,
)
_ZH_PART = re.compile(rf"({_NUM_ZH})月(?:份)?(初|上旬|中旬|中|下旬|底|末|第([一二三四1-4])周)?")
_EN_PART = re.compile(
    rf"\b(?:(early|mid|late|end of|beginning of|the (first|second|third|fourth|last) week of)[\s-]+)?({_MONTH_EN})\b"
    r"(?:,?\s+(?:of\s+)?(20\d\d)\b)?",
    re.IGNORECASE,
)
# A season with its year ("the fall of 2022", "summer 2023"): months of the northern seasons.
_EN_SEASON = re.compile(r"\b(?:the\s+)?(spring|summer|fall|autumn|winter)\s+(?:of\s+)?(20\d\d)\b", re.IGNORECASE)
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11), "winter": (12, 14)}
# "lately", "recently": the newest notes, the days up to the reference.
LATELY = _EN_LATELY = re.compile(r"\b(?:lately|recently|these days|(?:the\s+)?most recent(?:ly)?)\b", re.IGNORECASE)
LATELY_DAYS = 30
# "last weekend": the Saturday and Sunday before the reference's week ("this weekend": the week's own; "over the
# weekend": the latest one begun on or before the reference).
_EN_WEEKEND = re.compile(r"\b(last|this|over the) weekend\b", re.IGNORECASE)
_WEEK_OF = re.compile(r"\bweek of\s+")
_WEEK_OF_WORDS = re.compile(r"\b(?:the\s+)?week of\b", re.IGNORECASE)
_EN_RELATIVE = re.compile(
    rf"\b(?:(yesterday|today|the day before yesterday)|(last|this) (week|{_WEEKDAY_EN})|on ({_WEEKDAY_EN}))\b",
    re.IGNORECASE,
)
#: Lower-cased text that may name a day for :func:`find_dates`: a year, the start of a month's or a weekday's name,
#: a relative word, a Chinese date word.  A cheap test before the full reading (a chat chunk is 30 lines, most
#: naming none): word starts in one short alternation, on text already lower-cased (a third of the time the
#: whole names took with IGNORECASE).
MAY_NAME_DAYS = re.compile(
    r"\b(?=[2jfmasondtwyrl])(?:20\d\d|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|mon|tue|wed|thu|fri|sat|sun"
    r"|yesterday|today|recent|lately|these days|week|spring|summer|fall|autumn|winter)|[月周天星礼]"
)
_ZH_RELATIVE = re.compile(r"(前天|昨天|今天|(上|这|本)(?:个)?(?:周|星期|礼拜)([一二三四五六日天])?)")


@dataclass(frozen=True)
class DateRange:
    since: date
    until: date
    words: tuple[str, ...]  # what the query said, as found in it
    reference: date

    def describe(self) -> NamedDays:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "from": list(self.words),
            "reference": self.reference.isoformat(),
        }


def _day(year: int | None, month: int, day: int, reference: date) -> date | None:
    """A day, in the named year or the latest one on or before the reference."""
    try:
        if year:
            return date(year, month, day)
        candidate = date(reference.year, month, day)
        return candidate if candidate <= reference else date(reference.year - 1, month, day)
    except ValueError:
        return None


def _month(month: int, reference: date) -> tuple[int, int]:
    year = reference.year if month <= reference.month else reference.year - 1
    return year, calendar.monthrange(year, month)[1]


def _week(day: date) -> tuple[date, date]:
    start = day - timedelta(days=day.weekday())
    return start, start + timedelta(days=6)


def find_dates(text: str, reference: date) -> tuple[DateRange | None, str]:
    """The day range ``text`` names (None when none) and ``text`` without the words that named it.

    When several expressions are found, the range covers them all.
    """
    days: list[tuple[date, date]] = []
    words: list[str] = []
    rest = text

    def take(match: re.Match, span: tuple[date, date] | None) -> str:
        if span is None:
            return match.group(0)
        days.append(span)
        words.append(match.group(0).strip())
        return " "

    def iso(m: re.Match) -> str:
        d = _day(int(m.group(1)), int(m.group(2)), int(m.group(3)), reference)
        return take(m, (d, d) if d else None)

    def zh_day(m: re.Match) -> str:
        d = _day(int(m.group(1)) if m.group(1) else None, day_number(m.group(2)), day_number(m.group(3)), reference)
        return take(m, (d, d) if d else None)

    def en_day(m: re.Match) -> str:
        month = _MONTHS_EN[(m.group(1) or m.group(4)).lower()]
        d = _day(int(m.group(5)) if m.group(5) else None, month, int(m.group(2) or m.group(3)), reference)
        return take(m, (d, d) if d else None)

    def part(month: int, which: str, ordinal: int | None, named_year: int | None = None) -> tuple[date, date] | None:
        if not 1 <= month <= 12:
            return None
        if named_year:
            year, last = named_year, calendar.monthrange(named_year, month)[1]
        else:
            year, last = _month(month, reference)
        first_day, last_day = 1, last
        if which in ("初", "上旬", "early", "beginning of"):
            last_day = 10
        elif which in ("中旬", "中", "mid"):
            first_day, last_day = 11, 20
        elif which in ("下旬", "底", "末", "late", "end of"):
            first_day = 21
        elif ordinal:
            first_day = min(1 + 7 * (ordinal - 1), last - 6) if ordinal < 5 else last - 6
            last_day = first_day + 6
        return date(year, month, first_day), date(year, month, last_day)

    def zh_part(m: re.Match) -> str:
        which = m.group(2) or ""
        ordinal = day_number(m.group(3)) if m.group(3) else None
        return take(m, part(day_number(m.group(1)), which, ordinal))

    def en_part(m: re.Match) -> str:
        which = (m.group(1) or "").lower()
        ordinal = _ORDINALS_EN[m.group(2).lower()] if m.group(2) else None
        year = int(m.group(4)) if m.group(4) else None
        before = m.string[max(0, m.start() - 8) : m.start()].lower().split()
        if m.group(3).lower() == "may" and not which and not year and before[-1:] not in (["in"], ["during"], ["of"]):
            return m.group(0)  # "may" alone is a verb far more often than a month ("in May", "May 2023" are the month)
        return take(m, part(_MONTHS_EN[m.group(3).lower()], which, ordinal, year))

    def en_season(m: re.Match) -> str:
        first, last = _SEASONS[m.group(1).lower()]
        year = int(m.group(2))
        end_year, end_month = (year + 1, last - 12) if last > 12 else (year, last)
        end = date(end_year, end_month, calendar.monthrange(end_year, end_month)[1])
        return take(m, (date(year, first, 1), end))

    def en_lately(m: re.Match) -> str:
        return take(m, (reference - timedelta(days=LATELY_DAYS), reference))

    def en_weekend(m: re.Match) -> str:
        which = m.group(1).lower()
        passed = which == "last" or (which == "over the" and reference.weekday() < 5)  # the one just past
        start = _week(reference)[0] - timedelta(days=7 if passed else 0)
        return take(m, (start + timedelta(days=5), start + timedelta(days=6)))

    def en_relative(m: re.Match) -> str:
        if m.group(1):
            back = {"today": 0, "yesterday": 1}.get(m.group(1).lower(), 2)
            d = reference - timedelta(days=back)
            return take(m, (d, d))
        if m.group(3) and m.group(3).lower() == "week":
            start, end = _week(reference)
            if m.group(2).lower() == "last":
                start, end = start - timedelta(days=7), end - timedelta(days=7)
            return take(m, (start, min(end, reference)))
        weekday = _WEEKDAYS_EN[(m.group(3) or m.group(4)).lower()]
        back = (reference.weekday() - weekday) % 7
        if back == 0 and (not m.group(2) or m.group(2).lower() == "last"):
            back = back or 7  # "last Tuesday" on a Tuesday is a week ago
        d = reference - timedelta(days=back)
        return take(m, (d, d))

    def zh_relative(m: re.Match) -> str:
        word = m.group(1)
        if word in ("前天", "昨天", "今天"):
            d = reference - timedelta(days={"今天": 0, "昨天": 1, "前天": 2}[word])
            return take(m, (d, d))
        start, end = _week(reference)
        if m.group(2) == "上":
            start, end = start - timedelta(days=7), end - timedelta(days=7)
        if m.group(3):
            d = start + timedelta(days=_WEEKDAYS_ZH[m.group(3)])
            return take(m, (d, d))
        return take(m, (start, min(end, reference)))

    rest = _ISO.sub(iso, rest)
    rest = _ZH_DAY.sub(zh_day, rest)
    rest = _EN_DAY.sub(en_day, rest)
    rest = _ZH_PART.sub(zh_part, rest)
    rest = _EN_SEASON.sub(en_season, rest)
    rest = _EN_PART.sub(en_part, rest)
    if not days:
        # Words relative to the newest note ("lately", "on Saturday", 上周) only where the question names no day
        # of its own: "what had Hannah lately been doing, in May?" asks of May (its "lately" is May's), not of
        # the month before the newest note; the words stay in the question.
        rest = _EN_LATELY.sub(en_lately, rest)
        rest = _EN_WEEKEND.sub(en_weekend, rest)
        rest = _EN_RELATIVE.sub(en_relative, rest)
        rest = _ZH_RELATIVE.sub(zh_relative, rest)
    if not days:
        return None, text
    if _WEEK_OF.search(text) and len(days) == 1 and days[0][0] == days[0][1]:
        days[0] = _week(days[0][0])  # "the week of 2026-09-21"
        words[0] = "week of " + words[0]
        rest = _WEEK_OF_WORDS.sub(" ", rest)
    since = min(d[0] for d in days)
    until = max(d[1] for d in days)
    return DateRange(since, until, tuple(words), reference), re.sub(r"\s+", " ", rest).strip()


_NAME_DAY = re.compile(r"(?<!\d)(20\d\d)[-_.]?(\d\d)[-_.]?(\d\d)(?!\d)")
_TITLE_ZH_DAY = re.compile(r"(20\d\d)年(\d{1,2})月(\d{1,2})[日号]")


def day_named(file_name: str, text: str) -> date | None:
    """The day a note names for itself where its file is not called ``YYYY-MM-DD.md`` (issue 50 item 3):
    a date in its file name (``2026-09-08-migration.md``, ``incident_20260908.md``), else one with its
    year in its title (its first heading: ``# 迁移复盘 2026-09-08``, ``# 2026年9月8日 周会``).  A
    question naming that day then finds the note among the day's files; None when neither names one."""
    found = _NAME_DAY.search(file_name)
    if found is None:
        title = next((line for line in text.split("\n", 20)[:20] if line.startswith("# ")), "")
        found = _ISO.search(title) or _TITLE_ZH_DAY.search(title)
    if found is None:
        return None
    try:
        return date(int(found[1]), int(found[2]), int(found[3]))
    except ValueError:
        return None
