"""BM25 as FTS5's ``bm25()`` computes it, with the phrases' document counts given rather than walked.

FTS5's ``bm25()`` counts, at every query, the chunks holding each phrase by walking the phrase's
whole posting list (its IDF).  At 100,000 chunks a word in most of them took ~1.8 ms, and a question
of two such words spent 3-4 ms of its 4.3 ms of ranking there, though only the newest 1,000 matches
were being ranked (:data:`layers.local.storage.index.RANK_NEWEST`).  :func:`sampled_bm25` is the same formula
(fts5_aux.c: k1 1.2, b 0.75, column weights on the term frequency, an IDF of at least 1e-6), whose
IDFs the caller passes in from counts it has already made or sampled
(:meth:`layers.local.storage.index.LocalIndex.phrase_matches`).  Written in Python it costs ~1.7 µs a row
against ~0.5 µs in C, so it pays only when few rows are ranked and the walks are long: the index uses
it for the newest-matches case alone.  Given exact counts it returns the C function's scores (to a
relative 1e-12: tests/layers/local/test_ranking.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import apsw

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6  # fts5_aux.c: a phrase in more than half the rows would otherwise weigh negatively
FUNCTION = "sampled_bm25"


def idf(rows: int, matches: float) -> float:
    """BM25's inverse document frequency of a phrase in ``matches`` of ``rows`` chunks."""
    value = math.log((rows - matches + 0.5) / (matches + 0.5)) if rows else 0.0
    return value if value > 0.0 else MIN_IDF


def idf_argument(rows: int, matches: Sequence[float]) -> str:
    """The IDFs of the expression's phrases, in their order, as the SQL argument of :data:`FUNCTION`."""
    return ",".join(repr(idf(rows, n)) for n in matches)


def register(db: apsw.Connection, heading_weight: float, body_weight: float = 1.0) -> None:
    """Make ``sampled_bm25(table, idfs)`` available on ``db``, for the index's two columns
    (heading, body) weighted as its bm25() call weighs them."""

    def sampled_bm25(api: apsw.FTS5ExtensionApi, *args: apsw.SQLiteValue) -> float:
        (idfs,) = args  # the IDFs, comma-separated (idf_argument)
        prepared = api.aux_data  # per query: the length norm's terms and the IDFs, made on its first row
        if prepared is None:
            average = api.column_total_size(-1) / max(1, api.row_count)
            phrases = tuple(enumerate(float(x) for x in str(idfs).split(",")))
            prepared = api.aux_data = (K1 * (1.0 - B), K1 * B / average, phrases)
        fixed, per_token, phrases = prepared
        norm = fixed + per_token * api.column_size(-1)
        score = 0.0
        for phrase, phrase_idf in phrases:
            heading, body = api.phrase_locations(phrase)
            frequency = heading_weight * len(heading) + body_weight * len(body)
            score += phrase_idf * frequency / (frequency + norm)
        return -score * (K1 + 1.0)

    db.register_fts5_function(FUNCTION, sampled_bm25)
