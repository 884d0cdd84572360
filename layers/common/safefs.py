"""Writing inside a directory someone else controls, without ever following a symlink.

The daemon runs as root and writes into agent workspaces (its token, restored
files, archive moves, daily notes, template copies).  An agent can replace any
path component with a symlink, so a plain ``open(workspace / rel)`` may write, or
chown, a file anywhere on the machine.  Everything here walks ``rel`` one
component at a time from a directory fd of the root, with ``O_NOFOLLOW``
(``O_DIRECTORY`` for directories), and creates files with ``O_EXCL``: a symlink
where a file or directory of ours should be raises :class:`UnsafePathError` and
nothing is touched.  The root itself is the caller's (configured) path and is
opened normally.

Ownership: new files and directories are handed to ``owner`` (normally the
workspace's owner) with ``fchown`` on the open fd, only when it differs; a file
that is replaced keeps its owner and mode.  Under systemd's ``SystemCallFilter``
chown fails with EPERM: that is logged once and is never fatal (the file then
stays root's, which is safe, only less convenient for the agent).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

Owner = tuple[int, int]  # (uid, gid)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_chown_denied_logged = False


class UnsafePathError(OSError):
    """A path component is a symlink (or not the kind of file expected); it was not followed."""

    def __init__(self, root: Path, rel: str, why: str) -> None:
        super().__init__(errno.ELOOP, f"{rel}: {why}; refused (never followed)", str(Path(root) / rel))
        self.root = Path(root)
        self.rel = rel
        self.why = why

    def __str__(self) -> str:
        return f"{self.root / self.rel}: {self.why}; refused (never followed)"


def owner_of(root: Path) -> Owner | None:
    """The owner new files under ``root`` should get: root's owner when we are root, else None."""
    if os.geteuid() != 0:
        return None
    st = os.stat(root)
    return (st.st_uid, st.st_gid)


def fchown_if_needed(fd: int, owner: Owner | None) -> bool:
    """Give ``fd`` to ``owner`` unless it already has it; False when chown was refused (EPERM)."""
    global _chown_denied_logged
    if owner is None:
        return True
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) == owner:
        return True
    try:
        os.fchown(fd, *owner)
    except PermissionError as exc:
        if not _chown_denied_logged:
            _chown_denied_logged = True
            log.warning(
                "cannot change file ownership (%s; a systemd SystemCallFilter without @chown?): files the daemon "
                "creates in workspaces stay owned by uid %d",
                exc.strerror,
                os.geteuid(),
            )
        return False
    return True


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a plain relative path: {rel!r}")
    return parts


def _refusal(root: Path, rel: str, dir_fd: int, name: str, expected: str) -> UnsafePathError:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return UnsafePathError(root, rel, f"is not a {expected}")
    if stat.S_ISLNK(st.st_mode):
        return UnsafePathError(root, rel, "is a symbolic link")
    return UnsafePathError(root, rel, f"is not a {expected}")


def open_dir(root: Path, rel: str = "", *, create: bool = False, mode: int = 0o755, owner: Owner | None = None) -> int:
    """An fd of directory ``root/rel``, every component opened without following symlinks.

    With ``create``, missing components are made (``mode``, handed to ``owner``);
    existing directories are never chowned (we did not create them).  The caller
    closes the fd.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    done: list[str] = []
    try:
        for part in _parts(rel) if rel else []:
            done.append(part)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                    made = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    fchown_if_needed(made, owner)
                    os.close(made)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except NotADirectoryError:
                    raise _refusal(root, "/".join(done), fd, part, "directory") from None
            except NotADirectoryError:
                raise _refusal(root, "/".join(done), fd, part, "directory") from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _parent(root: Path, rel: str, create: bool, owner: Owner | None) -> Iterator[tuple[int, str]]:
    parent, _, name = rel.rpartition("/")
    _parts(rel)
    fd = open_dir(root, parent, create=create, owner=owner)
    try:
        yield fd, name
    finally:
        os.close(fd)


def lstat(root: Path, rel: str) -> os.stat_result | None:
    """``lstat`` of ``root/rel`` (its directories not followed); None when it does not exist."""
    try:
        with _parent(root, rel, False, None) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_file(root: Path, rel: str) -> int:
    """A read-only fd of the regular file ``root/rel``, opened once and never through a symlink.

    Every directory of ``rel`` is walked with ``O_NOFOLLOW`` from ``root``, so the
    fd is of a file inside ``root`` whatever the names are swapped to meanwhile;
    ``O_NONBLOCK`` means a FIFO put in the file's place cannot hang the caller,
    and what the fd refers to is checked with ``fstat`` (a regular file).  The
    caller reads from the fd, never from the name again, and closes it.
    A file with other hard links is refused too: it may be a file from elsewhere
    (another agent's) under a second name, and which name is its own cannot be told.
    Raises ``FileNotFoundError`` when missing and :class:`UnsafePathError` for a
    symlink, anything but a regular file, or a file with other links.
    """
    with _parent(root, rel, False, None) as (dfd, name):
        return _single_regular(root, rel, dfd, name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)


def _single_regular(root: Path, rel: str, dfd: int, name: str, flags: int) -> int:
    """``name`` in ``dfd`` opened with ``flags`` (no-follow), refused unless a regular file with one link."""
    try:
        fd = os.open(name, flags, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            raise _refusal(root, rel, dfd, name, "regular file") from None
        raise
    _check_single_regular(root, rel, fd)
    return fd


def _check_single_regular(root: Path, rel: str, fd: int) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        why = "is not a regular file" if not stat.S_ISREG(st.st_mode) else "has other hard links"
        raise UnsafePathError(root, rel, why)


def same_file(root: Path, rel: str, st: os.stat_result) -> bool:
    """True while the name ``root/rel`` (not followed) still is the file ``st`` describes.

    Checked after reading an fd from :func:`open_file`: False means the name was
    swapped (renamed over, replaced by a symlink) while the file was being read.
    """
    try:
        now = lstat(root, rel)
    except (OSError, ValueError):
        return False
    return now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def read_bytes(root: Path, rel: str) -> bytes | None:
    """Content of the regular file ``root/rel``; None when missing; a symlink is refused."""
    try:
        with _parent(root, rel, False, None) as (dfd, name):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _refusal(root, rel, dfd, name, "regular file") from None
                raise
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise UnsafePathError(root, rel, "is not a regular file")
                return fh.read()
    except FileNotFoundError:
        return None


def write_atomic(root: Path, rel: str, data: bytes, *, mode: int | None = None, owner: Owner | None = None) -> None:
    """Replace (or create) the regular file ``root/rel`` so a crash leaves old or new content.

    The new content goes to a temp file created ``O_EXCL|O_NOFOLLOW`` in the same
    directory fd, then ``rename`` over the name (rename never follows a symlink).
    A symlink or non-regular file at the name is refused.  A replaced file keeps
    its mode and owner; a new one gets ``mode`` (default 0644) and ``owner``.
    """
    with _parent(root, rel, True, owner) as (dfd, name):
        try:
            old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISLNK(old.st_mode):
            raise UnsafePathError(root, rel, "is a symbolic link")
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise UnsafePathError(root, rel, "is not a regular file")
        import secrets  # imported by a write, not by every reader of this module (a front call finding an agent)

        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fd)
            final_mode = mode if mode is not None else (stat.S_IMODE(old.st_mode) if old else 0o644)
            os.fchmod(fd, final_mode)
            keep = (old.st_uid, old.st_gid) if old is not None and os.geteuid() == 0 else owner
            fchown_if_needed(fd, keep)
            os.close(fd)
            fd = -1
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        with contextlib.suppress(OSError):
            os.fsync(dfd)


def create_new(root: Path, rel: str, data: bytes, *, mode: int = 0o644, owner: Owner | None = None) -> bool:
    """Create ``root/rel`` only if nothing (not even a dangling symlink) has that name; True when created."""
    with _parent(root, rel, True, owner) as (dfd, name):
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fd, mode)
            fchown_if_needed(fd, owner)
            os.fsync(fd)
        return True


def open_append(root: Path, rel: str, *, owner: Owner | None = None) -> BinaryIO:
    """``root/rel`` opened for reading and appending (created, and handed to ``owner``, if missing).

    A symlink, a non-regular file or a file with other hard links (it may be
    someone else's file under a second name) is refused.
    """
    with _parent(root, rel, True, owner) as (dfd, name):
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
            fchown_if_needed(fd, owner)
            _check_single_regular(root, rel, fd)
        except FileExistsError:
            fd = _single_regular(root, rel, dfd, name, flags)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "r+b")


def move(root: Path, src: str, dst: str, *, owner: Owner | None = None) -> None:
    """Move the regular file ``src`` to ``dst`` (which must not exist) inside ``root``.

    Missing directories of ``dst`` are created for ``owner``.  ``link`` + ``unlink``
    makes "must not exist" atomic (rename would replace a file that appeared
    meanwhile); the moved file is never opened, so its content is untouched.
    """
    with _parent(root, src, False, None) as (sfd, sname), _parent(root, dst, True, owner) as (dfd, dname):
        st = os.stat(sname, dir_fd=sfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            why = "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a regular file"
            raise UnsafePathError(root, src, why)
        try:
            os.link(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, f"{dst} already exists", str(root / dst)) from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            if lstat(root, dst) is not None:
                raise FileExistsError(errno.EEXIST, f"{dst} already exists", str(root / dst)) from None
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            return
        os.unlink(sname, dir_fd=sfd)
        with contextlib.suppress(OSError):
            os.fsync(sfd)
            os.fsync(dfd)


def give_tree(root: Path, rel: str, owner: Owner | None) -> int:
    """Give what this process created under ``root/rel`` to ``owner``; the number of entries changed.

    git, run as root in a workspace owned by its agent's user, writes the repository's
    objects, index and refs as root: the agent could not read its own history.  Only
    directories and regular files owned by this process's uid are changed (what anyone
    else made stays as it is); a symlink is neither changed nor followed, a regular file
    with other hard links is left alone (it may be a file from elsewhere on the machine).
    Each entry is opened without following symlinks and checked on its fd before the
    fchown, so a name swapped meanwhile cannot redirect it.  A refused chown (EPERM) is
    logged once (:func:`fchown_if_needed`) and ends the walk.
    """
    me = os.geteuid()
    if owner is None or owner[0] == me:
        return 0
    try:
        top = open_dir(root, rel)
    except (FileNotFoundError, NotADirectoryError, UnsafePathError):
        return 0
    try:
        before = os.fstat(top).st_uid
        if not _give(top, owner, me):
            return 0
        changed = int(before != os.fstat(top).st_uid)
        for _, dirs, files, dfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in (*dirs, *files):
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
                except OSError:
                    continue  # a symlink (ELOOP), gone meanwhile, or not ours to open
                try:
                    before = os.fstat(fd).st_uid
                    if not _give(fd, owner, me):
                        return changed
                    changed += before != os.fstat(fd).st_uid
                finally:
                    os.close(fd)
        return changed
    finally:
        os.close(top)


def give_dir(root: Path, rel: str, owner: Owner | None) -> None:
    """Give the one directory ``root/rel`` (not what it holds) to ``owner`` if this process made it.  For the
    directories a tree handed over with :func:`give_tree` was made in (``skills`` of
    ``skills/mem0-integration``): what else they hold may be anyone's, and is left alone."""
    me = os.geteuid()
    if owner is None or owner[0] == me:
        return
    try:
        fd = open_dir(root, rel)
    except (FileNotFoundError, NotADirectoryError, UnsafePathError):
        return
    try:
        _give(fd, owner, me)
    finally:
        os.close(fd)


def _give(fd: int, owner: Owner, me: int) -> bool:
    """fchown ``fd`` to ``owner`` if it is our directory or our singly-linked regular file; False on EPERM."""
    st = os.fstat(fd)
    if st.st_uid != me or (st.st_uid, st.st_gid) == owner:
        return True
    if not (stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
        return True
    return fchown_if_needed(fd, owner)
