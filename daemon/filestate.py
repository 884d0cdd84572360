"""What the daemon last processed, per agent: the basis of reconcile.

Each memory file's checksum is recorded after it went through the edit flow;
comparing checksums with the disk finds whatever the watcher missed, including
edits made while the daemon was stopped.  The record is a small JSON file per
agent, replaced atomically, so a crash leaves the previous record intact (and
reconcile then repeats, harmlessly, the work that was in flight).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from daemon.storage import StorageHealth, is_storage_error
from layers.fsutil import atomic_write, private_dirs, resolves_inside

_HASH_BLOCK = 1024 * 1024

SKIP_OUTSIDE = "symlink leading outside the workspace (never followed)"
SKIP_NOT_REGULAR = "not a regular file"


@dataclass(frozen=True)
class Inspection:
    """One look at a memory file, without ever following it out of its workspace."""

    exists: bool
    sha256: str | None = None
    size: int = 0
    skip: str | None = None  # neither versioned nor indexed, and why
    index_skip: str | None = None  # versioned, but not indexed, and why

    @property
    def usable(self) -> bool:
        return self.exists and self.skip is None


def safe_stat(path: Path, workspace: Path) -> os.stat_result | Inspection:
    """The file's stat when it may be opened; otherwise an Inspection saying why not."""
    if not os.path.lexists(path):
        return Inspection(exists=False)
    if not resolves_inside(path, workspace):
        return Inspection(exists=True, skip=SKIP_OUTSIDE)
    try:
        st = path.stat()
    except OSError:
        return Inspection(exists=False)
    if not stat.S_ISREG(st.st_mode):
        return Inspection(exists=True, skip=SKIP_NOT_REGULAR)
    return st


def inspect(path: Path, workspace: Path, max_index_bytes: int) -> Inspection:
    """Hash a file and decide what may be done with it.

    Symlinks out of the workspace and non-regular files (a FIFO would block the
    daemon forever) are reported but never opened.
    """
    st = safe_stat(path, workspace)
    if isinstance(st, Inspection):
        return st
    digest = hashlib.sha256()
    utf8_ok = True
    try:
        with path.open("rb") as fh:
            if st.st_size <= max_index_bytes:
                data = fh.read()
                digest.update(data)
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    utf8_ok = False
            else:
                while block := fh.read(_HASH_BLOCK):
                    digest.update(block)
    except FileNotFoundError:
        return Inspection(exists=False)
    index_skip = None
    if st.st_size > max_index_bytes:
        index_skip = (
            f"larger than the indexing limit ({st.st_size / 1e6:.1f} MB > "
            f"{max_index_bytes / 1e6:.1f} MB): versioned, not indexed"
        )
    elif not utf8_ok:
        index_skip = "not valid UTF-8: versioned, not indexed"
    return Inspection(True, digest.hexdigest(), st.st_size, None, index_skip)


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
