"""The cluster-wide shared core through the central remote, one way: the hub pushes it, spokes fetch it.

The hub commits its ``shared/`` directory's content to one ref of the remote
(``refs/memstrata/shared/core``) and pushes it, never forced (:func:`push_shared`).  A spoke fetches
that ref into a small bare mirror of its own and exports the commit's tree into a directory
(:func:`fetch_shared`): written beside the directory and swapped in with one rename, so a reader
sees the old copy or the new one, never half of one.  A fetch that fails leaves the directory as it
was: the last good copy stays, and :func:`exported` says which commit it is and how old.

Nothing here installs the copy into workspaces: the daemon does that, as it installs ``shared/``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from layers.daily.git.history_copy import HistoryCopy
from layers.daily.git.remote import (
    NotOnRemote,
    RefUpdate,
    Remote,
    Unreachable,
    commit_and_push,
    remote_git,
    talk,
)
from layers.daily.git.run import Cancel, Git, sync_dirs, sync_tree

SHARED_REF = "refs/memstrata/shared/core"
FETCHED_REF = "refs/shared/fetched"  # the mirror's: the last commit fetched (or pushed, on the hub)
EXPORTED_REF = "refs/shared/exported"  # the mirror's: the commit the exported directory holds


@dataclass(frozen=True)
class SharedCore:
    """A commit of the shared core: its sha, its committer date (ISO 8601), and whether this call changed anything."""

    commit: str
    date: str
    changed: bool = False
    skipped: tuple[str, ...] = ()  # symbolic links and submodules of the commit, never written here


def _mirror(path: Path, cancel: Cancel | None) -> HistoryCopy:
    """The local bare mirror (made on first use, 0700, like a history copy)."""
    mirror = HistoryCopy(path, cancel)
    mirror.ensure()
    return mirror


def _ref(mirror: HistoryCopy, ref: str) -> str | None:
    status, out = mirror.runner().status("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    return out.decode().strip() if status == 0 else None


def _date(mirror: HistoryCopy, sha: str) -> str:
    return mirror.runner().run("log", "-1", "--format=%cI", sha).decode().strip()


def _fetch(mirror: HistoryCopy, remote: Remote, ref: str) -> str:
    """The remote's ``ref``, fetched into the mirror (FETCHED_REF follows it); NotOnRemote when it has none."""
    git = remote_git(remote, mirror.path, mirror.cancel)
    status, _out, why = talk(git, remote, "fetch", "--no-tags", "--no-recurse-submodules", "--", remote.url, ref)
    if status != 0:
        if "couldn't find remote ref" in why:
            raise NotOnRemote(f"the remote {remote.shown} has no {ref}")
        raise Unreachable(remote.shown, why)
    head = (mirror.path / "FETCH_HEAD").read_text(encoding="utf-8", errors="replace")
    sha = head[:40]
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise Unreachable(remote.shown, f"the fetch of {ref} named no commit")
    mirror.runner().run("update-ref", FETCHED_REF, sha, killable=False)
    sync_dirs(mirror.path / "refs" / "shared", mirror.path / "refs")
    return sha


def fetch_shared(
    remote: Remote,
    mirror_path: Path,
    target: Path,
    ref: str = SHARED_REF,
    cancel: Cancel | None = None,
    *,
    read_only: bool = False,
) -> SharedCore:
    """Fetch ``ref`` and make ``target`` hold its tree; the commit and its date.

    Raises Unreachable or NotOnRemote with ``target`` untouched (the last good copy stays).
    ``changed`` is False when ``target`` already held that commit.  ``read_only``: the files are
    written 0444 (a spoke's copy is the hub's, not to be edited there).
    """
    mirror = _mirror(mirror_path, cancel)
    sha = _fetch(mirror, remote, ref)
    if _ref(mirror, EXPORTED_REF) == sha and target.is_dir() and not target.is_symlink():
        return SharedCore(sha, _date(mirror, sha), False)
    skipped = export(mirror, sha, target, read_only=read_only)
    return SharedCore(sha, _date(mirror, sha), True, skipped)


def local_edits(target: Path, mirror_path: Path) -> list[str] | None:
    """The files of ``target`` that differ from the exported commit (added, changed or removed there);
    None before a first export.  Read locally, no remote: a spoke finds an edit of its copy with it."""
    mirror = HistoryCopy(mirror_path)
    if not mirror.exists:
        return None
    sha = _ref(mirror, EXPORTED_REF)
    if sha is None:
        return None
    if not target.is_dir() or target.is_symlink():
        return ["."]  # the directory itself removed or replaced
    index = mirror.path / f"edits-{os.getpid()}.index"
    _remove(index)
    try:
        git = _worktree(mirror, target, index)
        git.run("add", "--all", "--force", "--", ":/")
        out = git.run("diff-index", "--cached", "--name-only", "-z", "--no-renames", sha)
    finally:
        _remove(index)
    return sorted(os.fsdecode(p) for p in out.split(b"\0") if p)


def reexport(mirror_path: Path, target: Path, *, read_only: bool = False) -> SharedCore | None:
    """Write the exported commit into ``target`` again (an edit there undone, no remote needed);
    None before a first export."""
    mirror = HistoryCopy(mirror_path)
    sha = _ref(mirror, EXPORTED_REF) if mirror.exists else None
    if sha is None:
        return None
    skipped = export(mirror, sha, target, read_only=read_only)
    return SharedCore(sha, _date(mirror, sha), True, skipped)


def exported(mirror_path: Path, ref: str = EXPORTED_REF) -> SharedCore | None:
    """The commit the exported directory holds now (None before a first export): its age, when the hub is away.

    On the hub, ``ref=FETCHED_REF``: the commit the remote last had (pushed or found there)."""
    mirror = HistoryCopy(mirror_path)
    if not mirror.exists:
        return None
    sha = _ref(mirror, ref)
    return SharedCore(sha, _date(mirror, sha)) if sha else None


def export(mirror: HistoryCopy, sha: str, target: Path, *, read_only: bool = False) -> tuple[str, ...]:
    """Write commit ``sha``'s tree beside ``target``, synced, then swap it in with one rename.

    Only regular files are written: a symbolic link (``rules.md -> /etc/shadow``, which a reader
    that follows links would then serve) or a submodule in the commit is left out, and named in
    the answer.  ``read_only``: every file 0444 (before the swap: never a moment writable).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.parent / f".{target.name}.new-{os.getpid()}"
    index = mirror.path / f"export-{os.getpid()}.index"
    for leftover in (fresh, index):
        _remove(leftover)
    fresh.mkdir(mode=0o755)
    try:
        git = _worktree(mirror, fresh, index)
        listing = git.run("ls-tree", "-r", "-z", "--full-tree", sha).split(b"\0")
        skipped = [entry.partition(b"\t")[2] for entry in listing if entry.startswith((b"120000 ", b"160000 "))]
        git.run("read-tree", "--reset", sha)
        if skipped:
            git.run("update-index", "-z", "--force-remove", "--stdin", input=b"".join(p + b"\0" for p in skipped))
        git.run("checkout-index", "--all", "--force", killable=False)
        if read_only:
            _read_only(fresh)
        sync_tree(fresh)
        if os.path.lexists(target):
            _swap(fresh, target)  # ``fresh`` now names the old copy
        else:
            os.rename(fresh, target)
        sync_dirs(target.parent)
    finally:
        _remove(fresh)
        _remove(index)
    mirror.runner().run("update-ref", EXPORTED_REF, sha, killable=False)
    sync_dirs(mirror.path / "refs" / "shared", mirror.path / "refs")
    return tuple(os.fsdecode(p) for p in skipped)


def _read_only(tree: Path) -> None:
    """Every regular file under ``tree`` 0444 (directories stay writable by their owner: the next
    export replaces the whole directory, and removing it needs that)."""
    for dirpath, _dirs, files in os.walk(tree):
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o444)


def _worktree(mirror: HistoryCopy, tree: Path, index: Path) -> Git:
    """The mirror's git with ``tree`` as its work tree and an index of its own."""
    base = mirror.runner()
    env = {**base.env, "GIT_INDEX_FILE": str(index)}
    return Git([*base.prefix, f"--work-tree={tree}"], env, tree, mirror.cancel)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _swap(a: Path, b: Path) -> None:
    """Exchange ``a`` and ``b`` in one step (renameat2 RENAME_EXCHANGE); where the file system cannot,
    two renames (a reader may then find ``b`` missing for that moment, never half written)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(b))
    old = b.parent / f".{b.name}.old-{os.getpid()}"
    _remove(old)
    os.rename(b, old)
    os.rename(a, b)
    os.rename(old, a)


# ---------------------------------------------------------------- the hub's side


def push_shared(
    source: Path,
    remote: Remote,
    mirror_path: Path,
    ref: str = SHARED_REF,
    message: str = "shared core",
    cancel: Cancel | None = None,
    *,
    held_back: Iterable[str] = (),
) -> RefUpdate:
    """Commit ``source``'s content on top of the remote's ``ref`` and push it there, never forced.

    ``status`` ``unchanged`` when the remote's commit already has this content (nothing pushed);
    ``refused`` when the remote's ref moved meanwhile (another writer): nothing overwritten, the
    next call builds on what is there.  Raises Unreachable.  ``held_back``: paths under ``source``
    left out of the commit (files holding a secret: never sent to every host).
    """
    mirror = _mirror(mirror_path, cancel)
    try:
        parent: str | None = _fetch(mirror, remote, ref)
    except NotOnRemote:
        parent = None
    tree = _content_tree(mirror, source, held_back)
    runner = mirror.runner()
    if parent is not None and runner.run("rev-parse", f"{parent}^{{tree}}").decode().strip() == tree:
        return RefUpdate(str(source), ref, parent, "unchanged")
    return commit_and_push(mirror, remote, tree, parent, message, ref, FETCHED_REF, str(source), cancel)


def content_tree(source: Path, mirror_path: Path, held_back: Iterable[str] = ()) -> str:
    """The tree ``push_shared`` would commit for ``source`` now, found locally (no remote): the hub
    compares it with what it last pushed before it talks to the remote at all."""
    return _content_tree(_mirror(mirror_path, None), source, held_back)


def _content_tree(mirror: HistoryCopy, source: Path, held_back: Iterable[str]) -> str:
    index = mirror.path / f"push-{os.getpid()}-{threading.get_ident()}.index"
    _remove(index)
    excluded = [f":(exclude,literal){p}" for p in held_back]
    try:
        git = _worktree(mirror, source, index)
        git.run("add", "--all", "--force", "--", ":/", *excluded)
        return git.run("write-tree").decode().strip()
    finally:
        _remove(index)
