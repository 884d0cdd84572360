"""The security audit log: JSON lines, one file per UTC day, never a memory's text.

Refused requests (a wrong token, another agent's private memory, a project the
caller is not in, a secret in content) are written here so an operator can see
who tried what.  The seed keeps its security logs in ``{workspace}/logs/security``
(``paths.audit_dir``); the cleanup job writes its own file next to these.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from layers import safefs

if TYPE_CHECKING:
    from daemon.config import Config

log = logging.getLogger(__name__)


class AuditLog:
    def __init__(self, directory: Path, prefix: str = "memory-access", confine: Path | None = None) -> None:
        """``confine``: a directory an agent controls (the main workspace holds the default
        ``logs/security``); below it the log is written without following a symlink, so an
        agent that plants ``logs`` → ``/etc`` gets a refusal, not root's appends there."""
        self.directory = directory
        self.prefix = prefix
        self._lock = threading.Lock()
        self._confine = confine if confine is not None and confine in directory.parents else None

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
        self.write({"event": event, **fields})

    def write(self, fields: dict) -> None:
        """Append one event; a failure to write is logged, never raised into the request."""
        now = datetime.now(timezone.utc)
        entry = {"time": now.isoformat(timespec="milliseconds"), **fields}
        line = json.dumps(entry, ensure_ascii=False, default=str) + "\n"
        try:
            with self._lock:
                if self._confine is not None:
                    rel = self.path_for(now).relative_to(self._confine).as_posix()
                    with safefs.open_append(self._confine, rel) as fh:
                        fh.write(line.encode("utf-8"))
                else:
                    self.directory.mkdir(parents=True, exist_ok=True, mode=0o750)
                    with open(self.path_for(now), "a", encoding="utf-8") as fh:
                        fh.write(line)
        except OSError as exc:
            log.error("audit log %s not written (%s): %s", self.directory, exc.strerror, fields.get("event"))


def audit_log(config: Config, prefix: str = "memory-access") -> AuditLog:
    """The configured audit log; inside the main workspace it never follows the agent's symlinks."""
    return AuditLog(config.paths.audit_dir, prefix, confine=config.paths.workspace)
