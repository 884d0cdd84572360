"""A spoke's offline replica of what its agents may read on the hub (issue 48): read with the hub away.

An embedded Edge store (the broker's own adapter, layers/conversation/adapters/store.py; its layout in
replica_store.py) in ``state_dir/conversation/replica/<generation>/``, and a small durable meta file beside it
(``replica/meta.json``: the generation, the feed ``seq`` and ``epoch`` it stands at, when it last
applied).  One thread (``hub-replica``) asks the hub's change feed (daemon/api/peer_feed.py) every
second while the hub answers (at once after a write of this host's agents), applies the changes in
order and records the seq after the store has flushed them, so a restart, SIGKILL included, resumes
from there (a change applied twice is the same state twice).  An epoch that differs (the hub restored,
this host's enrolment or its agents' projects changed) or a seq below the feed's horizon (compacted)
rebuilds it from the hub's snapshot into a new generation, built by a child process (replica_build.py: the
daemon's memory stays as it was); the meta file names the new one only once it is complete, and the old one
answers until then.

The spoke applies no rule: each memory comes with ``readers``, the agents of this host the hub computed
may read it, and a search or a listing here holds only memories whose readers name the caller (a filter
inside the store's query); every result, and a memory got by its id, is checked again by its readers
(``_checked``, one check for the three).  A memory no agent here may read never arrives (the hub sends
``null``: a delete).  Each answer has the hub's shape plus ``degraded: true``, the reason and ``replica_age_s``.
A history is not answered here: the replica holds each memory as it is now, not mem0's record of its events.

A search is ranked by the same code as on the hub (``ConversationStore.search``: the same phases, the
same relevance, decay and trust) with the query embedded by this host's embedder: when its model is not
the hub's (another id or size) the replica is not searched (vectors of two models do not compare) and
the caller's L3 answers, as before; nor is it read by id or listed then (one rule for when the replica
answers, the one status says: ``searchable``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from daemon.common.contracts import fit_memories
from daemon.common.domain_errors import NoSuchMemoryError
from daemon.conversation import replica_build
from daemon.conversation.hub_client import HubClient, HubUnreachable
from daemon.conversation.reads import checked_filters, is_uuid, made_between
from daemon.conversation.replica_store import LAYOUT, PAGE, READERS, ReplicaError, ask, open_store, write
from layers.conversation.adapters.store import ConversationStore, Embedder
from layers.conversation.policy.decay import DecayRules
from layers.conversation.policy.rules import Phase, PolicyError
from protocol.operations import List, MemorySearch

log = logging.getLogger(__name__)

FEED_PATH = "/v1/peer/feed"  # daemon/api/peer_feed.py's
POLL_S = 1.0  # while the hub answers
# A feed request a cut link caught in flight would wait the whole `conversation.hub.timeout_s` (the bench saw
# replicas catch up 12 s after the link returned), so a feed request gives up sooner; the one after a
# timed-out request waits the whole timeout, so a hub slow to answer a page (500 memories) is still followed.
FEED_TIMEOUT_S = 4.0


def replica_dir(state_dir: Path) -> Path:
    return state_dir / "conversation" / "replica"


class HubReplica:
    def __init__(
        self,
        root: Path,
        client: Callable[[], HubClient],
        embedder: Callable[[], Embedder | None],  # this host's, for queries (None: none configured)
        decay: DecayRules,
        host: Callable[[], str],  # this host's name on the hub (a private memory's owner is HOST/AGENT)
        on_change: Callable[[], None] = lambda: None,
        poll_s: float = POLL_S,
    ) -> None:
        self.root = root
        self.client = client
        self.embedder_of = embedder
        self.decay = decay
        self.host = host
        self.on_change = on_change
        self.poll_s = poll_s
        self.meta_path = root / "meta.json"
        self._lock = threading.RLock()  # the store: applied by the thread, searched by requests
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.store: ConversationStore | None = None
        self.meta: dict[str, Any] = {}
        self.head: int | None = None  # the hub's settled seq, as last seen
        self.polled_at: float | None = None  # wall time of the last feed answer applied
        self.rebuilds = 0
        self.rebuilding: dict[str, Any] | None = None
        self._builder: subprocess.Popen | None = None  # a rebuild's child process, while it runs
        self.last_error: str | None = None
        self._feed_timed_out = False  # the last feed request gave up at FEED_TIMEOUT_S: the next waits longer
        self.last_rebuild: dict[str, Any] | None = None
        self.memories = 0
        self._embedder: Embedder | None = None
        self._load()

    # ------------------------------------------------------------ lifecycle

    def _load(self) -> None:
        """The replica as the last run left it (nothing yet: built at the first answer of the hub)."""
        try:
            self.meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.meta = {}
        except (OSError, ValueError) as exc:
            log.warning("the replica's meta file %s cannot be read (%s): it is rebuilt", self.meta_path, exc)
            self.meta = {}
        polled = self.meta.get("polled_at")
        self.polled_at = float(polled) if isinstance(polled, (int, float)) else None
        self.rebuilds = int(self.meta.get("rebuilds") or 0)
        generation = self.meta.get("dir")
        dim = int((self.meta.get("model") or {}).get("dim") or 0)
        if generation and self.meta.get("layout") != LAYOUT:  # "dir" stays: the rebuild removes it after its swap
            log.info("the replica at %s is of an earlier layout: it is rebuilt from the hub's snapshot", generation)
        elif generation and dim:
            try:
                self.store = self._open(self.root / str(generation), dim)
                self.memories = self.store.count()
            except Exception as exc:  # a replica that cannot open is rebuilt: it is only a copy
                log.warning("the replica at %s cannot be opened (%s): it is rebuilt", generation, exc)
                self.store, self.meta = None, {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="hub-replica", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def request_stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        builder = self._builder
        if builder is not None:  # a rebuild under way: its child's part is dropped (the old generation stays)
            with contextlib.suppress(OSError):
                builder.kill()

    def stop(self, timeout: float) -> bool:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        with self._lock:
            if self.store is not None:
                with contextlib.suppress(Exception):
                    self.store.flush()
                    self.store.close()
        return True

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                more = self.poll()
                if self.last_error is not None:
                    log.info("the replica follows the hub's feed again")
                self.last_error = None
            except HubUnreachable as exc:
                self.last_error, more = f"the hub is unreachable ({exc})", False
            except Exception as exc:  # a bad answer or a store error: said in status, tried again
                error = f"{type(exc).__name__}: {exc}"
                if error != self.last_error:  # logged once while it stays the same
                    log.warning("the replica could not apply the hub's feed: %s", error)
                self.last_error, more = error, False
                self._stopping.wait(5.0)
            if not more:
                self._wake.wait(self.poll_s)
                self._wake.clear()

    # ------------------------------------------------------------ the feed

    def poll(self) -> bool:
        """One page of the feed applied (or a rebuild); True when more is waiting."""
        seq = int(self.meta.get("seq") or 0)
        short = not self._feed_timed_out
        try:
            data = ask(self.client(), FEED_PATH, {"after": seq, "limit": PAGE}, FEED_TIMEOUT_S if short else None)
        except HubUnreachable as exc:
            self._feed_timed_out = short and str(exc).startswith("no answer within")
            raise
        self._feed_timed_out = False
        if self.store is None or data.get("rebuild") or data.get("epoch") != self.meta.get("epoch"):
            if self.store is None:
                why = "an earlier layout" if self.meta.get("dir") else "first build"
            else:
                why = "compacted" if data.get("rebuild") else "epoch"
            self.rebuild(why)
            return True
        if data.get("model") != self.meta.get("model"):
            self.rebuild("the hub's model changed")
            return True
        changes = data.get("changes") or []
        if changes:
            self._apply(changes)
        else:
            self._upkeep()
        new_seq = int(data.get("seq") or seq)
        self.head = int(data.get("head") or new_seq)
        self.polled_at = time.time()
        if new_seq != seq or changes:
            self.meta.update(seq=new_seq, applied_at=self.polled_at, polled_at=self.polled_at)
            self._save()
            self.on_change()
        return len(changes) >= PAGE

    def _apply(self, changes: list[dict[str, Any]]) -> None:
        """The changes' final states in the store (the last of each id), flushed before the seq is recorded."""
        final: dict[str, dict[str, Any] | None] = {}
        for change in changes:
            final.pop(str(change["id"]), None)
            final[str(change["id"])] = change.get("memory")
        with self._lock:
            assert self.store is not None
            write(self.store._edge(), final, self.meta.setdefault("projects", {}))
            self.store.flush()
            self.store.upkeep()  # after the flush: an optimize's copy (no WAL here) takes what the files hold
            self.memories = self.store.count()

    def _upkeep(self) -> None:
        """The store's optimize schedule ticked with no change to apply (as the hub's store is on its ping): a
        finished optimize is swapped in, a due one started, without waiting for the next change."""
        with self._lock:
            if self.store is not None:
                self.store.upkeep()

    # ------------------------------------------------------------ a rebuild from the snapshot

    def rebuild(self, why: str) -> None:
        """The hub's snapshot into a new generation (replica_build.py's child), then the meta file names it; the
        old one answers meanwhile."""
        started = time.monotonic()
        self.rebuilding = {"why": why, "since": _now(), "memories": 0}
        self.on_change()
        generation = f"gen-{secrets.token_hex(4)}"
        target = self.root / generation
        store: ConversationStore | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            done = replica_build.build(self.client(), target, self._built_so_far, self._building)
            if self._stopping.is_set():
                raise ReplicaError("stopping")
            model = done["model"]
            store = self._open(target, int(model["dim"]))
            seconds = round(time.monotonic() - started, 2)
            with self._lock:
                old, self.store = self.store, store
                self.last_rebuild = {"why": why, "at": _now(), "memories": done["memories"], "seconds": seconds}
                self.rebuilds += 1
                self.meta.update(
                    dir=generation,
                    layout=LAYOUT,
                    seq=int(done["seq"]),
                    epoch=done["epoch"],
                    model=model,
                    projects=done["projects"],
                    applied_at=time.time(),
                    polled_at=time.time(),
                    rebuilds=self.rebuilds,
                )
                self._save()
                self.polled_at = self.meta["polled_at"]
                self.memories = store.count()
            store = None  # it is the replica now
            if old is not None:
                with contextlib.suppress(Exception):
                    old.close()
            for stale in self.root.glob("gen-*"):  # the one replaced, and any a killed build left half made
                if stale.name != generation:
                    shutil.rmtree(stale, ignore_errors=True)
            log.info(
                "the replica was rebuilt from the hub's snapshot (%s): %d memories in %.1f s",
                why,
                done["memories"],
                seconds,
            )
        except BaseException:
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
            shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            self.rebuilding = None
            self.on_change()

    def _built_so_far(self, memories: int) -> None:
        if self.rebuilding is not None:
            self.rebuilding["memories"] = memories

    def _building(self, child: subprocess.Popen | None) -> None:
        self._builder = child
        if child is not None and self._stopping.is_set():
            child.kill()  # a stop that came before the child existed

    def _open(self, path: Path, dim: int) -> ConversationStore:
        store = open_store(path, dim)
        store.decay = self.decay
        return store

    def _save(self) -> None:
        """The meta file replaced atomically and synced: what a restart resumes from."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.meta_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.meta, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.meta_path)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # ------------------------------------------------------------ search with the hub away

    def unusable(self) -> str:
        """Why the replica cannot answer a search ("" when it can)."""
        if self.store is None:
            return "no replica of the hub yet"
        model = self.meta.get("model") or {}
        embedder = self._query_embedder()
        if embedder is None:
            return "this host has no embedder for the replica's queries"
        mine, dim = str(getattr(embedder, "model_id", "")), _dimension(embedder)
        if mine != str(model.get("id")) or dim != int(model.get("dim") or 0):
            return (
                f"this host's embedder ({mine}, {dim} dimensions) is not the hub's ({model.get('id')}, "
                f"{model.get('dim')} dimensions): the replica's vectors cannot be searched with it"
            )
        return ""

    def _query_embedder(self) -> Embedder | None:
        if self._embedder is None:
            with contextlib.suppress(Exception):
                self._embedder = self.embedder_of()
        return self._embedder

    def age_s(self) -> float | None:
        return None if self.polled_at is None else round(max(0.0, time.time() - self.polled_at), 1)

    def search(self, o: MemorySearch, reason: str) -> dict[str, Any] | None:
        """``o`` answered from the replica (degraded, its age said), or None when it cannot answer."""
        why = self.unusable()
        if why:
            log.info("the replica cannot answer a search: %s", why)
            return None
        agent = o.agent
        wanted = made_between(checked_filters(o.filters), o.since, o.until)
        options: dict[str, Any] = {
            "filters": self._readable(agent, wanted),
            "threshold": o.threshold or 0.0,
            "explain": o.explain,
            "include_expired": o.show_expired,
            "show_superseded": o.show_superseded,
            "trust_min": o.trust_min,
        }
        with self._lock:
            store = self.store
            if store is None:
                return None
            store.embedder = self._embedder  # type: ignore[assignment]  # checked in unusable()
            try:
                found = store.search(o.query, self._phases(agent), o.limit, **options)
                results = self._checked(agent, found)
            except Exception as exc:  # the replica's store or the embedder failed: the caller's L3 answers
                self._failed("search", exc)
                return None
        for view in results:
            if "score_details" in view:
                view["score_details"]["filters"] = wanted  # the caller's, as the hub says them (not the readers')
        answer: dict[str, Any] = {"layer": "conversation", **self.degraded(reason), "query": o.query}
        answer["results"] = results
        return fit_memories(answer, o.max_tokens) if o.max_tokens is not None else answer

    def get_all(self, o: List, reason: str) -> dict[str, Any] | None:
        """One page of ``o`` from the replica, as the hub lists it (degraded, its age said); None: it cannot answer.

        The cursor is the replica's own (the phases of a listing here and on the hub need not match)."""
        why = self.unusable()
        if why:
            log.info("the replica cannot answer a listing: %s", why)
            return None
        agent = o.agent
        options: dict[str, Any] = {
            "filters": self._readable(agent, checked_filters(o.filters)),
            "show_superseded": o.show_superseded,
            "include_expired": o.show_expired,
            "show_archived": o.show_archived,
        }
        with self._lock:
            store = self.store
            if store is None:
                return None
            try:
                page, next_cursor = store.list(self._phases(agent), o.limit, o.cursor, **options)
                results = self._checked(agent, page)
            except ValueError as exc:  # a cursor this listing did not give (the hub's Reads.get_all: 400)
                raise PolicyError(str(exc)) from None
            except Exception as exc:
                self._failed("list", exc)
                return None
        return {
            "results": results,
            "next_cursor": next_cursor,
            "truncated": next_cursor is not None,
            **self.degraded(reason),
        }

    def get(
        self, agent: str, memory_id: str, reason: str, denied: Callable[[dict[str, Any]], None] = lambda view: None
    ) -> dict[str, Any] | None:
        """The memory from the replica if ``agent`` may read it (degraded, its age said); None: it cannot answer.

        NoSuchMemoryError when the replica holds no such memory *or* one ``agent`` may not read (another
        agent's of this host: ``denied`` is told it), in the same words: it is not admitted to exist."""
        why = self.unusable()
        if why:
            log.info("the replica cannot answer a get: %s", why)
            return None
        with self._lock:
            store = self.store
            if store is None:
                return None
            try:
                memory = store.get(memory_id) if is_uuid(memory_id) else None
                found = self._checked(agent, [memory]) if memory is not None else []
            except Exception as exc:
                self._failed("get", exc)
                return None
        if memory is not None and not found:
            denied(memory)
        if not found:
            age = self.age_s()
            raise NoSuchMemoryError(
                f"no memory {memory_id} in this host's replica of the hub ({reason}; the replica is "
                f"{'of unknown age' if age is None else f'{age} s old'})"
            )
        return {**found[0], **self.degraded(reason)}

    def degraded(self, reason: str) -> dict[str, Any]:
        """What every answer of the replica says: degraded, why, and how old the replica is."""
        return {
            "degraded": True,
            "reason": f"{reason}: answered from this host's replica of the hub",
            "replica_age_s": self.age_s(),
        }

    def _failed(self, what: str, exc: Exception) -> None:
        """The replica's store (or the embedder) failed: said in status; the answer is as without a replica."""
        log.warning("the replica could not answer a %s: %s", what, exc)
        self.last_error = f"{what}: {type(exc).__name__}: {exc}"

    def _phases(self, agent: str) -> list[Phase]:
        """What ``agent`` may read, in the hub's order (rules.py's read_phases): public, its projects', its own."""
        projects = tuple(sorted((self.meta.get("projects") or {}).get(agent, [])))
        phases = [Phase("public", "public")]
        if projects:
            phases.append(Phase("project", "project", projects=projects))
        phases.append(Phase("private", "private", owner=f"{self.host()}/{agent}"))
        return phases

    @staticmethod
    def _readable(agent: str, wanted: dict | None) -> dict[str, Any]:
        """The caller's filter inside the store's query, with the hub's word: only what ``agent`` may read."""
        readable: dict[str, Any] = {READERS: agent}
        return {**readable, "AND": [wanted]} if wanted else readable

    def _checked(self, agent: str, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The views ``agent`` may read, checked again by their readers (as the hub checks every result; the
        query's filter already held the others out), each in the hub's shape: a ``superseded_by`` naming a
        memory ``agent`` may not read is null (not even its id is told); the readers are not shown (reserved).
        Called with the lock held."""
        links = [str(v["superseded_by"]) for v in views if v.get("superseded_by")]
        readers_of = self._readers([str(v["id"]) for v in views] + links)
        results = []
        for view in views:
            if agent not in readers_of.get(str(view["id"]), []):
                continue  # never through a query: the filter held it out; a get by id is held out here
            link = view.get("superseded_by")
            if link and agent not in readers_of.get(str(link), []):
                view["superseded_by"] = None  # a memory the caller may not read: not even its id
            results.append(view)  # READERS is reserved: the view's metadata (custom_of) never holds it
        return results

    def _readers(self, ids: list[str]) -> dict[str, list[str]]:
        with self._lock:
            if self.store is None or not ids:
                return {}
            shard = self.store._edge()
            return {h.id: list(h.payload.get(READERS) or []) for h in shard.retrieve(ids, with_payload=[READERS])}

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        seq = int(self.meta.get("seq") or 0)
        why = self.unusable()
        applied = self.meta.get("applied_at")
        return {
            "seq": seq,
            "epoch": self.meta.get("epoch"),
            "memories": self.memories,
            "last_applied": _iso(applied) if isinstance(applied, (int, float)) else None,
            "lag": None if self.head is None else max(0, self.head - seq),
            "age_s": self.age_s(),
            "rebuilds": self.rebuilds,
            "rebuilding": self.rebuilding,
            "last_rebuild": self.last_rebuild,
            "last_error": self.last_error,
            "searchable": not why,
            "not_searchable": why or None,
        }


def copied_points(root: Path, meta: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], list[str], Any]]:
    """Every point of the replica's current generation (``meta["dir"]`` under ``root``) as (id, payload without
    its readers, readers, vector), read with the replica's own store code from a copy: for checks beside a
    running daemon (the fleet benches, the booted tests), which must not open the generation it holds."""
    with tempfile.TemporaryDirectory(prefix="replica-copy-") as tmp:
        copy = Path(tmp) / "gen"
        shutil.copytree(root / meta["dir"], copy, symlinks=True, ignore=shutil.ignore_patterns("*.lock"))
        store = open_store(copy, int(meta["model"]["dim"]))
        try:
            cursor = None
            while True:
                rows, cursor = store.points_page(1000, cursor)
                for memory_id, payload, vector in rows:
                    readers = [str(r) for r in payload.pop(READERS, None) or []]
                    yield memory_id, payload, readers, vector
                if not cursor:
                    return
        finally:
            store.close()


def _dimension(embedder: Any) -> int:
    try:
        return int(embedder.dimension())
    except Exception:
        return 0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")
