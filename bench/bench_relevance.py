"""Query-to-passage cosines of the local e5 model, related vs unrelated pairs: where L4's relevance scale comes from.

mem0's ``threshold`` (default 0.1; its users pick 0.3-0.7) assumes a score near 0 for an unrelated
memory.  e5's cosines are compressed into a narrow high band (an unrelated query scores ~0.75), so a
raw cosine passes every threshold a mem0 user would pick.  This measures the band per language
(English, Chinese, mixed) for pairs that answer each other and pairs that do not; the figures set
``RELEVANCE_FLOOR``/``RELEVANCE_CEILING`` in layers/local/models/vectors.py (docs/facts.md, "Relevance").

Run: ``.venv/bin/python -m bench.bench_relevance`` (needs the model `make setup` builds).
"""

from __future__ import annotations

import sys

import numpy as np

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.local.models.vectors import LocalEmbedder, relevance

# (topic, query, a memory that answers it), per language.  A memory is related to a query when it is about
# the query's topic (the same fact told in another language counts), unrelated otherwise.
PAIRS = {
    "en": [
        ("movies", "What kind of movies do I love?", "I'm not a big fan of thriller movies but I love sci-fi movies."),
        ("qdrant", "which port does qdrant listen on", "Qdrant is deployed on port 6333 in the infra cluster"),
        ("backup", "when do backups run", "The backup job runs every day at four in the morning"),
        ("tea", "what does Alice drink", "Alice prefers tea over coffee"),
        ("diet", "is the user vegetarian", "The user does not eat meat and prefers vegetarian dishes"),
        ("staging", "where is the staging database", "The staging database moved to db-2.internal, port 6543"),
        ("me", "what do you know about me?", "My name is Alex and I work as a nurse in Boston"),
        ("budget", "who owns the infra budget", "Carol owns the infra budget for 2027"),
    ],
    "zh": [
        ("qdrant", "Qdrant 用的哪个端口", "部署了 Qdrant，端口 6333"),
        ("style", "用户喜欢什么样的回答", "用户喜欢简洁、直接的回答"),
        ("meeting", "会议什么时候开", "周会改到周三下午三点"),
        ("backup", "备份几点执行", "备份任务每天凌晨四点执行"),
        ("oncall", "谁负责值班", "本周五由小王值班"),
        ("migration", "数据库迁移到哪里了", "测试数据库已经迁移到新节点 10.0.0.7"),
        ("allergy", "我对什么过敏", "我对花生过敏，不能吃坚果"),
        ("budget", "项目的预算是多少", "基础设施项目明年的预算是五十万"),
    ],
    "mixed": [
        ("qdrant", "qdrant 端口是多少", "Qdrant is deployed on port 6333 in the infra cluster"),
        ("meeting", "when is the weekly meeting", "周会改到周三下午三点"),
        ("movies", "用户喜欢什么电影", "The user loves sci-fi movies and dislikes thrillers"),
        ("backup", "backup 几点跑", "The backup job runs every day at four in the morning"),
        ("staging", "staging 数据库在哪", "The staging database moved to db-2.internal, port 6543"),
        ("oncall", "who is on call this Friday", "本周五由小王值班"),
        ("tea", "Alice 喝什么", "Alice prefers tea over coffee"),
        ("allergy", "我对什么过敏 allergy", "I am allergic to peanuts"),
    ],
}
# Queries about nothing any memory says.
OFF_TOPIC = [
    "how tall is mount everest",
    "recipe for chocolate cake",
    "今天天气怎么样",
    "怎么学习弹吉他",
    "best football team 2026",
    "火星上有水吗",
]


def measure(embedder) -> dict[str, dict[str, np.ndarray]]:
    """Per language: cosines of related pairs and of unrelated ones (memories of other topics, off-topic queries)."""
    topic_of = {p: t for pairs in PAIRS.values() for t, _, p in pairs}
    passages = sorted(topic_of)
    vectors = embedder.embed_passages(passages)
    out: dict[str, dict[str, np.ndarray]] = {}
    for language, pairs in PAIRS.items():
        related, unrelated = [], []
        for topic, query, _ in pairs:
            scores = vectors @ embedder.embed_query(query)
            for passage, score in zip(passages, scores, strict=True):
                (related if topic_of[passage] == topic else unrelated).append(float(score))
        out[language] = {"related": np.array(related), "unrelated": np.array(unrelated)}
    off = [float(s) for q in OFF_TOPIC for s in vectors @ embedder.embed_query(q)]
    out["off-topic"] = {"related": np.array([]), "unrelated": np.array(off)}
    return out


def main() -> int:
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    figures = measure(embedder)
    print(f"{'set':<10} {'kind':<10} {'n':>4} {'min':>6} {'p50':>6} {'p95':>6} {'max':>6}   relevance p50 / max")
    for language, kinds in figures.items():
        for kind, scores in kinds.items():
            if not len(scores):
                continue
            rel = np.array([relevance(s) for s in scores])
            q = np.percentile(scores, [0, 50, 95, 100])
            print(
                f"{language:<10} {kind:<10} {len(scores):>4} {q[0]:6.3f} {q[1]:6.3f} {q[2]:6.3f} {q[3]:6.3f}"
                f"   {np.median(rel):.2f} / {rel.max():.2f} (min {rel.min():.2f})"
            )
    pooled = {k: np.concatenate([f[k] for f in figures.values()]) for k in ("related", "unrelated")}
    print("\nkept by a threshold on the relevance scale (all sets pooled):")
    for threshold in THRESHOLDS:
        kept = {k: float(np.mean([relevance(s) >= threshold for s in v])) for k, v in pooled.items()}
        print(f"  threshold {threshold:.1f}: related {kept['related']:5.0%}   unrelated {kept['unrelated']:5.0%}")
    return 0


THRESHOLDS = (0.1, 0.3, 0.5, 0.7)

if __name__ == "__main__":
    sys.exit(main())
