"""Consolidation's thresholds against the real embedder: every measured pair measured again.

The pairs and their cosines live in layers/conversation/consolidation/thresholds.py; this embeds each pair
with the store's model (multilingual-e5-small through llama.cpp) and checks that the figures
still hold and that the threshold with the guard folds every duplicate and no distinct fact.
"""

from __future__ import annotations

import numpy as np
import pytest

from layers.conversation.consolidation import thresholds as calibration
from layers.conversation.consolidation.sameness import distinct_reason, normalised

TOLERANCE = 0.01  # a rebuilt model or another llama.cpp may move the third decimal


def cosines(embedder, pairs) -> list[float]:
    left = embedder.embed_passages([p.a for p in pairs])
    right = embedder.embed_passages([p.b for p in pairs])
    left = left / np.linalg.norm(left, axis=1, keepdims=True)
    right = right / np.linalg.norm(right, axis=1, keepdims=True)
    return [float(x) for x in (left * right).sum(axis=1)]


@pytest.mark.parametrize("kind", ["DUPLICATES", "DISTINCT", "TASK_TOPICS"])
def test_each_recorded_cosine_is_what_the_model_measures(embedder, kind):
    pairs = getattr(calibration, kind)
    measured = cosines(embedder, pairs)
    off = [
        (p.a, p.b, p.cosine, round(m, 3)) for p, m in zip(pairs, measured, strict=True) if abs(p.cosine - m) > TOLERANCE
    ]
    assert not off, f"recorded vs measured: {off}"


def test_every_duplicate_is_folded(embedder):
    for pair, cosine in zip(calibration.DUPLICATES, cosines(embedder, calibration.DUPLICATES), strict=True):
        assert cosine >= calibration.NEAR_THRESHOLD, pair
        assert distinct_reason(pair.a, pair.b) is None, pair


def test_no_distinct_fact_is_folded_though_most_score_above_the_threshold(embedder):
    measured = cosines(embedder, calibration.DISTINCT)
    above = sum(c >= calibration.NEAR_THRESHOLD for c in measured)
    assert above >= len(measured) - 2  # the point of the guard: cosine does not tell them apart
    for pair in calibration.DISTINCT:
        assert normalised(pair.a) != normalised(pair.b)
        assert distinct_reason(pair.a, pair.b) is not None, pair


def test_task_topic_threshold_groups_no_two_tasks(embedder):
    measured = cosines(embedder, calibration.TASK_TOPICS)
    for pair, cosine in zip(calibration.TASK_TOPICS, measured, strict=True):
        if not pair.same_task:
            assert cosine < calibration.TASK_TOPIC_THRESHOLD, pair
    grouped = [
        c >= calibration.TASK_TOPIC_THRESHOLD
        for p, c in zip(calibration.TASK_TOPICS, measured, strict=True)
        if p.same_task
    ]
    assert sum(grouped) >= len(grouped) - 1
