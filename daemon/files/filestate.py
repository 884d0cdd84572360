"""What the daemon last processed, per agent: the basis of reconcile.

Each memory file's checksum is recorded after it went through the edit flow;
comparing checksums with the disk finds whatever the watcher missed, including
edits made while the daemon was stopped.  The record is a small JSON file per
agent, replaced atomically, so a crash leaves the previous record intact (and
reconcile then repeats, harmlessly, the work that was in flight).
"""

from __future__ import annotations

import json
from pathlib import Path

from daemon.common.storage import StorageHealth, is_storage_error
from layers.common.fsutil import atomic_write, private_dirs


class FileState:
    """rel path → sha256 of what was last processed, for one agent."""

    def __init__(self, path: Path | None, storage: StorageHealth | None = None, subject: str = "") -> None:
        """``path`` None keeps the record in memory only (``status`` without the daemon).

        With ``storage``, a save the disk refuses (full, read-only) is reported
        there and kept pending instead of raised: the next save writes it.
        """
        self.path = path
        self.storage = storage
        self.subject = subject
        self._files: dict[str, str] = {}
        self._dirty = False
        #: True until a record has been saved once: everything is new, nothing is a repair.
        self.fresh = path is None or not path.exists()
        if path is not None and path.exists():
            try:
                self._files = dict(json.loads(path.read_text("utf-8")).get("files", {}))
            except (ValueError, OSError, AttributeError):
                # A damaged record only costs a full re-check: reconcile rebuilds it.
                self._files = {}

    def get(self, rel: str) -> str | None:
        return self._files.get(rel)

    def set(self, rel: str, sha256: str) -> None:
        if self._files.get(rel) != sha256:
            self._files[rel] = sha256
            self._dirty = True

    def remove(self, rel: str) -> None:
        if self._files.pop(rel, None) is not None:
            self._dirty = True

    def paths(self) -> list[str]:
        return list(self._files)

    def items(self) -> dict[str, str]:
        return dict(self._files)

    def __len__(self) -> int:
        return len(self._files)

    @property
    def dirty(self) -> bool:
        return self._dirty

    def save(self) -> bool:
        """Write the record when it changed; False when the disk refused (it stays pending)."""
        if self._dirty and self.path is not None:
            try:
                private_dirs(self.path.parent)  # the record names every memory file (0600 in 0700)
                atomic_write(self.path, json.dumps({"version": 1, "files": self._files}, sort_keys=True))
            except OSError as exc:
                if self.storage is None or not is_storage_error(exc):
                    raise
                self.storage.failed("records", exc, subject=self.subject, path=self.path)
                return False
            self._dirty = False
            self.fresh = False
            if self.storage is not None:
                self.storage.succeeded("records", self.subject)
        return True
