"""The shared core flows one way: the hub pushes ``<main workspace>/shared/``, every spoke fetches it.

``fleet.role`` says which side this host is (default ``spoke``; never inferred, since a host wrongly
taken for the hub would push its copy over the cluster's).  The directory is the one the core
bundle and the indexes already read (layers/core/bundle.py: every agent reads the main workspace's
``shared/``), so a fetched copy is installed by being written there: the main agent's tracker
commits it, the indexer gives it to every agent's index, ``memstrata core`` shows it.

- **Hub**: after each commit of the main workspace (the loop's word, :meth:`SharedCoreSync.changed`)
  and every ``fleet.shared_poll_s``, the content of ``shared/`` is compared, locally, with what the
  remote last took; when it differs it is pushed with layers/daily/git/shared_core.py's
  ``push_shared``, never forced.  A refusal (the remote's ref moved: another writer) is said in
  status, the log and the audit log, and tried again at the next change or poll, built on what the
  remote holds.  Files holding a secret (the guard's) are held back, never sent to every host.
- **Spoke**: at start and every ``fleet.shared_poll_s`` the core is fetched and, when it moved,
  written into ``shared/`` with one rename, its files 0444.  While the remote is away the last
  good copy stays and status says its age.  An edit of ``shared/`` here is never pushed: it is
  found when the main workspace commits it or at the next poll, said in status, the log and the
  audit log, the edited files copied aside (``state_dir/shared-core-edits/``), and the hub's copy
  written back: the hub's copy wins, at once, not only when the hub changes it.

A thread of its own (git on the network never blocks the loop); attempts that fail wait the
daemon's back-off.  Only this thread writes the state below; status readers take a copy under the lock.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from daemon.common.backoff import backoff
from daemon.common.contracts import SharedCoreStatus, SharedLocalEdit
from daemon.common.guard import SecretGuard
from daemon.files.network_thread import NetworkThread
from daemon.files.reconcile import iso
from layers.daily.git import remote as fleet
from layers.daily.git import shared_core
from layers.daily.git.run import Cancelled, GitFailed

log = logging.getLogger(__name__)

FIRST_RETRY_S = 2.0
EDIT_NOTE = "local edit of shared/ not propagated: the hub's copy is written back (spokes never push the core)"
MAX_SCANNED_BYTES = 4 * 1024 * 1024  # a file of shared/ larger than this is held back unread
KEPT_EDITS = 20  # sets of a spoke's edited files kept (state_dir/shared-core-edits/)


class SharedCoreSync(NetworkThread):
    """One host's side of the shared core (see the module docstring)."""

    def __init__(
        self,
        role: str,
        remote: fleet.Remote,
        host: str,
        shared_dir: Path,
        mirror: Path,
        audit: Callable[..., None],
        guard: Callable[[], SecretGuard],
        poll_s: float = 60.0,
        retry_cap_s: float = 300.0,
        on_change: Callable[[], None] = lambda: None,
        on_installed: Callable[[Path], None] = lambda _p: None,
        edits_dir: Path | None = None,
    ) -> None:
        if role not in ("hub", "spoke"):
            raise ValueError(f"fleet.role {role!r}: hub or spoke")
        self.role = role
        self.remote = remote
        self.host = host
        self.shared_dir = shared_dir
        self.mirror = mirror
        self._audit = audit
        self._guard = guard
        self.poll_s = poll_s
        self._retry_cap_s = retry_cap_s
        self._on_change = on_change
        self._on_installed = on_installed  # tells the loop the directory changed (the watcher may lag a swap)
        self.edits_dir = edits_dir  # a spoke's edits of shared/, copied here before they are undone
        super().__init__()
        self._lock = threading.Lock()
        self._local = False  # the loop's word: the main workspace committed (look at shared/, no remote)
        self._failures = 0
        self._retry_at: float | None = None  # monotonic
        self._pushed_tree: str | None = None  # hub: the content the remote last took
        self._state: SharedCoreStatus = {
            "role": role,
            "ref": shared_core.SHARED_REF,
            "dir": str(shared_dir),
            "commit": None,
            "date": None,
            "poll_s": poll_s,
            "reachable": None,
            "last_error": None,
            "failing_since": None,
            "waiting": None,
            **({"last_push": None, "refused": None, "held_back": []} if role == "hub" else {}),  # type: ignore[typeddict-item]
            **({"last_fetch": None, "skipped": [], "local_edit": None} if role == "spoke" else {}),  # type: ignore[typeddict-item]
        }

    # ------------------------------------------------------------ other threads

    def start(self) -> None:
        ref = shared_core.FETCHED_REF if self.role == "hub" else shared_core.EXPORTED_REF
        known = shared_core.exported(self.mirror, ref)
        if known is not None:  # the last good copy, from an earlier run: status has its age at once
            self._set(commit=known.commit, date=known.date)
        self._begin(self._run, "shared-core")

    def changed(self) -> None:
        """(loop thread) the main workspace committed: shared/ may have changed; look at it soon."""
        with self._lock:
            self._local = True
        self._wake.set()

    def status(self) -> SharedCoreStatus:
        with self._lock:
            state: SharedCoreStatus = dict(self._state)  # type: ignore[assignment]
            retry = None if self._retry_at is None else round(max(0.0, self._retry_at - time.monotonic()), 1)
        state["retry_in_s"] = retry
        state["age_s"] = _age(state.get("date"))
        return state

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        next_poll = 0.0  # at start: a spoke fetches, the hub pushes what changed while it was down
        while not self._stop.is_set():
            now = time.monotonic()
            due = min(next_poll, self._retry_at if self._retry_at is not None else next_poll)
            self._wake.wait(max(0.0, due - now))
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            with self._lock:
                local, self._local = self._local, False
            polled = now >= next_poll
            retry_due = self._retry_at is not None and now >= self._retry_at
            if polled:
                next_poll = now + self.poll_s
            if not (polled or retry_due or local):
                continue
            try:
                if self.role == "hub":
                    self._hub(now)
                else:
                    self._spoke(now, fetch=polled or retry_due)
            except Cancelled:
                return
            except Exception:  # a bug, or git failing locally: said, and tried again after the back-off
                log.exception("shared core: the round failed")
                self._failed("the shared core's round failed (see the log)", now)
            self._on_change()

    # the hub

    def _hub(self, now: float) -> None:
        if not self.shared_dir.is_dir() or self.shared_dir.is_symlink():
            self._set(waiting=f"no directory {self.shared_dir} to push")
            return
        held = self._held_back()
        tree = shared_core.content_tree(self.shared_dir, self.mirror, held)
        self._set(held_back=held, waiting=None)
        if tree == self._pushed_tree or (self._retry_at is not None and now < self._retry_at):
            return
        try:
            update = shared_core.push_shared(
                self.shared_dir,
                self.remote,
                self.mirror,
                message=f"shared core from {self.host}",
                cancel=self.cancel,
                held_back=held,
            )
        except fleet.Unreachable as exc:
            self._failed(exc.reason, now)
            return
        except GitFailed as exc:
            self._failed(str(exc), now)
            return
        self._reached()
        if update.status == "refused":
            with self._lock:
                before = self._state.get("refused")
            if before is None or before.get("reason") != update.reason:
                log.warning(
                    "shared core: the remote refused %s (%s): its ref moved; never forced, built on next time",
                    update.remote,
                    update.reason,
                    extra={"event": "shared_refused"},
                )
                self._audit(
                    "shared_refused",
                    host=self.host,
                    remote=self.remote.shown,
                    remote_ref=update.remote,
                    sha=update.sha,
                    reason=update.reason,
                )
            since = before["since"] if before is not None else iso(time.time()) or ""
            self._set(refused={"sha": update.sha, "reason": update.reason, "since": since})
            return
        self._pushed_tree = tree
        if update.status != "unchanged":
            log.info("shared core: pushed %s to %s", update.sha[:12], self.remote.shown)
        core = shared_core.exported(self.mirror, shared_core.FETCHED_REF)
        self._set(
            refused=None,
            last_push=iso(time.time()),
            commit=core.commit if core else update.sha,
            date=core.date if core else None,
        )

    def _held_back(self) -> list[str]:
        """Files of shared/ that hold a secret (or are too large to look at): never sent to every host."""
        guard = self._guard()
        held = []
        for path in sorted(self.shared_dir.rglob("*")):
            if path.is_symlink() or not path.is_file() or ".git" in path.relative_to(self.shared_dir).parts:
                continue
            rel = path.relative_to(self.shared_dir).as_posix()
            try:
                if path.stat().st_size > MAX_SCANNED_BYTES or guard.scan_file(path):
                    held.append(rel)
            except OSError:
                held.append(rel)
        if held:
            log.warning("shared core: not pushing %s: a secret (the guard's never_store)", ", ".join(held))
        return held

    # a spoke

    def _spoke(self, now: float, fetch: bool) -> None:
        self._undo_local_edit()
        if not fetch or (self._retry_at is not None and now < self._retry_at):
            return
        try:
            got = shared_core.fetch_shared(
                self.remote, self.mirror, self.shared_dir, cancel=self.cancel, read_only=True
            )
        except fleet.NotOnRemote:
            self._reached()
            self._set(waiting="the remote has no shared core yet (the hub pushed none)", last_fetch=iso(time.time()))
            return
        except fleet.Unreachable as exc:
            self._failed(exc.reason, now)
            return
        self._reached()
        self._set(commit=got.commit, date=got.date, last_fetch=iso(time.time()), waiting=None)
        if got.changed:
            log.info("shared core: installed %s (%s) into %s", got.commit[:12], got.date, self.shared_dir)
            self._set(skipped=list(got.skipped))
            self._on_installed(self.shared_dir)

    def _undo_local_edit(self) -> None:
        edits = shared_core.local_edits(self.shared_dir, self.mirror)
        if not edits:
            return
        with self._lock:
            before = self._state.get("local_edit")
        count = (before["count"] if before else 0) + 1
        kept = self._keep(edits)
        edit: SharedLocalEdit = {
            "count": count,
            "at": iso(time.time()) or "",
            "files": edits,
            "note": EDIT_NOTE,
            "kept_in": str(kept) if kept else None,
        }
        log.warning(
            "shared core: %s (%s)%s",
            EDIT_NOTE,
            ", ".join(edits),
            f"; the edited files kept in {kept}" if kept else "",
            extra={"event": "shared_local_edit"},
        )
        self._audit("shared_local_edit", host=self.host, files=edits, kept_in=str(kept) if kept else None)
        shared_core.reexport(self.mirror, self.shared_dir, read_only=True)
        self._set(local_edit=edit)
        self._on_installed(self.shared_dir)

    def _keep(self, edits: list[str]) -> Path | None:
        """A copy of the edited files (those still there) under ``edits_dir``, before the hub's copy is
        written back: nothing overwritten without a trace, even an edit the main workspace had not
        committed yet.  The last KEPT_EDITS sets are kept.  None when there was nothing to copy."""
        if self.edits_dir is None:
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = self.edits_dir / f"{stamp}-{time.monotonic_ns() % 1_000_000:06d}"
        copied = 0
        for rel in edits:
            source = self.shared_dir / rel
            if rel == "." or source.is_symlink() or not source.is_file():
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.copyfile(source, dest / rel, follow_symlinks=False)
            copied += 1
        if not copied:
            return None
        for old in sorted(p for p in self.edits_dir.iterdir() if p.is_dir())[:-KEPT_EDITS]:
            shutil.rmtree(old, ignore_errors=True)
        return dest

    # both

    def _set(self, **fields: object) -> None:
        with self._lock:
            self._state.update(fields)  # type: ignore[typeddict-item]

    def _failed(self, reason: str, now: float) -> None:
        self._failures += 1
        wait = backoff(self._failures, FIRST_RETRY_S, self._retry_cap_s)
        with self._lock:
            first = self._state.get("reachable") is not False
            self._state["reachable"] = False
            self._state["last_error"] = reason
            if self._state.get("failing_since") is None:
                self._state["failing_since"] = iso(time.time())
            self._retry_at = now + wait
        if first:
            log.warning(
                "shared core: the remote %s cannot be reached: %s (the last good copy stays)", self.remote.shown, reason
            )

    def _reached(self) -> None:
        with self._lock:
            if self._state.get("reachable") is False:
                log.info("shared core: the remote %s answers again", self.remote.shown)
            self._state["reachable"] = True
            self._state["last_error"] = None
            self._state["failing_since"] = None
            self._retry_at = None
        self._failures = 0


def _age(date: str | None) -> float | None:
    if not date:
        return None
    try:
        return round(max(0.0, time.time() - datetime.fromisoformat(date).timestamp()), 1)
    except ValueError:
        return None
