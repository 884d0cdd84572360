"""mem0's vector store over an Edge shard, so mem0 stays the write path on the embedded backend.

mem0 builds its vector store from a fixed provider map, so :class:`EdgeVectorStore` is swapped
into ``Memory.vector_store`` after the ``Memory`` is built (and into ``Memory._entity_store``,
which mem0 would otherwise build as a qdrant-client store of its own).  Filters are mem0's own
dictionaries, translated by :func:`layers.conversation.adapters.edge.to_filter`.

Scores: the shard answers cosine similarity; like mem0's other stores this returns it clamped to
[0, 1] (``max(0, cos)``).  The daemon's searches call :meth:`EdgeVectorStore.search` directly and map
the cosine onto the embedder's relevance scale (layers/conversation/adapters/store.py); ``fetch_only`` is for
mem0's own ``search``, which over-fetches for boosts that have nothing to work with here.

There is no BM25 slot (mem0's keyword search needs fastembed, which is not installed), so
``keyword_search`` answers None and mem0 ranks by the semantic score alone, as it does on the
other backends here.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from types import SimpleNamespace

from mem0.vector_stores.base import VectorStoreBase

from layers.conversation.adapters.edge import EdgeCollection, Hit


class EdgeVectorStore(VectorStoreBase):
    """One Edge shard as mem0's ``VectorStoreBase``; ``open_shard`` is called on first use."""

    def __init__(self, collection_name: str, dim: int, open_shard: Callable[[], EdgeCollection]) -> None:
        self.collection_name = collection_name
        self.embedding_model_dims = dim
        self._open = open_shard
        self._shard: EdgeCollection | None = None
        # mem0 over-fetches max(4 x top_k, 60) candidates for its BM25 and entity boosts; with neither
        # (see ``fetch_only``) the ranking is the semantic one, and only the top this many are asked for
        self.fetch_cap: int | None = None

    @property
    def shard(self) -> EdgeCollection:
        if self._shard is None or self._shard.closed:
            self._shard = self._open()
        return self._shard

    @property
    def opened(self) -> bool:
        return self._shard is not None and not self._shard.closed

    def close(self) -> None:
        if self._shard is not None:
            self._shard.close()
        self._shard = None

    # ------------------------------------------------------------ mem0's interface

    def create_col(self, name=None, vector_size=None, distance=None) -> None:
        """The shard is the collection: opening it creates it."""
        _ = self.shard

    def insert(self, vectors, payloads=None, ids=None) -> None:
        if ids is None:
            raise ValueError("Edge points need ids (mem0 always gives them)")
        payloads = payloads or [{} for _ in vectors]
        self.shard.upsert(zip(ids, vectors, payloads, strict=True))

    def search(self, query, vectors, top_k=5, filters=None) -> list[Hit]:
        limit = min(top_k, self.fetch_cap) if self.fetch_cap else top_k
        hits = self.shard.search(vectors, limit=limit, filters=filters)
        return [Hit(h.id, h.payload, max(0.0, float(h.score or 0.0))) for h in hits]

    def search_batch(self, queries, vectors_list, top_k=1, filters=None) -> list[list[Hit]]:
        return [self.search(q, v, top_k=top_k, filters=filters) for q, v in zip(queries, vectors_list, strict=True)]

    @contextmanager
    def fetch_only(self, limit: int):
        """Within the block searches fetch ``limit`` hits, not mem0's over-fetch (the caller knows no boost applies)."""
        self.fetch_cap = limit
        try:
            yield
        finally:
            self.fetch_cap = None

    def keyword_search(self, query, top_k=5, filters=None):
        return None

    def delete(self, vector_id) -> None:
        self.shard.delete([str(vector_id)])

    def update(self, vector_id, vector=None, payload=None) -> None:
        """Both given: the point is replaced (as mem0's Qdrant store does); one given: only it changes."""
        point = str(vector_id)
        if vector is not None and payload is not None:
            self.shard.upsert([(point, vector, payload)])
            return
        if payload is not None:
            self.shard.set_payload(point, payload)
        if vector is not None:
            self.shard.set_vector(point, vector)

    def get(self, vector_id) -> Hit | None:
        found = self.shard.retrieve([str(vector_id)])
        return found[0] if found else None

    def list_cols(self):
        return SimpleNamespace(collections=[SimpleNamespace(name=self.collection_name)])

    def delete_col(self) -> None:
        """Every point goes (the shard directory stays: it is ours, not mem0's, to remove)."""
        shard = self.shard
        while True:
            page, _ = shard.scroll(limit=1024, with_payload=False)
            if not page:
                return
            shard.delete([h.id for h in page])

    def col_info(self) -> dict:
        return {"name": self.collection_name, **self.shard.info()}

    def list(self, filters=None, top_k=100):
        """Like mem0's Qdrant store: ``(points, next_offset)``."""
        return self.shard.scroll(filters, limit=top_k or 100)

    def reset(self) -> None:
        self.delete_col()
