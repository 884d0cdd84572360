"""How editors and agents save a note, for the tests and the soak benchmark that drive a daemon with them.

Each save leaves ``text`` at ``path`` the way a real program does it:

- :func:`save_by_rename`: write a temp file in the same directory, fsync, rename it over the note
  (most editors' atomic save, and every careful agent's);
- :func:`save_vim_style`: vim's backup-rename: the note renamed away to ``note~``, a new one written
  under its name, the backup removed;
- :func:`save_into_new_dir`: a directory made, the note written into it at once (by a rename);
- :func:`append_note`: a line appended in place (an agent's daily note).

:func:`unique_word` makes a word the full-text index keeps as it is (consonants and a ``k``: no
stemmer turns it into another word), so a search for it says whether that very save was indexed.
"""

from __future__ import annotations

import os
from pathlib import Path

_LETTERS = "bcdfghjlmnpqrstvwxz"


def unique_word(n: int, prefix: str = "zq") -> str:
    """A word for save number ``n``: the prefix, ``n`` in consonants, and a ``k``."""
    digits = ""
    n += 1
    while n:
        n, r = divmod(n, len(_LETTERS))
        digits += _LETTERS[r]
    return f"{prefix}{digits}k"


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def save_by_rename(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_synced(temp, text)
    os.rename(temp, path)


def save_vim_style(path: Path, text: str) -> None:
    backup = path.with_name(path.name + "~")
    if path.exists():
        os.rename(path, backup)
    _write_synced(path, text)
    backup.unlink(missing_ok=True)


def save_into_new_dir(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_by_rename(path, text)


def append_note(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


STYLES = {"rename": save_by_rename, "vim": save_vim_style, "new-dir": save_into_new_dir}
