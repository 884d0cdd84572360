"""The security audit log: JSON lines, one file per UTC day, never a memory's text.

Refused requests (a wrong token, another agent's private memory, a project the
caller is not in, a secret in content) are written here so an operator can see
who tried what.  The seed keeps its security logs in ``{workspace}/logs/security``
(``paths.audit_dir``); the cleanup job writes its own file next to these.

What a refused request carried is the caller's, so every value is cut short and
passed through the never_store patterns before it is written (daemon/common/echo.py):
a 5 MB ``project`` costs a line of a few hundred bytes, a key sent as a project
id is written ``[redacted …]``.  A caller repeating the same refused request
does not fill the disk either: an event identical to one written less than
:data:`FOLD_WINDOW_S` ago is counted, not written, and the count goes out as one
line (``"repeated": N``) when the window has passed (or the daemon stops).

Each append is fdatasync'd before the call returns, and a new day's file has its directory synced:
these are rare events (refusals, changes), and a change's line is written only after the change is
on disk (daemon/conversation/writes.py), so after a power cut the log never says more than the store.

Who acted: an event written while the API serves a request names the request's caller as
``"actor"`` (:func:`acting_for`): the agent itself, or ``"admin as beta"`` when the administrator's
token acted as agent beta (``memstrata delete ID --agent beta`` as root).  Before, such a delete
was written ``"agent": "beta"`` alone, as if beta had done it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.common.echo import capped
from daemon.common.guard import SecretGuard
from daemon.common.terminal import escape_json_controls
from daemon.common.tokens import ADMIN
from layers.common import safefs
from layers.common.fsutil import fsync_dir

if TYPE_CHECKING:
    from daemon.common.config import Config

log = logging.getLogger(__name__)

FOLD_WINDOW_S = 60.0  # identical events within this are one line and a count
MAX_FOLDS = 4096  # distinct events remembered for folding; the oldest is written out past this


#: The caller of the API request being served on this thread (an agent id, ADMIN), None outside one.
_CALLER: ContextVar[str | None] = ContextVar("memstrata_audit_caller", default=None)


@contextlib.contextmanager
def acting_for(caller: str | None) -> Iterator[None]:
    """While a request of ``caller`` is served: every audit event names it as ``actor``."""
    token = _CALLER.set(caller)
    try:
        yield
    finally:
        _CALLER.reset(token)


def actor(caller: str | None, agent: object) -> str | None:
    """Who really acted, as the audit log says it: the agent, or ``admin as AGENT`` for the administrator's
    token acting as an agent (``admin`` for its own routes)."""
    if caller == ADMIN:
        return f"admin as {agent}" if isinstance(agent, str) and agent else ADMIN
    return caller


@dataclass
class _Fold:
    entry: dict[str, Any]  # the event as written (without its time)
    started: float  # monotonic: when the first one was written
    first: str  # its time, as written
    last: str = ""
    repeats: int = 0


class AuditLog:
    def __init__(
        self,
        directory: Path,
        prefix: str = "memory-access",
        confine: Path | None = None,
        guard: Callable[[], SecretGuard] | None = None,
    ) -> None:
        """``confine``: a directory an agent controls (the main workspace holds the default
        ``logs/security``); below it the log is written without following a symlink, so an
        agent that plants ``logs`` → ``/etc`` gets a refusal, not root's appends there.
        ``guard``: the never_store patterns in force (a reload may change them)."""
        self.directory = directory
        self.prefix = prefix
        self._lock = threading.Lock()
        self._confine = confine if confine is not None and confine in directory.parents else None
        self._guard = guard
        self._folds: dict[str, _Fold] = {}

    def ensure_directory(self) -> None:
        """Create the directory now (the daemon does at start): on a fresh root the shipped cron
        lines redirect their output into it, and a shell redirect into a missing directory
        fails before memstrata even starts.  Never follows an agent's symlink."""
        if self._confine is not None:
            rel = self.directory.relative_to(self._confine).as_posix()
            os.close(safefs.open_dir(self._confine, rel, create=True, mode=0o750))
        else:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o750)

    def path_for(self, when: datetime) -> Path:
        return self.directory / f"{self.prefix}-{when:%Y-%m-%d}.log"

    def record(self, event: str, **fields: object) -> None:
        caller = _CALLER.get()
        if caller is not None and "actor" not in fields:
            fields["actor"] = actor(caller, fields.get("agent"))
        self.write({"event": event, **fields})

    def write(self, fields: dict[str, Any]) -> None:
        """Append one event (cut, redacted, folded); a failure to write is logged, never raised."""
        redact = self._guard().redact if self._guard is not None else (lambda text: text)
        entry = capped(fields, redact)
        assert isinstance(entry, dict)
        key = json.dumps(entry, ensure_ascii=False, sort_keys=True, default=str)
        now, stamp = time.monotonic(), datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        with self._lock:
            lines = self._expired(now)
            fold = self._folds.get(key)
            if fold is not None:
                fold.repeats += 1
                fold.last = stamp
            else:
                self._folds[key] = _Fold(entry, now, stamp)
                lines.append({"time": stamp, **entry})
                while len(self._folds) > MAX_FOLDS:
                    lines += self._summary(self._folds.pop(next(iter(self._folds))))
            self._append(lines)

    def flush(self) -> None:
        """Write the counts of folded events now (the daemon's stop)."""
        with self._lock:
            lines: list[dict[str, Any]] = []
            for fold in self._folds.values():
                lines += self._summary(fold)
            self._folds.clear()
            self._append(lines)

    def _expired(self, now: float) -> list[dict[str, Any]]:
        """The count lines of folds whose window has passed (they are forgotten)."""
        lines: list[dict[str, Any]] = []
        for key in [k for k, f in self._folds.items() if now - f.started >= FOLD_WINDOW_S]:
            lines += self._summary(self._folds.pop(key))
        return lines

    @staticmethod
    def _summary(fold: _Fold) -> list[dict[str, Any]]:
        if not fold.repeats:
            return []
        return [{"time": fold.last, **fold.entry, "repeated": fold.repeats, "since": fold.first}]

    def _append(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        text = "".join(escape_json_controls(json.dumps(e, ensure_ascii=False, default=str)) + "\n" for e in entries)
        when = datetime.fromisoformat(entries[-1]["time"])
        path = self.path_for(when)
        new_file = not path.exists()
        try:
            if self._confine is not None:
                rel = path.relative_to(self._confine).as_posix()
                with safefs.open_append(self._confine, rel) as fh:
                    fh.write(text.encode("utf-8", errors="backslashreplace"))
                    fh.flush()
                    os.fdatasync(fh.fileno())
            else:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o750)
                with open(path, "a", encoding="utf-8", errors="backslashreplace") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fdatasync(fh.fileno())
            if new_file:  # the day's file: its name synced too
                fsync_dir(path.parent)
        except OSError as exc:
            log.error("audit log %s not written (%s): %s", self.directory, exc.strerror, entries[-1].get("event"))


def audit_log(
    config: Config, prefix: str = "memory-access", guard: Callable[[], SecretGuard] | None = None
) -> AuditLog:
    """The configured audit log; inside the main workspace it never follows the agent's symlinks.

    ``guard``: the never_store patterns in force; without it, the configuration's.
    """
    if guard is None:
        fixed = SecretGuard(config.guard.never_store)
        guard = lambda: fixed  # noqa: E731
    return AuditLog(config.paths.audit_dir, prefix, confine=config.paths.workspace, guard=guard)
