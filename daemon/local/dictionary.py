"""The bilingual dictionary L3 searches translate questions with: one file in the state directory.

Built from the installed CC-CEDICT wheel at the daemon's first start, and again when the file is
missing or of another version (a few seconds, while status says the daemon is starting; later starts
only open it); each search opens it read-only, so nothing of it stays resident between searches.
A dictionary that cannot be built (a full disk) is logged and searches go on untranslated.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import apsw

from layers.local.text.translate import DICTIONARY_FILE, Dictionary, build, open_dictionary

log = logging.getLogger(__name__)

ROOM_BYTES = 32 * 2**20  # the file is ~8 MB; SQLite's journal and the temporary copy need as much again


class DictionaryFile:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / DICTIONARY_FILE

    def open(self) -> Dictionary | None:
        """The dictionary, or None: the search goes on without translations."""
        return open_dictionary(self.path)

    def ensure(self) -> None:
        """Build the file when it is missing or stale."""
        found = self.open()
        if found is not None:
            found.close()
            return
        try:
            free = shutil.disk_usage(self.path.parent).free
        except OSError:
            free = 0
        if free < ROOM_BYTES:  # a full disk: not worth the seconds of reading the wheel only to fail writing
            log.warning(
                "the dictionary for translated search is not built: %s has %d MB free, it needs %d "
                "(searches go untranslated; the next start tries again)",
                self.path.parent,
                free // 2**20,
                ROOM_BYTES // 2**20,
            )
            return
        log.info("building the dictionary for translated search at %s (once)", self.path)
        try:
            entries = build(self.path)
        except (OSError, ImportError, apsw.Error) as exc:  # a full disk, or the wheel missing
            log.warning("the dictionary for translated search could not be built (searches go untranslated): %s", exc)
            return
        log.info("dictionary for translated search: %d entries", entries)
