"""Query-to-passage cosines of the local e5 model, related vs unrelated pairs: where the relevance scales come from.

mem0's ``threshold`` (default 0.1; its users pick 0.1-0.5) assumes a score near 0 for an unrelated
memory.  e5's cosines are compressed into a narrow high band (an unrelated query scores ~0.75), so a
raw cosine passes every threshold a mem0 user would pick.  Two measurements:

- the built-in sets below (8 topics per language, each query against every memory): they set L3's
  ``RELEVANCE_FLOOR``/``RELEVANCE_CEILING`` (``memstrata search --threshold``);
- a labelled pair file (``--set tuned``: bench/relevance_pairs_tuned/pairs.yaml, what L4's
  ``PAIR_FLOORS``/``PAIR_SPAN`` were fitted on; ``--set blind``: bench/relevance_pairs_blind, written by
  someone who never saw the calibration, to check it): the cosines per language and what thresholds
  0.1/0.3/0.5/0.7 keep of related and of unrelated pairs, on the old linear scale and on L4's.

Run: ``.venv/bin/python -m bench.bench_relevance [--set tuned|blind]`` (needs the model `make setup` builds).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.local.models.vectors import LocalEmbedder, pair_relevance, relevance

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


PAIR_SETS = {
    "tuned": Path(__file__).resolve().parent / "relevance_pairs_tuned" / "pairs.yaml",
    "blind": Path(__file__).resolve().parent / "relevance_pairs_blind" / "pairs.yaml",
}
THRESHOLDS = (0.1, 0.3, 0.5, 0.7)


def pair_cosines(embedder, pairs: list[dict]) -> list[float]:
    """The cosine of each pair's query with its memory."""
    memories = embedder.embed_passages([p["memory"] for p in pairs])
    return [float(m @ embedder.embed_query(p["query"])) for p, m in zip(pairs, memories, strict=True)]


def keep_rates(pairs: list[dict], scores: list[float], threshold: float) -> tuple[float, float]:
    """The share of related pairs and of unrelated ones whose score is at least ``threshold``."""
    kept = {True: [], False: []}
    for pair, score in zip(pairs, scores, strict=True):
        kept[bool(pair["related"])].append(score >= threshold)
    return float(np.mean(kept[True])), float(np.mean(kept[False]))


def separation(pairs: list[dict], scores: list[float]) -> float:
    """The share of (related, unrelated) pairs of pairs in which the related one scores higher (ties count
    half): the ROC AUC.  No threshold on any monotone scale of ``scores`` can do better than it allows."""
    related = np.array([s for p, s in zip(pairs, scores, strict=True) if p["related"]])
    unrelated = np.array([s for p, s in zip(pairs, scores, strict=True) if not p["related"]])
    above = related[:, None] > unrelated[None, :]
    tied = related[:, None] == unrelated[None, :]
    return float(above.mean() + 0.5 * tied.mean())


def _companion_cosines(pairs: list[dict]) -> dict[int, float] | None:
    """Each pair's cosine on the companion model (layers/local/models/companion.py), None without it."""
    from layers.local.models import companion

    if not companion.available():
        return None
    model = companion.CompanionEmbedder(min_free_mb=0)
    memories = model.embed([p["memory"] for p in pairs])
    queries = model.embed([p["query"] for p in pairs])
    return {id(p): float(m @ q) for p, m, q in zip(pairs, memories, queries, strict=True)}


def _mixed(first: list[float], second: list[float], weight: float) -> list[float]:
    """``weight`` of the first scores and the rest of the second, each z-scored over the pairs given."""
    a, b = np.asarray(first), np.asarray(second)
    return list(weight * (a - a.mean()) / a.std() + (1 - weight) * (b - b.mean()) / b.std())


def main_pairs(name: str) -> int:
    pairs = yaml.safe_load(PAIR_SETS[name].read_text(encoding="utf-8"))
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    cosines = pair_cosines(embedder, pairs)
    by_pair = {id(p): c for p, c in zip(pairs, cosines, strict=True)}
    companion_cosines = _companion_cosines(pairs)
    print(f"{name}: {len(pairs)} pairs ({sum(bool(p['related']) for p in pairs)} related)")
    print(f"{'lang':<5} {'kind':<10} {'n':>4} {'min':>6} {'p5':>6} {'p50':>6} {'p95':>6} {'max':>6}")
    for lang in sorted({p["lang"] for p in pairs}):
        for related in (True, False):
            c = [x for p, x in zip(pairs, cosines, strict=True) if p["lang"] == lang and bool(p["related"]) == related]
            if c:
                q = np.percentile(c, [0, 5, 50, 95, 100])
                kind = "related" if related else "unrelated"
                print(f"{lang:<5} {kind:<10} {len(c):>4} " + " ".join(f"{v:6.3f}" for v in q))
        mine = [p for p in pairs if p["lang"] == lang]
        line = f"{lang:<5} separation (AUC): e5 {separation(mine, [by_pair[id(p)] for p in mine]):.3f}"
        if companion_cosines is not None:
            other = [companion_cosines[id(p)] for p in mine]
            line += f", the companion {separation(mine, other):.3f}"
            mixes = [_mixed([by_pair[id(p)] for p in mine], other, w) for w in (0.3, 0.5, 0.7)]
            line += ", mixed (e5 0.3 / 0.5 / 0.7) " + " / ".join(f"{separation(mine, m):.3f}" for m in mixes)
        print(line)
    scales = {
        "old linear 0.78-0.92": [relevance(c) for c in cosines],
        "L4 (per language)": [
            min(1.0, max(0.0, pair_relevance(c, p["query"], p["memory"]))) for p, c in zip(pairs, cosines, strict=True)
        ],
    }
    for lang in [None, *sorted({p["lang"] for p in pairs})]:
        subset = [i for i, p in enumerate(pairs) if lang is None or p["lang"] == lang]
        print(f"\nkept, related / unrelated ({lang or 'all'}):")
        for scale, scores in scales.items():
            rates = [keep_rates([pairs[i] for i in subset], [scores[i] for i in subset], t) for t in THRESHOLDS]
            cells = "   ".join(f"{t:.1f}: {r:4.0%} / {u:4.0%}" for t, (r, u) in zip(THRESHOLDS, rates, strict=True))
            print(f"  {scale:<22} {cells}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--set" in argv:
        return main_pairs(argv[argv.index("--set") + 1])
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


if __name__ == "__main__":
    sys.exit(main())
