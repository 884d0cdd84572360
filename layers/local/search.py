"""Hybrid recall over one index: BM25 and vectors fused by reciprocal rank.

The answer always says which lists contributed and, when vectors were not used,
why — so "lexical only because the memory gate is closed" never looks like
"the model found nothing".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from layers.local.index import Filters, Hit, LocalIndex
from layers.local.query import highlight, parse_query
from layers.local.vectors import VectorsUnavailableError

RRF_K = 60
MODES = ("auto", "fts", "vector", "hybrid")

#: Embeds a query, or raises :class:`VectorsUnavailableError`.
QueryEmbedder = Callable[[str], np.ndarray]


@dataclass
class SearchAnswer:
    query: str
    mode: str
    results: list[dict] = field(default_factory=list)
    relaxed: bool = False
    vectors: str = "unavailable: vectors are not configured"
    lists: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _fuse(lists: dict[str, list[Hit]], limit: int) -> list[tuple[Hit, float, dict[str, int]]]:
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    hits: dict[int, Hit] = {}
    for name, hit_list in lists.items():
        for rank, hit in enumerate(hit_list, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            ranks.setdefault(hit.chunk_id, {})[name] = rank
            hits.setdefault(hit.chunk_id, hit)
    order = sorted(scores, key=lambda i: -scores[i])[:limit]
    return [(hits[i], scores[i], ranks[i]) for i in order]


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
) -> SearchAnswer:
    """Search ``index``; ``auto`` is hybrid when vectors exist, else full-text.

    ``blocked_reason`` is what the embedder already knows stops it now (a closed
    memory gate): the query is then not even tried against the model.

    Raises :class:`~layers.local.query.EmptyQueryError` for a query with nothing
    searchable, and :class:`VectorsUnavailableError` only when ``mode="vector"``
    was asked for explicitly and cannot be served.
    """
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r} (choose from {', '.join(MODES)})")
    filters = filters or Filters()
    query = parse_query(text)
    answer = SearchAnswer(query=text, mode=mode)
    pool = max(limit * 4, 40)
    lists: dict[str, list[Hit]] = {}

    if mode in ("auto", "hybrid", "vector"):
        reason = ""
        if not index.identity.embed_model:
            reason = "vectors are not configured"
        elif embed_query is None:
            reason = no_embedder_reason
        elif blocked_reason:
            reason = f"{blocked_reason} ({index.pending_count()} chunks waiting to be embedded)"
        elif index.vector_count() == 0:
            reason = f"no chunk has a vector yet ({index.pending_count()} waiting to be embedded)"
        if not reason:
            try:
                lists["vector"] = index.search_vectors(embed_query(text), pool, filters)  # type: ignore[misc]
                answer.vectors = "used"
            except VectorsUnavailableError as exc:
                reason = str(exc)
        if reason:
            answer.vectors = f"unavailable: {reason}"
            if mode == "vector":
                raise VectorsUnavailableError(reason)
    if mode == "fts":
        answer.vectors = "unavailable: " + (
            no_embedder_reason if embed_query is None else "full-text mode was asked for"
        )
    if mode != "vector":
        fts_hits, answer.relaxed = index.search_query(query, pool, filters)
        lists["fts"] = fts_hits

    answer.lists = [name for name, hits in lists.items() if hits]
    if len(lists) == 1:
        ((name, only),) = lists.items()
        fused = [(hit, hit.score, {name: rank}) for rank, hit in enumerate(only[:limit], start=1)]
    else:
        fused = _fuse(lists, limit)
    wanted = query.token_set
    for hit, score, ranks in fused:
        result = {
            "text": hit.text,
            "snippet": highlight(hit.text, wanted),
            "score": round(score, 6),
            "source": "local",
            "path": hit.path,
            "lines": [hit.line_start, hit.line_end],
            "heading": hit.heading,
        }
        if explain:
            result["ranks"] = ranks
        answer.results.append(result)
    return answer
