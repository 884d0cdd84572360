"""One commit of exactly the given paths, built in an index of its own, with what is staged checked first.

``git commit -- PATHS`` did this in one command, and failed in two ways:

- the paths and the message were arguments: 20,000 new files made the command
  line (and a 640 KB ``-m``) too long for the kernel ("Argument list too long"),
  so the commit never happened and was retried forever;
- ``--only`` takes each file from the work tree *when it commits*: a secret
  appended between the daemon's scan and the commit went into history unchecked.

So the commit is assembled from git's plumbing, as ``git commit`` does it
inside, each step one git program with its input on stdin (:mod:`layers.daily.git.run`):

1. the repository's ``index.lock`` is taken, as ``git commit`` takes it, and the
   index copied to a private one (in a temporary directory of the daemon's);
   what a person staged there for other paths is set aside in the copy;
2. ``update-index --add --remove --stdin``: each path's content becomes a blob,
   once (paths are named on stdin, never matched as patterns: a pathspec list
   of 2,000 names costs seconds against an index of 20,000);
3. ``diff-index --cached --raw``: what the commit would change, with each new blob;
4. every new blob is read back (``cat-file --batch``) and given to ``check``;
   a path it flags goes back to HEAD's version in the private index, and its
   blob leaves the object store: held back.  What is committed is exactly what
   was checked, whatever the file holds by the time the commit is written;
5. ``write-tree``, ``commit-tree`` (message on stdin), ``update-ref HEAD NEW OLD``:
   the branch moves only if HEAD is still the commit the index was built from;
6. the private index, with what a person had staged put back, becomes the
   repository's index (written into ``index.lock`` and renamed, git's own
   protocol), so ``git status`` agrees and keeps the stat data git recorded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from layers.common import lockowner
from layers.common.fsutil import atomic_write
from layers.daily.git.run import Cancelled, Git, GitFailed

ZERO_OID = "0" * 40
BLOB_MODES = ("100644", "100755", "120000")  # a file, an executable, a symlink's target
_KINDS = {"A": "added", "M": "modified", "T": "modified", "D": "deleted"}
_UPDATE_REF_TRIES = 3

#: ``check(path, read)``: ``read(n)`` gives up to n bytes of the staged blob (b"" at its end);
#: a truthy answer holds the path back and is reported as the reason.
Check = Callable[[str, Callable[[int], bytes]], object]


class IndexBusy(RuntimeError):
    """The repository's ``index.lock`` exists: another git is at work (or one died and left it)."""


@dataclass(frozen=True)
class StagedChange:
    path: str
    kind: str  # "added" | "modified" | "deleted"
    old_mode: str
    old_blob: str
    new_mode: str
    new_blob: str


@dataclass
class CommitResult:
    """What one call did: the new commit (None when nothing differed), what it holds, what was held back."""

    sha: str | None = None
    committed: list[StagedChange] = field(default_factory=list)
    held: dict[str, object] = field(default_factory=dict)


def _nul(paths: Iterable[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def head_commit(git: Git) -> str | None:
    """HEAD's commit, or None on a branch without commits yet."""
    status, out = git.status("rev-parse", "--verify", "-q", "HEAD^{commit}")
    return out.decode().strip() if status == 0 else None


def _differences(git: Git, head: str | None) -> list[StagedChange]:
    """Where the (private) index differs from HEAD (every entry, on a branch without commits)."""
    changes: list[StagedChange] = []
    if head is None:
        for entry in git.run("ls-files", "-z", "--stage").split(b"\0"):
            if entry:
                meta, _, path = entry.partition(b"\t")
                mode, blob, _stage = meta.decode().split(" ")
                changes.append(StagedChange(os.fsdecode(path), "added", "000000", ZERO_OID, mode, blob))
        return changes
    fields = git.run("diff-index", "--cached", "-z", "--raw", "--no-renames", "--no-abbrev", head).split(b"\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(b":"):
            continue
        old_mode, new_mode, old_blob, new_blob, letter = meta[1:].decode().split(" ")
        if letter == "U":
            raise IndexBusy("the index has unmerged paths (a merge in progress): committing waits until it is done")
        kind = _KINDS.get(letter[0], "modified")
        changes.append(StagedChange(os.fsdecode(path), kind, old_mode, old_blob, new_mode, new_blob))
    return changes


def _set_entries(git: Git, entries: Iterable[tuple[str, str, str]], killable: bool = True) -> None:
    """(mode, blob, path) into the index; mode ``0`` removes the path."""
    records = b"".join(f"{mode} {blob}".encode() + b"\t" + os.fsencode(path) + b"\0" for mode, blob, path in entries)
    if records:
        git.run("update-index", "-z", "--index-info", input=records, killable=killable)


def _back_to_head(changes: Iterable[StagedChange]) -> list[tuple[str, str, str]]:
    return [("0", ZERO_OID, c.path) if c.kind == "added" else (c.old_mode, c.old_blob, c.path) for c in changes]


def _as_staged(changes: Iterable[StagedChange]) -> list[tuple[str, str, str]]:
    return [("0", ZERO_OID, c.path) if c.kind == "deleted" else (c.new_mode, c.new_blob, c.path) for c in changes]


class _BlobReader:
    """``read(n)`` over one blob of ``cat-file --batch``'s output, never past its end."""

    def __init__(self, stream, size: int) -> None:
        self._stream = stream
        self.left = size

    def read(self, n: int) -> bytes:
        if self.left <= 0:
            return b""
        data = self._stream.read(min(n, self.left))
        if not data:
            raise Cancelled("git cat-file ended early")  # killed (a stop) or died: nothing is decided
        self.left -= len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def _check_blobs(git: Git, changes: list[StagedChange], check: Check) -> dict[str, object]:
    """Each new blob through ``check``, read back from the object store by one ``cat-file``."""
    held: dict[str, object] = {}
    wanted = [c for c in changes if c.kind != "deleted" and c.new_mode in BLOB_MODES]
    if not wanted:
        return held
    with git.process("cat-file", "--batch") as proc:
        assert proc.stdin is not None and proc.stdout is not None
        for change in wanted:
            proc.stdin.write(change.new_blob.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().decode(errors="replace").split()
            if len(header) != 3 or header[1] != "blob":
                raise GitFailed("cat-file", 1, f"cannot read the staged blob of {change.path}")
            reader = _BlobReader(proc.stdout, int(header[2]))
            why = check(change.path, reader.read)
            reader.drain()
            proc.stdout.read(1)  # the newline after each blob
            if why:
                held[change.path] = why
    return held


def _forget_blobs(git: Git, blobs: set[str]) -> None:
    """Held-back blobs that staging wrote leave the object store: a secret never stays in ``.git``.

    Only loose objects nothing reaches (no ref, reflog or index entry) are removed:
    the same content committed earlier (before a pattern knew it) is history's.
    Rare (a file that gained a secret after the edit flow looked at it), so the
    full walk of the history it costs is paid only then.
    """
    objects = git.work_tree / ".git" / "objects"
    loose = {blob for blob in blobs if (objects / blob[:2] / blob[2:]).is_file()}
    if not loose:
        return
    listed = git.run("rev-list", "--objects", "--all", "--reflog", "--indexed-objects", killable=False)
    reached = {line.partition(" ")[0] for line in listed.decode(errors="replace").splitlines()}
    for blob in loose - reached:
        with contextlib.suppress(OSError):
            os.unlink(objects / blob[:2] / blob[2:])


class _Lock:
    """The ``index.lock`` we created: its fd, and whether it became the index (then it is not ours to remove)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.renamed = False


@contextlib.contextmanager
def index_lock(git_dir: Path, record: Path | None = None) -> Iterator[_Lock]:
    """``index.lock``, created as git creates it (exclusively, never through a symlink); removed unless installed.

    With ``record``, the lock is also written down there (its path, inode and this process,
    :mod:`layers.common.lockowner`) while it is held: a lock the daemon's own dead process left (SIGKILL, a
    power cut) is then known as such at the next start and removed at once
    (:func:`clear_recorded_lock`), instead of blocking commits until it is ``stale_lock_s`` old.
    """
    path = git_dir / "index.lock"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise IndexBusy(f"{path} is held by another git process") from None
    lock = _Lock(path, fd)
    try:
        if record is not None:
            st = os.fstat(fd)
            held = {"lock": os.fsdecode(path), "dev": st.st_dev, "ino": st.st_ino, "since": time.time()}
            try:
                atomic_write(record, json.dumps({**held, **lockowner.this_process()}), mode=0o600)
            except OSError:  # a full state disk: the commit goes on; a lock left is then cleared by its age
                record = None
        yield lock
    finally:
        os.close(fd)
        if not lock.renamed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if record is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(record)


def clear_recorded_lock(record: Path) -> str | None:
    """Remove the lock ``record`` names if the process that took it is gone; what was removed, or None.

    Left alone: a lock whose holder still runs, and a file at the lock's path that is not the
    one recorded (another inode: someone else's git took it since).  Ref locks (``HEAD.lock``, the
    branch's) made while the recorded lock was held are the same dead commit's: removed too.
    """
    try:
        held = json.loads(record.read_text())
    except (OSError, ValueError):
        record.unlink(missing_ok=True)
        return None
    if not isinstance(held, dict) or lockowner.alive(held):
        return None
    removed = []
    lock = Path(str(held.get("lock", "")))
    with contextlib.suppress(OSError):
        st = os.lstat(lock)
        if (st.st_dev, st.st_ino) == (held.get("dev"), held.get("ino")):
            lock.unlink()
            removed.append(lock.name)
    since = float(held.get("since") or 0)
    git_dir = lock.parent
    for ref_lock in (git_dir / "HEAD.lock", *(git_dir / "refs" / "heads").rglob("*.lock")):
        with contextlib.suppress(OSError):
            if os.lstat(ref_lock).st_mtime >= since - 1 and not ref_lock.is_symlink():
                ref_lock.unlink()
                removed.append(ref_lock.relative_to(git_dir).as_posix())
    record.unlink(missing_ok=True)
    return f"{', '.join(removed)} in {git_dir}" if removed else None


def _copy_index(git_dir: Path, private: Path) -> None:
    """The repository's index into ``private`` (read without following a symlink); none yet: nothing."""
    try:
        fd = os.open(git_dir / "index", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return  # a symlink where git keeps its index: start from HEAD, and replace it
        raise
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        with open(private, "wb") as dst:
            shutil.copyfileobj(src, dst)
        # git trusts an entry's stat data only when the file is older than the index itself ("racy
        # git"): the copy keeps the index's time, or an edit in the same second as an entry is missed
        os.utime(private, ns=(st.st_atime_ns, st.st_mtime_ns))


def _install(private: Path, lock: _Lock) -> None:
    """``private`` becomes the repository's index: written into the lock we hold, fsynced, renamed."""
    with open(private, "rb") as src:
        while block := src.read(1 << 20):
            os.write(lock.fd, block)
        st = os.fstat(src.fileno())
    os.utime(lock.fd, ns=(st.st_atime_ns, st.st_mtime_ns))  # the time git wrote it: see _copy_index
    os.fsync(lock.fd)
    os.rename(lock.path, lock.path.with_name("index"))
    lock.renamed = True


def _directories(work_tree: Path, paths: list[str]) -> set[str]:
    """Those of ``paths`` that are a directory now: a file that became one is committed as deleted
    (its files are paths of their own)."""
    found = set()
    for path in paths:
        try:
            if stat.S_ISDIR(os.lstat(work_tree / path).st_mode):
                found.add(path)
        except OSError:
            pass
    return found


def commit_paths(
    git: Git,
    paths: list[str],
    message: str | Callable[[list[StagedChange]], str],
    check: Check | None = None,
    before_update: Callable[[str], None] | None = None,
    lock_record: Path | None = None,
) -> CommitResult:
    """Commit exactly ``paths`` as their files are now (steps 1-6 above).

    ``message`` may be a function of what is actually committed (held-back
    paths left out).  ``before_update`` is given the new commit after it is
    written and before HEAD moves to it (the daemon copies it out of the
    workspace there).  Raises :class:`IndexBusy` when another git holds the
    index, :class:`layers.daily.git.run.Cancelled` when stopped before the commit was
    written; once the branch has moved, the rest runs to its end.
    """
    paths = list(dict.fromkeys(paths))
    ours = set(paths)
    directories = _directories(git.work_tree, paths)
    git_dir = git.work_tree / ".git"
    result = CommitResult()
    if not paths:
        return result
    with index_lock(git_dir, lock_record) as lock, tempfile.TemporaryDirectory(prefix="memstrata-index-") as scratch:
        private = Path(scratch) / "index"
        staging = git.with_env(GIT_INDEX_FILE=str(private))
        for attempt in range(_UPDATE_REF_TRIES):
            private.unlink(missing_ok=True)
            head = head_commit(git)
            _copy_index(git_dir, private)
            if not private.exists() and head is not None:
                staging.run("read-tree", head)
            # what a person staged for other paths is theirs: out of this commit, back in the index after it
            theirs = [c for c in _differences(staging, head) if c.path not in ours]
            _set_entries(staging, _back_to_head(theirs))
            # in the index's own (byte) order: git hashes them one after the other as they come
            listed = _nul(sorted((p for p in paths if p not in directories), key=os.fsencode))
            # out first, so each is hashed again: git trusts a same-size file whose stat matches to the
            # second, and an edit in the second of the last commit was missed (1 run in 30 here)
            staging.run("update-index", "--force-remove", "-z", "--stdin", input=listed)
            staging.run("update-index", "--add", "--remove", "-z", "--stdin", input=listed)
            if directories:
                staging.run("update-index", "--force-remove", "-z", "--stdin", input=_nul(sorted(directories)))
            changes = _differences(staging, head)
            result.held = _check_blobs(staging, changes, check) if check is not None else {}
            if result.held:
                flagged = [c for c in changes if c.path in result.held]
                _set_entries(staging, _back_to_head(flagged))
                _forget_blobs(git, {c.new_blob for c in flagged})
                changes = [c for c in changes if c.path not in result.held]
            if not changes:
                _set_entries(staging, _as_staged(theirs))
                _install(private, lock)  # with the stat data git just recorded: `git status` stays fast
                return result
            tree = staging.run("write-tree").decode().strip()
            text = message(changes) if callable(message) else message
            parents = ["-p", head] if head is not None else []
            sha = git.run("commit-tree", tree, *parents, "-F", "-", input=text.encode("utf-8")).decode().strip()
            if git.cancel is not None:
                git.cancel.check()  # the last moment a stop leaves nothing behind
            if before_update is not None:
                before_update(sha)
            subject = text.partition("\n")[0][:200]
            try:
                git.run("update-ref", "-m", f"commit: {subject}", "HEAD", sha, head or ZERO_OID, killable=False)
            except GitFailed as exc:
                # HEAD moved since it was read (a person's `git commit --only`?), or its lock is held: again
                if "cannot lock ref" not in str(exc.stderr) or attempt == _UPDATE_REF_TRIES - 1:
                    raise
                continue
            result.sha, result.committed = sha, changes
            _set_entries(staging, _as_staged(theirs), killable=False)
            _install(private, lock)
            return result
    return result
