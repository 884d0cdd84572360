"""File-system helpers every layer needs: containment checks and crash-safe writes."""

from __future__ import annotations

import contextlib
import os
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


def fsync_dir(path: Path) -> None:
    """Sync a directory's entries: a file just created or renamed into it survives a power cut.

    fsync of a file syncs its data, not the name pointing at it; ext4 without ``auto_da_alloc`` (and
    other file systems always) can lose a rename or a new name that was never synced.  A directory
    that cannot be opened (gone, not ours) is left: this only hardens what already happened.  A
    symlink to a directory is followed (the main workspace may be one): a sync writes nothing there.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory (EINVAL): nothing more to do there
        pass
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """fsync a file's data (and inode) by its path: one someone else wrote (``tarfile``, ``cp``) without syncing."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO never blocks
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (``root`` too), deepest first; symlinks are names only.

    For a tree about to be renamed into place (a backup put back): a rename of a directory synced
    before its contents could leave, after a power cut, the new name over files the disk never got.
    A file that cannot be synced raises: the caller must not answer as if it were on disk.  (The
    Edge optimize has its own copy, layers/conversation/adapters/edge.py ``_sync_tree``: its child process
    runs with the standard library only.)
    """
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            path = Path(directory, name)
            if not path.is_symlink():
                fsync_file(path)
        fsync_dir(Path(directory))


def atomic_write(path: Path, data: bytes | str, mode: int | None = None) -> None:
    """Write ``path`` so that a crash leaves either the old or the new content, never half.

    The content is fsynced before the rename and the directory after it, so once this returns the new
    content is what a power cut leaves (issue 45: a report written ``applied`` must be the one on disk).
    """
    import tempfile  # a write: readers of this module (a front call reading its token) do not pay for it

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
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def private_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents 0700; tighten ``path`` itself when it is ours.

    Only the directory that holds our files is tightened: parents that already
    exist (a person's home, an OpenClaw tree) are left as they are.
    """
    missing = []
    for candidate in (path, *path.parents):
        if os.path.isdir(candidate):
            break
        missing.append(candidate)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, PRIVATE_DIR)
        os.chmod(directory, PRIVATE_DIR)  # mkdir's mode is cut by the umask, never widened
    tighten(path, PRIVATE_DIR)


def tighten(path: Path | str, mode: int) -> None:
    """Drop permission bits beyond ``mode`` from a file or directory this process owns (not a symlink)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if st.st_uid == os.geteuid() and not os.path.islink(path) and st.st_mode & 0o777 & ~mode:
            os.chmod(path, st.st_mode & 0o777 & mode)


def create_private_file(path: Path) -> None:
    """Make sure ``path`` exists as a 0600 file before a library (SQLite) creates it wider.

    SQLite creates a database 0644 and gives its -wal/-shm/-journal the database's
    mode, so a file that starts 0600 keeps every side file 0600 from the first byte.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)


def tighten_sqlite(path: Path) -> None:
    """A database of ours and its side files to 0600 (an index or queue made by an older version)."""
    for name in (str(path), *(f"{path}{s}" for s in SQLITE_SIDECARS)):
        tighten(name, PRIVATE_FILE)
