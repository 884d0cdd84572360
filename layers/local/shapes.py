"""What L3 hands out as plain dicts: a search's answer and an index's statistics.

Defined once, here: :meth:`layers.local.ranking.hybrid_search.SearchAnswer.to_dict` and
:meth:`layers.local.storage.index.LocalIndex.stats` build them, and the daemon's
contracts (daemon/common/contracts.py) extend them with what the daemon adds.
Standard library only: the daemon's front imports the contracts, and must not
pay for the index's libraries.
"""

from __future__ import annotations

from typing import TypedDict

# The days a query named, and the words they were read from ("from" is a keyword, hence the functional form).
NamedDays = TypedDict("NamedDays", {"since": str, "until": str, "from": list[str], "reference": str})


class LocalHit(TypedDict, total=False):
    """One L3 result; ``ranks`` only when the search was asked to explain itself."""

    text: str
    snippet: str
    score: float
    source: str  # "local"
    path: str
    lines: list[int]  # the chunk's first and last line
    heading: str | None
    focus: list[int] | None  # the line holding the query's rarest terms (first, last); None when no line has one
    ranks: dict[str, int]  # list name -> the result's rank in it
    passage: list[int]  # the item or paragraph holding the focus line (first, last): what matched
    whole: bool  # a max_tokens answer: the text is the whole section (else only the passage)
    superseded_by: str  # a question about the present: the newer note's line (file:line) stating this anew
    relevance: float | None  # with a threshold or explain: the calibrated cosine with the query (None: no vector)
    confidence: float  # the chance (0-1) that this is the passage that answers (layers/local/ranking/calibration.py)
    cosine: float  # with explain, when the query had a vector: the model's cosine with the result's best passage


class Budget(TypedDict):
    """How a ``max_tokens`` answer spent its budget (layers/local/ranking/budget.py)."""

    max_tokens: int
    used: int  # estimated tokens of what the results hold (text, heading, path)
    whole: int  # results given as their whole section
    left_out: int  # results that did not fit


class Embedded(TypedDict):
    """How much of the index the vector lists could search: a first index is searched while it is embedded."""

    chunks: int
    with_vectors: int


class SearchAnswer(TypedDict):
    """A search's answer: its results, and how they were found."""

    query: str
    mode: str
    results: list[LocalHit]
    relaxed: bool  # no chunk had every term: the lexical list matched any of them
    vectors: str  # "used", or "unavailable: why"
    lists: list[str]  # the ranked lists that contributed
    dates: NamedDays | None  # the day range the query named
    matched: str | None  # lexical side: "all" terms, "some" (relaxed), "none"; None when not asked
    embedded: Embedded | None  # when vectors were used: how many chunks they covered
    threshold: Threshold | None  # when one was given: how it was applied
    budget: Budget | None  # when max_tokens was given: how the answer spent it
    min_score: MinScore | None  # when one was given: how many results had less confidence
    ranked_newest: int | None  # more chunks held every term than this: BM25 ranked the newest this many


class MinScore(TypedDict):
    """A least confidence asked of an L3 search's results (layers/local/ranking/calibration.py)."""

    value: float
    dropped: int  # results left out


class Threshold(TypedDict):
    """A relevance threshold on an L3 search: the same scale as L4's (layers/local/models/vectors.py)."""

    value: float
    applied: str  # "relevance", or "full matches only: why" (no query vector: nothing to measure)
    dropped: int  # results left out


class IndexStats(TypedDict, total=False):
    """What an index holds (every key optional: the daemon's index report, which extends it, may know none)."""

    files: int
    chunks: int
    last_indexed: float | None  # time.time() of the newest indexed file; None when it holds none
    pending_embeddings: int  # chunks with embedding work left: their vector, or their items' after it
    pending_items: int  # of those, chunks that have their whole vector and wait for their items'
    vectors: int
    identity: str


class RebuildStats(IndexStats, total=False):
    """What a rebuild made (:func:`layers.local.storage.index.rebuild`): the new index's statistics, and how."""

    files_indexed: int
    vectors_reused: int  # vectors carried over from the old file (chunks whose text did not change)
    seconds: float
