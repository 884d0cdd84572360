"""An agent's own L4 memories among similar public ones: is each found by its own exact text? (issue 50 item 4)

Several agents write memories on the same topics: 150 private ones of agent ``a`` and 150 public
ones of agents ``b``, ``c`` and ``d``, all from the same sentence templates (so most of them are near
each other).  Each memory's exact text is then searched as ``a`` (public and private phases, limit
10), and the bench counts how often the memory itself is in the ten results, and first.  Before
issue 50 the calibrated relevance saturated at 1.0, the ten results tied and the public phase came
first: 0 of 152 private memories were found (the issue's count).

Run: ``.venv/bin/python -m bench.bench_own_memories`` (the real model `make setup` builds; ~1 min).
"""

from __future__ import annotations

import random
import sys
import tempfile
import uuid
from pathlib import Path

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
from layers.conversation.policy.rules import Phase
from layers.local.models.vectors import LocalEmbedder

CREATED = "2026-11-30T08:00:00+00:00"
SERVICES = ["qdrant", "redis", "postgres", "the gateway", "the billing API", "grafana", "kafka", "nginx"]
HOSTS = ["node-1", "node-2", "db-3", "edge-7", "10.0.0.7", "staging-2"]
TEMPLATES_EN = [
    "{svc} on {host} was restarted at {h}:00 after its memory grew past {n} GB",
    "The deploy of {svc} to {host} needs the {n}-step checklist before {h}:00",
    "{svc} backups on {host} run nightly at {h}:00 and keep {n} days",
    "Remember: {svc} listens on port {p} on {host}",
]
TEMPLATES_ZH = [
    "{host} 上的 {svc} 在 {h} 点重启了，内存超过了 {n} GB",
    "{svc} 部署到 {host} 之前要走 {n} 步检查，{h} 点前完成",
    "{host} 上 {svc} 每晚 {h} 点备份，保留 {n} 天",
]
PHASES = (Phase("public", "public"), Phase("private", "private", owner="a"))


def texts(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct sentences from the shared templates (English and Chinese)."""
    out: set[str] = set()
    while len(out) < n:
        template = rng.choice(TEMPLATES_EN + TEMPLATES_ZH)
        fields = {"svc": rng.choice(SERVICES), "host": rng.choice(HOSTS), "h": rng.randint(1, 23)}
        out.add(template.format(**fields, n=rng.randint(2, 30), p=rng.randint(1000, 9999)))
    return sorted(out)


def memories(per_side: int = 150, seed: int = 50) -> list[NewMemory]:
    """``per_side`` private memories of ``a`` and as many public ones of b, c and d, on the same topics."""
    rng = random.Random(seed)
    sentences = texts(rng, 2 * per_side)
    rng.shuffle(sentences)
    fields = {"memory_type": "knowledge", "expiration_date": None, "expires_at": None, "created_at": CREATED}
    private = [
        NewMemory(str(uuid.uuid4()), "a", t, visibility="private", project_id=None, **fields)
        for t in sentences[:per_side]
    ]
    public = [
        NewMemory(str(uuid.uuid4()), "bcd"[i % 3], t, visibility="public", project_id=None, **fields)
        for i, t in enumerate(sentences[per_side:])
    ]
    return private + public


def count(store: ConversationStore, written: list[NewMemory]) -> dict[str, tuple[int, int, int]]:
    """Per visibility: (found in the top 10, found first, searched)."""
    out: dict[str, list[int]] = {}
    for memory in written:
        results = store.search(memory.text, PHASES, limit=10)
        texts_found = [r["memory"] for r in results]
        tally = out.setdefault(memory.visibility, [0, 0, 0])
        tally[0] += memory.text in texts_found
        tally[1] += bool(texts_found) and texts_found[0] == memory.text
        tally[2] += 1
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def main(quick: bool = False) -> None:
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore(StoreSettings("embedded", Path(tmp) / "l4"), embedder, embedder.dimension())
        store.connect()
        try:
            written = memories(50 if quick else 150)
            store.add_batch(written)
            for visibility, (top10, first, n) in sorted(count(store, written).items()):
                print(f"own exact text searched as a, {visibility:<7}: in the top 10 {top10}/{n}, first {first}/{n}")
        finally:
            store.close()


if __name__ == "__main__":
    main("--quick" in sys.argv)
