"""The L4 store: mem0's ``Memory`` over a Qdrant Edge shard (embedded) or a ``QdrantClient`` (remote).

We build the client so that a remote server gets our timeout (mem0's own
config cannot set one).  The embedded backend is a Qdrant Edge shard under the
state directory (layers/conversation/adapters/edge.py holds every Edge call), plugged
into mem0 as its vector store (edge_mem0.py); a store left by the older
embedded engine (qdrant-client's local mode) is imported once (migrate.py), and
that engine is otherwise reachable only as ``engine=QDRANT_LOCAL`` (tests,
benchmarks).  Writes go through mem0 (so ``infer=True``
gets mem0's ADD/UPDATE/DELETE/NOOP); searches use mem0's embedder and vector
store with one filter per visibility phase.  Listing, get, delete and the write-id lookup use the
client directly: mem0's ``get_all`` has no cursor and stops at ``top_k``.
Replayed writes (``infer=False``) go in batches: one write-id lookup, one
embedding call, one upsert through mem0's vector store and one history commit
per batch, the payload built by mem0's own helpers so a replayed memory is the
same in every field as one ``Memory.add(infer=False)`` makes.  A search embeds the
query once and asks the vector store itself, one filtered query per visibility
phase (mem0's ``search`` would merge a caller's filter into the phase's own keys:
layers/conversation/policy/filters.py).  A batched write's
point id is derived from its owner and write_id (layers/conversation/lifecycle/write_ids.py: a write_id is
its owner's, never global), so the lookup is a retrieve by id (local mode evaluates a payload
filter in Python, point by point and value by value) and a repeated upsert could only replace
the point, never add a second one.

Every call that reaches Qdrant may raise :class:`StoreUnavailableError`; the
broker decides what that means (breaker, queue, fallback).  This module knows
nothing about callers, tokens or the daemon.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from layers.common.fsutil import atomic_write
from layers.common.sqlite_wal import keep_wal_small
from layers.conversation.lifecycle.write_ids import KEY_FIELDS, WriteKey, candidate_points, owner_of, point_id_of
from layers.conversation.policy import validity
from layers.conversation.policy.decay import ACCESS_COUNT, DEFAULT_DECAY, LAST_ACCESSED, DecayRules, merged_access
from layers.conversation.policy.filters import engine_part, has_text_match, matches, restrict, to_qdrant
from layers.conversation.policy.metadata import custom_of
from layers.conversation.policy.rules import DEFAULT_TRUST, TRUST_RANK, Phase, trust_filter

log = logging.getLogger(__name__)

# Payload fields we filter on; a remote server and an Edge shard get an index for each.
# ``state`` and ``superseded_by``: a memory's validity (layers/conversation/policy/validity.py), filtered inside
# the query.
KEYWORD_FIELDS = (
    "agent_id",
    "visibility",
    "project_id",
    "memory_type",
    "write_id",
    "user_id",
    "run_id",
    "actor_id",
    validity.STATE,
    validity.SUPERSEDED_BY,
    "trust",  # trust_min filters inside the query too
)
EXPIRY_FIELD = "expires_at"
# The embedded backend's engines: Qdrant Edge (HNSW, payload indexes, a WAL) or, for migration
# from it, qdrant-client's local mode (brute force in Python, a SQLite file of pickled points).
EDGE, QDRANT_LOCAL = "edge", "qdrant-local"
# Without an LLM each turn of a conversation is a memory, and an assistant's "Got it! I'll remember that you're
# a nurse" outranks the user's own "I work as a nurse" for "what do you know about me?" (bench/bench_roles.py,
# local e5: a user's statement ranked first for 0 of 5 such questions; with the assistant's relevance x 0.7,
# 3 of 5; with a {"role": "user"} filter, 5 of 5).  Assistant turns are ranked with this weight.
ASSISTANT_WEIGHT = 0.7


class StoreUnavailableError(ConnectionError):
    """The store did not answer (refused, timed out, failed); the message says how."""


class StoreConfigError(RuntimeError):
    """The store cannot be used as configured (for example a vector size mismatch)."""


class StoreRequestError(ValueError):
    """The store refused this request (a 4xx, mem0's validation): the request's fault, not the link's."""


class Embedder(Protocol):
    model_id: str

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class ChangeLog(Protocol):
    """Told the ids a change touches before it can be seen, and when it ended (the hub's change feed); a
    change whose ids are known only once it is made (an inferred add) is begun unknown and ended with them."""

    def begin(self, ids: Sequence[str]) -> int: ...

    def begin_unknown(self) -> int: ...

    def end(self, token: int, ids: Sequence[str] | None = ()) -> None: ...


@dataclass(frozen=True)
class StoreSettings:
    backend: str  # "embedded" | "remote"
    data_dir: Path  # embedded storage, mem0's own files (history, MEM0_DIR)
    collection: str = "mem0_v4_shared"
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 5.0
    llm: dict | None = field(default=None, repr=False)  # {"base_url", "model", "api_key"}
    engine: str = EDGE  # embedded only: EDGE or QDRANT_LOCAL (the old local mode, read by migration)
    cold: bool = False  # on Edge: vectors and graph read from disk as searched, not at load (edge.py's _config)
    wal: bool = True  # on Edge: False, no write-ahead log (a copy that flushes before it records progress)
    # the payload fields given a keyword index: a store that filters on fewer (a spoke's replica of the hub)
    # indexes fewer, each index being ~5 MB of mapped files read at load on Edge
    keyword_fields: tuple[str, ...] = KEYWORD_FIELDS

    @property
    def on_edge(self) -> bool:
        return self.backend == "embedded" and self.engine == EDGE

    @property
    def edge_dir(self) -> Path:
        """Where the Edge shards live: one directory per collection (and one for mem0's entities)."""
        return self.data_dir / "edge"


@dataclass(frozen=True)
class NewMemory:
    """One memory to write, with every decision (placement, lifetime) already made."""

    write_id: str
    agent_id: str
    text: str
    memory_type: str
    visibility: str
    project_id: str | None
    created_at: str  # ISO 8601 UTC, the moment the agent wrote it (not the replay)
    expiration_date: str | None
    expires_at: float | None
    infer: bool = False
    role: str = "user"  # whose words: a conversation's assistant turns are stored as such (mem0's ``role``)
    # mem0's ids as data (layers/conversation/policy/metadata.py): whom or which run the memory is about, who spoke
    user_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # the caller's own metadata (checked: no reserved key)
    trust: str | None = None  # high / medium / low (layers/conversation/policy/rules.py); None: written before trust
    provenance: str | None = None  # the write's source: user_direct, agent_output, tool_result, inferred, operator

    def metadata(self) -> dict:
        """The payload fields mem0 takes as ``metadata`` (the ids go as its own arguments: it drops them here)."""
        meta: dict[str, Any] = {
            **self.extra,
            "write_id": self.write_id,
            "visibility": self.visibility,
            "memory_type": self.memory_type,
            "created_at": self.created_at,
            validity.VALID_FROM: self.created_at,
        }
        if self.trust:
            meta["trust"] = self.trust
        if self.provenance:
            meta["provenance"] = self.provenance
        if self.project_id:
            meta["project_id"] = self.project_id
        if self.expires_at is not None:
            meta[EXPIRY_FIELD] = self.expires_at
        return meta

    @property
    def write_key(self) -> WriteKey:
        """Whose write this is: its write_id inside its owner's scope (layers/conversation/lifecycle/write_ids.py)."""
        return (self.agent_id, self.write_id)


@dataclass(frozen=True)
class BatchResult:
    """What a batch did with one write: ``ADD`` (``ids`` new), ``EXISTS`` (``ids`` already there), ``REFUSED``."""

    write_id: str
    event: str
    ids: tuple[str, ...] = ()
    reason: str = ""


def mem0_payload(memory: NewMemory) -> dict:
    """The payload ``Memory.add(text, infer=False)`` stores for ``memory``, built by mem0's own helpers.

    ValueError when mem0 would refuse it (a bad agent id or expiration date): that write's fault alone.
    """
    from mem0.exceptions import ValidationError
    from mem0.memory.main import _build_filters_and_metadata, _normalize_expiration_date
    from mem0.utils.lemmatization import lemmatize_for_bm25

    try:
        payload, _ = _build_filters_and_metadata(
            agent_id=memory.agent_id, user_id=memory.user_id, run_id=memory.run_id, input_metadata=memory.metadata()
        )
    except ValidationError as exc:
        raise ValueError(exc.message) from None
    expiration = _normalize_expiration_date(memory.expiration_date)
    if expiration is not None:
        payload["expiration_date"] = expiration
    payload["role"] = memory.role  # add() turns a text into one message of this role
    if memory.actor_id:
        payload["actor_id"] = memory.actor_id  # add() takes it from the message's ``name``
    payload["data"] = memory.text
    payload["hash"] = hashlib.md5(memory.text.encode()).hexdigest()
    payload["updated_at"] = payload["created_at"]
    payload["text_lemmatized"] = lemmatize_for_bm25(memory.text)
    return payload


def prepare_mem0_environment(data_dir: Path) -> None:
    """mem0 reads these once, at import: no telemetry, its files under our directory."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(data_dir / "mem0"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def memory_view(memory_id: str, payload: dict, score: float | None = None, decay: DecayRules = DEFAULT_DECAY) -> dict:
    """A stored memory as callers see it: text, placement, owner, lifetime, validity, use, provenance."""
    count = payload.get(ACCESS_COUNT)
    return {
        "id": str(memory_id),
        "memory": payload.get("data", ""),
        "agent_id": payload.get("agent_id"),
        "visibility": payload.get("visibility"),
        "project_id": payload.get("project_id"),
        "memory_type": payload.get("memory_type"),
        "created_at": payload.get("created_at"),
        "updated_at": payload.get("updated_at"),
        "expiration_date": payload.get("expiration_date"),
        "expires_at": payload.get(EXPIRY_FIELD),
        "hash": payload.get("hash"),
        "role": payload.get("role"),
        "user_id": payload.get("user_id"),
        "run_id": payload.get("run_id"),
        "actor_id": payload.get("actor_id"),
        "metadata": custom_of(payload),
        "write_id": payload.get("write_id"),
        **validity.window(payload),
        ACCESS_COUNT: count if isinstance(count, int) and not isinstance(count, bool) else 0,
        LAST_ACCESSED: payload.get(LAST_ACCESSED),
        "importance": round(decay.importance(payload), 4),
        "trust": payload.get("trust") or DEFAULT_TRUST,
        "provenance": payload.get("provenance"),
        "score": None if score is None else round(float(score), 4),
        "source": "conversation",
    }


def _flatten(result: dict) -> dict:
    """mem0's result format (promoted keys + ``metadata``) back into one payload dict."""
    payload = {k: v for k, v in result.items() if k not in ("metadata", "memory", "id", "score")}
    payload.update(result.get("metadata") or {})
    payload["data"] = result.get("memory", "")
    return payload


def _why_visible(phase: Phase) -> str:
    """Why a phase's memories may be read, for ``explain``."""
    if phase.visibility == "public":
        return "public: every agent may read it"
    if phase.visibility == "project":
        return f"project: you are a member of {', '.join(phase.projects)}"
    return f"private: yours ({phase.owner})"


def _selection_fields(selection) -> dict[str, str]:
    """The payload fields a scan's selection pins (owner, visibility, project, type), unset ones left out."""
    fields = {
        "agent_id": selection.agent,
        "visibility": selection.visibility,
        "project_id": selection.project,
        "memory_type": selection.memory_type,
    }
    return {key: value for key, value in fields.items() if value}


class ConversationStore:
    """mem0 + qdrant-client, connected lazily (a remote server may be down at start)."""

    def __init__(self, settings: StoreSettings, embedder: Embedder, dim: int) -> None:
        self.settings = settings
        self.embedder = embedder
        self.dim = dim
        self._client = None  # qdrant-client (remote, or local mode), or an EdgeCollection (Edge)
        self._mem0 = None  # mem0's Memory; on Edge built at the first call that needs it (see ``_memory``)
        self._edge_open = False  # Edge: the shard is open and checked (mem0 may not be built yet)
        self._entities = None  # mem0's entity store on Edge (a shard of its own, opened on first use)
        # the one-time import of an old local-mode store, for status: {"state", "done", "total", ...}
        self.import_progress: dict | None = None
        self.optimizer = (
            None  # Edge only: when the shard's index is rebuilt (layers/conversation/adapters/optimizer.py)
        )
        self.decay = (
            DEFAULT_DECAY  # half-lives and ranking weight (layers/conversation/policy/decay.py); set by the daemon
        )
        self.retired = False  # replaced by a reload (:meth:`retire`): never opened again
        # told of every write (from the store thread): the checkpoint that flushes it is then due
        # (daemon/conversation/checkpoint.py); carried over to the store a reload swaps in
        self.changed: Callable[[], None] = lambda: None
        # told the ids a change is about to touch, before it can be seen, and when it has ended: the hub's
        # change feed for its spokes' replicas (daemon/conversation/feed.py); None elsewhere
        self.feed: ChangeLog | None = None

    @contextmanager
    def _noting(self, ids: Sequence[str]) -> Iterator[None]:
        """The change of ``ids`` inside, recorded in the feed before it (and its end after)."""
        feed = self.feed
        if feed is None or not ids:
            yield
            return
        token = feed.begin([str(i) for i in ids])
        try:
            yield
        finally:
            feed.end(token)

    @property
    def connected(self) -> bool:
        return self._mem0 is not None or self._edge_open

    @property
    def _memory(self):
        """mem0's ``Memory``, built when first needed on Edge (importing mem0 costs the daemon ~88 MB).

        Listing, counting, cleanup, backup, the probe and status need only the shard; a write, a
        search or an edit builds mem0.
        """
        if self._mem0 is None and self._edge_open:
            with _translate_errors("connect"):
                self._mem0 = self._build_edge_memory(self._client)
        return self._mem0

    # ------------------------------------------------------------ connection

    def _make_client(self):
        s = self.settings
        if s.on_edge:
            return self._open_edge()
        from qdrant_client import QdrantClient

        if s.backend == "embedded":
            path = s.data_dir / "qdrant"
            try:
                path.mkdir(parents=True, exist_ok=True, mode=0o700)
                _prepare_local_meta(path)
                return QdrantClient(path=str(path))
            except RuntimeError as exc:  # qdrant local storage is single-process
                raise StoreConfigError(
                    f"the embedded store at {path} is open in another process ({exc}); "
                    "only the daemon may open it: go through its API"
                ) from None
            except OSError as exc:  # a full or read-only disk: the store comes back when the disk does
                raise StoreUnavailableError(f"connect: {describe_error(exc)}") from exc
        return QdrantClient(url=s.url, api_key=s.api_key, timeout=max(1, round(s.timeout_s)), check_compatibility=False)

    def _edge_shard_dir(self, suffix: str = "") -> Path:
        return self.settings.edge_dir / f"{self.settings.collection}{suffix}"

    def _open_edge(self, suffix: str = ""):
        """The collection's Edge shard; None when it does not exist and there is no embedder to size one."""
        from layers.conversation.adapters.edge import EdgeCollection, EdgeError, EdgeLockedError, stored_dim

        path = self._edge_shard_dir(suffix)
        stored = stored_dim(path) if path.is_dir() else None
        dim = self.dim or stored
        if not dim:
            return None  # maintenance without an embedder on a store never written: nothing to open
        if stored is not None and self.dim and stored != self.dim:
            raise StoreConfigError(
                f"collection {self.settings.collection!r} holds {stored}-dimensional vectors but the embedder "
                f"({self.embedder.model_id}) makes {self.dim}-dimensional ones: use a collection made with "
                "this embedder (conversation.qdrant.collection) or configure the embedder it was made with"
            )
        try:
            self.settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            return EdgeCollection(path, dim, cold=self.settings.cold, wal=self.settings.wal)
        except EdgeLockedError as exc:
            if exc.here:  # a handle of ours not yet closed (a store a reload is replacing): try again later
                raise StoreUnavailableError(f"connect: {exc}") from None
            raise StoreConfigError(f"{exc}; only the daemon may open it: go through its API") from None
        except (OSError, EdgeError) as exc:  # a full or read-only disk: the store comes back when the disk does
            raise StoreUnavailableError(f"connect: {describe_error(exc)}") from exc

    def _edge(self):
        """The open Edge shard, or None (see ``_open_edge``)."""
        return self._client_only()

    def _check_vector_size(self, client) -> None:
        name = self.settings.collection
        if not client.collection_exists(name):
            return
        vectors = client.get_collection(name).config.params.vectors
        size = vectors.size if hasattr(vectors, "size") else next(iter(vectors.values())).size
        if size != self.dim:
            raise StoreConfigError(
                f"collection {name!r} holds {size}-dimensional vectors but the embedder "
                f"({self.embedder.model_id}) makes {self.dim}-dimensional ones: use a collection made with "
                "this embedder (conversation.qdrant.collection) or configure the embedder it was made with"
            )

    def _ensure_payload_indexes(self, client) -> None:
        from qdrant_client import models

        for name in KEYWORD_FIELDS:
            client.create_payload_index(self.settings.collection, name, models.PayloadSchemaType.KEYWORD)
        client.create_payload_index(self.settings.collection, EXPIRY_FIELD, models.PayloadSchemaType.FLOAT)

    def connect(self) -> None:
        """Open the collection (creating it), check it, and build mem0 on top (on Edge: when first needed)."""
        if self.connected:
            return
        client = self._client_only()
        try:
            with _translate_errors("connect"):
                if self.settings.on_edge:
                    self._import_local_mode(client)
                    self._prepare_edge(client)
                    self._edge_open = True
                    log.info("conversation store: embedded (Edge) collection %r ready", self.settings.collection)
                    return
                else:
                    self._check_vector_size(client)
                    memory = self._build_memory(client)
                if self.settings.backend == "remote":
                    self._ensure_payload_indexes(client)
        except BaseException:
            self.close()
            raise
        self._mem0 = memory
        if self.settings.backend == "embedded" and not self.settings.on_edge:
            _keep_local_meta(self.settings.data_dir / "qdrant")
        log.info("conversation store: %s collection %r ready", self.settings.backend, self.settings.collection)

    def _build_memory(self, client):
        # mem0 announces missing optional extras (spaCy, fastembed) and asks a local
        # client for payload indexes it cannot use; neither is news to an operator.
        logging.getLogger("mem0").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
        from mem0 import Memory
        from mem0.configs.base import MemoryConfig

        s = self.settings
        llm = {"provider": "openai", "config": {"api_key": "unused"}}  # mem0 insists; never called without infer
        if s.llm:
            llm = {
                "provider": "openai",
                "config": {"model": s.llm["model"], "openai_base_url": s.llm["base_url"], "api_key": s.llm["api_key"]},
            }
        config = MemoryConfig(
            vector_store={
                "provider": "qdrant",
                "config": {"collection_name": s.collection, "embedding_model_dims": self.dim, "client": client},
            },
            embedder={"provider": "openai", "config": {"api_key": "unused", "embedding_dims": self.dim}},
            llm=llm,
            history_db_path=str(s.data_dir / "history.db"),
        )
        memory = Memory(config)
        memory.embedding_model = _Mem0Embedder(self.embedder, self.dim)
        _history_in_wal_mode(memory.db.connection)
        return memory

    def _import_local_mode(self, shard) -> None:
        """Bring an old local-mode store into the shard, once (see layers/conversation/adapters/migrate.py)."""
        from layers.conversation.adapters import migrate

        local = self.settings.data_dir / "qdrant"
        if shard is None or not migrate.pending(local, self.settings.collection, shard.path):
            return
        log.info("conversation store: importing the old local-mode store at %s into Edge", local)
        _prepare_local_meta(local)

        def progress(done: int, total: int) -> None:
            self.import_progress = {"state": "importing", "from": str(local), "done": done, "total": total}
            if done == total or done % 5000 < migrate.PAGE:
                log.info("conversation store: import %d/%d memories", done, total)

        self.import_progress = {"state": "importing", "from": str(local), "done": 0, "total": None}
        try:
            result = migrate.import_local_mode(local, self.settings.collection, shard, progress)
        except BaseException as exc:
            self.import_progress = {**self.import_progress, "state": "failed", "error": describe_error(exc)}
            raise
        self.import_progress = {
            "state": "done",
            "from": str(local),
            "done": result["points"],
            "total": result["points"],
        }
        log.info(
            "conversation store: imported %d memories in %.1f s, verified by count; the old store is kept at %s "
            "(remove it once satisfied)",
            result["points"],
            result["seconds"],
            local,
        )

    def _prepare_edge(self, shard) -> None:
        """The shard's payload indexes; StoreConfigError when there is no shard (no embedder to size one)."""
        from layers.conversation.adapters.edge import FLOAT, KEYWORD

        if shard is None:
            raise StoreConfigError("the conversation store needs an embedder to create its collection")
        for name in self.settings.keyword_fields:
            shard.ensure_index(name, KEYWORD)
        shard.ensure_index(EXPIRY_FIELD, FLOAT)

    def _build_edge_memory(self, shard):
        """mem0 on a placeholder in-memory client, then its vector stores swapped for Edge shards.

        mem0 builds its vector store from a fixed provider map (it would open qdrant-client's
        local storage): it gets an in-memory client to build with, and both the memory store and
        its entity store are replaced by :class:`EdgeVectorStore` before anything is stored.
        """
        from qdrant_client import QdrantClient

        from layers.conversation.adapters.edge_mem0 import EdgeVectorStore

        memory = self._build_memory(QdrantClient(location=":memory:"))
        memory.vector_store = EdgeVectorStore(self.settings.collection, shard.dim, lambda: shard)
        self._entities = EdgeVectorStore(
            f"{self.settings.collection}_entities", shard.dim, lambda: self._open_edge("_entities")
        )
        memory._entity_store = self._entities
        return memory

    def close(self) -> None:
        if self._entities is not None:
            with suppress(Exception):
                self._entities.close()
        if self._mem0 is not None:  # mem0's history: checkpointed and closed (a restore replaces the file)
            with suppress(Exception):
                self._mem0.db.connection.close()
        if self._client is not None:
            self._client.close()
        self._client = self._mem0 = self._entities = None
        self._edge_open = False

    def flush(self) -> None:
        """Everything written so far on disk: the Edge shards' segments and mem0's history (fsynced).

        Edge's ``update`` syncs nothing and mem0's history commits with ``synchronous=NORMAL``: until
        this runs, a power cut can take them.  Called by the checkpoint (daemon/conversation/checkpoint.py)
        before the write-ahead log forgets the writes it covers, never per request (a flush holds the
        GIL 9-40 ms on a small shard).  The history goes first: a cut between the two leaves an ADD row
        whose point the log's replay writes again (under its own id), never a point without its row.
        A remote server keeps its own writes (``wait=True``); only the history is ours there.
        """
        if self._mem0 is not None:
            db = self._mem0.db
            with _translate_errors("flush"), getattr(db, "_lock", nullcontext()):
                db.connection.execute("PRAGMA wal_checkpoint(FULL)")
        if not self.settings.on_edge:
            return
        with _translate_errors("flush"):
            if self._client is not None:
                self._client.flush()
            if self._entities is not None and self._entities.opened:
                self._entities.shard.flush()

    def retire(self) -> None:
        """Close for good: this store was replaced (a reload), and another object now owns its files.

        A closed store reopens on its next call (a failed connect, a failed batch close it to reload
        from disk); a retired one refuses instead.  A job that captured this object before the swap and
        runs after it would otherwise reopen the shard and hold its lock for ever, and the store that
        replaced it could never connect (issue 45: a SIGHUP right after start left L4 off).
        """
        self.retired = True
        self.close()

    def _require(self):
        if not self.connected:
            self.connect()
        return self._memory, self._client

    def _client_only(self):
        """The Qdrant client without mem0 (listing, cleanup, backups need no embedder)."""
        if self.retired:
            raise StoreUnavailableError("the conversation store was replaced by a reload: try again")
        if self._client is None:
            prepare_mem0_environment(self.settings.data_dir)
            self._client = self._make_client()
        return self._client

    # ------------------------------------------------------------ operations

    def ping(self) -> float:
        """Round-trip time of a cheap request, in milliseconds; on Edge, then the index upkeep (``upkeep``)."""
        client = self._client_only()
        started = time.perf_counter()
        with _translate_errors("ping"):
            if self.settings.on_edge:
                if client is not None:
                    client.count()
            else:
                client.collection_exists(self.settings.collection)
        rtt = round((time.perf_counter() - started) * 1000, 2)
        self.upkeep(refresh=True)
        return rtt

    def upkeep(self, refresh: bool = False) -> None:
        """On Edge: swap in a finished optimize or start one that is due (see optimizer.py); never raises.

        Runs on the caller's thread, which must be the one that owns the store: the daemon's store
        thread calls it after each write and on every ping.
        """
        if not self.settings.on_edge or self._client is None:
            return
        if self.optimizer is None:
            from layers.conversation.adapters.optimizer import Optimizer

            self.optimizer = Optimizer()
        self.optimizer.tick(self._client, refresh=refresh)

    def index_status(self) -> dict | None:
        """The Edge shard's index for status (indexed vs unindexed points, optimizes); None elsewhere.

        Figures the store thread last saw: reading them never touches the engine.
        """
        if not self.settings.on_edge:
            return None
        return self.optimizer.status() if self.optimizer is not None else {"optimizing_since": None}

    def add(self, memory: NewMemory) -> list[dict]:
        mem0, _ = self._require()
        # mem0 (and its LLM, when inferring) picks the ids: the feed is told a change is under way before
        # it, and its ids after (a crash between the two: every spoke rebuilds, daemon/conversation/feed.py)
        token = self.feed.begin_unknown() if self.feed is not None else None
        ids: list[str] | None = None  # None: it failed, touching what is not known
        try:
            result = self._mem0_add(mem0, memory)
            ids = [str(r.get("id")) for r in result["results"] if r.get("id")]
        finally:
            if self.feed is not None and token is not None:
                self.feed.end(token, ids)
        self.changed()
        self.upkeep()
        return [{"id": r.get("id"), "event": r.get("event"), "memory": r.get("memory")} for r in result["results"]]

    @staticmethod
    def _mem0_add(mem0, memory: NewMemory) -> dict:
        with _translate_errors("add"):
            message: str | dict = memory.text
            if memory.role != "user" or memory.actor_id:
                message = {"role": memory.role, "content": memory.text}
                if memory.actor_id:
                    message["name"] = memory.actor_id  # mem0 stores a message's name as its actor_id
            return mem0.add(
                message,
                agent_id=memory.agent_id,
                user_id=memory.user_id,
                run_id=memory.run_id,
                metadata=memory.metadata(),
                expiration_date=memory.expiration_date,
                infer=memory.infer,
            )

    def add_plain(self, memory: NewMemory, suspect: bool = False) -> list[dict]:
        """An ``infer=False`` write at its deterministic point id (``point_id_of(owner, write_id)``): once.

        The direct path and the replay of the write-ahead log (layers/conversation/lifecycle/durable_queue.py) write the
        same point, so a write applied, lost to a power cut before the shard's flush, and applied again
        from the log is one memory, never two (mem0's own ``add`` would pick a random id each time).
        ``suspect``: it may already be stored under a random id (a direct add of an older version, a
        retry): looked up by its write_id too.  StoreRequestError when mem0 would refuse it.
        """
        result = self.add_batch([memory], [memory.write_key] if suspect else ())[0]
        if result.event == "REFUSED":
            raise StoreRequestError(result.reason)
        if result.event == "EXISTS":
            return [{"id": i, "event": "EXISTS"} for i in result.ids]
        return [{"id": i, "event": "ADD", "memory": memory.text} for i in result.ids]

    def embed_ahead(self, text: str, query: bool = False) -> None:
        """Embed, on the calling thread, what the next write (a passage) or search (a query) of ``text`` needs.

        Only once mem0 is built (building it is the store thread's work); an error is left for the
        store call itself to meet, which embeds as it always did when nothing was embedded ahead.
        """
        model = getattr(self._mem0, "embedding_model", None)
        if isinstance(model, _Mem0Embedder):
            model.embed_ahead(text, query)

    def find_write(self, agent_id: str, write_id: str) -> list[str]:
        """Ids of the memories ``agent_id``'s write ``write_id`` already produced (another agent's never count)."""
        return self.find_writes([(agent_id, write_id)]).get((agent_id, write_id), [])

    def find_writes(
        self, keys: Sequence[WriteKey], by_filter: Collection[WriteKey] | None = None
    ) -> dict[WriteKey, list[str]]:
        """Which of ``keys`` (owner, write_id) the store holds, with their memory ids, in one lookup for all.

        A batched write is found by its derived point id (or, written before write ids had an owner, by
        the legacy one: counted only when its payload names the same owner).  A write mem0 made itself
        (random ids: an inferred write, a direct add) only by a filter on ``write_id`` and ``agent_id``,
        which a server answers from its payload indexes but local mode evaluates in Python over the whole
        collection, once per value: there only the keys in ``by_filter`` are looked up that way (None: all).
        """
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        if self.settings.on_edge:
            return self._find_writes_on_edge(keys, by_filter)
        from qdrant_client import models

        client = self._client_only()
        found: dict[WriteKey, list[str]] = {}
        if self.settings.backend == "remote":
            by_filter = keys  # indexed on a server: one filtered scroll finds every kind
        else:
            candidates = candidate_points(keys)
            with _translate_errors("lookup"):
                points = client.retrieve(self.settings.collection, ids=list(candidates), with_payload=KEY_FIELDS)
            for point in points:
                key = owner_of(candidates[str(point.id)], point.payload)
                if key is not None:
                    found.setdefault(key, []).append(str(point.id))
        rest = [k for k in (keys if by_filter is None else by_filter) if k not in found]
        if not rest:
            return found
        wanted = set(rest)
        conditions = [
            models.FieldCondition(key="write_id", match=models.MatchAny(any=sorted({w for _, w in rest}))),
            models.FieldCondition(key="agent_id", match=models.MatchAny(any=sorted({a for a, _ in rest}))),
        ]
        offset = None
        with _translate_errors("lookup"):
            while True:
                points, offset = client.scroll(
                    self.settings.collection,
                    scroll_filter=models.Filter(must=conditions),
                    limit=max(64, 2 * len(rest)),  # an inferred write may have made several memories
                    offset=offset,
                    with_payload=KEY_FIELDS,
                )
                for point in points:
                    key = owner_of(wanted, point.payload)  # the filter pairs any owner with any write_id
                    if key is not None and str(point.id) not in found.setdefault(key, []):
                        found[key].append(str(point.id))
                if offset is None:
                    return found

    def _find_writes_on_edge(
        self, keys: Sequence[WriteKey], by_filter: Collection[WriteKey] | None = None
    ) -> dict[WriteKey, list[str]]:
        """By derived id (and legacy id) first, then the keys of ``by_filter`` (None: all) not found so by the
        indexed ``write_id``/``agent_id``: a write made at its derived id needs no filtered scroll (a direct add
        under load paid one per write), only one that may sit at mem0's random id (a suspect) does."""
        shard = self._edge()
        if shard is None:
            return {}
        candidates = candidate_points(keys)
        found: dict[WriteKey, list[str]] = {}
        with _translate_errors("lookup"):
            for hit in shard.retrieve(list(candidates), with_payload=KEY_FIELDS):
                key = owner_of(candidates[hit.id], hit.payload)
                if key is not None:
                    found.setdefault(key, []).append(hit.id)
            rest = [k for k in (keys if by_filter is None else by_filter) if k not in found]
            wanted = set(rest)
            conditions = {
                "write_id": {"in": sorted({w for _, w in rest})},
                "agent_id": {"in": sorted({a for a, _ in rest})},
            }
            offset = None
            while rest:
                page, offset = shard.scroll(
                    conditions, limit=max(64, 2 * len(rest)), offset=offset, with_payload=KEY_FIELDS
                )
                for hit in page:
                    key = owner_of(wanted, hit.payload)  # the filter pairs any owner with any write_id
                    if key is not None and hit.id not in found.setdefault(key, []):
                        found[key].append(hit.id)
                if offset is None:
                    break
        return found

    def add_batch(self, memories: Sequence[NewMemory], suspects: Collection[WriteKey] = ()) -> list[BatchResult]:
        """Write ``infer=False`` memories not yet in the store, each once, in the order given.

        One lookup, one embedding call, one upsert (one commit), one history commit for the whole
        batch.  ``suspects`` are writes (owner, write_id) that may already be stored under a random id (a direct
        add that was tried before it was queued): those are also looked up by a ``write_id`` filter.
        A memory mem0 would refuse comes back ``REFUSED`` with the reason and does not stop the
        others; StoreRequestError when the store refuses the upsert itself (split the batch then).
        A write is its owner's (``NewMemory.write_key``): two agents' equal write ids are two writes.
        """
        if any(m.infer for m in memories):
            raise ValueError("add_batch writes infer=False memories only; inferred writes go through add()")
        mem0, _ = self._require()
        existing = self.find_writes([m.write_key for m in memories], by_filter=suspects)
        results: dict[WriteKey, BatchResult] = {}
        todo: list[tuple[NewMemory, dict]] = []
        for memory in memories:
            key = memory.write_key
            if key in existing:
                results[key] = BatchResult(memory.write_id, "EXISTS", tuple(existing[key]))
                continue
            try:
                todo.append((memory, mem0_payload(memory)))
            except (ValueError, TypeError) as exc:
                results[key] = BatchResult(memory.write_id, "REFUSED", reason=describe_error(exc))
        if todo:
            ids = [point_id_of(*m.write_key) for m, _ in todo]
            payloads = [payload for _, payload in todo]
            with _translate_errors("replay"), self._noting(ids):
                vectors = mem0.embedding_model.embed_batch([m.text for m, _ in todo], "add")
                with self._one_commit():
                    mem0.vector_store.insert(vectors=vectors, ids=ids, payloads=payloads)
            self.changed()
            history = [
                {
                    "memory_id": memory_id,
                    "old_memory": None,
                    "new_memory": payload["data"],
                    "event": "ADD",
                    "created_at": payload["created_at"],
                    "updated_at": payload["updated_at"],
                    "actor_id": payload.get("actor_id"),
                    "role": payload["role"],
                }
                for memory_id, payload in zip(ids, payloads, strict=True)
            ]
            with _translate_errors("history"):
                mem0.db.batch_add_history(history)
            for (memory, _), memory_id in zip(todo, ids, strict=True):
                results[memory.write_key] = BatchResult(memory.write_id, "ADD", (memory_id,))
        self.upkeep()
        return [results[m.write_key] for m in memories]

    @contextmanager
    def _one_commit(self) -> Iterator[None]:
        """Local mode commits, and fsyncs, once per point (~20 ms each here): make a batch one transaction.

        qdrant-client's local persistence writes each point inside ``with connection:``; during the
        batch its connection is stood in for by one whose ``with`` does not commit, and the batch is
        committed once at the end.  When that fails the in-memory collection may hold points that
        are not on disk, so the client is closed and the collection reloaded from disk.  On a
        server, or a qdrant-client whose internals differ, this does nothing.
        """
        persistence = self._local_persistence()
        if persistence is None:
            yield
            return
        connection = persistence.storage
        persistence.storage = _NoCommit(connection)
        try:
            yield
            connection.commit()
        except BaseException:
            with suppress(Exception):
                connection.rollback()
            self.close()  # memory and disk may differ now: reopen from disk
            raise
        finally:
            persistence.storage = connection

    def _local_persistence(self):
        local = getattr(self._client, "_client", None)
        collection = getattr(local, "collections", {}).get(self.settings.collection)
        persistence = getattr(collection, "storage", None)
        connection = getattr(persistence, "storage", None)
        return persistence if isinstance(connection, sqlite3.Connection) else None

    def search(
        self,
        query: str,
        phases: Sequence[Phase],
        limit: int,
        filters: dict | None = None,
        include_expired: bool = False,
        threshold: float = 0.0,
        explain: bool = False,
        show_superseded: bool = False,
        show_archived: bool = False,
        trust_min: str | None = None,
    ) -> list[dict]:
        """Each phase searched on its own (``filters``, mem0's language, ANDed with it), merged by score,
        de-duplicated by content hash.

        The query is embedded once and each phase is one filtered nearest-neighbour query on the
        engine, with the filter built by layers/conversation/policy/filters.py: mem0's ``search`` is not
        used here because its filter processing merges a caller's ``AND`` items into the phase's own
        keys (see filters.py), and its BM25 and entity boosts have nothing to work with in this
        installation (no fastembed, no spaCy), so the ranking is the same semantic one.  Scores are
        relevances: the embedder's calibrated map of the cosine onto [0, 1] (``pair_relevance``, measured for
        the local e5 model in layers/local/models/vectors.py, on the Chinese scale when query and memory are
        both Chinese), so that ``threshold`` means what it means in mem0; an embedder without one gives the
        cosine clamped to [0, 1], as mem0's stores do.  ``explain`` adds ``score_details`` (the phase, the
        visibility filter's verdict, the cosine, the relevance).  Results are ordered by the relevance
        before it is clamped (so memories above the scale's top keep their order instead of tying at 1.0,
        whatever phase they come from; issue 50), and a memory whose text is the query's own (words, case
        and spacing aside) comes first, the caller's own before another agent's.
        Superseded and archived memories are left out inside each query (layers/conversation/policy/validity.py)
        unless ``show_superseded`` / ``show_archived``.  A result's score is its relevance (times the
        role's weight) times its importance's rank factor (layers/conversation/policy/decay.py); ``threshold``
        applies to the relevance, before importance: a faded memory ranks lower, it is not cut.
        ``trust_min`` keeps memories of that trust and above, inside the query; equal cosines rank by trust.
        """
        mem0, _ = self._require()
        now = time.time()
        moment = datetime.fromtimestamp(now, timezone.utc)
        text_match = has_text_match(filters)
        fetch = min(max(4 * limit, 100), 1000) if text_match else limit  # substring checks drop candidates
        if self.decay.rank_weight:  # importance may lift one from past the first ``limit`` by relevance
            fetch = min(max(fetch, 2 * limit, limit + 10), 1000)
        found: list[tuple[tuple, dict]] = []
        hidden = validity.hidden_states(show_superseded, show_archived)
        trusted = trust_filter(trust_min)
        caller = next((phase.owner for phase in phases if phase.owner), None)
        asked = _same_text_key(query)
        with _translate_errors("search"), self._optimize_held():
            vector = mem0.embedding_model.embed(query, "search")
            for phase in phases:
                combined = restrict(self._phase_filter_dict(phase, include_expired, now, hidden), filters)
                if trusted:
                    combined = restrict(combined, trusted)
                for point_id, payload, cosine in self._nearest(mem0, query, vector, engine_part(combined), fetch):
                    if text_match and not matches(payload, combined):
                        continue
                    weight = ASSISTANT_WEIGHT if payload.get("role") == "assistant" else 1.0
                    unclamped = self.pair_relevance(cosine, query, payload.get("data") or "")
                    relevance = min(1.0, max(0.0, unclamped)) * weight
                    if relevance < threshold:
                        continue
                    importance = self.decay.importance(payload, moment)
                    factor = self.decay.rank_factor(importance)
                    score = relevance * factor
                    exact = _same_text_key(payload.get("data") or "") == asked
                    own = exact and caller is not None and payload.get("agent_id") == caller
                    view = memory_view(point_id, payload, score, decay=self.decay)
                    view["phase"] = phase.name
                    if explain:
                        view["score_details"] = {
                            "phase": phase.name,
                            "visibility": _why_visible(phase),
                            "cosine": round(float(cosine), 4),
                            "relevance": round(relevance / weight, 4),
                            "unclamped_relevance": round(unclamped, 4),
                            "exact_match": "own" if own else "other" if exact else None,
                            "role_weight": weight,
                            "importance": round(importance, 4),
                            "decay_factor": round(factor, 4),
                            "score": round(score, 4),
                            "calibrated": bool(getattr(self.embedder, "calibrated", False)),
                            "threshold": threshold,
                            "filters": filters,
                        }
                    scaled = weight * factor
                    order = (int(own) + int(exact), max(0.0, unclamped) * scaled, float(cosine) * scaled)
                    found.append(((*order, _trust_rank(view)), view))
        found.sort(key=lambda item: item[0], reverse=True)
        seen: set[str] = set()
        merged = []
        for _, view in found:
            key = view["hash"] or view["id"]
            if key not in seen:
                seen.add(key)
                merged.append(view)
        return merged[:limit]

    def relevance(self, cosine: float) -> float:
        """The embedder's relevance for a query-to-passage cosine, or the cosine clamped to [0, 1]."""
        calibrate = getattr(self.embedder, "relevance", None)
        return float(calibrate(cosine)) if calibrate is not None else min(1.0, max(0.0, float(cosine)))

    def pair_relevance(self, cosine: float, query: str, memory: str) -> float:
        """The embedder's L4 relevance of ``memory`` for ``query``, not clamped (above 1 it still orders results),
        or, for an embedder without one, its :meth:`relevance` (the cosine clamped to [0, 1])."""
        calibrate = getattr(self.embedder, "pair_relevance", None)
        return float(calibrate(cosine, query, memory)) if calibrate is not None else self.relevance(cosine)

    def _nearest(self, mem0, query: str, vector, filters: dict | None, limit: int) -> builtins.list[tuple]:
        """(id, payload, score) of the ``limit`` nearest points matching ``filters`` (mem0's dictionary form)."""
        if self.settings.on_edge:
            return [(h.id, h.payload or {}, h.score) for h in mem0.vector_store.search(query, vector, limit, filters)]
        answer = self._client_only().query_points(
            self.settings.collection, query=vector, query_filter=to_qdrant(filters), limit=limit, with_payload=True
        )
        return [(p.id, p.payload or {}, max(0.0, float(p.score))) for p in answer.points]

    def _optimize_held(self):
        """On Edge, a running optimize child stopped for the whole search (all phases; see EdgeCollection.reading)."""
        reading = getattr(self._client, "reading", None) if self.settings.on_edge else None
        return reading() if reading is not None else nullcontext()

    def _phase_filter_dict(
        self, phase: Phase, include_expired: bool, now: float, hidden: Sequence[str] = validity.HIDDEN_BY_DEFAULT
    ) -> dict:
        """The phase in mem0's filter form (what an Edge shard is queried with), ``hidden`` states left out."""
        filters: dict = {"visibility": phase.visibility}
        if phase.owner:
            filters["agent_id"] = phase.owner
        if phase.visibility == "project":
            filters["project_id"] = {"in": list(phase.projects)}
        excluded: list[dict] = []
        if not include_expired:
            excluded.append({EXPIRY_FIELD: {"lt": now}})
        if hidden:
            excluded.append({validity.STATE: {"in": list(hidden)}})
        if excluded:
            filters["NOT"] = excluded
        return filters

    def _phase_filter(self, phase: Phase, include_expired: bool, now: float, filters: dict | None = None):
        """The phase (and the caller's ``filters``, ANDed) as a qdrant-client filter."""
        return to_qdrant(restrict(self._phase_filter_dict(phase, include_expired, now), filters))

    def list(
        self,
        phases: Sequence[Phase],
        limit: int = 100,
        cursor: str | None = None,
        include_expired: bool = False,
        filters: dict | None = None,
        show_superseded: bool = False,
        show_archived: bool = False,
    ) -> tuple[builtins.list[dict], str | None]:
        """One page of the memories the phases allow (and ``filters`` match); the cursor resumes where it ended.

        Superseded and archived memories only with ``show_superseded`` / ``show_archived``, as in a search."""
        client = self._client_only()
        phase_index, offset = 0, None
        if cursor:
            phase_index, offset = _parse_cursor(cursor, len(phases))
        now = time.time()
        text_match = has_text_match(filters)
        hidden = validity.hidden_states(show_superseded, show_archived)
        page: list[dict] = []
        with _translate_errors("list"):
            while phase_index < len(phases) and len(page) < limit:
                combined = restrict(self._phase_filter_dict(phases[phase_index], include_expired, now, hidden), filters)
                engine = engine_part(combined)
                if self.settings.on_edge:
                    if client is None:
                        break  # nothing was ever written
                    points, next_offset = client.scroll(engine, limit=limit - len(page), offset=offset)
                else:
                    points, next_offset = client.scroll(
                        self.settings.collection,
                        scroll_filter=to_qdrant(engine),
                        limit=limit - len(page),
                        offset=offset,
                        with_payload=True,
                    )
                page.extend(
                    memory_view(p.id, p.payload or {}, decay=self.decay)
                    for p in points
                    if not text_match or matches(p.payload or {}, combined)
                )
                if next_offset is None:
                    phase_index, offset = phase_index + 1, None
                else:
                    offset = next_offset
        more = phase_index < len(phases)
        return page, (f"{phase_index}:{offset or ''}" if more else None)

    def get(self, memory_id: str) -> dict | None:
        client = self._client_only()
        with _translate_errors("get"):
            try:
                if self.settings.on_edge:
                    points = client.retrieve([memory_id]) if client is not None else []
                else:
                    points = client.retrieve(self.settings.collection, ids=[memory_id], with_payload=True)
            except ValueError:  # not a valid point id
                return None
        return memory_view(points[0].id, points[0].payload or {}, decay=self.decay) if points else None

    def delete(self, memory_id: str) -> None:
        mem0, _ = self._require()
        with _translate_errors("delete"), self._noting([memory_id]):
            mem0.delete(memory_id)
        self.changed()
        self.upkeep()

    def count(self) -> int:
        client = self._client_only()
        with _translate_errors("count"):
            if self.settings.on_edge:
                return client.count() if client is not None else 0
            return client.count(self.settings.collection, exact=True).count

    def scan(
        self, selection, limit: int = 256, cursor: str | None = None, filters: dict | None = None
    ) -> tuple[builtins.list[dict], str | None]:
        """Every memory ``selection`` (a cleanup Selection) and ``filters`` match, expired ones included, a page at
        a time (a page may hold fewer than ``limit`` when a substring condition dropped some: follow the cursor)."""
        combined = restrict(_selection_fields(selection), filters)
        engine = engine_part(combined)
        if self.settings.on_edge:
            shard = self._edge()
            if shard is None:
                return [], None  # nothing was ever written
            with _translate_errors("scan"):
                points, next_offset = shard.scroll(engine, limit=limit, offset=cursor or None)
        else:
            client = self._client_only()
            with _translate_errors("scan"):
                if not client.collection_exists(self.settings.collection):
                    return [], None  # nothing was ever written
                points, next_offset = client.scroll(
                    self.settings.collection,
                    scroll_filter=to_qdrant(engine),
                    limit=limit,
                    offset=cursor or None,
                    with_payload=True,
                )
            next_offset = str(next_offset) if next_offset else None
        kept = [p for p in points if matches(p.payload or {}, combined)] if has_text_match(filters) else points
        return [memory_view(p.id, p.payload or {}, decay=self.decay) for p in kept], next_offset

    def delete_ids(self, ids: builtins.list[str]) -> None:
        """Delete a batch of points in one request (the seed's script built this call wrongly)."""
        if not ids:
            return
        self.changed()
        if self.settings.on_edge:
            shard = self._edge()
            if shard is not None:
                with _translate_errors("delete"), self._noting(ids):
                    shard.delete(ids)
                self.upkeep()
            return
        from qdrant_client import models

        client = self._client_only()
        with _translate_errors("delete"), self._noting(ids):
            client.delete(self.settings.collection, points_selector=models.PointIdsList(points=ids), wait=True)

    # ------------------------------------------------------------ update, history

    def update(self, memory_id: str, text: str, expiration: tuple[str | None, float | None] | None = None) -> None:
        """Replace a memory's text through mem0 (re-embedded, created_at kept, updated_at set, UPDATE event).

        ``expiration`` (mem0's date, our epoch seconds; both None: never) moves the expiry too; None leaves
        it as it is.
        """
        mem0, _ = self._require()
        metadata: dict[str, Any] = {validity.VALID_FROM: _now_iso()}  # the new text is true from now
        options: dict = {}
        if expiration is not None:
            metadata[EXPIRY_FIELD] = expiration[1]
            options = {"expiration_date": expiration[0]}
        with _translate_errors("update"), self._noting([memory_id]):
            mem0.update(memory_id, text=text, metadata=metadata, **options)
        self.changed()
        self.upkeep()

    # ------------------------------------------------------------ validity (layers/conversation/policy/validity.py)

    def supersede(self, old_ids: Sequence[str], by_id: str, at: str) -> None:
        """Mark ``old_ids`` superseded by ``by_id`` at ``at`` (ISO 8601): one payload write for all of them.

        The one primitive a change of what is true goes through (``add(..., supersedes=ID)``, a
        consolidation merging several memories into one): on Edge a single engine update (one WAL
        record: all the points or none), on a server one ``set_payload`` request.  Who may supersede
        what is the caller's to decide; this only writes.  :meth:`restore_fields` undoes it.
        """
        ids = [str(i) for i in old_ids if str(i) != str(by_id)]
        if not ids:
            return
        self._set_payload_of(ids, validity.supersede_payload(str(by_id), at), "supersede")

    def restore_fields(self, memory_id: str, fields: dict[str, Any]) -> bool:
        """Put lifecycle fields of one memory back as they were (None removes one): undoes a supersede or an
        archive.  One write of the whole payload; False when there is no such memory.

        Only :data:`validity.LIFECYCLE_FIELDS` (ValueError for any other): a restore re-validates a memory,
        it never re-owns, re-places or re-words it.
        """
        current = self._payloads([memory_id]).get(str(memory_id))
        if current is None:
            return False
        payload = validity.restored_payload(current, fields)
        self.changed()
        if self.settings.on_edge:
            shard = self._edge()
            with _translate_errors("restore"), self._noting([memory_id]):
                shard.replace_payload(str(memory_id), payload)
            self.upkeep()
            return True
        client = self._client_only()
        with _translate_errors("restore"), self._noting([memory_id]):
            client.overwrite_payload(self.settings.collection, payload=payload, points=[str(memory_id)], wait=True)
        return True

    def archive(self, memory_ids: Sequence[str], at: str) -> None:
        """Archive faded memories (layers/conversation/policy/decay.py): hidden from search, kept, restorable.

        One payload write for all of them; :meth:`restore_fields` brings one back."""
        ids = [str(i) for i in memory_ids]
        if ids:
            self._set_payload_of(ids, validity.archive_payload(at), "archive")

    def record_access(self, batch: dict[str, tuple[int, str]]) -> int:
        """Add a batch of hits (id -> (count, last ISO time)) to the memories' ``access_count`` / ``last_accessed``.

        One lookup for the batch, then one small payload write per memory (their counts differ); a
        memory deleted since it was returned is skipped.  The number of memories updated.
        """
        current = self._payloads(list(batch), [ACCESS_COUNT, LAST_ACCESSED])
        if not current:
            return 0
        updates = {i: merged_access(p, *batch[i]) for i, p in current.items()}
        self.changed()
        if self.settings.on_edge:
            shard = self._edge()
            with _translate_errors("access"):
                for memory_id, fields in updates.items():
                    shard.set_payload(memory_id, fields)
            self.upkeep()
        else:
            client = self._client_only()
            with _translate_errors("access"):
                for memory_id, fields in updates.items():
                    client.set_payload(self.settings.collection, payload=fields, points=[memory_id], wait=True)
        return len(updates)

    def states(self, memory_ids: Sequence[str]) -> dict[str, str]:
        """``valid`` / ``superseded`` / ``archived`` of each of ``memory_ids`` that exists (one lookup)."""
        return {i: validity.state_of(p) for i, p in self._payloads(memory_ids, [validity.STATE]).items()}

    def predecessors(self, memory_id: str, limit: int = 64) -> builtins.list[dict]:
        """The memories ``memory_id`` superseded (their ``superseded_by`` names it), oldest first."""
        wanted = {validity.SUPERSEDED_BY: str(memory_id)}
        if self.settings.on_edge:
            shard = self._edge()
            if shard is None:
                return []
            with _translate_errors("history"):
                points, _ = shard.scroll(wanted, limit=limit)
        else:
            client = self._client_only()
            with _translate_errors("history"):
                points, _ = client.scroll(
                    self.settings.collection, scroll_filter=to_qdrant(wanted), limit=limit, with_payload=True
                )
        views = [memory_view(p.id, p.payload or {}, decay=self.decay) for p in points]
        return sorted(views, key=lambda v: (v.get("invalid_at") or "", v.get("created_at") or ""))

    def _payloads(self, memory_ids: Sequence[str], fields: builtins.list[str] | None = None) -> dict[str, dict]:
        """The payloads (or ``fields`` of them) of the memories among ``memory_ids`` that exist."""
        ids = [str(i) for i in memory_ids]
        if not ids:
            return {}
        selector: bool | builtins.list[str] = fields if fields else True
        if self.settings.on_edge:
            shard = self._edge()
            if shard is None:
                return {}
            with _translate_errors("get"):
                return {h.id: h.payload for h in shard.retrieve(ids, with_payload=selector)}
        client = self._client_only()
        with _translate_errors("get"):
            points = client.retrieve(self.settings.collection, ids=ids, with_payload=selector)
        return {str(p.id): p.payload or {} for p in points}

    def _set_payload_of(self, ids: builtins.list[str], payload: dict[str, Any], what: str) -> None:
        self.changed()
        if self.settings.on_edge:
            shard = self._edge()
            if shard is None:
                return
            with _translate_errors(what), self._noting(ids):
                shard.set_payload_of(ids, payload)
            self.upkeep()
            return
        client = self._client_only()
        with _translate_errors(what), self._noting(ids):
            client.set_payload(self.settings.collection, payload=payload, points=ids, wait=True)

    # ------------------------------------------------------------ the hub's feed and snapshot (with vectors)

    def points(self, memory_ids: Sequence[str]) -> dict[str, tuple[dict, builtins.list[float]]]:
        """(payload, vector) of each of ``memory_ids`` that exists: what a spoke's replica holds of it."""
        ids = [str(i) for i in memory_ids]
        if not ids:
            return {}
        if self.settings.on_edge:
            shard = self._edge()
            if shard is None:
                return {}
            with _translate_errors("get"):
                hits = shard.retrieve(ids, with_payload=True, with_vector=True)
            return {h.id: (h.payload or {}, _plain_vector(h.vector)) for h in hits}
        client = self._client_only()
        with _translate_errors("get"):
            found = client.retrieve(self.settings.collection, ids=ids, with_payload=True, with_vectors=True)
        return {str(p.id): (p.payload or {}, _plain_vector(p.vector)) for p in found}

    def points_page(
        self, limit: int, cursor: str | None = None
    ) -> tuple[builtins.list[tuple[str, dict, builtins.list[float]]], str | None]:
        """One page of every point (id, payload, vector) in id order, and the cursor of the next (None: done)."""
        if self.settings.on_edge:
            shard = self._edge()
            if shard is None:
                return [], None
            with _translate_errors("scan"):
                hits, next_offset = shard.scroll(None, limit=limit, offset=cursor or None, with_vector=True)
            return [(h.id, h.payload or {}, _plain_vector(h.vector)) for h in hits], next_offset
        client = self._client_only()
        with _translate_errors("scan"):
            if not client.collection_exists(self.settings.collection):
                return [], None
            points, offset = client.scroll(
                self.settings.collection, limit=limit, offset=cursor or None, with_payload=True, with_vectors=True
            )
        rows = [(str(p.id), p.payload or {}, _plain_vector(p.vector)) for p in points]
        return rows, (str(offset) if offset else None)

    def history(self, memory_id: str) -> builtins.list[dict]:
        """mem0's history of one memory: its ADD/UPDATE/DELETE events, oldest first."""
        mem0, _ = self._require()
        with _translate_errors("history"):
            return list(mem0.history(memory_id))

    # ------------------------------------------------------------ dedup on write

    def nearest(self, memory: NewMemory, count: int = 3) -> builtins.list[tuple[dict, float]]:
        """The stored memories closest to ``memory`` in its scope (owner, visibility, project), with cosines.

        The new text is embedded as a passage, as stored memories are, so the score is passage to
        passage (what dedup's threshold was measured on), not the query-to-passage score of a search.
        Expired memories do not count, nor superseded or archived ones (inside the query): restating a
        fact that was replaced, or that faded, is a new statement, never a NOOP answered with a memory
        searches leave out (nor, with ``supersedes``, a replacement that is itself replaced: a cycle).
        """
        mem0, _ = self._require()
        filters: dict[str, Any] = {"agent_id": memory.agent_id, "visibility": memory.visibility}
        if memory.project_id:
            filters["project_id"] = memory.project_id
        for key in ("user_id", "run_id"):  # a memory about alice is not a duplicate of one about bob
            value = getattr(memory, key)
            if value:
                filters[key] = value
        filters["NOT"] = [{validity.STATE: {"in": list(validity.HIDDEN_BY_DEFAULT)}}]
        with _translate_errors("dedup"):
            vector = mem0.embedding_model.embed(memory.text, "dedup")  # kept for the write that may follow
            hits = self._nearest(mem0, memory.text, vector, filters, count)
        now = time.time()
        found = []
        for point_id, payload, score in hits:
            expires_at = payload.get(EXPIRY_FIELD)
            if expires_at is None or expires_at >= now:
                found.append((memory_view(point_id, payload, decay=self.decay), float(score)))
        return found


def _plain_vector(vector: Any) -> builtins.list[float]:
    """A point's vector as a list of floats (the engine's one unnamed vector)."""
    if isinstance(vector, dict):
        vector = next(iter(vector.values()), [])
    return [float(x) for x in (vector or [])]


def _trust_rank(view: dict) -> int:
    """A result's trust (layers/conversation/policy/rules.py) as a number: the last tie-break of a search's order."""
    return TRUST_RANK.get(view.get("trust") or "", TRUST_RANK[DEFAULT_TRUST])


def _same_text_key(text: str) -> str:
    """What two texts must share to be the same memory text: the words, whatever their case and spacing."""
    return " ".join(text.split()).casefold()


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _history_in_wal_mode(connection: sqlite3.Connection) -> None:
    """mem0's history database in WAL mode, synchronous=NORMAL: one write no longer costs ~16 ms.

    mem0 opens it in rollback-journal mode, where each history row (three statements, a commit)
    fsyncs the journal and the database: 16 ms of the 25 ms an ``add(infer=False)`` took here.
    In WAL mode with NORMAL a commit survives the process being killed (what the daemon's
    crash rules are about); only a power cut can take the last commits, as it can the shard's.
    """
    with suppress(sqlite3.Error):
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        keep_wal_small(connection)  # its -wal never shrank (layers/common/sqlite_wal.py)


META_FILE = "meta.json"  # qdrant-client local mode: the collections' configuration
META_COPY = "meta.json.last-good"  # ours: the last meta.json that opened


def _valid_meta(path: Path) -> bytes | None:
    """The file's bytes when they are a meta.json qdrant-client can read, else None."""
    try:
        data = path.read_bytes()
        meta = json.loads(data)
    except (OSError, ValueError):
        return None
    ok = isinstance(meta, dict) and isinstance(meta.get("collections"), dict) and isinstance(meta.get("aliases"), dict)
    return data if ok else None


def _prepare_local_meta(path: Path) -> None:
    """Make sure qdrant-client finds a readable meta.json, or none at all.

    qdrant-client writes the first meta.json in place: on a full disk that leaves
    an empty file, and every later open fails on it for ever (JSONDecodeError).
    So the first one is written here, atomically; an empty or damaged one is
    replaced by the last copy that opened, or (when no collection was ever
    stored) by an empty one.  A damaged file with data but no copy is refused
    with a message instead of being guessed at.
    """
    meta = path / META_FILE
    if not os.path.lexists(meta):
        atomic_write(meta, json.dumps({"collections": {}, "aliases": {}}))
        return
    if _valid_meta(meta) is not None:
        return
    copy = _valid_meta(path / META_COPY)
    if copy is not None:
        log.warning("embedded store: %s was empty or damaged; restored the last copy that opened", meta)
        atomic_write(meta, copy)
        return
    stored = [p.name for p in (path / "collection").glob("*") if p.is_dir()] if (path / "collection").is_dir() else []
    if not stored:
        log.warning("embedded store: %s was empty or damaged and no collection is stored; starting it afresh", meta)
        atomic_write(meta, json.dumps({"collections": {}, "aliases": {}}))
        return
    raise StoreConfigError(
        f"{meta} is empty or damaged and there is no earlier copy ({META_COPY}); the collections "
        f"{', '.join(sorted(stored))} are still under {path / 'collection'}: restore meta.json from a backup "
        "(`memstrata backup` archives hold it)"
    )


def _keep_local_meta(path: Path) -> None:
    """Keep a copy of a meta.json that opened, for :func:`_prepare_local_meta` (best effort)."""
    current = _valid_meta(path / META_FILE)
    if current is None:
        return
    try:
        if (path / META_COPY).read_bytes() == current:
            return
    except OSError:
        pass
    try:
        atomic_write(path / META_COPY, current, mode=0o600)
    except OSError as exc:
        log.debug("embedded store: no copy of meta.json kept (%s)", exc)


def _parse_cursor(cursor: str, phases: int) -> tuple[int, str | None]:
    """``"<phase>:<point id>"`` as :meth:`ConversationStore.list` hands it out; ValueError otherwise."""
    head, _, rest = cursor.partition(":")
    try:
        if not head.isdigit() or int(head) >= phases:
            raise ValueError(head)
        if rest:
            uuid.UUID(rest)  # point ids are UUIDs; anything else would reach the server as a bad request
    except ValueError:
        raise ValueError(f"not a cursor from this listing: {cursor!r}") from None
    return int(head), rest or None


@contextmanager
def _translate_errors(what: str) -> Iterator[None]:
    """Anything the client raises becomes :class:`StoreUnavailableError` with a short reason."""
    try:
        yield
    except (StoreConfigError, StoreUnavailableError, StoreRequestError):
        raise
    except Exception as exc:
        if type(exc).__name__ == "VectorsUnavailableError":  # the embedder's gate, without importing L3
            raise StoreUnavailableError(f"{what}: embedder unavailable: {exc}") from exc
        if _is_request_error(exc):  # must not open the breaker: the store itself answered
            raise StoreRequestError(f"{what}: {describe_error(exc)}") from exc
        raise StoreUnavailableError(f"{what}: {describe_error(exc)}") from exc


def _is_request_error(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return 400 <= status < 500 and status not in (408, 429)
    return isinstance(exc, (ValueError, TypeError))


def describe_error(exc: BaseException) -> str:
    """A one-line reason without secrets or tracebacks: the exception's kind and first line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    cause = exc.__cause__ or exc.__context__
    if not text and cause is not None:
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


class _NoCommit:
    """A sqlite3 connection whose ``with`` block neither commits nor rolls back (see ``_one_commit``)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def __enter__(self) -> _NoCommit:
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        return False

    def __getattr__(self, name: str):
        return getattr(self._connection, name)


AHEAD_KEPT = 64  # vectors embedded ahead and not yet used (a call that never came) are forgotten past this


class _Mem0Embedder:
    """Our embedder in mem0's shape: passages for writes, queries (with the query prefix) for search.

    A vector may be embedded ahead, on the caller's thread (:meth:`embed_ahead`), so the one thread
    that touches the store spends its time on the store and not on the model: one agent's stream of
    writes then holds another agent's search up by one store operation, not by an embedding.
    """

    def __init__(self, embedder: Embedder, dim: int) -> None:
        from mem0.configs.embeddings.base import BaseEmbedderConfig

        self.config = BaseEmbedderConfig(embedding_dims=dim)
        self._embedder = embedder
        self._last_query: tuple[str, list[float]] | None = None  # the phases of one search share it
        self._ahead: dict[tuple[str, bool], list[float]] = {}  # (text, is a query) -> its vector
        self._ahead_lock = threading.Lock()

    def embed_ahead(self, text: str, query: bool) -> None:
        """Embed ``text`` now, on the calling thread; the store call that needs it finds it here."""
        vector = (self._embedder.embed_query(text) if query else self._embedder.embed_passages([text])[0]).tolist()
        self._keep(text, query, vector)

    def _keep(self, text: str, query: bool, vector: list[float]) -> None:
        with self._ahead_lock:
            self._ahead[(text, query)] = vector
            while len(self._ahead) > AHEAD_KEPT:
                self._ahead.pop(next(iter(self._ahead)))

    def _taken(self, text: str, query: bool) -> list[float] | None:
        with self._ahead_lock:
            return self._ahead.pop((text, query), None)

    def embed(self, text, memory_action=None) -> list[float]:
        if memory_action == "search":
            if self._last_query and self._last_query[0] == text:
                return self._last_query[1]
            vector = self._taken(text, True) or self._embedder.embed_query(text).tolist()
            self._last_query = (text, vector)
            return vector
        vector = self._taken(text, False) or self._embedder.embed_passages([text])[0].tolist()
        if memory_action == "dedup":  # the write embeds the same text next: one embedding serves both
            self._keep(text, False, vector)
        return vector

    def embed_batch(self, texts, memory_action="add") -> list[list[float]]:
        if memory_action == "search":
            return [self.embed(t, "search") for t in texts]
        vectors: list[list[float] | None] = [self._taken(t, False) for t in texts]  # embedded ahead
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            fresh = self._embedder.embed_passages([texts[i] for i in missing])
            for i, vector in zip(missing, fresh, strict=True):
                vectors[i] = vector.tolist()
        return [v for v in vectors if v is not None]
