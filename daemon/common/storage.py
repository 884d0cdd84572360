"""Writes that fail because the disk is full (or read-only): noted, shown, retried.

A full disk is an operator's problem the daemon must survive, not a bug: the
record of processed files, the index, git, the token files, the L4 queue and
store all write to disk, and any of them may meet ``ENOSPC`` (``EDQUOT``,
``EROFS``) at any moment.  Each place that writes reports here; a condition is
logged once when it starts and once when it ends (not at every retry), shown in
``status`` while it lasts, and retried with a back-off (1 s doubling to 60 s)
until a write succeeds, which clears it without anybody's help.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import apsw

from daemon.common.backoff import backoff

if TYPE_CHECKING:
    from daemon.common.contracts import StorageProblem, StorageReport

log = logging.getLogger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0

STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
# How the errors read when they come back as text: git's stderr, SQLite's messages.
STORAGE_PHRASES = (
    "no space left on device",
    "disk quota exceeded",
    "read-only file system",
    "database or disk is full",
    "attempt to write a readonly database",
    "out of diskspace",  # git: "sha1 file '…/index.lock' write error. Out of diskspace"
    "unable to write new index file",  # git, when the index cannot be written (no reason given)
)


def is_storage_message(text: str | None) -> bool:
    """True when an error's text says the disk is full or read-only."""
    lowered = (text or "").lower()
    return any(phrase in lowered for phrase in STORAGE_PHRASES)


def is_storage_error(exc: BaseException | None) -> bool:
    """True for a write the disk refused: ENOSPC/EDQUOT/EROFS, SQLite's full/read-only/I/O errors.

    The cause chain is followed, so a store client that wraps the OS error is recognised too.
    """
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
            return True
        if isinstance(exc, (apsw.FullError, apsw.ReadOnlyError, apsw.IOError)):
            return True
        if is_storage_message(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def describe(exc: BaseException) -> str:
    """A short reason: the OS's words for the errno and the file, or the first line of the message."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def has_room(path: os.PathLike[str] | str, minimum: int = 1 << 20) -> bool:
    """True when the file system holding ``path`` is writable and has ``minimum`` bytes free.

    For stores whose writes cannot be tried cheaply; a quota (EDQUOT) is not
    visible here, so a write that still fails simply reports the problem again.
    """
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return not st.f_flag & os.ST_RDONLY and st.f_bavail * st.f_frsize >= minimum


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


@dataclass
class Problem:
    """One place whose writes fail, since when, and when it is tried again."""

    place: str  # records, index, git, tokens, queue, store, snapshot, vectors, lock
    subject: str  # the agent it concerns, or "" for the daemon's own files
    error: str
    path: str
    since: float
    failures: int = 1
    retry_at: float = 0.0  # time.monotonic()

    def view(self, now: float) -> StorageProblem:
        return {
            "place": self.place,
            "agent": self.subject or None,
            "path": self.path or None,
            "error": self.error,
            "since": _iso(self.since),
            "failures": self.failures,
            "retry_in_s": round(max(0.0, self.retry_at - now), 1),
        }


class StorageHealth:
    """Every place whose writes currently fail; shared by the loop, the broker and API threads."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.on_change = on_change  # the daemon republishes its status
        self._problems: dict[tuple[str, str], Problem] = {}
        self._lock = threading.Lock()

    def failed(
        self, place: str, exc: BaseException | str, *, subject: str = "", path: object = "", quiet: bool = False
    ) -> None:
        """A write at ``place`` failed for lack of space: note it, log it the first time."""
        error = exc if isinstance(exc, str) else describe(exc)
        if not path and isinstance(exc, OSError) and exc.filename:
            path = exc.filename
        now = time.monotonic()
        with self._lock:
            problem = self._problems.get((place, subject))
            if problem is None:
                problem = Problem(place, subject, error, str(path or ""), time.time())
                self._problems[(place, subject)] = problem
                new = True
            else:
                problem.failures += 1
                problem.error = error
                new = False
            delay = backoff(problem.failures, FIRST_RETRY_S, MAX_RETRY_S)
            problem.retry_at = now + delay
        if new:
            if not quiet:
                who = f"{subject}: " if subject else ""
                log.error("%sstorage: %s writes fail (%s); retrying until space returns", who, place, error)
            self.on_change()

    def succeeded(self, place: str, subject: str = "") -> None:
        """A write at ``place`` went through: the condition (if any) is over."""
        with self._lock:
            problem = self._problems.pop((place, subject), None)
        if problem is not None:
            who = f"{subject}: " if subject else ""
            log.info("%sstorage: %s writes succeed again (after %d failed attempt(s))", who, place, problem.failures)
            self.on_change()

    def attempt(self, place: str, fn: Callable[[], object], *, subject: str = "", path: object = "") -> bool:
        """Run a write; a storage error is noted (False), anything else is raised; success clears."""
        try:
            fn()
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            self.failed(place, exc, subject=subject, path=path)
            return False
        self.succeeded(place, subject)
        return True

    def postpone(self, place: str, subject: str, now: float | None = None) -> None:
        """A retry that neither failed again nor succeeded waits for its back-off (no busy loop)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            problem = self._problems.get((place, subject))
            if problem is not None and problem.retry_at <= now:
                problem.retry_at = now + backoff(problem.failures, FIRST_RETRY_S, MAX_RETRY_S)

    def waiting(self, place: str, subject: str = "") -> bool:
        """True while ``place`` fails and its back-off has not passed yet."""
        with self._lock:
            problem = self._problems.get((place, subject))
            return problem is not None and problem.retry_at > time.monotonic()

    def error(self, place: str, subject: str = "") -> str | None:
        """The current error at ``place``, or None when its writes work."""
        with self._lock:
            problem = self._problems.get((place, subject))
            return problem.error if problem is not None else None

    def failing(self, place: str, subject: str = "") -> bool:
        with self._lock:
            return (place, subject) in self._problems

    def due(self, places: Collection[str], now: float | None = None) -> list[tuple[str, str]]:
        """(place, subject) pairs among ``places`` whose retry time has come (each owner retries its own)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return [key for key, p in self._problems.items() if key[0] in places and p.retry_at <= now]

    def next_retry(self, places: Collection[str] | None = None) -> float | None:
        """The earliest retry among ``places`` (all when None); None when their writes work."""
        with self._lock:
            return min(
                (p.retry_at for key, p in self._problems.items() if places is None or key[0] in places), default=None
            )

    def forget(self, subject: str) -> None:
        """An agent went away: its problems go with it."""
        with self._lock:
            for key in [k for k in self._problems if k[1] == subject]:
                del self._problems[key]

    def snapshot(self) -> StorageReport:
        now = time.monotonic()
        with self._lock:
            problems = [p.view(now) for p in self._problems.values()]
        return {"ok": not problems, "problems": sorted(problems, key=lambda p: (p["place"], p["agent"] or ""))}
