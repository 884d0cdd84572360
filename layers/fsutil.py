"""File-system helpers every layer needs: containment checks and crash-safe writes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def resolves_inside(path: Path, root: Path) -> bool:
    """True when ``path``, with every symlink followed, stays under ``root``.

    A memory file that is a symlink to ``/etc/shadow`` must never be read,
    hashed, indexed or committed; this is the one check that decides it.
    """
    try:
        real = path.resolve(strict=False)
        real_root = root.resolve(strict=False)
    except (OSError, RuntimeError):  # symlink loop
        return False
    return real == real_root or real_root in real.parents


def atomic_write(path: Path, data: bytes | str, mode: int | None = None) -> None:
    """Write ``path`` so that a crash leaves either the old or the new content, never half."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
