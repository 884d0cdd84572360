"""One open per file version: how the daemon reads a memory file an agent controls.

An agent can swap a name between any two system calls of the daemon: a file
checked by name and then opened by name again may, at the second open, be a
symlink to another agent's MEMORY.md, a root-only file or a FIFO.  So a file is
opened once, without following a symlink in any component of its path
(:func:`layers.common.safefs.open_file`), non-blocking, and checked on that fd (a regular
file, one link, its size under the limit) before a byte is read.  The bytes read
from that fd are the version: the secret guard, the index and the commit
decision all get those same bytes (or, for an unchanged version, the verdict
kept for it), never a second read by name.  A name that no longer is the file
read (swapped while it was being read) is skipped and said so; the event the
swap caused brings the name back through here.

Files over the size limit are not read at all, and reads are bounded: nothing a
workspace holds can make the daemon hold more than the limit of it in memory.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from layers.common import safefs

#: (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of an open fd: a version of a file
#: (ctime changes with any write, rename or utime, and no agent can set it back).
Identity = tuple[int, int, int, int, int]

SKIP_SYMLINK = "symbolic link: never followed (it could lead outside the workspace, or into another agent's)"
SKIP_NOT_REGULAR = "not a regular file: never read"
SKIP_LINKED = "has other hard links: never read (it may be another file under a second name)"
SKIP_SWAPPED = "replaced while it was being read: skipped, read again at its next change"
NOT_UTF8 = "not valid UTF-8: versioned, not indexed"
_SKIPS = {"is a symbolic link": SKIP_SYMLINK, "has other hard links": SKIP_LINKED}

_READ_BLOCK = 1024 * 1024


def skip_too_large(size: int, limit: int) -> str:
    return (
        f"larger than watch.max_file_mb ({size / 1e6:.1f} MB > {limit / 1e6:.1f} MB): "
        "not read, neither versioned nor indexed"
    )


@dataclass(frozen=True)
class Inspection:
    """One version of a memory file, read once (or recognised as the version read before)."""

    exists: bool
    sha256: str | None = None
    size: int = 0
    skip: str | None = None  # neither versioned nor indexed, and why
    index_skip: str | None = None  # versioned, but not indexed, and why
    #: The bytes read from the fd; None when nothing was read (skipped, missing, or ``known``).
    data: bytes | None = field(default=None, repr=False, compare=False)
    identity: Identity | None = None

    @property
    def usable(self) -> bool:
        return self.exists and self.skip is None

    def text(self) -> str | None:
        """The version as text, when it is indexable UTF-8 that was read."""
        if self.data is None or self.index_skip:
            return None
        return self.data.decode("utf-8")


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _open(root: Path, rel: str, max_bytes: int) -> tuple[int, os.stat_result] | Inspection:
    """The fd and fstat of ``root/rel`` when it may be read; otherwise an Inspection saying why not."""
    try:
        fd = safefs.open_file(root, rel)
    except FileNotFoundError:
        return Inspection(exists=False)
    except safefs.UnsafePathError as exc:
        return Inspection(exists=True, skip=_SKIPS.get(exc.why, SKIP_NOT_REGULAR))
    except NotADirectoryError:
        return Inspection(exists=False)  # a directory of its path is a file now: this name is gone
    except PermissionError as exc:
        return Inspection(exists=True, skip=f"cannot be read ({exc.strerror}): neither versioned nor indexed")
    st = os.fstat(fd)
    if st.st_size > max_bytes:
        os.close(fd)
        return Inspection(exists=True, size=st.st_size, skip=skip_too_large(st.st_size, max_bytes))
    return fd, st


def peek(root: Path, rel: str, max_bytes: int) -> Inspection:
    """Whether ``root/rel`` may be read, from its open fd, without reading a byte (no checksum, no data).

    For a commit job off the loop thread: the edit flow read the version, and what git
    stages of it is checked again before it is committed.
    """
    opened = _open(root, rel, max_bytes)
    if isinstance(opened, Inspection):
        return opened
    fd, st = opened
    os.close(fd)
    return Inspection(True, size=st.st_size, identity=identity_of(st))


def read_version(
    root: Path,
    rel: str,
    max_bytes: int,
    known: tuple[Identity, str] | None = None,
) -> Inspection:
    """Open ``root/rel`` once and read it, or say why it is not read.

    ``known`` is the (identity, sha256) of the version read last time: when the
    open fd is still that version, nothing is read and the Inspection carries
    that checksum without data (the caller keeps the verdict it made then).
    """
    opened = _open(root, rel, max_bytes)
    if isinstance(opened, Inspection):
        return opened
    fd, st = opened
    try:
        identity = identity_of(st)
        if known is not None and known[0] == identity:
            return Inspection(True, known[1], st.st_size, identity=identity)
        data = _read_at_most(fd, max_bytes)
    finally:
        os.close(fd)
    if data is None:  # grew past the limit while being read
        return Inspection(exists=True, size=max_bytes + 1, skip=skip_too_large(max_bytes + 1, max_bytes))
    if not safefs.same_file(root, rel, st):
        return Inspection(exists=True, skip=SKIP_SWAPPED)
    try:
        data.decode("utf-8")
        index_skip = None
    except UnicodeDecodeError:
        index_skip = NOT_UTF8
    return Inspection(True, hashlib.sha256(data).hexdigest(), len(data), None, index_skip, data, identity)


def _read_at_most(fd: int, limit: int) -> bytes | None:
    """Everything the fd holds, in bounded blocks; None when that is more than ``limit`` bytes."""
    os.set_blocking(fd, True)  # a regular file (checked): reads never wait on a writer
    chunks: list[bytes] = []
    total = 0
    while block := os.read(fd, min(_READ_BLOCK, limit + 1 - total)):
        chunks.append(block)
        total += len(block)
        if total > limit:
            return None
    return b"".join(chunks)
