"""The L3 side of the edit flow: keeps every agent's index in step with its markdown.

It plugs into the tracker's :class:`~daemon.tracker.EditListener` seam and runs
in the daemon's loop thread, which makes it the single writer of every index.
The shared core (``<main>/shared/*.md``) is indexed into every agent's index, so
a change there fans out to all of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from daemon.filestate import Inspection
from daemon.guard import SecretGuard
from daemon.workspaces import MEMORY_FILES, Agent
from layers import core, daily
from layers.ids import MAIN_AGENT
from layers.local.index import Document, Identity, IndexStale, LocalIndex, rebuild

log = logging.getLogger(__name__)

SHARED_PREFIX = core.SHARED_DIR + "/"


def is_indexable(rel: str) -> bool:
    """L1 core files, MEMORY.md, ``memory/**/*.md`` and the shared core."""
    if rel in MEMORY_FILES:
        return True
    return rel.endswith(".md") and (rel.startswith(daily.MEMORY_DIR + "/") or rel.startswith(SHARED_PREFIX))


def layer_of(rel: str) -> tuple[str, str | None]:
    """("core" | "daily", the day a daily file stands for)."""
    if rel.startswith(SHARED_PREFIX) or rel in core.CORE_FILES:
        return "core", None
    day = daily.parse_daily_name(rel.rpartition("/")[2])
    return "daily", day.isoformat() if day else None


def read_document(rel: str, path: Path, sha256: str) -> Document | None:
    """The file as a Document; None when it vanished or is not UTF-8 (reported by the tracker)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    layer, day = layer_of(rel)
    return Document(rel, text, sha256, layer, day)


@dataclass
class AgentIndex:
    agent: Agent
    index: LocalIndex | None = None
    last_rebuild: dict | None = None
    error: str | None = None
    progress: dict = field(default_factory=dict)


class Indexer:
    """Every agent's writer connection, plus incremental updates, sync and rebuilds."""

    def __init__(
        self,
        identity: Identity,
        main_workspace: Path,
        desired: Callable[[Agent], dict[str, str]],
        on_pending: Callable[[], None] = lambda: None,
        guard: Callable[[], SecretGuard | None] = lambda: None,
        withheld: Callable[[Agent], set[str]] = lambda agent: set(),
    ):
        self.identity = identity
        self.main_workspace = main_workspace
        self.desired = desired  # what an agent's index should hold, for rebuilds after damage
        self.on_pending = on_pending  # wakes the embedding worker
        # The tracker decides which files hold secrets; the text is scanned once more right
        # before it is stored (the file may have changed since), and files the tracker
        # withholds are scrubbed, not merely deleted, when an index still has them.
        self.guard = guard
        self.withheld = withheld
        self.agents: dict[str, AgentIndex] = {}

    # ------------------------------------------------------------ lifecycle

    def open(self, agent: Agent, desired: dict[str, str]) -> int:
        """Open the agent's index (rebuilding it when stale) and bring it up to ``desired``.

        Returns how many files had to be (re)indexed or dropped.
        """
        entry = self.agents.setdefault(agent.id, AgentIndex(agent))
        if entry.index is None:
            try:
                entry.index = LocalIndex(agent.index, self.identity)
            except IndexStale as exc:
                return self.rebuild(agent, desired, reason=str(exc))["files"]
        return self.sync(agent, desired)

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
            doc = self._read(agent, rel, self._source(agent, rel), sha)
            if doc is not None:
                yield doc

    def _read(self, agent: Agent, rel: str, path: Path, sha256: str) -> Document | None:
        """The file as a Document, or None when unreadable or when its text holds a secret."""
        doc = read_document(rel, path, sha256)
        return None if doc is None or self._holds_secret(agent, doc) else doc

    def _holds_secret(self, agent: Agent, doc: Document) -> bool:
        """True when the text about to be stored matches never_store.

        The tracker scanned the content whose checksum it recorded; text that hashes to
        that checksum is what it scanned (the check costs 5% of a scan), anything else
        changed on disk since and is scanned here, before a byte of it is stored.
        """
        guard = self.guard()
        if guard is None or hashlib.sha256(doc.text.encode("utf-8")).hexdigest() == doc.sha256:
            return False
        if guard.contains_secret(doc.text):
            log.warning("%s: %s holds a secret (never_store): not indexed", agent.id, doc.path)
            return True
        return False

    def _source(self, agent: Agent, rel: str) -> Path:
        base = self.main_workspace if rel.startswith(SHARED_PREFIX) else agent.workspace
        return base / rel

    def rebuild(self, agent: Agent, desired: dict[str, str], reason: str, progress=None) -> dict:
        """Build a fresh index from markdown; the old file answers searches until the swap."""
        entry = self.agents.setdefault(agent.id, AgentIndex(agent))
        log.warning("%s: rebuilding the L3 index from markdown: %s", agent.id, reason)
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
            )
            entry.index = LocalIndex(agent.index, self.identity)
            entry.error = None
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

    def _apply(self, entry: AgentIndex, rel: str, action: Callable[[LocalIndex], object]) -> object:
        try:
            return action(entry.index)  # type: ignore[arg-type]
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            self.repair(entry.agent, f"the index file is damaged ({exc})")
            return None
        except apsw.Error as exc:
            entry.error = f"indexing {rel} failed: {exc}"
            raise

    def file_changed(self, agent: Agent, rel: str, path: Path, inspection: Inspection) -> None:
        if not is_indexable(rel) or (rel.startswith(SHARED_PREFIX) and agent.id != MAIN_AGENT):
            return
        if inspection.index_skip:
            self.file_removed(agent, rel)
            return
        doc = read_document(rel, path, inspection.sha256 or "")
        if doc is None:
            return
        if self._holds_secret(agent, doc):  # changed since the tracker looked: nothing of it stays
            self.file_withheld(agent, rel)
            return
        for entry in self._targets(agent, rel):
            stats = self._apply(entry, rel, lambda index: index.update_document(doc))
            if stats is not None and stats.added:  # type: ignore[attr-defined]
                self.on_pending()

    def file_removed(self, agent: Agent, rel: str) -> None:
        if not is_indexable(rel):
            return
        for entry in self._targets(agent, rel):
            self._apply(entry, rel, lambda index: index.remove_document(rel))

    def file_withheld(self, agent: Agent, rel: str) -> None:
        """``rel`` holds a secret: its chunks leave every index that has them, scrubbed."""
        if not is_indexable(rel) or (rel.startswith(SHARED_PREFIX) and agent.id != MAIN_AGENT):
            return
        for entry in self._targets(agent, rel):
            if self._apply(entry, rel, lambda index: index.scrub([rel])):
                log.info("%s: removed %s from the index and scrubbed the file", entry.agent.id, rel)

    def sync(self, agent: Agent, desired: dict[str, str], progress=None) -> int:
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
        withheld = self.withheld(agent)
        scrub: list[str] = []
        entry.progress = {"done": 0, "total": len(desired), "phase": "sync"}
        try:
            with index.bulk():
                for done, (rel, sha) in enumerate(sorted(desired.items()), start=1):
                    if indexed.get(rel) != sha:
                        doc = self._read(agent, rel, self._source(agent, rel), sha)
                        if doc is not None:
                            index.update_document(doc)
                            changed += 1
                        elif rel in indexed:
                            scrub.append(rel)  # turned into a secret since it was indexed
                    entry.progress["done"] = done
                    if progress:
                        progress(done)
                for rel in set(indexed) - set(desired):
                    if rel in withheld:
                        scrub.append(rel)
                    else:
                        index.remove_document(rel)
                    changed += 1
            if scrub:
                index.scrub(scrub)  # outside the bulk transaction: it checkpoints the WAL
        finally:
            entry.progress = {}
        if changed:
            self.on_pending()
        return changed

    # ------------------------------------------------------------ status

    def report(self, agent_id: str) -> dict:
        entry = self.agents.get(agent_id)
        if entry is None:
            return {"state": "not open"}
        out: dict = {"path": str(entry.agent.index)}
        if entry.index is not None:
            try:
                stats = entry.index.stats()
            except Exception as exc:  # a file damaged under us: say so, the next sync rebuilds
                stats = {"error": str(exc)}
            out.update(stats)
            out["state"] = "rebuilding" if entry.progress.get("phase") == "rebuild" else "ready"
        else:
            out["state"] = "rebuilding" if entry.progress else "unavailable"
        if entry.progress:
            out["progress"] = dict(entry.progress)
        out["last_rebuild"] = entry.last_rebuild
        out["error"] = entry.error
        return out


def desired_documents(own: dict[str, str], shared: dict[str, str], not_indexed: set[str]) -> dict[str, str]:
    """What an agent's index should hold: its own indexable files plus the shared core."""
    wanted = {rel: sha for rel, sha in own.items() if is_indexable(rel) and rel not in not_indexed}
    wanted = {rel: sha for rel, sha in wanted.items() if not rel.startswith(SHARED_PREFIX)}
    wanted.update({rel: sha for rel, sha in shared.items() if rel.startswith(SHARED_PREFIX) and rel.endswith(".md")})
    return wanted
