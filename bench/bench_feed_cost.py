"""What the hub's change feed adds to an L4 write (issue 48): one more synced SQLite commit per change.

On a hub (``fleet.listen``) every change to the store first records its memory ids in the feed
(daemon/conversation/feed.py, ``synchronous=FULL``) before the change can be seen.  Measured here, same
run, with the feed and without it, alternated round by round so drift falls on both ways:

- the store's write alone (``ConversationStore.add_batch``: one embedding call, one upsert, one history
  commit a batch), single writes and batches of 32 (the grouped path under load);
- an acknowledged write as the live path makes it: the write-ahead log's synced append
  (``WriteQueue.log``), the store's write, then ``applied`` (a claimed row: noted in memory, no commit):
  the one sync a write already pays before the feed adds its own.

The embedder is a stand-in returning random unit vectors (labelled): the model's own time is the same
with or without the feed and would only hide the ratio.  Printed: median milliseconds a write, each way,
and the ratio with the feed to without; nothing asserted.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.conversation.feed import ChangeFeed, feed_path
from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
from layers.conversation.lifecycle.durable_queue import WriteQueue

DIM = 384
CREATED = "2026-12-07T00:00:00+00:00"


class RandomEmbedder:
    """A stand-in embedder (labelled): random unit vectors, so the store's own work is what is timed."""

    model_id = "stand-in-random"

    def __init__(self) -> None:
        self.rng = np.random.default_rng(48)

    def dimension(self) -> int:
        return DIM

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        vectors = self.rng.standard_normal((len(texts), DIM)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_passages([text])[0]


def _memories(count: int) -> list[NewMemory]:
    return [
        NewMemory(
            str(uuid.uuid4()),
            "main",
            f"a memory for the feed's cost {uuid.uuid4().hex}",
            "knowledge",
            "public",
            None,
            CREATED,
            None,
            None,
        )
        for _ in range(count)
    ]


def _round(store: ConversationStore, batch: int, writes: int, queue: WriteQueue | None = None) -> float:
    """Seconds a write, ``writes`` written in batches of ``batch``; with ``queue``, one at a time as the live
    path acknowledges it (logged, written, noted applied)."""
    memories = _memories(writes)
    began = time.perf_counter()
    if queue is None:
        for i in range(0, writes, batch):
            store.add_batch(memories[i : i + batch])
    else:
        for memory in memories:
            seq, _ = queue.log(memory.write_id, memory.agent_id, {"text": memory.text})
            store.add_batch([memory])
            queue.applied([seq] if seq is not None else [], claimed=True)
    return (time.perf_counter() - began) / writes


def main(quick: bool = False, rounds: int | None = None) -> None:
    rounds = rounds or (2 if quick else 6)
    cases = [  # (what, batch, writes a round, through the write-ahead log)
        ("the store's write, single", 1, 40 if quick else 100, False),
        ("the store's write, batches of 32", 32, 320 if quick else 960, False),
        ("an acknowledged write (log, store)", 1, 40 if quick else 100, True),
    ]
    print("embeddings: a stand-in returning random vectors (labelled): the store's and the feed's work is timed")
    with tempfile.TemporaryDirectory(prefix="bench-feed-cost-") as tmp:
        store = ConversationStore(StoreSettings("embedded", Path(tmp) / "l4"), RandomEmbedder(), DIM)
        store.connect()
        feed = ChangeFeed(feed_path(Path(tmp)))
        queue = WriteQueue(Path(tmp) / "queue.sqlite")
        queue.open()
        try:
            store.add_batch(_memories(8))  # mem0 built, the shard warm
            for what, batch, count, logged in cases:
                timed: dict[str, list[float]] = {"without": [], "with": []}
                for n in range(rounds):
                    for way in ("without", "with") if n % 2 == 0 else ("with", "without"):
                        store.feed = feed if way == "with" else None
                        timed[way].append(_round(store, batch, count, queue if logged else None))
                without, with_feed = statistics.median(timed["without"]), statistics.median(timed["with"])
                print(
                    f"{what}: {without * 1000:.2f} ms a write without the feed, {with_feed * 1000:.2f} ms with it "
                    f"= {with_feed / without:.2f}x ({rounds} rounds of {count} writes each way, alternated; medians)",
                    flush=True,
                )
        finally:
            store.feed = None
            store.close()
            feed.close()
            queue.close()


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
