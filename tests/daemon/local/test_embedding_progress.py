"""How far a first index's vectors are: the worker's recent rate, the time left in status, coverage in answers.

A first index of 20,000 chunks takes hours to embed on the reference host; meanwhile
search uses the vectors made so far, and says how many that is, and status says how
long the rest takes at the rate of the last minutes.
"""

from __future__ import annotations

import collections
import hashlib

import numpy as np

from daemon.front.status import _embedding_lines
from daemon.local.embedding import IDLE_AFTER_S, RATE_WINDOW_S, EmbedWorker
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex


def _worker() -> EmbedWorker:
    """A worker with only its progress book-keeping (no model, no thread): what this test exercises."""
    worker = EmbedWorker.__new__(EmbedWorker)
    worker.embedded = 0
    worker._progress = collections.deque()
    return worker


def test_the_rate_is_over_the_last_minutes_and_none_once_the_worker_is_idle():
    worker = _worker()
    for second in range(0, 600, 10):  # 2 chunks a second for ten minutes, then 1 a second
        worker.embedded += 20 if second < 300 else 10
        worker._note_progress(float(second))
    assert abs(worker.rate(now=590.0) - 1.0) < 0.05, "the last RATE_WINDOW_S, not the whole run"
    assert worker._progress[0][0] >= 590.0 - RATE_WINDOW_S
    assert worker.rate(now=590.0 + IDLE_AFTER_S + 1) is None


def test_status_says_how_many_chunks_wait_and_how_long_they_take():
    status = {
        "vectors": {"backend": "local", "rate_per_s": 2.0},
        "agents": [{"index": {"pending_embeddings": 7200}}, {"index": {"pending_embeddings": 0}}, {}],
    }
    assert _embedding_lines(status) == [
        "  embedding: 7,200 chunks waiting, about 1h 0m 0s left at 2.0 chunks/s (search uses the vectors made so far)"
    ]
    status["vectors"]["rate_per_s"] = None
    assert _embedding_lines(status) == ["  embedding: 7,200 chunks waiting (search uses the vectors made so far)"]
    assert _embedding_lines({"vectors": {}, "agents": [{"index": {"pending_embeddings": 0}}]}) == []


def test_a_search_says_how_many_chunks_its_vectors_covered(tmp_path):
    rng = np.random.default_rng(1)
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model="m")) as index:
        for i in range(5):
            text = f"# note {i}\n\nthe sensor note number {i}\n"
            index.update_document(Document(f"memory/{i}.md", text, hashlib.sha256(text.encode()).hexdigest(), "daily"))
        pending = index.take_pending(3)
        index.store_vectors("m", [(h, rng.standard_normal(8).astype(np.float32)) for h, _ in pending])
        answer = search(index, "sensor note", mode="hybrid", embed_query=lambda q: np.ones(8, dtype=np.float32))
    assert answer.vectors == "used"
    assert answer.to_dict()["embedded"] == {"chunks": 5, "with_vectors": 3}


def test_reindex_vectors_off_a_terminal_prints_a_line_with_the_time_left(capsys, monkeypatch):
    from daemon.front.local_commands import _VectorProgress

    monkeypatch.setattr(_VectorProgress, "LINE_EVERY_S", 0.0)
    progress = _VectorProgress()  # pytest's stderr is no terminal: lines, not a bar
    progress.show(8_400, 20_000, 2.0)
    progress.close()
    assert capsys.readouterr().err == "vectors: 8,400 of 20,000 chunks, about 1h 36m 40s left at 2.0 chunks/s\n"
