"""Hybrid recall over one index: BM25 and vectors fused by reciprocal rank.

The answer always says which lists contributed and, when vectors were not used,
why — so "lexical only because the memory gate is closed" never looks like
"the model found nothing".

A query that names days ("2026-09-08", "9月23日", "last Tuesday", see
:mod:`layers.local.text.dates`) adds the same searches again restricted to the daily
files of those days ("fts@date", "vector@date"), so their chunks rise without
hiding the rest (the question may be about a decision taken earlier), and the
date words leave the lexical query.  The answer says which range it read.

A question about the present ("now", "current", "latest", 现在, 目前, 最新, 最近)
wants the newest statement of a fact that changed over time: the best
:data:`RECENT_POOL` results are ranked once more by their note's day, newest
first ("recent"), and that list joins the fusion.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import date, timedelta

import numpy as np

from layers.local.models import companion
from layers.local.models.vectors import VectorsUnavailableError, clamped
from layers.local.ranking.budget import answer_span, fit
from layers.local.ranking.calibration import confidence, is_chinese
from layers.local.ranking.told import Told, told_lines
from layers.local.storage.index import RANK_NEWEST, Filters, Hit, LocalIndex
from layers.local.text.dates import DateRange, find_dates
from layers.local.text.glossary import Glossary
from layers.local.text.query import EmptyQueryError, Query, highlight, parse_query
from layers.local.text.tokenizer import terms, token_spans, token_string
from layers.local.text.units import MAX_ITEMS, has_companion, item_spans
from protocol.answers import Budget, Embedded, LocalHit, MinScore, NamedDays, SearchAnswer, Threshold
from protocol.vocabulary import SEARCH_MODES

# A list's first ranks weigh more than the literature's default of 60 lets them: with up to eight lists, a chunk
# that several lists rank twentieth outscored one that two lists rank first. Measured on the sets tuned on
# (bench/recall_set, 114 questions; bench/recall_set_chat, 186), hybrid R@5 over both at 10/15/20/30/60:
# 280/282/282/280/281 (tuned alone 0.921/0.939/0.939/0.939/0.947, MRR 0.755 at 60, 0.790 at 15), fts R@5
# tuned 0.851/0.842/0.833/0.833/0.833. The blind set (bench/recall_set_untuned) was looked at before this
# was chosen: hybrid R@5 0.849 at 60, 0.905 at 15 (docs/facts.md, "Fusion's k").
RRF_K = 15
# The day order breaks a tie in relevance, it does not outweigh relevance.  A line told of the question's days in
# its note's time (layers/local/ranking/told.py) outweighs the newest notes' lists (fts@date, recent) when the question
# says only "recently": its speaker said so of their own time, which is what a conversation's "recently" asks.
WEIGHTS = {"recent": 1.05, "told": 2.0}
RELAXED_WEIGHT = 0.5  # a relaxed (any-term) list is noisier than one that matched every term
RELAXED_SHARE = 2  # under a budget, a relaxed lexical list's first places handed out in turn with the fusion's
MIN_VECTOR_ONLY = 3  # vector-only results kept below full lexical matches, at least
RECENT_POOL = 10  # how many of the best results a question about the present re-ranks by day
TOLD_POOL = 20  # how many of the best results have their lines read for days told in their note's time
SUBJECT_SHARE = 0.5  # two statements are of one subject when the question's terms on them weigh this much
# A dictionary's translations are guesses (bench/recall_set hybrid R@5 0.947 at 0.5, 0.912 at 1); with
# no vectors beside them they outweigh the question's own words sooner (fts R@5 0.825 at 0.5, 0.833 at 0.25).
TRANSLATED_WEIGHT = 0.5
TRANSLATED_WEIGHT_LEXICAL = 0.25
# The names of what a question describes (layers/local/text/glossary.py): bench/recall_set hybrid R@5 0.939 at
# 0.5, 0.947 at 1 (held-out third 0.943 -> 0.971); fts 0.816 at 0.5, 0.833 at 0-0.25.
ENTITY_WEIGHT = 1.0
ENTITY_WEIGHT_LEXICAL = 0.25
ANY_SHARE = 0.51  # below the full matches, a chunk with more than half of the terms
MIN_ANY_TERMS = 3  # of a query that has this many (with fewer, more than half is all of them)
WIDEN_DAYS = 7  # a named month's lists reach this far into its neighbours
COMMON_SHARE = 0.5  # a query term in more of the chunks than this is neither required nor ORed
MIN_CHUNKS_FOR_SHARES = 20  # below this, shares say nothing about a word
_PRESENT = re.compile(
    r"\b(?:now|nowadays|current(?:ly)?|latest|newest|(?:most )?recent(?:ly)?|lately|these days|still|as of today)\b"
    r"|现在|目前|当前|最新|最近|如今|眼下|此刻",
    re.IGNORECASE,
)
# A question (not a list of keywords) that names no day and asks of no earlier state is about the present
# too: where a value changed, its newest statement answers it (issue 50 item 3: "where is the Redis primary?"
# after the note that moved it).  Only the statements of one subject are reordered (:func:`_supersede`); the
# re-ranking of the best results by day ("recent") stays with the words that say "now".
_ASKS = re.compile(
    r"[?？]|\b(?:what|which|where|who|whose|how|is|are|does|do)\b|什么|哪|谁|多少|几|怎么|如何|吗|呢",
    re.IGNORECASE,
)
_EARLIER = re.compile(
    r"\b(?:before|earlier|originally|at first|initially|first|previous(?:ly)?|former(?:ly)?|old|used to|prior"
    r"|ago|until|when|last time|history)\b"
    r"|以前|之前|原来|原先|最初|起初|当时|曾经|早先|过去|第一次|首次|什么时候|何时|哪天|几号|历史",
    re.IGNORECASE,
)
# Without a word about the present, a newer statement supersedes an older one only when it says it changed
# something: in a chat memory a later line about the same subject is more often another remark on it ("Theo's
# band rehearses ..." months apart: the chat set's c004 fell out of the top 5 when any later line won).
_CHANGED = re.compile(
    r"\b(?:mov(?:e|ed|es|ing)|chang(?:e|ed|es|ing)|switch(?:ed|es|ing)?|migrat(?:e|ed|es|ing)|replac(?:e|ed|es|ing)"
    r"|renam(?:e|ed|es|ing)|upgrad(?:e|ed|es|ing)|downgrad(?:e|ed|es|ing)|now|no longer|instead|anymore|from now on)\b"
    r"|迁|改|换|切到|切换|变成|变为|升级|降级|替换|不再|现在|如今",
    re.IGNORECASE,
)
MODES = SEARCH_MODES  # protocol/vocabulary.py
FUTURE_SLACK_DAYS = 1  # a note dated tomorrow (another time zone's today) still counts; a later day is no "now"
BEFORE_EVERY_NOTE = "0001-01-01"  # the day of a curated file's undated lines when the file names none
_NEWLINE = re.compile("\n")

#: Embeds a query, or raises :class:`VectorsUnavailableError`.
QueryEmbedder = Callable[[str], np.ndarray]


@dataclass
class Answer:
    """What :func:`search` found, as it builds it; :meth:`to_dict` is the form callers send on.

    The keys, and what each means, are :class:`protocol.answers.SearchAnswer`'s.
    """

    query: str
    mode: str
    results: list[LocalHit] = field(default_factory=list)
    relaxed: bool = False
    vectors: str = "unavailable: vectors are not configured"
    lists: list[str] = field(default_factory=list)
    dates: NamedDays | None = None
    matched: str | None = None
    embedded: Embedded | None = None
    threshold: Threshold | None = None
    budget: Budget | None = None
    min_score: MinScore | None = None
    ranked_newest: int | None = None

    def to_dict(self) -> SearchAnswer:
        return {
            "query": self.query,
            "mode": self.mode,
            "results": [LocalHit(**hit) for hit in self.results],
            "relaxed": self.relaxed,
            "vectors": self.vectors,
            "lists": list(self.lists),
            "dates": None if self.dates is None else NamedDays(**self.dates),
            "matched": self.matched,
            "embedded": None if self.embedded is None else Embedded(**self.embedded),
            "threshold": None if self.threshold is None else Threshold(**self.threshold),
            "budget": None if self.budget is None else Budget(**self.budget),
            "min_score": None if self.min_score is None else MinScore(**self.min_score),
            "ranked_newest": self.ranked_newest,
        }


def _fuse(
    lists: dict[str, list[Hit]], limit: int | None, weights: dict[str, float] = WEIGHTS
) -> list[tuple[Hit, float, dict[str, int]]]:
    """Reciprocal-rank fusion of ``lists``: the best ``limit`` (None: every candidate), with each one's ranks."""
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    hits: dict[int, Hit] = {}
    for name, hit_list in lists.items():
        weight = weights.get(name, 1.0)
        for rank, hit in enumerate(hit_list, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight / (RRF_K + rank)
            ranks.setdefault(hit.chunk_id, {})[name] = rank
            hits.setdefault(hit.chunk_id, hit)
    order = sorted(scores, key=lambda i: -scores[i])[:limit]
    return [(hits[i], scores[i], ranks[i]) for i in order]


def _end_with_the_matches(fused: list[tuple[Hit, float, dict[str, int]]]) -> list[tuple[Hit, float, dict[str, int]]]:
    """Where every term matched somewhere, a result only the vectors found must be nearer than a match.

    The vector list always has a full page, however unrelated; below the last
    chunk that has every term, a chunk the model ranks lower than all of them
    is filler (``6333端口``: one hit, then nine template files).
    """
    matched = [ranks for _, _, ranks in fused if _is_match(ranks)]
    worst = max((ranks.get("vector", 0) for ranks in matched), default=0)
    keep = max(worst, MIN_VECTOR_ONLY)
    return [item for item in fused if not _only_vectors(item[2]) or _vector_rank(item[2]) <= keep]


def _keep_the_matches(
    page: list[tuple[Hit, float, dict[str, int]]], fused: list[tuple[Hit, float, dict[str, int]]], limit: int
) -> list[tuple[Hit, float, dict[str, int]]]:
    """Every chunk that has every term stays in the answer: one the cut left below the page takes the place
    of the lowest result only the vectors found.

    Several vector lists (e5 and the companion) give a chunk both of them place
    ahead of one the lexical list alone ranks first, so a page of ``limit`` could
    fill with vector-only results and lose the one note that holds the query's
    rare word, while the answer says ``matched: all``.
    """
    shown = {hit.chunk_id for hit, _, _ in page}
    missing = [item for item in fused if _is_match(item[2]) and item[0].chunk_id not in shown]
    if not missing:
        return page
    page = list(page)
    room = limit - len(page)
    for i in range(len(page) - 1, -1, -1):
        if room >= len(missing):
            break
        if _only_vectors(page[i][2]):
            del page[i]
            room += 1
    return page + missing[:room]  # below every result of the page: their scores are lower


def _waiting_for_vectors(
    index: LocalIndex,
    fused: list[tuple[Hit, float, dict[str, int]]],
    lists: dict[str, list[Hit]],
    weights: dict[str, float],
) -> list[tuple[Hit, float, dict[str, int]]]:
    """Scores of full matches that have no vector yet, as if the vector lists had ranked them as the others did.

    While the embedding worker catches up (a file just written, a fresh index), such
    a chunk can be in no vector list, and reciprocal-rank fusion would rank it below
    any chunk the vector lists merely find near.  The share of its lexical lists is
    scaled up to the weight of every list, so it competes as a chunk that has its
    vectors; once it has them, their ranks count.  Only chunks with every query term
    (not a relaxed list's), and an index whose chunks all have vectors is left as it is.
    """
    # the any-term lists hold no full match by construction: they do not count in a full match's share
    present = {name: weights.get(name, 1.0) for name, hits in lists.items() if hits and not name.startswith("fts:any")}
    lexical = sum(w for name, w in present.items() if not name.startswith("vector"))
    if lexical == 0 or lexical == sum(present.values()) or index.pending_count() == 0:
        return fused
    candidates = (hit.chunk_id for hit, _, ranks in fused if _is_match(ranks) and not _vector_rank(ranks))
    waiting = index.without_vectors(candidates)
    if not waiting:
        return fused
    scale = sum(present.values()) / lexical
    rescored = [(hit, score * scale if hit.chunk_id in waiting else score, ranks) for hit, score, ranks in fused]
    return sorted(rescored, key=lambda item: -item[1])


def _is_match(ranks: dict[str, int]) -> bool:
    return "fts" in ranks or "fts@date" in ranks


def _only_vectors(ranks: dict[str, int]) -> bool:
    return all(name.startswith("vector") for name in ranks)


def _vector_rank(ranks: dict[str, int]) -> int:
    return min((rank for name, rank in ranks.items() if name.startswith("vector")), default=0)


def _date_filters(filters: Filters, found: DateRange) -> Filters | None:
    """``filters`` narrowed to the named days, a month or longer widened by :data:`WIDEN_DAYS` on each side
    (what happened "in May" is often told in a note of early June); None when the two do not overlap."""
    margin = timedelta(days=WIDEN_DAYS if (found.until - found.since).days >= 27 else 0)
    since = max(filter(None, (filters.since, (found.since - margin).isoformat())))
    until = min(filter(None, (filters.until, (found.until + margin).isoformat())))
    return replace(filters, since=since, until=until) if since <= until else None


def _companion_lists(
    index: LocalIndex, text: str, pool: int, filters: Filters, dated: Filters | None
) -> dict[str, list[Hit]]:
    """The companion model's ranking ("vector:use", and "vector:use@date"), its columns after e5's.

    A second model makes other mistakes than e5 (:mod:`layers.local.models.companion`);
    when it cannot run now (package gone, memory gate) the answer simply has e5's list alone.
    """
    try:
        vector = companion.shared().embed([text], threads=1)[0]  # e5's encode has the other core
    except VectorsUnavailableError:
        return {}
    offset = (index.vector_width() or companion.DIM) - companion.DIM  # its columns are the row's last
    return index.vector_lists(vector, pool, _vector_filters("vector:use", filters, dated), offset=offset)


def _in_background(work: Callable[[], np.ndarray]) -> Future[np.ndarray]:
    """``work`` (the query's e5 encode) running on its own thread while the caller does the rest.

    The encode is most of a hybrid search (20-30 ms of a few words on one core of the
    reference host); llama.cpp's C call lets go of the interpreter, so the companion's
    ranking and the lexical lists are made on the other core meanwhile.  Only the
    encode leaves the calling thread: every read of the index stays in it.
    """
    future: Future[np.ndarray] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the caller by result()
            future.set_exception(exc)

    threading.Thread(target=run, name="query-embed", daemon=True).start()
    return future


def _vector_filters(name: str, filters: Filters, dated: Filters | None) -> dict[str, Filters]:
    """A vector list, and its ``@date`` twin when the query names days: one pass of the codes serves both."""
    return {name: filters, **({f"{name}@date": dated} if dated is not None else {})}


def _covers(hit: Hit, terms: set[str]) -> int:
    """How many of the relaxed query's terms (token phrases) occur in the hit's heading path and text."""
    return len(_covered(hit, terms))


def _covered(hit: Hit, terms: set[str]) -> list[str]:
    """The relaxed query's terms (token phrases) that occur in the hit's heading path and text."""
    stream = " " + token_string(f"{hit.heading} {hit.text}") + " "
    return [phrase for phrase in terms if f" {phrase} " in stream]


def _thin_matches_out(
    hits: list[Hit], query: Query, share: float = 0.5, weights: dict[str, float] | None = None
) -> list[Hit]:
    """A relaxed list without the hits that share fewer than half of the question's terms.

    When no chunk has every term, the relaxed retry ORs them, and a hit that
    shares one common word (恢复, 用户, "full") with a six-term question
    still earns its rank's full share in the fusion: down at rank 14 that is
    more than the gap between the vectors' best answers.  With vectors in the
    fusion such a hit is left to them (measured on bench/recall_set: hybrid R@5
    0.90 → 0.92; without vectors the relaxed list is all there is, and it stays).

    With ``weights`` (:func:`_term_weights`) the half is of the terms' weight, as BM25 weighs them: a
    hit holding the two rare words of five ("severance", "Ledgerly"; not "much", "pay", "get") is
    BM25's first and stays (issue 50 item 2; counted, it was left out).
    """
    terms = set(query.optional or query.phrases)
    quoted = set(query.quoted)  # a hit holding every literal the question quoted is never thinned out
    if weights is None:
        need = max(1, math.ceil(len(terms) * share))
        return [hit for hit in hits if _covers(hit, terms) >= need or (quoted and _covers(hit, quoted) == len(quoted))]
    weight = {phrase: sum(weights.get(t, 0.0) for t in phrase.split(" ")) for phrase in terms}
    half = share * sum(weight.values())
    return [
        hit
        for hit in hits
        if sum(weight[p] for p in _covered(hit, terms)) >= half or (quoted and _covers(hit, quoted) == len(quoted))
    ]


def _focus(hit: Hit, weights: dict[str, float], spans: list[tuple[int, int, str]]) -> tuple[int | None, frozenset[str]]:
    """The line of ``hit`` a reader should look at (its offset in the chunk) and the query terms on it.

    It is the line holding the rarest of the query's terms (each term weighs log(1 / its share of the
    chunks), once per line); None when no line holds one.  ``spans`` are the text's term spans
    (:func:`token_spans`), shared with the highlight.  A chunk of a chat note is twenty turns; the
    answer to a question is one of them.
    """
    newlines = [m.start() for m in _NEWLINE.finditer(hit.text)]
    scores: dict[int, float] = {}
    held: dict[int, set[str]] = {}  # line -> the query terms on it
    for start, _end, term in spans:
        weight = weights.get(term)
        if weight is None:
            continue
        line = bisect.bisect_left(newlines, start)
        on_line = held.setdefault(line, set())
        if term not in on_line:
            on_line.add(term)
            scores[line] = scores.get(line, 0.0) + weight
    best = max(scores, key=lambda line: (scores[line], -line), default=None)  # the first of equals
    if best is None or scores[best] <= 0:
        return None, frozenset()
    return best, frozenset(held[best])


_STATED_DAY = re.compile(r"(?<!\d)(20\d\d)-(\d\d)-(\d\d)(?!\d)")


def _stated_days(
    hits: list[Hit],
    days: dict[int, str],
    focus: dict[int, tuple[int | None, frozenset[str]]] | None = None,
    undated: dict[str, str] | None = None,
    latest: str = "9999-12-31",
) -> dict[int, str]:
    """``days`` (chunk id → its daily note's day) with the day an undated chunk states for itself: an ISO
    date on its focus line, else in its heading path (MEMORY.md's ``## 2026-09 迁移`` is not a day;
    ``- 2026-09-10 起 Redis 在 redis02`` is).  A curated statement that gives its day then takes part in
    "the newest statement wins" like a daily note's (issue 50 item 3).  One that gives none takes its
    file's day from ``undated`` (path → day, :func:`_curated_days`) when given, else stays out.  A day
    after ``latest`` is not taken: a note that claims a day years ahead is not the newest statement."""
    stated = {i: day for i, day in days.items() if day <= latest}
    for hit in hits:
        if hit.chunk_id in stated or hit.chunk_id in days:
            continue
        offset = (focus or {}).get(hit.chunk_id, (None, frozenset()))[0]
        for where in (_line_text(hit, offset) if offset is not None else "", hit.heading or ""):
            if (m := _STATED_DAY.search(where)) is not None:
                try:
                    day = date(int(m[1]), int(m[2]), int(m[3])).isoformat()
                except ValueError:
                    continue
                if day <= latest:
                    stated[hit.chunk_id] = day
                break
        if hit.chunk_id not in stated and undated and hit.path in undated:
            stated[hit.chunk_id] = undated[hit.path]
    return stated


def _curated_days(curated: list[tuple[str, int, str]], newest: str) -> dict[str, str]:
    """path → the day an undated line of a curated file (MEMORY.md, the core files) counts as stated: the
    newest ISO day the file itself names up to the newest note's (``newest``; a later one is a plan, not when
    it was written), or :data:`BEFORE_EVERY_NOTE` when it names none.

    Not the file's mtime nor its last commit (L2): a copy, a checkout, a restore or an edit of any other line
    renews those, so they say when the file's bytes were written, not when the line's fact was; the memory's
    own dates are what it says of itself.  A file that was curated after a note names a day at least as new
    (``2026-09-29: SSH password login disabled``) and its undated lines then stand against older notes; a file
    that names no day is background written before the notes (the chat set's ``MEMORY.md``: "as things stand
    at the start"), and a dated note stating its subject anew supersedes it."""
    days: dict[str, str] = {}
    for path, _start, text in curated:
        named = [m[0] for m in _STATED_DAY.finditer(text) if m[0] <= newest and _valid(int(m[1]), int(m[2]), int(m[3]))]
        days[path] = max([days.get(path, BEFORE_EVERY_NOTE), *named])
    return days


def _valid(year: int, month: int, day: int) -> bool:
    try:
        date(year, month, day)
    except ValueError:
        return False
    return True


def _told(
    index: LocalIndex,
    lists: dict[str, list[Hit]],
    text: str,
    weights: dict[str, float],
    pool: int,
    spans: dict[int, list[tuple[int, int, str]]],
) -> dict[int, Told]:
    """The best ``pool`` candidates' told lines (:mod:`layers.local.ranking.told`): each read in its note's time,
    the day of its daily note or an ISO day in its heading path."""
    hits = [hit for hit, _, _ in _fuse(lists, pool)]
    days = {i: date.fromisoformat(d) for i, d in index.days_of(hit.chunk_id for hit in hits).items()}
    for hit in hits:
        if hit.chunk_id not in days and (m := _STATED_DAY.search(hit.heading or "")) is not None:
            try:
                days[hit.chunk_id] = date(int(m[1]), int(m[2]), int(m[3]))
            except ValueError:
                continue
    return told_lines(hits, days, text, weights, spans)


def _nearest_items(
    index: LocalIndex,
    fused: list[tuple[Hit, float, dict[str, int]]],
    focus: dict[int, tuple[int | None, frozenset[str]]],
    vector: np.ndarray,
) -> dict[int, int]:
    """For each result no line of which holds a query term (a chunk the vectors found), the first line of
    the item whose stored vector is nearest the query: its passage, where the first item was a guess."""
    wanted = [hit for hit, _, _ in fused if focus[hit.chunk_id][0] is None]
    if not wanted:
        return {}
    cosines = index.passage_cosines([hit.chunk_id for hit in wanted], vector)
    nearest = {}
    for hit in wanted:
        scores = cosines.get(hit.chunk_id)
        items = item_spans(hit.text)[:MAX_ITEMS]  # the first items have vectors, the whole chunk covers the rest
        if scores is None or len(scores) < 2 or len(scores) != len(items) + 1:  # whole only (or a big index)
            continue
        nearest[hit.chunk_id] = items[int(np.argmax(scores[1:]))][1]
    return nearest


def _line_text(hit: Hit, offset: int) -> str:
    lines = hit.text.split("\n")
    return lines[offset].strip() if offset < len(lines) else ""


def _supersede(
    fused: list[tuple[Hit, float, dict[str, int]]],
    focus: dict[int, tuple[int | None, frozenset[str]]],
    days: dict[int, str],
    weights: dict[str, float],
    changes_only: bool = False,
) -> tuple[list[tuple[Hit, float, dict[str, int]]], dict[int, str]]:
    """For a question about the present: the newest daily note's statement of a subject first, and the
    older statements of it marked ``superseded by <file:line>`` (issue 25).  ``changes_only`` (a question
    that does not say "now"): only where the newest statement says it changed something (:data:`_CHANGED`).

    A statement is a result's focus line; its subject is the question's terms on that line, and two
    statements are of one subject when those terms are the same and weigh at least
    :data:`SUBJECT_SHARE` of the question's.  A statement's day is its note's, or the one it states
    (:func:`_stated_days`); an undated line of MEMORY.md counts as of the newest day the file names, or as
    older than every note when it names none (:func:`_curated_days`).  A line saying the same thing again
    is a repeat, not a change.
    """
    total = sum(weights.values())
    if total <= 0:
        return fused, {}
    groups: dict[frozenset[str], list[tuple[int, Hit, int]]] = {}  # subject -> (position, hit, focus line)
    for position, (hit, _, _) in enumerate(fused):
        offset, subject = focus.get(hit.chunk_id, (None, frozenset()))
        if offset is None or hit.chunk_id not in days or sum(weights[t] for t in subject) < SUBJECT_SHARE * total:
            continue
        groups.setdefault(subject, []).append((position, hit, offset))
    order = list(range(len(fused)))
    marks: dict[int, str] = {}
    for statements in groups.values():
        changes = [s for s in statements if _CHANGED.search(_line_text(s[1], s[2]))] if changes_only else statements
        if not changes:
            continue
        # the newest day's statement (of a change, when asked without "now"), the best ranked of that day
        position, newest, line = max(changes, key=lambda s: (days[s[1].chunk_id], -s[0]))
        current = _line_text(newest, line)
        older = [
            p
            for p, hit, offset in statements
            if days[hit.chunk_id] < days[newest.chunk_id] and _line_text(hit, offset) != current
        ]
        for p in older:
            marks[fused[p][0].chunk_id] = f"{newest.path}:{newest.line_start + line}"
        if older and min(older) < position:  # the current statement takes the place of the first older one
            order.remove(position)
            order.insert(order.index(min(older)), position)
    return [fused[i] for i in order], marks


def _content_terms(query: Query) -> set[str]:
    """The index terms of ``query``'s content words (question words left out)."""
    return {t for p in (*query.required, *query.optional) for t in p.split(" ")}


def _words(terms: set[str]) -> set[str]:
    """The terms that are words (letters and digits): those whose share is looked up.  A Chinese
    character's share would cost a walk over its whole posting list (fts5vocab counts documents by
    reading it), and Chinese search stays as it was: BM25 weighs characters as before."""
    return {t for t in terms if t.isascii()}


def _term_weights(query: Query | None, shares: dict[str, float]) -> dict[str, float]:
    """How much each content term of ``query`` found here tells: log(1 / its share of the chunks) for a
    word, 1 for a character (its share is not looked up)."""
    if query is None:
        return {}
    weights = {t: math.log(1 / max(share, 1e-3)) for t, share in shares.items() if share > 0}
    return {**{t: 1.0 for t in _content_terms(query) if t not in shares}, **weights}


def _without_common(query: Query, shares: dict[str, float], chunks: int) -> Query:
    """``query`` without the terms most of this memory's chunks hold (issue 29).

    A speaker's name is in every turn marker of a chat note, "said" or "time" in
    most of them: required, such a word decides nothing but which chunks are
    left out; ORed, it matches every chunk (BM25 gives it almost no weight, but it
    still admits them all).  Left out, the words that tell the chunks apart decide.
    """
    if chunks < MIN_CHUNKS_FOR_SHARES:
        return query
    phrases = set(query.required) | set(query.optional)
    common = {p for p in phrases if min(shares.get(t, 0.0) for t in p.split(" ")) > COMMON_SHARE}
    return query.without(common) if common else query


def _lexical_lists(
    index: LocalIndex, query: Query, pool: int, filters: Filters, suffix: str = ""
) -> tuple[dict[str, list[Hit]], bool, bool]:
    """The lexical lists for ``query``: "fts" (every term; any term when none has them all: ``relaxed``;
    the newest of too many full matches: ``newest_only``, :meth:`LocalIndex.search_query`),
    "fts:any" beside a short "fts": the other chunks that have some of the terms, and "fts:quoted" when
    no chunk has every term: those holding every literal the question quotes (`max_num_seqs`).

    Requiring every term often leaves two or three chunks, and the one that
    answers may use another word for one of them; below the full matches, the
    any-term list ranks the rest (at the relaxed list's weight, never as a match).
    """
    hits, relaxed, newest_only = index.search_query(query, pool, filters)
    lists = {f"fts{suffix}": hits}
    if query.quoted and (relaxed or not hits):
        # `max_num_seqs`: the chunks holding what the question quotes, whatever else it asks
        lists[f"fts:quoted{suffix}"] = index.search_text(query.all_quoted, pool, filters)
    if hits and not relaxed and len(hits) < pool and len(set(query.optional)) >= MIN_ANY_TERMS:
        full = {hit.chunk_id for hit in hits}
        rest = [hit for hit in index.search_text(query.any_term, pool, filters) if hit.chunk_id not in full]
        if rest:
            lists[f"fts:any{suffix}"] = rest
    return lists, relaxed, newest_only


def _translated_lists(
    index: LocalIndex, translations: list[str], pool: int, filters: Filters, dated: Filters | None
) -> dict[str, list[Hit]]:
    """ "fts:translated": the chunks holding the question's words in the other language, ranked by BM25
    (a translation this memory does not use matches nothing).  The question's own words are left to
    the other lists: ORed in here too they ranked its language's chunks a second time (bench/recall_set
    hybrid R@5 0.930 with them, 0.947 without)."""
    if not translations:
        return {}
    expression = " OR ".join(f'"{p}"' for p in dict.fromkeys(translations))
    lists = {"fts:translated": index.search_text(expression, pool, filters)}
    if dated is not None:
        lists["fts:translated@date"] = index.search_text(expression, pool, dated)
    return {name: hits for name, hits in lists.items() if hits}


def _entity_lists(
    index: LocalIndex,
    glossary: Glossary,
    query: Query,
    translations: list[str],
    text: str,
    pool: int,
    filters: Filters,
    romanize: Callable[[str], str | None] | None = None,
) -> dict[str, list[Hit]]:
    """ "fts:entity": when the question describes a thing the memory defines ("the A100 training box"
    for ``moth``), the chunks that name it and hold the rest of the question's words.  A person named
    in Chinese is looked for as Latin letters write the name too (``romanize``: 李娜, "Li Na")."""
    phrases = [*(query.optional or query.phrases), *query.required, *translations]
    meant = glossary.bridge(phrases, text)
    if meant is None:
        return {}
    described = f" {token_string(meant.description)} "
    spelled = [" ".join(terms(n)) for n in meant.names]
    if romanize is not None:
        spelled += [latin for n in meant.names if (latin := romanize(n))]
    names = " OR ".join(f'"{n}"' for n in dict.fromkeys(spelled))
    rest = " OR ".join(f'"{p}"' for p in dict.fromkeys(phrases) if f" {p} " not in described)
    hits = index.search_text(f"({names}) AND ({rest})", pool, filters) if rest else []
    hits = hits or index.search_text(names, pool, filters)
    return {"fts:entity": hits} if hits else {}


def _cosines(
    index: LocalIndex, fused: list[tuple[Hit, float, dict[str, int]]], lists: dict[str, list[Hit]], vector: np.ndarray
) -> dict[int, float]:
    """e5's cosine of the query with each fused result's best passage: the vector lists' exact scores where they
    have it, the stored vectors for the rest (a lexical result the vectors did not rank; one without a vector
    has none)."""
    known = {hit.chunk_id: hit.score for name in ("vector", "vector@date") for hit in lists.get(name, [])}
    wanted = [hit.chunk_id for hit, _, _ in fused]
    missing = [i for i in wanted if i not in known]
    found = index.cosines(missing, vector) if missing else {}
    return {i: known[i] if i in known else found[i] for i in wanted if i in known or i in found}


def _above(
    fused: list[tuple[Hit, float, dict[str, int]]], threshold: float, relevances: dict[int, float], answer: Answer
) -> tuple[list[tuple[Hit, float, dict[str, int]]], Threshold]:
    """``fused`` without what falls under ``threshold``; an unmeasured result stays as a full match only."""
    full_match = not answer.relaxed and answer.matched == "all"

    def keep(hit: Hit, ranks: dict[str, int]) -> bool:
        if hit.chunk_id in relevances:
            return relevances[hit.chunk_id] >= threshold
        return full_match and any(name in ranks for name in ("fts", "fts@date"))

    kept = [entry for entry in fused if keep(entry[0], entry[2])]
    applied = "relevance" if answer.vectors == "used" else f"full matches only: vectors {answer.vectors}"
    return kept, Threshold(value=threshold, applied=applied, dropped=len(fused) - len(kept))


def _budget_order(
    results: list[LocalHit],
    fused: list[tuple[Hit, float, dict[str, int]]],
    lists: dict[str, list[Hit]],
    matched: str | None,
) -> tuple[list[LocalHit], list[LocalHit]]:
    """A budgeted hybrid answer: its results in the order the budget hands them out, and those that get
    only the room the others leave once they are in and grown (:func:`~layers.local.ranking.budget.fit`).

    A budget holds the first few passages, and full-text alone held more of the answers than hybrid
    (issue 50 item 2; bench/recall_set_chat's dev part, within 200/400 tokens: fts 64.0/76.8, hybrid
    60.8/75.2).  The causes, measured there:

    - Full-text's answer is its few lexical matches, so the room they leave grows their passages, often
      to the turn that answers a few lines below the one repeating the question.  Hybrid's answer goes
      on with results only the vectors found (their lists always run a full page), and the budget spent
      their passages instead.  Such a result, ranked below the lexical places kept here, now waits for
      the room the others leave, unless it is in a list of the days the question names (the vectors'
      pick among that day's notes: "what happened yesterday").
    - Where no chunk has every term (a word no note uses: "houseplant"), the relaxed lexical list weighs
      half and the two vector lists outvote its first places.  Its first two now go in alternately with
      the fusion's: the fusion's first, the lexical first, the fusion's second, the lexical second.
      (Its first place ahead of everything, or more of its places, cost the tuned set's cross-lingual
      questions, whose relaxed matches are single shared words.)

    Where every term matched, the lexical first place is kept (:func:`_lexical_first_kept`) and the
    results only the vectors found below the first lexical match wait.  Where the list is relaxed, those
    below its two places wait unless a vector list ranks them in its first :data:`MIN_VECTOR_ONLY`
    (there the vectors are the stronger side: every one of them waiting gained on both dev parts and
    lost on both held-out thirds, tuned's 74.3/82.9/94.3 -> 65.7/77.1/94.3).  Measured with the relaxed
    list thinned by weight (:func:`_thin_matches_out`), within 200/400/800 tokens, every question: chat
    65.6/78.5/86.0 -> 71.5/80.6/88.2 (fts 69.4/80.1/86.0), tuned 75.4/81.6/95.6 -> 75.4/85.1/97.4.
    """
    if len(results) < 2 or matched not in ("all", "some"):
        return results, []
    ranks = {id(result): entry[2] for result, entry in zip(results, fused, strict=True)}
    if matched == "all":
        order = _lexical_first_kept(results, fused, lists)
        kept = [r for r in order if not _only_vectors(ranks[id(r)])][:1]  # the first lexical match
    else:
        name = "fts@date" if lists.get("fts@date") else "fts"
        lexical = sorted((r for r in results if name in ranks[id(r)]), key=lambda r: ranks[id(r)][name])
        kept = lexical[:RELAXED_SHARE]
        order = _alternate(results, kept)
    if not kept:
        return order, []
    last = max(i for i, r in enumerate(order) if any(r is k for k in kept))
    # relaxed, the lexical side is the weaker: a result a vector list ranks in its first places keeps its place
    placed = 0 if matched == "all" else MIN_VECTOR_ONLY
    waits = [
        i > last
        and _only_vectors(ranks[id(r)])
        and _vector_rank(ranks[id(r)]) > placed
        and not any(list_name.endswith("@date") for list_name in ranks[id(r)])
        for i, r in enumerate(order)
    ]
    return [r for r, w in zip(order, waits, strict=True) if not w], [r for r, w in zip(order, waits, strict=True) if w]


def _alternate(first: list[LocalHit], second: list[LocalHit]) -> list[LocalHit]:
    """``first`` with ``second``'s results taken in turn with its own (first[0], second[0], first[1], ...),
    each result once."""
    order: list[LocalHit] = []
    for i in range(len(first)):
        for result in (first[i], second[i] if i < len(second) else None):
            if result is not None and all(result is not r for r in order):
                order.append(result)
    return order


def _lexical_first_kept(
    results: list[LocalHit], fused: list[tuple[Hit, float, dict[str, int]]], lists: dict[str, list[Hit]]
) -> list[LocalHit]:
    """A budgeted answer's order: the chunk the lexical list ranks first (within the named days when the
    question names some), a match of every term, is handed out first (issue 50 item 2).

    Under a budget only the first few results fit, and the vector lists (e5, the companion, their
    ``@date`` twins) can together outvote a lexical first place and push it past the cut: hybrid was
    below full-text at every budget.  The vectors keep the first place only when they agree on it (the
    result ahead is the first of e5's list and of the companion's, where there is one): then the lexical
    first comes second.  Unbudgeted answers keep the fused order.
    """
    lexical = lists.get("fts@date") or lists.get("fts")
    if not lexical or len(results) < 2:
        return results
    first = lexical[0].chunk_id
    position = next((i for i, (hit, _, _) in enumerate(fused) if hit.chunk_id == first), None)
    if position is None or position == 0 or position >= len(results):
        return results
    vector_firsts = [name for name in ("vector", "vector:use") if lists.get(name)]
    agreed = bool(vector_firsts) and all(fused[0][2].get(name) == 1 for name in vector_firsts)
    to = 1 if agreed else 0
    if position <= to:
        return results
    order = [*results[:to], results[position], *results[to:position], *results[position + 1 :]]
    return order


def _lexical(text: str) -> Query | None:
    try:
        return parse_query(text)
    except EmptyQueryError:
        return None


def search(
    index: LocalIndex,
    text: str,
    *,
    limit: int = 10,
    mode: str = "auto",
    filters: Filters | None = None,
    embed_query: QueryEmbedder | None = None,
    no_embedder_reason: str = "no embedder available",
    blocked_reason: str = "",
    explain: bool = False,
    pause: Callable[[], None] = lambda: None,
    threshold: float | None = None,
    relevance: Callable[[float], float] = clamped,
    translate: Callable[[str], list[str]] | None = None,
    romanize: Callable[[str], str | None] | None = None,
    max_tokens: int | None = None,
    min_score: float | None = None,
    calibrated: bool = False,
) -> Answer:
    """Search ``index``; ``auto`` is hybrid when vectors exist, else full-text.

    ``pause`` is called before each model encode (the query's, the companion's):
    a caller that shares the cores with other searches may make one wait there.

    ``blocked_reason`` is what the embedder already knows stops it now (a closed
    memory gate): the query is then not even tried against the model.

    ``translate`` gives a question's words in the other language (:mod:`layers.local.text.translate`):
    when no chunk has every word of the question, the chunks holding the translations join as the
    "fts:translated" list (where every word matched, the answer is in the question's language; the
    same figures on both dev sets, and a search of ``集群规则`` stays the notes that say it).
    ``romanize`` spells a Chinese person's name in Latin letters (the same dictionary's readings).

    Every result has a ``confidence`` (0-1, :mod:`layers.local.ranking.calibration`): the chance that it is
    the passage that answers, from its place in the answer, whether it holds every term, and the
    query's cosine with it when ``calibrated`` says the query embedder is the model that was fitted
    (the local e5).  ``min_score`` leaves out the results under that confidence; the answer's
    ``min_score`` says how many.

    ``max_tokens`` cuts the answer to that many (estimated) tokens: passages first, whole sections
    where room is left (:mod:`layers.local.ranking.budget`); the answer's ``budget`` says how it was spent.

    ``threshold`` (0-1) leaves out results whose ``relevance`` (the embedder's calibrated map of the
    query's cosine with the chunk, the scale L4's threshold uses) is below it.  A chunk without a
    vector yet stays only as a full lexical match; with no query vector at all, full matches are all
    that stay, and the answer's ``threshold`` says so.

    Raises :class:`~layers.local.text.query.EmptyQueryError` for a query with nothing
    searchable, and :class:`VectorsUnavailableError` only when ``mode="vector"``
    was asked for explicitly and cannot be served.
    """
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r} (choose from {', '.join(MODES)})")
    filters = filters or Filters()
    query = parse_query(text)
    answer = Answer(query=text, mode=mode)
    pool = max(limit * 4, 40)
    lists: dict[str, list[Hit]] = {}
    shares: dict[str, float] = {}  # content term → its share of the chunks, when the lexical side runs
    latest = (date.today() + timedelta(days=FUTURE_SLACK_DAYS)).isoformat()  # no note's day after this is "now"
    newest = index.newest_day(until=latest)
    reference = date.fromisoformat(newest) if newest else date.today()
    found, rest = find_dates(text, reference)
    curated = index.curated_chunks()
    glossary = Glossary.of_chunks(curated)
    if found is None and (event := glossary.event_days(text)) is not None:
        (since, until), name = event  # "the week before the migration": days the memory's own note of it names
        found, rest = DateRange(since, until, (name,), reference), text
    dated = _date_filters(filters, found) if found else None
    lexical = _lexical(rest) if found else query
    if found:
        answer.dates = found.describe()

    vector: np.ndarray | None = None
    encoding: Future[np.ndarray] | None = None  # the query's e5 vector, being made while the lexical side runs
    companion_lists: dict[str, list[Hit]] = {}
    reason = ""
    if mode in ("auto", "hybrid", "vector"):
        if not index.identity.embed_model:
            reason = "vectors are not configured"
        elif embed_query is None:
            reason = no_embedder_reason
        elif blocked_reason:
            reason = f"{blocked_reason} ({index.pending_count()} chunks waiting to be embedded)"
        elif not index.has_vectors():
            reason = f"no chunk has a vector yet ({index.pending_count()} waiting to be embedded)"
        if not reason:
            pause()
            encoding = _in_background(lambda: embed_query(text))  # type: ignore[misc]
            if has_companion(index.identity.embed_model):
                pause()
                companion_lists = _companion_lists(index, text, pool, filters, dated)
    if mode == "fts":
        answer.vectors = "unavailable: " + (
            no_embedder_reason if embed_query is None else "full-text mode was asked for"
        )
    if mode != "vector":
        if lexical is not None:
            chunks, shares = index.term_shares(_words(_content_terms(lexical)))
            lexical = _without_common(lexical, shares, chunks)
            found_lists, answer.relaxed, newest_only = _lexical_lists(index, lexical, pool, filters)
            answer.ranked_newest = RANK_NEWEST if newest_only else None
            lists.update(found_lists)
            if dated is not None:
                lists.update(_lexical_lists(index, lexical, pool, dated, "@date")[0])
            translations: list[str] = []
            if translate is not None and (answer.relaxed or not lists.get("fts")):
                translations = translate(rest if found else text)
                lists.update(_translated_lists(index, translations, pool, filters, dated))
            lists.update(_entity_lists(index, glossary, lexical, translations, text, pool, filters, romanize))
        lexical_hits = lists.get("fts") or lists.get("fts@date")
        answer.matched = "none" if not lexical_hits else "some" if answer.relaxed else "all"
    if encoding is not None:
        try:
            vector = encoding.result()
            # the vector lists first, as when they were made first: the fusion breaks ties in list order
            lists = {
                **index.vector_lists(vector, pool, _vector_filters("vector", filters, dated)),
                **companion_lists,
                **lists,
            }
            answer.vectors = "used"
            answer.embedded = Embedded(chunks=index.chunk_count(), with_vectors=index.embedded_chunks)
        except VectorsUnavailableError as exc:
            reason = str(exc)
    if reason:
        answer.vectors = f"unavailable: {reason}"
        if mode == "vector":
            raise VectorsUnavailableError(reason)
    if mode != "vector" and dated is not None and not lists.get("fts@date"):
        # only the days to go by (nothing the question says is in their notes): their notes, newest first,
        # beside the vectors' pick among them, which ranked another chunk of the day first (bench/recall_set
        # q095, q096, q104: "What happened on 2026-09-08?")
        lists["date"] = index.chunks_of_days(pool, dated)

    present = found is None and bool(_PRESENT.search(text))
    current = present or (found is None and bool(_ASKS.search(text)) and not _EARLIER.search(text))
    told: dict[int, Told] = {}
    spans: dict[int, list[tuple[int, int, str]]] = {}  # chunk id -> its term spans, made once
    if found is not None and mode != "vector" and lists and (term_weights := _term_weights(lexical, shares)):
        told = _told(index, lists, text, term_weights, TOLD_POOL, spans)
        if told:
            lists["told"] = [hit for hit, _, _ in _fuse(lists, pool) if hit.chunk_id in told]
    if present and len(lists) > 0:
        best = [hit for hit, _, _ in _fuse(lists, RECENT_POOL)]
        days = _stated_days(best, index.days_of(hit.chunk_id for hit in best), latest=latest)
        recent = sorted((hit for hit in best if hit.chunk_id in days), key=lambda h: days[h.chunk_id], reverse=True)
        if recent:
            lists["recent"] = recent
    answer.lists = [name for name, hits in lists.items() if hits]
    if not lists:
        fused = []
    elif len(lists) == 1:
        ((name, only),) = lists.items()
        fused = [(hit, hit.score, {name: rank}) for rank, hit in enumerate(only[:limit], start=1)]
    else:
        translated_weight = TRANSLATED_WEIGHT if answer.vectors == "used" else TRANSLATED_WEIGHT_LEXICAL
        weights = {
            **WEIGHTS,
            "fts:any": RELAXED_WEIGHT,
            "fts:any@date": RELAXED_WEIGHT,
            **dict.fromkeys(("fts:translated", "fts:translated@date"), translated_weight),
            "fts:entity": ENTITY_WEIGHT if answer.vectors == "used" else ENTITY_WEIGHT_LEXICAL,
            **({"fts": RELAXED_WEIGHT, "fts@date": RELAXED_WEIGHT} if answer.relaxed else {}),
        }
        if lexical is not None:
            # with vectors, a relaxed list's weak hits are left to them; any-term hits below full matches always
            relaxed = ("fts", "fts@date") if answer.relaxed and answer.vectors == "used" else ()
            for name in relaxed:
                if name in lists:
                    lists[name] = _thin_matches_out(lists[name], lexical, weights=_term_weights(lexical, shares))
            for name in ("fts:any", "fts:any@date"):
                if name in lists:
                    lists[name] = _thin_matches_out(lists[name], lexical, ANY_SHARE)
        every = _fuse(lists, None, weights)  # every candidate, best first
        if answer.vectors == "used" and not answer.relaxed:
            every = _waiting_for_vectors(index, every, lists, weights)
        fused = every[:limit]
        if lists.get("fts") and not answer.relaxed:
            fused = _keep_the_matches(_end_with_the_matches(fused), every, limit)
    cosines: dict[int, float] = {}  # e5's cosine of the query with each result's best passage
    if vector is not None and answer.vectors == "used" and (calibrated or threshold is not None or explain):
        cosines = _cosines(index, fused, lists, vector)
    relevances = {i: relevance(c) for i, c in cosines.items()} if threshold is not None or explain else {}
    if threshold is not None:
        fused, answer.threshold = _above(fused, threshold, relevances, answer)
    weights = _term_weights(lexical, shares)
    # the snippet is drawn around the content words; question words only when there is nothing else
    wanted = frozenset(weights) or query.token_set
    spans = {hit.chunk_id: spans.get(hit.chunk_id) or token_spans(hit.text) for hit, _, _ in fused}
    focus = {hit.chunk_id: _focus(hit, weights, spans[hit.chunk_id]) for hit, _, _ in fused}
    for chunk_id, line in told.items():
        held = focus.get(chunk_id, (None, frozenset()))[1]
        if chunk_id in focus and line.weight >= sum(weights.get(t, 0.0) for t in held):
            focus[chunk_id] = (line.line, line.terms)  # of equal lines, the one told of the question's days
    # A named day's note asked about as a whole answers from its first item, as full-text answers it: the item
    # nearest "what happened" is a guess (the set's three such questions: another item of the right note).
    whole_days = {hit.chunk_id for hit in lists.get("date", [])}
    asked = [entry for entry in fused if entry[0].chunk_id not in whole_days]
    nearest = _nearest_items(index, asked, focus, vector) if vector is not None else {}
    superseded: dict[int, str] = {}
    if current and len(fused) > 1:
        hits = [hit for hit, _, _ in fused]
        undated = _curated_days(curated, newest or latest)
        days = _stated_days(hits, index.days_of(hit.chunk_id for hit in hits), focus, undated, latest)
        # a line told of the question's days answers for them: a later note does not make its "recently" untrue
        untold = {i: d for i, d in days.items() if i not in told}
        fused, superseded = _supersede(fused, focus, untold, weights, changes_only=not present)
    chinese = is_chinese(text)
    for position, (hit, score, ranks) in enumerate(fused, start=1):
        offset = focus[hit.chunk_id][0]
        if offset is None and hit.chunk_id in nearest:
            passage = answer_span(hit.text, nearest[hit.chunk_id], text, "the item nearest the question (vectors)")
        else:
            passage = answer_span(hit.text, offset, text)
        full_match = answer.matched == "all" and _is_match(ranks)
        cosine = cosines.get(hit.chunk_id) if calibrated else None
        result: LocalHit = {
            "text": hit.text,
            "snippet": highlight(hit.text, wanted, spans=spans[hit.chunk_id]),
            "score": round(score, 6),
            "source": "local",
            "path": hit.path,
            "lines": [hit.line_start, hit.line_end],
            "heading": hit.heading,
            "focus": None if offset is None else [hit.line_start + offset, hit.line_start + offset],
            "passage": [hit.line_start + passage[0], hit.line_start + passage[1]],
            "confidence": round(confidence(position, full_match, cosine, chinese), 3),
        }
        if hit.chunk_id in superseded:
            result["superseded_by"] = superseded[hit.chunk_id]
        if explain:
            result["ranks"] = ranks
            result["passage_why"] = passage[2]
            if hit.chunk_id in told:
                result["told"] = told[hit.chunk_id].why(hit.line_start)
        if relevances or threshold is not None:
            result["relevance"] = None if hit.chunk_id not in relevances else round(relevances[hit.chunk_id], 4)
        if explain and hit.chunk_id in cosines:
            result["cosine"] = round(cosines[hit.chunk_id], 4)
        answer.results.append(result)
    later: list[LocalHit] = []  # a budget's results that get only the room the others leave
    if max_tokens is not None and answer.vectors == "used":
        answer.results, later = _budget_order(answer.results, fused, lists, answer.matched)
    if min_score is not None:
        kept = [result for result in answer.results if result["confidence"] >= min_score]
        kept_later = [result for result in later if result["confidence"] >= min_score]
        answer.min_score = MinScore(
            value=min_score, dropped=len(answer.results) + len(later) - len(kept) - len(kept_later)
        )
        answer.results, later = kept, kept_later
    if max_tokens is not None:
        answer.results, answer.budget = fit(answer.results, max_tokens, after=later)
    return answer
