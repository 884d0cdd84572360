"""Cosine of e5 passage vectors for duplicates, paraphrases and unrelated pairs: where the dedup threshold comes from.

The figures calibrate ``conversation.dedup.near_threshold``: run
``.venv/bin/python -m bench.bench_dedup`` and read min/max per kind.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.local.models.vectors import LocalEmbedder

DUPLICATES = [
    ("部署了 Qdrant，端口 6333", "部署了 Qdrant，端口 6333"),
    ("The staging database moved to port 6543", "the staging database moved to port 6543 "),
    ("用户喜欢简洁的回答", "用户喜欢简洁的回答。"),
]
PARAPHRASES = [
    ("部署了 Qdrant，端口 6333", "Qdrant 已经部署好了，用的是 6333 端口"),
    ("The staging database moved to port 6543", "Staging DB now listens on port 6543"),
    ("用户喜欢简洁的回答", "用户偏好简短、直接的回复"),
    ("The backup job runs at four in the morning", "Backups run every day at 4 am"),
    ("Alice prefers tea over coffee", "Alice likes tea more than coffee"),
    ("会议改到周三下午三点", "会议时间调整为星期三 15:00"),
]
# Different facts in nearly the same words: what a near-duplicate threshold must not merge.
DISTINCT = [
    ("paging note 0: the build runs on kestrel", "paging note 1: the build runs on kestrel"),
    ("Qdrant 部署在 6333 端口", "Qdrant 部署在 6334 端口"),
    ("会议改到周三下午三点", "会议改到周四下午三点"),
    ("断网时写入的第 0 条记忆", "断网时写入的第 1 条记忆"),
    ("Alice prefers tea over coffee", "Bob prefers tea over coffee"),
]
UNRELATED = [
    "部署了 Qdrant，端口 6333",
    "The staging database moved to port 6543",
    "用户喜欢简洁的回答",
    "The backup job runs at four in the morning",
    "Alice prefers tea over coffee",
    "会议改到周三下午三点",
    "agent a keeps its scratch notes in the purple notebook",
    "The CI pipeline fails when the cache is cold",
]


def cosines(embedder: LocalEmbedder, pairs: list[tuple[str, str]]) -> list[float]:
    left = embedder.embed_passages([a for a, _ in pairs])
    right = embedder.embed_passages([b for _, b in pairs])
    left = left / np.linalg.norm(left, axis=1, keepdims=True)
    right = right / np.linalg.norm(right, axis=1, keepdims=True)
    return [float(x) for x in (left * right).sum(axis=1)]


def main() -> int:
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    kinds = {
        "duplicate": DUPLICATES,
        "paraphrase": PARAPHRASES,
        "distinct": DISTINCT,
        "unrelated": list(itertools.combinations(UNRELATED, 2)),
    }
    for kind, pairs in kinds.items():
        values = cosines(embedder, pairs)
        print(f"{kind:<11} n={len(values):<3} min {min(values):.4f}  mean {np.mean(values):.4f}  max {max(values):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
