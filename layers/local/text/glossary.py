"""What a memory defines: its hosts, people, services and named events, read off its own list items.

Why (issue 24): a question often *describes* what a note *names* — "the A100 training box" for the
host a note calls ``moth``, "里斯本那位同事" for the colleague named once with her city, "the week
before the migration" for a week the notes never call that.  The memory says what each name means,
in the curated files an agent keeps (MEMORY.md, the core files), as definition items:

    - moth — 4×A100 80GB SXM, 512 GB RAM, our training box. IP 10.88.1.11.
    - 周岚 Zhou Lan — 组长, Hangzhou 滨江 office.
    - gw-01 (10.0.1.1)：入口网关，nginx + certbot。
    - the migration / 机房搬迁 — moth and otter moved to 萧山 IDC on 2026-08-08.

An item that lists roles and who holds them, in clauses ("数据库：王磊（DBA）。安全审计：Tom Becker。",
"Database: Wang Lei. Security audit: Tom Becker."), defines each holder by the role: the question
says "the security auditor", the notes say "Tom".  Two such clauses at least, each holder a person's name.

An item is a definition when it starts with a short name part (at most :data:`MAX_NAME_WORDS`
words, not a date) followed by a dash, an en or em dash or a colon.  Its names are the parts
separated by ``/``, ``、`` or a comma, a bracketed alias, the Latin and Chinese halves of a
bilingual name, the first word of a person's name written in Latin letters ("Ana" of "Ana
Ferreira": how notes call her), and a former name the item gives ("Named otter before the
migration", 原名 …); its description is the rest of the line.  An event is a definition whose
line holds one ISO date.

:meth:`Glossary.described` ranks the definitions whose descriptions hold a question's words (each
word weighs by how few definitions hold it), so a search can look for the names as well;
:meth:`Glossary.event_days` turns an event a question names, with "the week before", "第二天",
"后的第一个工作日", into the days it means.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

from layers.local.text.query import STOPWORDS_ZH
from layers.local.text.tokenizer import terms, token_string

MAX_NAME_WORDS = 5
MAX_NAME_CHARS = 60
MIN_SCORE = 3.0  # one word that only one of 20 definitions holds, or two that a few hold
CLEAR_LEAD = 1.25  # the best definition must lead the next by this factor to be the one meant
MAX_SHARE = 0.25  # a word in more of the definitions than this tells none of them apart
_DEFINITION = re.compile(
    rf"^\s*[-*+]\s+(?P<head>[^\n]{{1,{MAX_NAME_CHARS}}}?)\s*(?:\s[—–-]\s|：|:\s)\s*(?P<body>\S.*)$"
)
# a clause of a roles item ("安全审计：Tom Becker", "数据库：王磊（DBA）"): the role, a colon, a person's name
# (two to four Han characters, or one to three capitalised words) with perhaps a bracketed note.  Only a
# person: "moth: GPU box. IP: 10.88.1.11." is a host's definition, not two roles.
_ROLE_CLAUSE = re.compile(
    r"^(?P<role>[^:：]{1,40}?)\s*[:：]\s*"
    r"(?P<who>(?:[\u4e00-\u9fff]{2,4}|[A-Z][a-z]+(?: [A-Z][a-z]+){0,2})\s*(?:[(（][^()（）]{1,20}[)）])?)$"
)
_CLAUSES = re.compile(r"\s*(?:。|；|;\s|\.\s)\s*")
_ISO_DAY = re.compile(r"\b(20\d\d)-(\d\d)-(\d\d)\b")
_BRACKETED = re.compile(r"[(（]([^()（）]{1,40})[)）]")
_SPLIT = re.compile(r"\s*(?:/|、|,|，)\s*")
_HAN = re.compile(r"[\u4e00-\u9fff]+")
_HAN_CHAR = re.compile(r"[\u4e00-\u9fff]")
_LATIN = re.compile(r"[A-Za-z][A-Za-z0-9 ._'-]*[A-Za-z0-9]|[A-Za-z]")
_MARKUP = re.compile(r"[*`_]")
# A person's name as notes write it (two or three capitalised words): its first word is how they are called.
_PERSON = re.compile(r"([A-Z][a-z]{2,}) [A-Z][a-z]+(?: [A-Z][a-z]+)?$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_CONTINUATION = re.compile(r"^\s+\S")
# A former name: "named otter before", "formerly otter", "renamed from otter", "previously called otter",
# 原名 otter, 以前叫 otter, 旧名 otter (one word or one run of Han characters).
_FORMER = re.compile(
    r"\b(?:named|called|known as)\s+`?([\w.-]+)`?\s+(?:before|until|earlier|previously)\b"
    r"|\b(?:formerly|previously|once)\s+(?:named\s+|called\s+|known as\s+)?`?([\w.-]+)"
    r"|\brenamed from\s+`?([\w.-]+)"
    r"|(?:原名|以前叫|之前叫|旧名|曾用名)[：:\s]*`?([\w.-]+|[\u4e00-\u9fff]{1,6})",
    re.IGNORECASE,
)
# Words that say where an event's days lie relative to it, with the days they mean.
_WEEK_BEFORE = re.compile(r"\bweek before\b|前一周|前一个?星期|之前一周|前的那一?周|前一週", re.IGNORECASE)
_WEEK_AFTER = re.compile(r"\bweek after\b|后一周|之后一周|后的那一?周|后一个?星期", re.IGNORECASE)
_DAY_BEFORE = re.compile(r"\bday before\b|\beve of\b|前一天|前一日", re.IGNORECASE)
_DAY_AFTER = re.compile(r"\b(?:day after|next day|following day)\b|第二天|次日|后一天|第二日", re.IGNORECASE)
_WORKDAY_AFTER = re.compile(r"\bfirst (?:working|work|business) day\b|第一个工作日|首个工作日", re.IGNORECASE)
_BEFORE = re.compile(r"\b(?:before|ahead of|leading up to)\b|之前|以前|前夕", re.IGNORECASE)
_AFTER = re.compile(r"\b(?:after|since|following)\b|之后|以后", re.IGNORECASE)
_FUNCTION_WORDS = frozenset(STOPWORDS_ZH)
# A question about a person: only such a question means the holder of a role its words describe ("负责网络的同事",
# "who handles security audits"); "how many database connections" is about the database, not its DBA.
_ABOUT_A_PERSON = re.compile(
    r"\b(?:who|whom|whose|colleague|owner|owns|lead|responsible|in charge|handles?|person|she|he|her|him)\b"
    r"|谁|负责|同事|那位|的人",
    re.IGNORECASE,
)
KEPT_GLOSSARIES = 16  # one per agent's index searched lately
NEAR_DAYS = 7  # "before the migration" / "after the migration": the week on that side of it


@dataclass(frozen=True)
class Definition:
    names: tuple[str, ...]
    description: str
    path: str
    line: int
    day: date | None  # an event's day: the one ISO date its line holds
    role: bool = False  # a person defined by what they do (a roles item): pointed at by a question about a person


def _names(head: str) -> tuple[str, ...]:
    head = _MARKUP.sub("", head).strip()
    found: list[str] = [alias.strip() for alias in _BRACKETED.findall(head)]
    bare = _BRACKETED.sub(" ", head)
    for part in _SPLIT.split(bare):
        part = part.strip()
        if not part:
            continue
        found.append(part)
        han, latin = _HAN.findall(part), _LATIN.findall(part)
        if han and latin:  # "周岚 Zhou Lan": each half names her
            found.extend([*han, *(w.strip() for w in latin)])
        if not han and (person := _PERSON.match(part)):  # "Ana Ferreira": notes say "Ana"
            found.append(person.group(1))
    names = []
    for name in found:
        name = re.sub(r"^(?:the|a|an)\s+", "", name.strip(), flags=re.IGNORECASE)
        if name and terms(name) and name not in names:
            names.append(name)
    return tuple(names)


def _former_names(description: str) -> list[str]:
    """The names ``description`` says the thing had before ("Named otter before the migration", "formerly
    gw-01", "原名 otter"): a note written then uses them (issue 24: a glossary's aliases)."""
    found = ("".join(groups).strip(".,;:，。；：") for groups in _FORMER.findall(description))
    return [name for name in found if name and terms(name)]


def _continued(lines: list[str], start: int) -> str:
    """The lines after ``start`` that continue its list item (indented, not an item of their own), joined."""
    more = []
    for line in lines[start + 1 :]:
        if not _CONTINUATION.match(line) or _ITEM.match(line):
            break
        more.append(line.strip())
    return " ".join(more)


def _holders(line: str, path: str, line_no: int) -> list[Definition] | None:
    """The definitions of a roles item (each holder defined by the role), or None when ``line`` is not one."""
    clauses = [c for c in _CLAUSES.split(_ITEM.sub("", line, count=1).strip().rstrip("。.;；")) if c]
    if len(clauses) < 2:
        return None
    found = []
    for clause in clauses:
        match = _ROLE_CLAUSE.match(clause)
        if match is None:
            return None
        names = _names(match.group("who"))
        if not names:
            return None
        found.append(Definition(names, match.group("role").strip(), path, line_no, None, role=True))
    return found


def definitions(path: str, first_line: int, text: str) -> list[Definition]:
    """The definition items of a chunk of ``path`` whose first line is ``first_line``.

    A former name anywhere in the item, its indented continuation lines included ("Named otter before
    the migration"), is one more name: notes written before a rename use it.  The description that
    questions are matched against stays the item's first line (with the continuation lines too, the
    tuned set's ranking moved both ways and the blind set's total did not: docs/facts.md)."""
    found = []
    lines = text.split("\n")
    for offset, line in enumerate(lines):
        if _ITEM.match(line) and (holders := _holders(line, path, first_line + offset)) is not None:
            found.extend(holders)
            continue
        match = _DEFINITION.match(line)
        if match is None:
            continue
        head, body = match.group("head"), match.group("body")
        if len(head.split()) > MAX_NAME_WORDS or _ISO_DAY.search(head) or not re.search(r"[^\W\d_]", head):
            continue
        names = _names(head)
        if not names:
            continue
        days = {date(int(y), int(m), int(d)) for y, m, d in _ISO_DAY.findall(body) if 1 <= int(m) <= 12}
        whole = f"{body.strip()} {_continued(lines, offset)}".strip()
        names = tuple(dict.fromkeys([*names, *_former_names(whole)]))
        found.append(Definition(names, body.strip(), path, first_line + offset, days.pop() if len(days) == 1 else None))
    return found


def _next_workday(day: date) -> date:
    day += timedelta(days=1)
    while day.weekday() >= 5:
        day += timedelta(days=1)
    return day


class Glossary:
    def __init__(self, items: Iterable[Definition]) -> None:
        self.items = list(items)
        self._streams = [f" {token_string(d.description)} " for d in self.items]
        self._names = [[token_string(n) for n in d.names] for d in self.items]  # each name as index terms

    def __len__(self) -> int:
        return len(self.items)

    @staticmethod
    def of_chunks(chunks: Iterable[tuple[str, int, str]]) -> Glossary:
        """The definitions of ``chunks`` ((path, first line, text), as :meth:`LocalIndex.curated_chunks` gives).

        Kept for the same chunks (:data:`KEPT_GLOSSARIES` of them): every search reads MEMORY.md's
        chunks, which seldom change, and 1,000 definitions take ~12 ms to read where a lookup of the
        same texts takes well under one."""
        return _glossary_of(tuple(chunks))

    def bridge(self, phrases: Iterable[str], question: str) -> Definition | None:
        """The one definition a question describes without naming it: the best of :meth:`described`
        when it is clearly the best (:data:`CLEAR_LEAD` times the next one's score), else None."""
        ranked = self.described(phrases, question)
        if not ranked or (len(ranked) > 1 and ranked[0][1] < CLEAR_LEAD * ranked[1][1]):
            return None
        return ranked[0][0]

    def described(self, phrases: Iterable[str], question: str) -> list[tuple[Definition, float]]:
        """The definitions whose descriptions hold the question's ``phrases`` (index terms), best first,
        each with its score (the sum of log(1 / share) of the phrases it holds), at least :data:`MIN_SCORE`.
        A definition the question already names is left out: nothing to bridge."""
        count = len(self.items)
        if count == 0:
            return []
        asked = f" {token_string(question)} "
        # a name the question says is what it is about, not a description of another thing: "moth 上的 NVIDIA
        # 驱动" is about moth even though the migration's description holds "moth" too
        named = {term for names in self._names for n in names if f" {n} " in asked for term in n.split(" ")}
        # one Chinese character alone is part of a word, not one (上 of "moth 上的" is not 上 of 上海): the
        # question's pairs of characters stand for its Chinese words instead (成都 of "成都那家公司")
        pairs = [
            f"{run[i]} {run[i + 1]}"
            for run in _HAN.findall(question)
            for i in range(len(run) - 1)
            if run[i : i + 2] not in _FUNCTION_WORDS  # 之前 of "哪个日期之前" describes nothing
        ]
        wanted = [
            p
            for p in dict.fromkeys([*phrases, *pairs])
            if p and not set(p.split(" ")) <= named and not _HAN_CHAR.fullmatch(p)
        ]
        person = bool(_ABOUT_A_PERSON.search(question))
        open_ = [i for i, item in enumerate(self.items) if person or not item.role]
        holders = {p: [i for i in open_ if f" {p} " in self._streams[i]] for p in wanted}
        scores: dict[int, float] = {}
        for where in holders.values():
            if not where or len(where) > max(1, MAX_SHARE * count):
                continue
            for i in where:
                scores[i] = scores.get(i, 0.0) + math.log(count / len(where))
        if person:  # that the question asks after a person is one more word a role's holder shares with it
            roles = [i for i, item in enumerate(self.items) if item.role]
            for i in roles:
                if i in scores:
                    scores[i] += math.log(count / len(roles))
        ranked = [
            (self.items[i], score)
            for i, score in sorted(scores.items(), key=lambda kv: -kv[1])
            if score >= MIN_SCORE and not any(f" {n} " in asked for n in self._names[i])
        ]
        return ranked

    def event_days(self, question: str) -> tuple[tuple[date, date], str] | None:
        """The days a question means by an event the memory names ("the week before the migration",
        "停电第二天"), and the event's name as the question said it; None when it names none."""
        asked = f" {token_string(question)} "
        for item in self.items:
            if item.day is None:
                continue
            for name in item.names:
                if f" {token_string(name)} " in asked or (_HAN.fullmatch(name) and _shares_a_pair(name, question)):
                    return _relative(item.day, question), name
        return None


@functools.lru_cache(maxsize=KEPT_GLOSSARIES)
def _glossary_of(chunks: tuple[tuple[str, int, str], ...]) -> Glossary:
    return Glossary(d for path, line, text in chunks for d in definitions(path, line, text))


def _shares_a_pair(name: str, question: str) -> bool:
    """A Chinese event name said in other words: "搬机房" for 机房搬迁 (a two-character word of it)."""
    return any(name[i : i + 2] in question for i in range(len(name) - 1)) if len(name) > 2 else name in question


def _relative(day: date, question: str) -> tuple[date, date]:
    week = timedelta(days=NEAR_DAYS)
    one = timedelta(days=1)
    if _WEEK_BEFORE.search(question):
        return day - week, day - one
    if _WEEK_AFTER.search(question):
        return day + one, day + week
    if _DAY_BEFORE.search(question):
        return day - one, day - one
    if _WORKDAY_AFTER.search(question):
        nxt = _next_workday(day)
        return nxt, nxt
    if _DAY_AFTER.search(question):
        return day + one, day + one
    if _BEFORE.search(question):
        return day - week, day
    if _AFTER.search(question):
        return day, day + week
    return day, day
