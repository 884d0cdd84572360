"""How likely a search result is the passage that answers: one 0-1 scale for fts, vectors and their fusion.

Why: a result's fused score (reciprocal ranks summed over lists) says only how it
placed among this query's candidates, and a cosine is on the model's own scale,
where Chinese questions sit higher whatever they ask (layers/local/models/vectors.py).
Neither lets ``--min-score 0.5`` mean the same thing in two memories.  The
*confidence* of a result is a logistic model of "this is the passage the answer
is in" over what the search knows of it: its place in the answer, whether it
holds every term of the question, and, when the query vector comes from the
measured e5 model, its cosine with the question and the question's script.

Fitted by ``bench/bench_calibration.py`` on ``bench/recall_set`` only: its
questions against their own memory, and against the chat set's memory (results
that cannot be the answer, so the scale also knows a memory without one).  The
set nobody tuned on (``bench/recall_set_untuned``) checks it; the figures, and
what a ``--min-score`` keeps on each set, are in docs/facts.md ("Confidence of L3 results").
"""

from __future__ import annotations

import math
import re

#: Coefficients with the e5 cosine (hybrid or vector search with the local model).
WITH_COSINE: dict[str, float] = {
    "bias": -1.262,
    "log_rank": -1.813,
    "full_match": 1.516,
    "cosine": 0.949,
    "cosine_zh": 2.547,
    "zh": -1.771,
}
#: Coefficients without a measured cosine: full-text search, a chunk not yet embedded, another embedder.
LEXICAL: dict[str, float] = {"bias": -1.155, "log_rank": -1.410, "full_match": 1.806}
#: The cosine enters as (cosine - COSINE_CENTRE) / COSINE_STEP: e5's unrelated pairs sit near 0.75, related near 0.85.
COSINE_CENTRE = 0.8
COSINE_STEP = 0.1
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def is_chinese(question: str) -> bool:
    """Whether the question has Chinese characters (their cosines run higher: :data:`WITH_COSINE`'s ``zh``)."""
    return bool(_CJK.search(question))


def features(rank: int, full_match: bool, cosine: float | None, chinese: bool) -> dict[str, float]:
    """What the model reads of one result (``cosine`` None: the lexical model's features only)."""
    out = {"bias": 1.0, "log_rank": math.log(max(1, rank)), "full_match": 1.0 if full_match else 0.0}
    if cosine is not None:
        centred = (cosine - COSINE_CENTRE) / COSINE_STEP
        zh = 1.0 if chinese else 0.0
        out.update(cosine=centred, cosine_zh=centred * zh, zh=zh)
    return out


def confidence(rank: int, full_match: bool, cosine: float | None, chinese: bool) -> float:
    """The chance (0-1) that the result at ``rank`` (1: first) of an answer is the passage that answers.

    ``full_match``: it holds every term of the question (the lexical list that required them all
    found it); ``cosine``: the e5 model's cosine of the question with its best passage, None when
    there is none to trust (no vector, or a model this was not fitted on).
    """
    coefficients = LEXICAL if cosine is None else WITH_COSINE
    logit = sum(coefficients[name] * value for name, value in features(rank, full_match, cosine, chinese).items())
    return 1.0 / (1.0 + math.exp(-logit))
