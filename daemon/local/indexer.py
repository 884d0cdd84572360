"""The L3 side of the edit flow: keeps every agent's index in step with its markdown.

It plugs into the tracker's :class:`~daemon.files.tracker.EditListener` seam and runs
in the daemon's loop thread, which makes it the single writer of every index.
The shared core (``<main>/shared/*.md``) is indexed into every agent's index, so
a change there fans out to all of them.

Settled files are not written one by one: the edit flow queues them and the
loop calls :meth:`Indexer.flush` once per turn, which writes every agent's
queue in one transaction (a burst of files costs one commit per agent, not one
per file).  A write that fails because the index is busy (another connection
holds its write lock) or full keeps its queue and is retried with back-off:
an update is never dropped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from daemon.common.backoff import backoff
from daemon.common.contracts import IndexProgress, IndexReport, LastRebuild
from daemon.common.fileread import Inspection, read_version
from daemon.common.guard import SecretGuard
from daemon.common.storage import StorageHealth, is_storage_error
from daemon.common.workspaces import MEMORY_FILES, Agent
from daemon.local.index_files import IndexClaims
from layers.common.ids import MAIN_AGENT
from layers.common.names import shown
from layers.core import bundle as core
from layers.daily import workspace_repo as daily
from layers.local.shapes import RebuildStats
from layers.local.storage.index import (
    Document,
    ForeignFile,
    Identity,
    IndexStale,
    LocalIndex,
    check_replaceable,
    rebuild,
)
from layers.local.text.dates import day_named

log = logging.getLogger(__name__)

SHARED_PREFIX = core.SHARED_DIR + "/"
WRITE_BUSY_TIMEOUT_MS = 1500  # the loop serves every agent: wait this long for a lock, then retry later
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0
DEFAULT_MAX_BYTES = 5 * 1024 * 1024  # watch.max_file_mb's default


def is_indexable(rel: str) -> bool:
    """L1 core files, MEMORY.md, ``memory/**/*.md`` and the shared core."""
    if rel in MEMORY_FILES:
        return True
    return rel.endswith(".md") and (rel.startswith(daily.MEMORY_DIR + "/") or rel.startswith(SHARED_PREFIX))


def layer_of(rel: str, text: str = "") -> tuple[str, str | None]:
    """("core" | "daily", the day a daily file stands for): its ``YYYY-MM-DD.md`` name, else a note under
    ``memory/`` that names its day in its file name or title (:func:`day_named`; MEMORY.md names none)."""
    if rel.startswith(SHARED_PREFIX) or rel in core.CORE_FILES:
        return "core", None
    name = rel.rpartition("/")[2]
    day = daily.parse_daily_name(name)
    if day is None and rel.startswith(daily.MEMORY_DIR + "/"):
        day = day_named(name, text)
    return "daily", day.isoformat() if day else None


def document_of(rel: str, inspection: Inspection) -> Document | None:
    """The version's bytes as a Document; None when there are none to index (reported by the tracker).

    The index names it :func:`~layers.common.names.shown` (SQLite text must be UTF-8): a
    file called ``bad\\xffname.md`` is indexed and found under that spelling.
    """
    text = inspection.text()
    if text is None or inspection.sha256 is None:
        return None
    layer, day = layer_of(rel, text)
    return Document(shown(rel), text, inspection.sha256, layer, day)


@dataclass
class AgentIndex:
    agent: Agent
    index: LocalIndex | None = None
    last_rebuild: LastRebuild | None = None
    error: str | None = None
    progress: IndexProgress = field(default_factory=lambda: IndexProgress())
    queue: dict[str, Document | None] = field(default_factory=dict)  # rel → new content, None: remove
    scrub: set[str] = field(default_factory=set)  # files that turned out to hold a secret: scrubbed first
    failures: int = 0  # consecutive failed flushes
    retry_at: float | None = None  # monotonic time of the next flush after a failure
    refused: str | None = None  # the configured path holds a file memstrata did not create


class Indexer:
    """Every agent's writer connection, plus incremental updates, sync and rebuilds."""

    def __init__(
        self,
        identity: Identity,
        main_workspace: Path,
        desired: Callable[[Agent], dict[str, str]] | None = None,
        on_pending: Callable[[], None] = lambda: None,
        storage: StorageHealth | None = None,
        guard: Callable[[], SecretGuard | None] = lambda: None,
        withheld: Callable[[Agent], set[str]] = lambda agent: set(),
        claims: IndexClaims | None = None,
        max_bytes: Callable[[], int] = lambda: DEFAULT_MAX_BYTES,
    ):
        """``desired`` and ``withheld`` come from whoever holds the agents' files; the daemon,
        whose agents are made with this indexer, hands them over with :meth:`know_files`."""
        self.identity = identity
        self.claims = claims or IndexClaims(None)  # the index files this daemon made (see daemon/local/index_files.py)
        self.storage = storage  # a full disk is noted there and retried by a later sync
        self.main_workspace = main_workspace
        self.desired = desired or (lambda agent: {})  # what an agent's index should hold, for rebuilds after damage
        self.on_pending = on_pending  # wakes the embedding worker
        # The tracker decides which files hold secrets; the text is scanned once more right
        # before it is stored (the file may have changed since), and files the tracker
        # withholds are scrubbed, not merely deleted, when an index still has them.
        self.guard = guard
        self.withheld = withheld
        self.max_bytes = max_bytes  # watch.max_file_mb: a larger file is never read
        self.agents: dict[str, AgentIndex] = {}

    def know_files(self, desired: Callable[[Agent], dict[str, str]], withheld: Callable[[Agent], set[str]]) -> None:
        """What each agent's index should hold and must not hold, from the parts that track its files."""
        self.desired = desired
        self.withheld = withheld

    # ------------------------------------------------------------ lifecycle

    def open(self, agent: Agent, desired: dict[str, str]) -> int:
        """Open the agent's index (rebuilding it when stale) and bring it up to ``desired``.

        Returns how many files had to be (re)indexed or dropped.  A file at the
        index path that memstrata did not create is refused (left untouched, the
        reason in :meth:`report`): 0.
        """
        entry = self.agents.setdefault(agent.id, AgentIndex(agent))
        if entry.index is None:
            try:
                try:
                    entry.index = self._open_writer(agent)
                    self._forget_unheld(entry.agent, entry.index)
                except IndexStale as exc:
                    return self.rebuild(agent, desired, reason=str(exc))["files"]
            except ForeignFile as exc:
                self._refuse(entry, exc)
                return 0
        return self.sync(agent, desired)

    def _open_writer(self, agent: Agent) -> LocalIndex:
        index = LocalIndex(
            agent.index, self.identity, busy_timeout_ms=WRITE_BUSY_TIMEOUT_MS, owned=self.claims.owns(agent.index)
        )
        self.claims.claim(agent.index)
        entry = self.agents.get(agent.id)
        if entry is not None and entry.refused:
            log.info("%s: the index path %s holds an index of ours now; indexing", agent.id, agent.index)
            entry.refused = entry.error = None
        return index

    @staticmethod
    def _forget_unheld(agent: Agent, index: LocalIndex) -> None:
        """The first start after an upgrade: the embedding jobs and vectors an earlier version left for
        chunks no file holds (status counted the jobs as waiting for ever) go, in one pass, said once."""
        try:
            removed = index.forget_unheld_everywhere()
        except apsw.Error as exc:  # busy or full: nothing is lost, the next start passes again
            log.warning("%s: the pass over jobs and vectors of no chunk is left for the next start: %s", agent.id, exc)
            return
        jobs = removed.get("pending", 0) + removed.get("pending_items", 0)
        if jobs or removed.get("vectors") or removed.get("codes"):
            log.info(
                "%s: removed %d embedding job(s) and %d vector(s) that no chunk holds any more "
                "(left by an earlier version; a one-time pass)",
                agent.id,
                jobs,
                removed.get("vectors", 0),
            )

    def _refuse(self, entry: AgentIndex, exc: ForeignFile) -> None:
        """Leave a foreign file alone; say so once in the log, and in status until it is gone."""
        message = str(exc)
        if entry.refused != message:
            log.error("%s: L3 index refused, this agent is not indexed: %s", entry.agent.id, message)
        entry.refused = entry.error = message
        entry.queue.clear()  # nothing can be written there; the next open after a fix syncs everything

    def refused(self, agent_id: str) -> str | None:
        """Why an agent's index path is refused (a file memstrata did not create), or None."""
        entry = self.agents.get(agent_id)
        return entry.refused if entry else None

    def rebuilding(self, agent_id: str) -> bool:
        """True while an agent's index is being rebuilt (a repair asked for again is not queued twice)."""
        entry = self.agents.get(agent_id)
        return bool(entry is not None and entry.progress)

    def close(self) -> None:
        for entry in self.agents.values():
            if entry.index is not None:
                with contextlib.suppress(Exception):
                    entry.index.close()
                entry.index = None

    def forget(self, agent_id: str) -> None:
        entry = self.agents.pop(agent_id, None)
        if entry and entry.index:
            entry.index.close()

    def _documents(self, agent: Agent, desired: dict[str, str]) -> Iterator[Document]:
        for rel, sha in sorted(desired.items()):
            doc = self._read(agent, rel, sha)
            if doc is not None:
                yield doc

    def _read(self, agent: Agent, rel: str, sha256: str) -> Document | None:
        """The file as a Document, or None when unreadable or when its text holds a secret.

        Read once through :func:`~daemon.common.fileread.read_version` (never through a symlink,
        and a file of ``shared/`` from inside the main workspace's ``shared/``), like the edit
        flow: a rebuild or ``reindex`` cannot read what the edit flow would refuse.
        """
        base = self.main_workspace if rel.startswith(SHARED_PREFIX) else agent.workspace
        doc = document_of(rel, read_version(base, rel, self.max_bytes()))
        if doc is None:
            return None
        if doc.sha256 != sha256 and self._holds_secret(agent, doc):
            return None
        return doc

    def _holds_secret(self, agent: Agent, doc: Document) -> bool:
        """True when text the tracker did not scan matches never_store.

        The tracker scanned the version whose checksum it recorded; a version read
        here that has another checksum changed on disk since, and is scanned before
        a byte of it is stored.
        """
        guard = self.guard()
        if guard is None:
            return False
        if guard.contains_secret(doc.text):
            log.warning("%s: %s holds a secret (never_store): not indexed", agent.id, doc.path)
            return True
        return False

    def rebuild(
        self, agent: Agent, desired: dict[str, str], reason: str, progress: Callable[[int], None] | None = None
    ) -> RebuildStats:
        """Build a fresh index from markdown; the old file answers searches until the swap."""
        entry = self.agents.setdefault(agent.id, AgentIndex(agent))
        try:
            check_replaceable(agent.index, self.claims.owns(agent.index))  # before the log line; rebuild() checks again
        except ForeignFile as exc:
            self._refuse(entry, exc)
            raise
        log.warning("%s: rebuilding the L3 index from markdown: %s", agent.id, reason, extra={"event": "index_rebuild"})
        entry.progress = {"done": 0, "total": len(desired), "phase": "rebuild"}

        def step(done: int) -> None:
            entry.progress["done"] = done
            if progress:
                progress(done)

        def close_old() -> None:
            if entry.index is not None:
                entry.index.close()
                entry.index = None

        try:
            stats = rebuild(
                agent.index,
                self.identity,
                self._documents(agent, desired),
                progress=step,
                before_swap=close_old,
                owned=self.claims.owns(agent.index),
            )
            self.claims.claim(agent.index)
            entry.index = self._open_writer(agent)
            entry.error = None
            self._settled(entry)  # the rebuild read every file: nothing queued is left to write
        except ForeignFile as exc:
            self._refuse(entry, exc)
            raise
        except Exception as exc:
            entry.error = f"rebuild failed: {exc}"
            log.exception("%s: index rebuild failed", agent.id)
            raise
        finally:
            entry.progress = {}
        entry.last_rebuild = {"time": time.time(), "reason": reason, "seconds": stats["seconds"]}
        log.info(
            "%s: index rebuilt: %d files, %d chunks in %.2f s",
            agent.id,
            stats["files"],
            stats["chunks"],
            stats["seconds"],
        )
        self.on_pending()
        return stats

    # ------------------------------------------------------------ incremental

    def _targets(self, agent: Agent, rel: str) -> list[AgentIndex]:
        if agent.id == MAIN_AGENT and rel.startswith(SHARED_PREFIX):
            return [e for e in self.agents.values() if e.index is not None]
        entry = self.agents.get(agent.id)
        return [entry] if entry and entry.index is not None else []

    def repair(self, agent: Agent, why: str) -> None:
        """An index failed under us (damaged file): rebuild it from markdown now."""
        entry = self.agents.get(agent.id)
        if entry is not None and entry.index is not None:
            with contextlib.suppress(Exception):
                entry.index.close()
            entry.index = None
        self.rebuild(agent, self.desired(agent), reason=why)

    def file_changed(self, agent: Agent, rel: str, inspection: Inspection) -> None:
        """Queue the version the tracker read (its bytes, scanned); :meth:`flush` writes it (the latest wins)."""
        if not is_indexable(rel) or (rel.startswith(SHARED_PREFIX) and agent.id != MAIN_AGENT):
            return
        if inspection.index_skip:
            self.file_removed(agent, rel)
            return
        doc = document_of(rel, inspection)
        if doc is None:
            return
        for entry in self._targets(agent, rel):
            entry.queue[rel] = doc

    def file_removed(self, agent: Agent, rel: str) -> None:
        if not is_indexable(rel):
            return
        for entry in self._targets(agent, rel):
            entry.queue[rel] = None

    def queued(self) -> int:
        """Updates waiting to be written, over every agent."""
        return sum(len(e.queue) + len(e.scrub) for e in self.agents.values())

    def retry_deadline(self) -> float | None:
        """When the loop must call :meth:`flush` again for a queue that failed (None: no such queue)."""
        due = [
            e.retry_at
            for e in self.agents.values()
            if (e.queue or e.scrub) and e.index is not None and e.retry_at is not None
        ]
        return min(due) if due else None

    def flush(self, now: float | None = None) -> int:
        """Write every agent's queue, one transaction per agent; returns the files written.

        A busy or full index (any SQLite error but damage) keeps its queue and is
        retried with back-off; a damaged one is rebuilt from markdown.
        """
        now = time.monotonic() if now is None else now
        written = 0
        for entry in list(self.agents.values()):
            if not (entry.queue or entry.scrub) or entry.index is None:
                continue
            if entry.retry_at is not None and now < entry.retry_at:
                continue
            written += self._flush_one(entry)
        return written

    def _flush_one(self, entry: AgentIndex) -> int:
        index = entry.index
        assert index is not None
        batch = dict(entry.queue)
        scrub = set(entry.scrub)
        added = 0
        try:
            if scrub and index.scrub([shown(rel) for rel in sorted(scrub)]):
                log.info("%s: removed %d file(s) holding a secret from the index, scrubbed", entry.agent.id, len(scrub))
            entry.scrub -= scrub
            with index.bulk():
                for rel, doc in batch.items():
                    try:
                        if doc is None:
                            index.remove_document(shown(rel))
                        else:
                            added += index.update_document(doc).added
                    except apsw.Error:
                        raise  # the whole batch is retried
                    except Exception:  # a file the chunker cannot take must not hold back the others
                        log.exception("%s: indexing %s failed", entry.agent.id, rel)
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            try:
                self.repair(entry.agent, f"the index file is damaged ({exc})")
            except Exception:
                self._failed(entry, f"rebuild failed: {exc}")
            return 0
        except (apsw.Error, OSError) as exc:
            if self.storage is not None and is_storage_error(exc):
                self.storage.failed("index", exc, subject=entry.agent.id, path=entry.agent.index)
            self._failed(entry, f"index write failed ({exc.__class__.__name__}: {exc})")
            return 0
        for rel, doc in batch.items():
            if entry.queue.get(rel, doc) is doc:  # a newer update queued meanwhile stays
                entry.queue.pop(rel, None)
        if entry.failures:
            log.info("%s: index writable again; %d queued update(s) written", entry.agent.id, len(batch))
        entry.failures, entry.retry_at, entry.error = 0, None, None
        if self.storage is not None:
            self.storage.succeeded("index", entry.agent.id)
        if added:
            self.on_pending()
        return len(batch)

    def _failed(self, entry: AgentIndex, error: str) -> None:
        entry.failures += 1
        delay = backoff(entry.failures, RETRY_FIRST_S, RETRY_MAX_S)
        entry.retry_at = time.monotonic() + delay  # after the busy wait, not from the turn's start
        if error != entry.error:
            log.warning(
                "%s: %s; %d update(s) kept queued, retrying with back-off (next in %.1f s)",
                entry.agent.id,
                error,
                len(entry.queue),
                delay,
            )
        entry.error = error

    @staticmethod
    def _settled(entry: AgentIndex) -> None:
        """The index now holds what the record says: the queue is written."""
        entry.queue.clear()
        entry.failures, entry.retry_at = 0, None

    def file_withheld(self, agent: Agent, rel: str) -> None:
        """``rel`` holds a secret: its chunks leave every index that has them, scrubbed (at the next flush)."""
        if not is_indexable(rel) or (rel.startswith(SHARED_PREFIX) and agent.id != MAIN_AGENT):
            return
        for entry in self._targets(agent, rel):
            entry.queue.pop(rel, None)  # content queued before the secret appeared is never written
            entry.scrub.add(rel)

    def sync(self, agent: Agent, desired: dict[str, str], progress: Callable[[int], None] | None = None) -> int:
        """Make the index hold exactly ``desired`` (rel → sha256); the same code as the edit flow.

        This is also ``memstrata reindex``: unchanged files are skipped by
        checksum, changed ones go through :meth:`LocalIndex.update_document`.
        """
        entry = self.agents.get(agent.id)
        if entry is None or entry.index is None:
            return 0
        index = entry.index
        try:
            indexed = index.documents()
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            self.repair(agent, f"the index file is damaged ({exc})")
            return len(desired)
        changed = 0
        withheld = {shown(rel) for rel in self.withheld(agent)}
        scrub: list[str] = []
        entry.progress = {"done": 0, "total": len(desired), "phase": "sync"}
        keyed = {shown(rel): rel for rel in desired}  # the index's name of each file → its name on disk
        try:
            with index.bulk():
                for done, (key, rel) in enumerate(sorted(keyed.items()), start=1):
                    sha = desired[rel]
                    if indexed.get(key) != sha:
                        doc = self._read(agent, rel, sha)
                        if doc is not None:
                            index.update_document(doc)
                            changed += 1
                        elif rel in indexed:
                            scrub.append(rel)  # turned into a secret since it was indexed
                    entry.progress["done"] = done
                    if progress:
                        progress(done)
                for key in set(indexed) - set(keyed):
                    if key in withheld:
                        scrub.append(key)
                    else:
                        index.remove_document(key)
                    changed += 1
            if scrub:
                index.scrub(scrub)  # outside the bulk transaction: it checkpoints the WAL
        finally:
            entry.progress = {}
        self._settled(entry)
        if changed:
            self.on_pending()
        return changed

    # ------------------------------------------------------------ status

    def report(self, agent_id: str) -> IndexReport:
        entry = self.agents.get(agent_id)
        if entry is None:
            return {"state": "not open"}
        out: IndexReport = {"path": str(entry.agent.index)}
        if entry.refused:
            return {**out, "state": "refused", "error": entry.refused, "queued_updates": 0, "last_rebuild": None}
        if entry.index is not None:
            try:
                out = {**out, **entry.index.stats()}
            except Exception as exc:  # a file damaged under us: say so, the next sync rebuilds
                out["error"] = str(exc)
            out["state"] = "rebuilding" if entry.progress.get("phase") == "rebuild" else "ready"
        else:
            out["state"] = "rebuilding" if entry.progress else "unavailable"
        if entry.progress:
            out["progress"] = entry.progress.copy()
        out["last_rebuild"] = entry.last_rebuild
        out["error"] = entry.error
        if entry.error and entry.queue:
            out["error"] = f"{entry.error}; {len(entry.queue)} update(s) kept queued, retrying"
        out["queued_updates"] = len(entry.queue)
        return out


def desired_documents(own: dict[str, str], shared: dict[str, str], not_indexed: set[str]) -> dict[str, str]:
    """What an agent's index should hold: its own indexable files plus the shared core."""
    wanted = {rel: sha for rel, sha in own.items() if is_indexable(rel) and rel not in not_indexed}
    wanted = {rel: sha for rel, sha in wanted.items() if not rel.startswith(SHARED_PREFIX)}
    wanted.update({rel: sha for rel, sha in shared.items() if rel.startswith(SHARED_PREFIX) and rel.endswith(".md")})
    return wanted
