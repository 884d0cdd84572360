"""A workspace repository a power cut broke, found cheaply and repaired from the daemon's history copy.

What a cut leaves behind in a repository whose writes were not synced (git's default before
issue 45, or a person's own git in the workspace): loose object files of 0 bytes (HEAD's commit
among them), a branch file that is empty or holds half a sha, an index that is missing or cut
short.  git then refuses every command ("object file … is empty", "bad object HEAD"), and the
daemon's commits fail for good.

Everything the daemon ever committed is in its history copy (:mod:`layers.daily.git.history_copy`), which
receives each commit, synced, *before* the workspace's HEAD moves to it.  So the repair is:

1. empty object files are removed (git wrote them and the cut kept only their names);
2. every object the copy has is packed into the workspace (``index-pack --fix-thin``, synced):
   what was lost comes back, and nothing the workspace has is touched;
3. a ref file too short to hold a sha is removed (``update-ref`` refuses to replace a "broken"
   ref); a branch that then names no commit is set to the copy's last commit;
4. an index that is missing or unreadable is made again from HEAD (``read-tree``): the work
   tree's files are never touched, so uncommitted edits stay as they are and are committed next.

:func:`damage` is the check: a walk of the loose objects (``stat`` only), a ``rev-parse`` of HEAD
and an ``ls-files`` of the index, plus ``fsck --connectivity-only`` when asked (after an unclean
stop: tens of milliseconds on a workspace's history).  Measured for issue 45: the repair takes
~160 ms and ends with ``git fsck --full --strict`` clean.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from layers.common.fsutil import atomic_write
from layers.daily.git.run import Git, GitFailed, sync_dirs

SHA_LENGTH = 40
# git's words for a repository that lost data (stderr of any command): a commit failing with one
# of these is a repair's business, not a retry's
CORRUPTION = re.compile(
    r"is empty|is corrupt|corrupt (?:loose )?object|bad object|unable to read|invalid (?:object|sha1 pointer)"
    r"|not a valid object|broken link|missing (?:blob|tree|commit)|index file (?:smaller|corrupt)"
    r"|bad (?:signature|index)|unable to mmap|not a git repository|bad default revision|broken ref"
    r"|unknown index entry format|does not point to a valid object",
    re.IGNORECASE,
)


def looks_corrupt(error: BaseException) -> bool:
    """Whether a failed git command's error says the repository lost data (see :data:`CORRUPTION`)."""
    if type(error).__name__ == "RepositoryBroken":  # layers.daily's, which imports this module
        return True
    stderr = getattr(error, "stderr", None)
    text = f"{stderr if isinstance(stderr, str) else ''} {error}"
    return bool(CORRUPTION.search(text))


def _empty_objects(git_dir: Path) -> list[Path]:
    found = []
    objects = git_dir / "objects"
    try:
        fans = [e for e in os.scandir(objects) if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    for fan in fans:
        try:
            entries = list(os.scandir(fan.path))
        except OSError:
            continue
        found += [Path(e.path) for e in entries if e.is_file(follow_symlinks=False) and e.stat().st_size == 0]
    return found


def _cut_short(path: Path) -> bool:
    """A ref file that holds neither a whole sha nor a symbolic ref (``ref: …``)."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with open(path, "rb") as fh:
            text = fh.read(SHA_LENGTH + 1)
    except OSError:
        return False
    return len(text) <= SHA_LENGTH and not text.startswith(b"ref:")


def _broken_refs(git_dir: Path) -> list[Path]:
    """Loose ref files (and HEAD) too short to name anything: a cut kept their name, not their text."""
    found = [git_dir / "HEAD"] if _cut_short(git_dir / "HEAD") else []
    for dirpath, _dirs, filenames in os.walk(git_dir / "refs"):
        paths = [Path(dirpath) / name for name in sorted(filenames) if not name.endswith(".lock")]
        found += [path for path in paths if _cut_short(path)]
    return found


def _default_branch(git_dir: Path) -> str:
    """The branch a HEAD made anew names: ``master`` or ``main`` if one exists, else the first there is."""
    heads = git_dir / "refs" / "heads"
    names = sorted(p.relative_to(heads).as_posix() for p in heads.rglob("*") if p.is_file() and not _cut_short(p))
    for name in ("master", "main", *names):
        if name in names:
            return f"refs/heads/{name}"
    return "refs/heads/master"


def damage(git: Git, thorough: bool = False) -> list[str]:
    """What is broken in the repository ``git`` runs in ([] when nothing): cheap unless ``thorough``."""
    git_dir = git.work_tree / ".git"
    found = [f"object {p.parent.name}{p.name} is an empty file" for p in _empty_objects(git_dir)]
    found += [f"{p.relative_to(git_dir).as_posix()} names no commit (cut short)" for p in _broken_refs(git_dir)]
    status, _ = git.status("rev-parse", "-q", "--verify", "HEAD^{commit}", fatal=False)
    has_branch = _branch_file(git_dir) is not None
    if status != 0 and has_branch:
        found.append("HEAD does not name a readable commit")
    if status == 0 and not (git_dir / "index").exists():
        found.append("the index is missing")
    elif status == 0:
        code, _ = git.status("ls-files", "--stage", "--", ":(top)/.memstrata-none", fatal=False)
        if code != 0:
            found.append("the index is unreadable")
    if thorough and not found and status == 0:
        code, _ = git.status("fsck", "--connectivity-only", "--no-progress", "--no-dangling", fatal=False)
        if code != 0:
            found.append("objects HEAD reaches are missing (git fsck --connectivity-only)")
    return found


def _branch_file(git_dir: Path) -> str | None:
    """The ref HEAD names (``refs/heads/main``), if HEAD is a symbolic ref to a branch."""
    try:
        text = (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace")[:512].strip()
    except OSError:
        return None
    name = text.removeprefix("ref: ")
    if text.startswith("ref: refs/heads/") and ".." not in name.split("/"):
        return name
    return None


def repair(git: Git, copy_git: Git, copy_refs: list[str], copy_last: str | None) -> list[str]:
    """Repair the repository ``git`` runs in from the copy ``copy_git`` (see the module docstring).

    ``copy_refs`` are the copy's references whose histories to bring back (its daemon ref and
    the lost ones); ``copy_last`` the daemon's last commit there.  Returns what was done.
    """
    git_dir = git.work_tree / ".git"
    done: list[str] = []
    if _cut_short(git_dir / "HEAD"):  # nothing runs in a repository without a HEAD: first
        default = _default_branch(git_dir)
        atomic_write(git_dir / "HEAD", f"ref: {default}\n")
        sync_dirs(git_dir)
        done.append(f"wrote HEAD again (it was empty): {default}")
    empty = _empty_objects(git_dir)
    for path in empty:
        path.unlink(missing_ok=True)
    if empty:
        done.append(f"removed {len(empty)} empty object file(s)")
        sync_dirs(*{p.parent for p in empty})
    if copy_refs:
        revs = "".join(f"{ref}\n" for ref in copy_refs).encode()
        pack = copy_git.run("pack-objects", "--revs", "--stdout", "-q", input=revs, killable=False)
        git.run("index-pack", "--stdin", "--fix-thin", input=pack, killable=False)
        sync_dirs(git_dir / "objects" / "pack")
        done.append("copied every commit of the daemon's history copy back into the repository")
    broken = _broken_refs(git_dir)
    for path in broken:
        path.unlink(missing_ok=True)
    if broken:
        done.append("removed broken ref(s) " + ", ".join(p.relative_to(git_dir).as_posix() for p in broken))
        sync_dirs(git_dir, *{p.parent for p in broken})
    branch = _branch_file(git_dir)
    status, _ = git.status("rev-parse", "-q", "--verify", "HEAD^{commit}", fatal=False)
    if status != 0 and branch is not None and copy_last is not None:
        git.run("update-ref", branch, copy_last, killable=False)
        sync_dirs(*{git_dir, (git_dir / branch).parent})
        done.append(f"set {branch} to the daemon's last commit {copy_last[:10]}")
        status = 0
    index = git_dir / "index"
    index_bad = not index.exists()
    if not index_bad and status == 0:
        index_bad = git.status("ls-files", "--stage", "--", ":(top)/.memstrata-none", fatal=False)[0] != 0
    if index_bad and status == 0:
        index.unlink(missing_ok=True)
        git.run("read-tree", "HEAD", killable=False)
        sync_dirs(git_dir)
        done.append("made the index again from HEAD (the work tree's files untouched)")
    return done


def verify(git: Git) -> str:
    """``git fsck --connectivity-only`` after a repair: "" when clean, else git's last words."""
    try:
        git.run("fsck", "--connectivity-only", "--no-progress", "--no-dangling", killable=False)
    except GitFailed as exc:
        return str(exc)
    except subprocess.SubprocessError as exc:  # pragma: no cover - a git that cannot start
        return str(exc)
    return ""
