"""What an Edge shard holds in anonymous memory per point, by where its payload indexes are placed (issue 51).

Under the soak's load the daemon's anonymous memory grew with the L4 store: ~1.8 KB per memory.  This
measures the engine's part alone, one variant per child process (a fresh allocator each, tuned as the
daemon's: layers/common/malloc.py): a shard of N mem0-shaped points with the store's keyword indexes and
its expiry index, anonymous RSS after the writes (one appendable segment: its indexes are in the heap
whatever their placement), then once it is optimized, closed, loaded again and ``malloc_trim``-ed (what
an optimize's swap leaves, the daemon trimming after it).  Variants:

- ``heap``: every payload index at the engine's default (what memstrata made before);
- ``disk``: the payload indexes ``Memory.Cold``, as ``EdgeCollection.ensure_index`` makes them now;
- ``disk+tracker``: and the id tracker on disk (not taken: see docs/memory.md).

Run: ``python bench/run.py edge-placement`` (20,000 points, ~40 s; ``--quick`` is the same).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("heap", "disk", "disk+tracker")
DIM = 384
BATCH = 500


def _anon_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("RssAnon:")[1].split()[0]) / 1024


def measure(variant: str, points: int) -> dict:
    """In this process: the shard of ``points`` points in ``variant``, and its anonymous memory at each step."""
    import numpy as np
    import qdrant_edge as qe

    from layers.common import malloc
    from layers.conversation.adapters.edge import HNSW_FULL_SCAN_KB
    from layers.conversation.adapters.store import EXPIRY_FIELD, KEYWORD_FIELDS

    malloc.tune()
    cold = qe.Memory.Cold
    extra = {"id_tracker_memory": cold} if "tracker" in variant else {}
    config = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine),
        hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=HNSW_FULL_SCAN_KB),
        **extra,
    )
    on_disk = variant != "heap"
    keyword = qe.KeywordIndexParams(memory=cold) if on_disk else qe.PayloadSchemaType.Keyword
    expiry = qe.FloatIndexParams(memory=cold) if on_disk else qe.PayloadSchemaType.Float
    base = _anon_mb()
    path = os.path.join(tempfile.mkdtemp(prefix="edge-placement-"), "shard")
    shard = qe.EdgeShard.create(path, config)
    for name in KEYWORD_FIELDS:
        shard.update(qe.UpdateOperation.create_field_index(name, keyword))
    shard.update(qe.UpdateOperation.create_field_index(EXPIRY_FIELD, expiry))
    rng = np.random.default_rng(1)
    for start in range(0, points, BATCH):
        vectors = rng.standard_normal((BATCH, DIM)).astype(np.float32)
        batch = [
            qe.Point(
                str(uuid.uuid4()),
                vector.tolist(),
                {
                    "data": f"agent s{i % 10} fact {start + i}: the pump in shed {start + i} runs on port {7000 + i}",
                    "hash": uuid.uuid4().hex,
                    "created_at": "2026-12-07T10:00:00+00:00",
                    "agent_id": f"s{i % 10}",
                    "visibility": ("public", "project", "private")[i % 3],
                    "memory_type": "knowledge",
                    "write_id": str(uuid.uuid4()),
                    "state": "valid",
                    "trust": "high",
                    EXPIRY_FIELD: 1.9e9 + start + i,
                },
            )
            for i, vector in enumerate(vectors)
        ]
        shard.update(qe.UpdateOperation.upsert_points(batch))
    shard.flush()
    written = _anon_mb()
    shard.optimize()  # what the store's optimize child does: placement applies to optimized segments
    shard.close()
    shard = qe.EdgeShard.load(path, config)
    malloc.trim()
    loaded = _anon_mb()
    shard.close()
    return {"variant": variant, "points": points, "before": base, "written": written, "loaded": loaded}


def main(quick: bool = False) -> None:
    # Not fewer when quick: a shard this small is not optimized into an immutable segment, and an
    # appendable segment's indexes are in the heap whatever their placement (5,000 points: 1.00x).
    points = 20_000
    print(f"{points:,} points, the store's keyword indexes and its expiry's; anonymous RSS, MB", flush=True)
    print(f"{'variant':>14} {'written':>9} {'a point':>9} {'loaded+trim':>12} {'a point':>9}", flush=True)
    rows = {}
    for variant in VARIANTS:
        run = subprocess.run(
            [sys.executable, __file__, variant, str(points)],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        row = rows[variant] = json.loads(run.stdout.strip().splitlines()[-1])
        written, loaded = row["written"] - row["before"], row["loaded"] - row["before"]
        print(
            f"{variant:>14} {written:9.1f} {written * 1024 / points:7.2f}KB "
            f"{loaded:12.1f} {loaded * 1024 / points:7.2f}KB",
            flush=True,
        )
    heap, disk = (rows[v]["loaded"] - rows[v]["before"] for v in ("heap", "disk"))
    print(f"indexes on disk / in the heap, loaded: {disk / heap:.2f}x", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
    else:
        main(quick="--quick" in sys.argv)
