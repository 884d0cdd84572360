"""The embedding worker: fills every index's "to embed" set in the background.

Embedding is slow (~100 short passages/s on two cores) and may not be allowed at
all (memory gate), so it never runs in the daemon's loop: a thread takes
batches from each index, embeds them when the gate is open, stores the vectors
and lets the model go after a quiet spell.

Stopping never waits for llama.cpp: :meth:`EmbedWorker.request_stop` aborts the
encode in progress (llama.cpp's abort callback, within one graph node) and the
thread ends at once; what it had not stored stays in the "to embed" sets for the
next start.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from daemon.common.config import Config
from daemon.common.storage import StorageHealth, is_storage_error
from layers.local.models import companion
from layers.local.models.vectors import (
    Embedder,
    EmbeddingAborted,
    LocalEmbedder,
    OpenAIEmbedder,
    VectorsUnavailableError,
)
from layers.local.storage.index import ForeignFile, Identity, IndexStale, LocalIndex
from layers.local.text.units import ITEMS_UP_TO_CHUNKS, has_companion, passages

log = logging.getLogger(__name__)

RETRY_S = 5.0  # how often a closed gate is looked at again while work waits
IDLE_CHECK_S = 5.0
# chunks embedded per call, between two looks at the stop flag (an encode itself is aborted at once):
# enough windows that the embedder's lanes end a call together (bench_index: 8 chunks/s at 8, 7.7 at 4)
STOP_SLICE = 8
YIELD_POLL_S = 0.02
YIELD_MAX_S = 5.0  # under a constant stream of edits, vectors still advance one slice per this long
RATE_WINDOW_S = 300.0  # the embedding rate status shows (and its time left) is over the last five minutes
IDLE_AFTER_S = 60.0  # no slice for this long: no rate to show (the gate closed, or nothing is left)


def make_embedder(config: Config) -> Embedder | None:
    v = config.vectors
    if v.backend == "off":
        return None
    if v.backend == "openai":
        o = v.openai
        return OpenAIEmbedder(o.base_url, o.model, o.dim, o.api_key_env, o.timeout_s)
    companion.configure(min_free_mb=v.min_free_mb, threads=v.threads, idle_unload_s=v.idle_unload_s, unload=v.unload)
    return _local_embedder(config)


def conversation_embedder(config: Config, l3: Embedder | None) -> Embedder:
    """L4's embedder: L3's when there is one (one model in memory), else the local model.

    ``vectors.backend: off`` switches off L3's vectors only; L4 cannot work without them.
    """
    if l3 is not None:
        return l3
    return _local_embedder(config)


def _local_embedder(config: Config) -> LocalEmbedder:
    """The local GGUF model with the configuration's memory gate, threads and unload policy."""
    v = config.vectors
    return LocalEmbedder(
        config.model_path,
        v.profile,
        min_free_mb=v.min_free_mb,
        idle_unload_s=v.idle_unload_s,
        threads=v.threads,
        unload=v.unload,
    )


class EmbedWorker:
    def __init__(
        self,
        embedder: Embedder,
        identity: Identity,
        indexes: Callable[[], list[tuple[str, Path]]],
        batch_size: int = 16,
        on_change: Callable[[], None] = lambda: None,
        yield_to: Callable[[], bool] = lambda: False,
        storage: StorageHealth | None = None,
    ) -> None:
        self.on_change = on_change  # the daemon refreshes its status when vectors move
        # True while the loop has fresh edits to index: the worker then leaves it the
        # cores and the index's write lock (a slice of llama.cpp takes both cores).
        self.yield_to = yield_to
        self.storage = storage  # a full index disk is reported there, not logged per pass
        self.embedder = embedder
        self.identity = identity
        self.indexes = indexes
        self.batch_size = batch_size
        self.embedded = 0
        #: (monotonic time, chunks embedded so far) after each slice of the last RATE_WINDOW_S: the rate status shows
        self._progress: collections.deque[tuple[float, int]] = collections.deque()
        self.waiting_reason = ""
        self.last_error = ""
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="embed", daemon=True)
        self._connections: dict[str, tuple[int, LocalIndex]] = {}

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def configure(self, batch_size: int) -> None:
        """A reload's batch size, used from the next batch on."""
        self.batch_size = batch_size
        self.wake()

    def request_stop(self) -> None:
        """Begin stopping, without waiting: an encode in progress is aborted.

        The local embedder is shared with L4, so from here on every embedding
        call in the process ends at once; the daemon calls this only to stop.
        """
        self._stop = True
        if isinstance(self.embedder, LocalEmbedder):
            self.embedder.abort()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop and wait up to ``timeout``; True when the thread has ended."""
        self.request_stop()
        self._thread.join(max(0.0, timeout))
        if self._thread.is_alive():
            log.warning("embedding worker still busy after %.1f s; leaving it behind", timeout)
            return False
        return True

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _connection(self, agent_id: str, path: Path) -> LocalIndex | None:
        """This thread's own connection, reopened when a rebuild swapped the file."""
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            return None
        cached = self._connections.get(agent_id)
        if cached and cached[0] == inode:
            return cached[1]
        if cached:
            cached[1].close()
        try:
            index = LocalIndex(path, self.identity, verify=False)
        except (IndexStale, ForeignFile):  # the loop rebuilds a damaged index of ours and refuses another's
            return None
        self._connections[agent_id] = (inode, index)
        return index

    def _one_pass(self) -> bool:
        """Embed one batch per index; True when anything was embedded."""
        worked = False
        for agent_id, path in self.indexes():
            index = self._connection(agent_id, path)
            if index is None:
                continue
            items = index.chunk_count() <= ITEMS_UP_TO_CHUNKS
            if not items and index.pending_items_count():
                index.drop_pending_items()  # grown past the size that embeds items: whole chunks are all it gets
            # every chunk's whole vector first, then the items of those that have them: the whole index
            # is searchable in half the time (docs/facts.md, "L3 vectors at scale")
            batch = index.take_pending(self.batch_size)
            adding_items = not batch and items
            if adding_items:
                batch = index.take_pending(self.batch_size, items=True)
            # small slices, so that stop() never waits long for llama.cpp (a busy CPU makes a batch slow)
            for start in range(0, len(batch), STOP_SLICE):
                self._give_way()
                if self._stop:
                    return worked
                part = batch[start : start + STOP_SLICE]
                if adding_items:
                    vectors, later = self._with_items(index, part), []
                else:
                    vectors = self._whole(part)
                    later = [h for h, text in part if items and len(passages(text)) > 1]
                index.store_vectors(
                    self.identity.embed_model, zip([h for h, _ in part], vectors, strict=True), items_later=later
                )
                if self.storage is not None:
                    self.storage.succeeded("vectors")
                self.embedded += len(part)
                self._note_progress(time.monotonic())
                worked = True
        return worked

    def _note_progress(self, now: float) -> None:
        self._progress.append((now, self.embedded))
        while self._progress and self._progress[0][0] < now - RATE_WINDOW_S:
            self._progress.popleft()

    def rate(self, now: float | None = None) -> float | None:
        """Chunks embedded per second over the last RATE_WINDOW_S, while the worker is embedding (None when idle)."""
        now = time.monotonic() if now is None else now
        if len(self._progress) < 2 or self._progress[-1][0] < now - IDLE_AFTER_S:
            return None
        (t0, n0), (t1, n1) = self._progress[0], self._progress[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None

    def _whole(self, part: list[tuple[str, str]]) -> list[np.ndarray]:
        """Each chunk embedded whole: one ``(1, dim)`` array per chunk."""
        return self._embed([[text] for _, text in part])

    def _with_items(self, index: LocalIndex, part: list[tuple[str, str]]) -> list[np.ndarray]:
        """Each chunk's stored whole vector with its items' vectors below it, the items embedded now
        (a chunk whose whole vector is gone meanwhile, e.g. rewritten, is embedded with all of its passages)."""
        wholes = [index.stored_vector(h) for h, _ in part]
        groups = [
            passages(text)[1:] if whole is not None else passages(text)
            for (_, text), whole in zip(part, wholes, strict=True)
        ]
        found = self._embed(groups)
        return [found[i] if whole is None else np.vstack([whole[:1], found[i]]) for i, whole in enumerate(wholes)]

    def _embed(self, groups: list[list[str]]) -> list[np.ndarray]:
        """Each chunk's given passages embedded in one call, one ``(n, dim)`` array per chunk."""
        texts = [p for group in groups for p in group]
        flat = self.embedder.embed_passages(texts)
        if has_companion(self.identity.embed_model):  # each row: the model's vector, then the companion's
            flat = companion.joined(flat, companion.shared().embed(texts))
        out, at = [], 0
        for group in groups:
            out.append(flat[at : at + len(group)])
            at += len(group)
        return out

    def _give_way(self) -> None:
        """Wait (bounded) while the loop indexes fresh edits: they must not queue behind vectors."""
        deadline = time.monotonic() + YIELD_MAX_S
        while not self._stop and time.monotonic() < deadline and self.yield_to():
            time.sleep(YIELD_POLL_S)

    def _run(self) -> None:
        while not self._stop:
            try:
                worked = self._one_pass()
                if worked or self.waiting_reason:
                    self.waiting_reason = ""
                    self.on_change()
            except EmbeddingAborted:
                break  # stopping: the batch stays pending for the next start
            except VectorsUnavailableError as exc:
                worked = False
                if str(exc) != self.waiting_reason:
                    log.info("embeddings wait: %s", exc)
                    self.waiting_reason = str(exc)
                    self.on_change()
            except Exception as exc:  # a bad batch must not kill the worker
                worked = False
                self.last_error = f"{exc.__class__.__name__}: {exc}"
                if self.storage is not None and is_storage_error(exc):
                    self.storage.failed("vectors", exc)  # logged once; the next pass retries
                else:
                    log.exception("embedding batch failed")
            if worked:
                continue
            if isinstance(self.embedder, LocalEmbedder) and self.embedder.maybe_unload():
                self.on_change()
            if companion.shared().maybe_unload():
                self.on_change()
            self._wake.wait(RETRY_S if self.waiting_reason else IDLE_CHECK_S)
            self._wake.clear()
        for _, index in self._connections.values():
            with contextlib.suppress(Exception):
                index.close()
        if isinstance(self.embedder, LocalEmbedder):
            self.embedder.unload()

    def status(self) -> dict:
        out = dict(self.embedder.status())
        out.update(embedded=self.embedded, waiting=self.waiting_reason or None, last_error=self.last_error or None)
        out["rate_per_s"] = self.rate()
        if has_companion(self.identity.embed_model):
            out["companion_loaded"] = companion.shared().loaded  # ~120 MB resident while True
        return out
