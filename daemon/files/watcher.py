"""File-system watching through watchdog: inotify, or polling when inotify runs out.

The watcher only reports *which paths* changed; what a change means is decided
by the daemon after a debounce, by looking at the disk.  That is why editors'
atomic saves (a temp file renamed over the target, reported as ``moved``) need
no special case: both ends of a move are reported and the disk tells the rest.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter, InotifyObserver
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)

# Opened / closed-without-write events are left out: the daemon reads every file
# it hashes, and listening to its own reads would only feed it noise.
_EVENTS = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]

#: ``on_change(path, is_directory)`` is called from the observer's thread.
ChangeCallback = Callable[[str, bool], None]


def _in_git_dir(path: str) -> bool:
    return "/.git/" in path or path.endswith("/.git")


def _names_history(path: str) -> bool:
    """A path in a ``.git`` whose change can change what history the repository holds.

    Only these leave the handler: ``.git`` itself (removed, replaced), ``HEAD``,
    ``packed-refs`` and ``refs/``; git writes thousands of objects per commit,
    and those events are noise.
    """
    if path.endswith("/.git"):
        return True
    _, _, inside = path.rpartition("/.git/")
    return inside in ("HEAD", "packed-refs") or inside.startswith("refs/")


class _Handler(FileSystemEventHandler):
    def __init__(self, on_change: ChangeCallback) -> None:
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path]
        if event.event_type == "moved":
            paths.append(event.dest_path)
        for raw in paths:
            path = os.fsdecode(raw)
            if path and (not _in_git_dir(path) or _names_history(path)):
                self.on_change(path, event.is_directory)


class _LossReportingEmitter(InotifyEmitter):
    """An inotify emitter that also says when the kernel dropped events.

    When its queue overflows (``IN_Q_OVERFLOW``: 20,000 files written at once on a
    busy host) the kernel drops events; watchdog then rebuilds its watches and
    reports nothing, so the files written meanwhile would wait for the periodic
    reconcile (minutes).  This emitter calls ``on_lost`` as well, and the daemon
    looks at the disk at once.
    """

    def __init__(self, *args: object, on_lost: Callable[[], None], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._on_lost = on_lost

    def on_thread_start(self) -> None:
        super().on_thread_start()
        group = getattr(self, "_inotify", None)
        rebuild = getattr(group, "on_queue_overflow", None)
        if group is None or rebuild is None:  # another watchdog: the periodic reconcile still covers it
            log.warning("this watchdog's inotify emitter has no overflow hook: lost events wait for the reconcile")
            return

        def overflowed() -> None:
            rebuild()
            self._on_lost()

        group.on_queue_overflow = overflowed


class _LossReportingObserver(InotifyObserver):
    """watchdog's inotify observer, with emitters that report lost events (:class:`_LossReportingEmitter`)."""

    def __init__(self, on_lost: Callable[[], None]) -> None:
        super().__init__()
        self._emitter_class = _LossReportingEmitter  # made with the observer's emitter arguments, and these
        self._emitter_kwargs = {**self._emitter_kwargs, "on_lost": on_lost}


class Watcher:
    """Recursive watches over a few roots (and plain ones over a few ``dirs``), with the mode in use and why.

    ``on_lost`` is called (from the watcher's thread) when inotify dropped events:
    which paths changed is then unknown, and only a look at the disk can tell.
    """

    def __init__(
        self,
        roots: list[Path],
        on_change: ChangeCallback,
        mode: str = "auto",
        poll_interval: float = 2.0,
        on_lost: Callable[[], None] = lambda: None,
        dirs: list[Path] | None = None,
    ):
        self.roots = roots
        #: Directories watched without their subdirectories (OpenClaw's state dir, for its ``openclaw.json``).
        self.dirs = dirs or []
        self.on_change = on_change
        self.on_lost = on_lost
        self.requested = mode
        self.poll_interval = poll_interval
        self.mode = "stopped"
        self.reason = ""
        self._observer: BaseObserver | None = None

    def _start(self, observer: BaseObserver) -> None:
        handler = _Handler(self.on_change)
        for root in self.roots:
            observer.schedule(handler, str(root), recursive=True, event_filter=_EVENTS)
        for directory in self.dirs:
            observer.schedule(handler, str(directory), recursive=False, event_filter=_EVENTS)
        observer.start()
        self._observer = observer

    def start(self) -> None:
        if self.requested in ("auto", "inotify"):
            observer: BaseObserver | None = None
            try:
                observer = _LossReportingObserver(self.on_lost)  # creating it already takes an inotify instance
                self._start(observer)
                self.mode, self.reason = "inotify", ""
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EMFILE, errno.ENFILE) or self.requested == "inotify":
                    raise
                self.reason = f"inotify unavailable ({exc.strerror or exc}); polling every {self.poll_interval:g} s"
                log.warning("%s", self.reason)
                if observer is not None:
                    self._stop_observer(observer)
        else:
            self.reason = "polling requested by configuration"
        self._start(PollingObserver(timeout=self.poll_interval))
        self.mode = "polling"

    def healthy(self) -> bool:
        """False when an emitter thread died (for example a watch failed on a new directory)."""
        if self._observer is None:
            return False
        return self._observer.is_alive() and all(e.is_alive() for e in self._observer.emitters)

    @staticmethod
    def _stop_observer(observer: BaseObserver) -> None:
        try:
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=5)
        except Exception:
            log.debug("observer stop failed", exc_info=True)

    def stop(self) -> None:
        if self._observer is not None:
            self._stop_observer(self._observer)
            self._observer = None
        self.mode = "stopped"
