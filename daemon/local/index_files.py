"""Which index files are memstrata's: the ones it created, and nothing else.

On an OpenClaw host QMD keeps its own live ``index.sqlite`` (the old default
``paths.index`` pointed at it).  memstrata never opens for writing, replaces or
deletes a file it did not create.  A healthy index says it is ours by its
``meta`` table (:func:`layers.local.storage.index.inspect_file`); a damaged one cannot,
so every index file the daemon creates or rebuilds is also recorded here by
device and inode, and a damaged file is rebuilt only when the record names it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from layers.common.fsutil import PRIVATE_FILE, atomic_write, private_dirs
from layers.local.storage.index import inspect_file

log = logging.getLogger(__name__)

CLAIMS_FILE = "index-files.json"
SIDECARS = ("-wal", "-shm")


class IndexClaims:
    """``{path: [st_dev, st_ino]}`` of the index files this daemon made, kept in the state directory."""

    def __init__(self, state_dir: Path | None) -> None:
        self.path = state_dir / CLAIMS_FILE if state_dir else None
        self._claims: dict[str, list[int]] = {}
        if self.path is not None:
            with contextlib.suppress(OSError, ValueError):
                loaded = json.loads(self.path.read_text("utf-8"))
                if isinstance(loaded, dict):
                    self._claims = {str(k): list(v) for k, v in loaded.items() if isinstance(v, list)}

    @staticmethod
    def _identity(file: Path) -> list[int] | None:
        try:
            st = os.lstat(file)
        except OSError:
            return None
        return [st.st_dev, st.st_ino]

    def owns(self, file: Path) -> bool:
        """True when ``file`` is the very file (same inode) this daemon last created or rebuilt there."""
        found = self._identity(file)
        return found is not None and self._claims.get(str(file)) == found

    def claim(self, file: Path) -> None:
        """Record ``file`` as ours (after creating, rebuilding or verifying it)."""
        found = self._identity(file)
        if found is None or self._claims.get(str(file)) == found:
            return
        self._claims[str(file)] = found
        if self.path is None:
            return
        try:
            private_dirs(self.path.parent)
            atomic_write(self.path, json.dumps(self._claims, indent=1), mode=PRIVATE_FILE)
        except OSError as exc:  # kept in memory: only a damaged index after a restart needs the record
            log.warning("could not record the index files memstrata owns in %s: %s", self.path, exc)


def move_legacy_index(old: Path, new: Path, claims: IndexClaims) -> bool:
    """Move an index of ours from the old default path (QMD's own file's place) to ``new``, once.

    Only a file that is recognisably a memstrata index moves; QMD's file there is
    left exactly as it is (inspected read-only, never opened for writing).
    Nothing moves when ``new`` already exists.  Returns True when it moved.
    """
    if old == new or os.path.lexists(new) or inspect_file(old).kind != "index":
        return False
    private_dirs(new.parent)
    try:
        os.rename(old, new)
    except OSError as exc:  # another file system: the index is a cache, built afresh at the new place
        log.warning("could not move the memstrata index %s to %s (%s); it is rebuilt there", old, new, exc)
        return False
    for suffix in SIDECARS:  # the WAL may hold the latest commits: it moves with its database
        with contextlib.suppress(FileNotFoundError):
            os.rename(f"{old}{suffix}", f"{new}{suffix}")
    claims.claim(new)
    log.info("moved the memstrata index from %s (the old default, QMD's own file's place) to %s", old, new)
    return True
