"""L2 daily memory: ``MEMORY.md`` plus ``memory/YYYY-MM-DD.md``, versioned with git.

Two halves live here because they are one layer: the daily-file convention
(append a note, spot files that break the convention, plan archiving) and the
workspace's git repository, which is what makes L1/L2 recoverable.

Git is driven through the git program (GitPython's ``repo.git``), not through
GitPython's own index code: measured here, ~30 ms against ~105 ms per commit.
History is never rewritten and nothing is forced; a person's own commits in the
same repository are simply part of the history.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from layers.common import safefs
from layers.common.names import shown as printable
from layers.daily import MEMORY_DIR
from layers.daily.git import commit as gitcommit
from layers.daily.git import repair as gitrepair
from layers.daily.git.commit import Check, StagedChange
from layers.daily.git.history_copy import HistoryCopy
from layers.daily.git.log import LOG_FORMAT, CommitInfo, parse_log
from layers.daily.git.run import NEUTRAL_CONFIG, Cancel, Git, GitFailed, sync_dirs, sync_tree

if TYPE_CHECKING:
    import git
    from git import Git as GitCommand  # in the class below, ``git`` is the property
else:

    class _GitOnFirstUse:
        """GitPython, imported when a repository is first used: importing it costs ~60 ms of CPU,
        which a command line call that never runs git (``--help``, ``status``, ``search``) should not pay
        (docs/facts.md, "What a command line call costs")."""

        def __getattr__(self, name: str):
            import git as module

            globals()["git"] = module
            return getattr(module, name)

    git = _GitOnFirstUse()

log = logging.getLogger(__name__)

ARCHIVE_DIR = "memory/archive"
DAILY_NAME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\.md$")

# ---------------------------------------------------------------- daily files


def daily_rel(day: date) -> str:
    """Workspace-relative path of the daily file for ``day``."""
    return f"{MEMORY_DIR}/{day:%Y-%m-%d}.md"


def parse_daily_name(name: str) -> date | None:
    """The date a conventional daily file name stands for, else None."""
    match = DAILY_NAME_RE.match(name)
    if not match:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:  # 2026-02-30.md looks right and is not
        return None


def append_note(workspace: Path, text: str, now: datetime | None = None) -> Path:
    """Append one timestamped line to today's daily file, creating it with a heading.

    A lock serialises concurrent writers (two agents' tools, a person's CLI) so
    lines never interleave; continuation lines are indented so a multi-line note
    stays one markdown list item.  The file is opened without following symlinks
    (the caller may be root; the workspace is the agent's): a symlinked
    ``memory/`` or day file raises :class:`layers.common.safefs.UnsafePathError`.
    """
    now = now or datetime.now().astimezone()
    text = text.strip()
    if not text:
        raise ValueError("a note needs some text")
    first, *rest = text.splitlines()
    line = f"- {now:%H:%M:%S} {first}\n" + "".join(f"  {r}\n" for r in rest)
    rel = daily_rel(now.date())
    with safefs.open_append(workspace, rel, owner=safefs.owner_of(workspace)) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            size = fh.seek(0, os.SEEK_END)
            prefix = b""
            if size == 0:
                prefix = f"# {now:%Y-%m-%d}\n\n".encode()
            else:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    prefix = b"\n"
            fh.write(prefix + line.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
            if size == 0:  # a new day's file: its name must survive a cut as its line does
                sync_dirs(workspace / MEMORY_DIR, workspace)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return workspace / rel


def refill_if_empty(workspace: Path, rel: str, content: bytes) -> bool:
    """Write ``content`` into ``rel`` if the file is still empty (0 bytes); True when it was.

    After a power cut a file the agent wrote (never synced) can be 0 bytes while HEAD holds its
    last committed version: committing that would record the cut as the agent's edit.  The check
    and the write happen under the note lock (:func:`append_note`), on the open fd (no symlink
    followed), so a note appended meanwhile is never overwritten: it lands after the content.
    """
    with safefs.open_append(workspace, rel, owner=safefs.owner_of(workspace)) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if os.fstat(fh.fileno()).st_size != 0:
                return False
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
            return True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def follows_convention(rel: str) -> bool:
    """Whether a workspace-relative path under ``memory/`` is named as the convention says."""
    rel_dir, _, name = rel.rpartition("/")
    day = parse_daily_name(name)
    if day is None:
        return False
    if rel_dir == MEMORY_DIR:
        return True
    return rel_dir == f"{ARCHIVE_DIR}/{day.year:04d}"


def naming_violations(workspace: Path) -> list[str]:
    """Files under ``memory/`` that break the ``YYYY-MM-DD.md`` convention.

    They are reported, never renamed: a file called ``notes.md`` may matter to
    someone, and moving it would break their links.  A ``memory`` that is a symbolic link is not
    walked (it is not the agent's memory: nothing under it is committed or indexed either).
    """
    root = workspace / MEMORY_DIR
    if root.is_symlink() or not root.is_dir():
        return []
    bad: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(workspace).as_posix()
        bad.extend(f"{rel_dir}/{name}" for name in sorted(filenames) if not follows_convention(f"{rel_dir}/{name}"))
    return bad


def archive_plan(workspace: Path, after_days: int, today: date) -> list[tuple[str, str]]:
    """(source, destination) moves for daily files older than ``after_days`` days."""
    root = workspace / MEMORY_DIR
    if root.is_symlink() or not root.is_dir():
        return []
    cutoff = today - timedelta(days=after_days)
    moves = []
    for path in sorted(root.glob("*.md")):
        day = parse_daily_name(path.name)
        if day is not None and day < cutoff and not path.is_symlink() and path.is_file():
            moves.append((f"{MEMORY_DIR}/{path.name}", f"{ARCHIVE_DIR}/{day.year:04d}/{path.name}"))
    return moves


# ---------------------------------------------------------------- git


class RepoBusyError(RuntimeError):
    """Another git process holds the repository's ``index.lock``; try again later."""


class RepositoryBroken(GitFailed):
    """The repository lost data (a power cut): :meth:`WorkspaceRepo.repair` puts it right."""


class RepoRefusedError(RuntimeError):
    """A repository git is not run in: its ``.git`` is a symlink or a gitfile pointing elsewhere."""


# Per driver named in any config file: a filter (run on every file ``git add`` or
# ``git status`` hashes) is emptied, which makes git use the content as it is.
_FILTER_KEYS = (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))


@dataclass(frozen=True)
class Change:
    """One uncommitted path and what happened to it."""

    path: str
    kind: str  # "added" | "modified" | "deleted"


@dataclass(frozen=True)
class Restored:
    """What ``restore`` did: the commit that keeps the edits it replaced, and the restore commit."""

    file: str
    source: str  # full sha the content was taken from
    changed: bool  # whether the file's content changed
    commit: CommitInfo | None
    kept_edits_commit: CommitInfo | None
    from_copy: bool = False  # taken from the daemon's copy: the workspace's history no longer had it


@dataclass(frozen=True)
class Committed:
    """What a commit did: the commit, what it holds, what ``check`` held back, a rewritten history found."""

    info: CommitInfo | None
    changes: list[StagedChange] = field(default_factory=list)
    held: dict[str, object] = field(default_factory=dict)
    lost: str | None = None  # the daemon's previous last commit, when this one does not descend from it


@dataclass(frozen=True)
class Repaired:
    """A repository found broken (a power cut) and what its repair did (:mod:`layers.daily.git.repair`)."""

    damage: list[str]
    actions: list[str]
    left: str  # "" when git fsck --connectivity-only is clean afterwards, else what it still says


@dataclass(frozen=True)
class Rewritten:
    """The daemon's last commit is no longer in the workspace's history (kept in the copy)."""

    lost: str
    commit: CommitInfo | None  # as the copy holds it
    head: str | None  # the workspace's HEAD now (None: no commits)
    why: str


class WorkspaceRepo:
    """The git repository of one workspace, as the daemon and the CLI use it.

    Every git command names the repository explicitly (``--git-dir``/``--work-tree``),
    trusts exactly this workspace (``-c safe.directory=``; a workspace owned by the
    agent's user is otherwise refused by git as "dubious ownership" when root runs
    it) and neutralises what the repository's own config could make git run
    (hooks, fsmonitor, filters, signing, pagers): the global git config is never
    touched.
    """

    def __init__(
        self,
        path: Path,
        author: tuple[str, str] = ("memstrata", "memstrata@localhost"),
        stale_lock_s: float = 60.0,
        copy: HistoryCopy | None = None,
    ) -> None:
        self.path = path
        self.stale_lock_s = stale_lock_s
        #: Where every commit made here is copied, out of the agent's reach (None: nowhere).
        self.copy = copy
        #: Set by the daemon's stop: kills the commit pipeline's running git (see layers/daily/git/run.py).
        self.cancel: Cancel | None = None
        #: Where the daemon writes down the index.lock it holds (None: nowhere; gitcommit.index_lock).
        self.lock_record: Path | None = None
        self._author = author
        self._git: git.Git | None = None
        self._filters: tuple[str, ...] = ()
        self._prefix: list[str] = []
        self._env: dict[str, str | None] = {}

    # -- set-up

    @property
    def exists(self) -> bool:
        return os.path.lexists(self.path / ".git")

    def head_stamp(self) -> tuple[tuple[int, int, int] | None, ...]:
        """What changes whenever HEAD moves, from three ``lstat`` calls and no git: ``.git/HEAD``,
        the branch file it names and ``packed-refs``.  A commit made by someone else (the CLI's
        restore, the agent's own git) shows here, so the daemon re-reads its last commit only then.
        Nothing is followed: HEAD's text names a file under ``refs/heads/`` or nothing is stamped."""
        dot_git = self.path / ".git"

        def stamp(path: Path) -> tuple[int, int, int] | None:
            try:
                st = os.lstat(path)
            except OSError:
                return None
            return (st.st_mtime_ns, st.st_size, st.st_ino)

        branch: Path | None = None
        try:
            if not os.path.islink(dot_git / "HEAD"):
                text = (dot_git / "HEAD").read_text(encoding="utf-8", errors="replace")[:512].strip()
                name = text.removeprefix("ref: ")
                if text.startswith("ref: refs/heads/") and ".." not in name.split("/"):
                    branch = dot_git / name
        except OSError:
            pass
        return (stamp(dot_git / "HEAD"), stamp(branch) if branch else None, stamp(dot_git / "packed-refs"))

    def _check_git_dir(self) -> None:
        dot_git = self.path / ".git"
        if dot_git.is_symlink() or not dot_git.is_dir():
            raise RepoRefusedError(
                f"{dot_git} is {'a symbolic link' if dot_git.is_symlink() else 'not a directory'}: "
                "git is never run in a repository that points elsewhere"
            )

    def ensure(self) -> bool:
        """Initialise the repository if it is missing; True when one was created.

        Checked before every use: in a spoke workspace nested inside the main
        one, running git without its own ``.git`` would act on the main repo.
        """
        created = False
        if not os.path.lexists(self.path / ".git"):
            self.path.mkdir(parents=True, exist_ok=True)
            git.Git().init("--quiet", "--", str(self.path))
            sync_tree(self.path / ".git")  # git init syncs nothing it writes
            log.info("initialised a git repository in %s", self.path)
            created = True
            self._git = None
            self._give_to_owner()
        self._check_git_dir()
        if self._git is None:
            cmd = git.Git(self.path)
            real = os.path.realpath(self.path)
            options = [f"safe.directory={real}", *(f"{k}={v}" for k, v in NEUTRAL_CONFIG)]
            cmd.set_persistent_git_options(git_dir=os.path.join(real, ".git"), work_tree=real, c=options)
            self._prefix = ["git", f"--git-dir={os.path.join(real, '.git')}", f"--work-tree={real}"]
            self._prefix += [arg for option in options for arg in ("-c", option)]
            name, email = self._author
            self._env = {
                "GIT_AUTHOR_NAME": name,
                "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": name,
                "GIT_COMMITTER_EMAIL": email,
                "GIT_TERMINAL_PROMPT": "0",
                # status never rewrites the index (a root-owned copy in the agent's repository)
                "GIT_OPTIONAL_LOCKS": "0",
                "GIT_PAGER": "cat",
                "GIT_EXTERNAL_DIFF": None,
                "GIT_CONFIG_NOSYSTEM": None,
                "GIT_INDEX_FILE": None,
                "GIT_DIR": None,
                "GIT_WORK_TREE": None,
            }
            cmd.update_environment(**self._env)
            self._git = cmd
            self._filters = ()
        return created

    @property
    def git(self) -> GitCommand:
        self.ensure()
        assert self._git is not None
        return self._git

    def _worktree_git(self) -> GitCommand:
        """``git`` for a command that reads the work tree, with every configured filter emptied.

        Driver names are arbitrary strings, so they go through ``GIT_CONFIG_COUNT``
        (key and value apart) rather than ``-c``; they are listed again before
        each such command, because the agent can edit its config at any time.
        """
        cmd = self.git
        try:
            listing = cmd.config("-z", "--get-regexp", r"^filter\.")
        except git.GitCommandError:
            listing = ""  # exit 1: no filter configured
        keys = [entry.partition("\n")[0] for entry in listing.split("\0")]
        names = sorted({key[7 : key.rindex(".")] for key in keys if key.count(".") >= 2})
        if tuple(names) != self._filters:
            env: dict[str, str | None] = {}
            pairs = [(f"filter.{n}.{k}", v) for n in names for k, v in _FILTER_KEYS]
            for i in range(max(len(pairs), len(self._filters) * len(_FILTER_KEYS))):
                key, value = pairs[i] if i < len(pairs) else (None, None)
                env[f"GIT_CONFIG_KEY_{i}"] = key
                env[f"GIT_CONFIG_VALUE_{i}"] = value
            env["GIT_CONFIG_COUNT"] = str(len(pairs)) if pairs else None
            cmd.update_environment(**env)
            self._env.update(env)
            self._filters = tuple(names)
        return cmd

    def _runner(self) -> Git:
        """The repository's git for the commit pipeline (stdin, deadlines, cancel), filters emptied."""
        self._worktree_git()
        return Git(self._prefix, self._env, self.path, self.cancel)

    # -- damage a power cut left

    def _plain_runner(self) -> Git:
        """The repository's git without asking its config first: a broken repository may refuse that."""
        self.ensure()
        return Git(self._prefix, self._env, self.path, self.cancel)

    def damage(self, thorough: bool = False) -> list[str]:
        """What is broken in the repository ([] when nothing; see :func:`layers.daily.git.repair.damage`)."""
        if not (self.path / ".git").is_dir():
            return []
        return gitrepair.damage(self._plain_runner(), thorough)

    def repair(self, thorough: bool = False) -> Repaired | None:
        """Repair the repository from :attr:`copy` when it is broken; None when nothing was broken.

        Nothing committed is lost: every object the copy holds comes back, no ref that names a
        readable commit is moved, and the work tree's files are not touched.
        """
        found = self.damage(thorough)
        if not found:
            return None
        copy = self.copy if self.copy is not None and self.copy.exists else None
        runner = self._plain_runner()
        actions = gitrepair.repair(
            runner,
            copy.runner() if copy is not None else runner,
            copy.refs() if copy is not None else [],
            copy.last() if copy is not None else None,
        )
        self._git = None  # HEAD and the index may be new files: the next use starts afresh
        self._give_to_owner()
        left = gitrepair.verify(self._plain_runner())
        return Repaired(found, actions, left)

    # -- lock handling

    @property
    def _lock(self) -> Path:
        return self.path / ".git" / "index.lock"

    def _clear_stale_lock(self) -> bool:
        try:
            age = time.time() - self._lock.lstat().st_mtime
        except FileNotFoundError:
            return False
        if age < self.stale_lock_s:
            return False
        log.warning("removing stale %s (%.0f s old): a git process died without releasing it", self._lock, age)
        with contextlib.suppress(FileNotFoundError):
            self._lock.unlink()
        return True

    # -- reading

    def changes(self, pathspecs: Iterable[str]) -> list[Change]:
        """Uncommitted paths under ``pathspecs`` (untracked files included)."""
        cmd = self._worktree_git()
        out = cmd.status("--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--", *pathspecs)
        found: list[Change] = []
        for entry in out.split("\0"):
            if len(entry) < 4:
                continue
            xy, rel = entry[:2], entry[3:]
            if not os.path.lexists(self.path / rel):
                kind = "deleted"
            elif xy == "??" or xy[0] == "A":
                kind = "added"
            else:
                kind = "modified"
            found.append(Change(rel, kind))
        return found

    def head(self) -> CommitInfo | None:
        """The newest commit, or None in a repository without commits."""
        commits = self.log(limit=1)
        return commits[0] if commits else None

    def log(self, rel: str | None = None, limit: int = 20) -> list[CommitInfo]:
        """Commits newest first; with ``rel``, the history of that file across renames."""
        args = [f"--format={LOG_FORMAT}", f"-n{int(limit)}"]
        if rel:
            args += ["--follow", "--", rel]
        try:
            return parse_log(self.git.log(*args))
        except git.GitCommandError as exc:
            if "does not have any commits" in str(exc.stderr) or "bad default revision" in str(exc.stderr):
                return []
            raise

    def resolve(self, rev: str) -> str:
        """The full sha of commit ``rev``; ValueError when there is no such commit."""
        if not rev or rev.startswith("-"):
            raise ValueError(f"not a revision: {rev!r}")
        try:
            return self.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}")
        except git.GitCommandError:
            raise ValueError(f"no commit {rev!r} in {self.path}") from None

    def read_at(self, rev: str, rel: str) -> bytes:
        """Content of ``rel`` as it was in commit ``rev``."""
        sha = self.resolve(rev)
        try:
            return self.git.show(f"{sha}:{rel}", stdout_as_string=False, strip_newline_in_stdout=False)
        except git.GitCommandError:
            raise ValueError(f"{rel} does not exist in commit {sha[:10]}") from None

    # -- writing

    def commit(
        self, paths: list[str], message: str | Callable[[list[StagedChange]], str], check: Check | None = None
    ) -> CommitInfo | None:
        """Commit exactly ``paths`` (adds, edits, deletions, renames); None when nothing changed."""
        return self.commit_checked(paths, message, check).info

    def commit_checked(
        self,
        paths: list[str],
        message: str | Callable[[list[StagedChange]], str],
        check: Check | None = None,
        keep: bool = True,
    ) -> Committed:
        """Commit exactly ``paths``, each as git staged it and ``check`` passed it (:mod:`layers.daily.git.commit`).

        Only these paths go into the commit, so anything a person has staged by
        hand for other paths stays staged and untouched.  A fresh ``index.lock``
        (another git at work) raises :class:`RepoBusyError` before anything is
        done.  The commit is copied to :attr:`copy` before HEAD moves to it, and
        the copy's reference then follows it (unless ``keep`` is False: a caller
        making several commits in a row moves it once, to the last).
        """
        self.ensure()
        self._clear_stale_lock()
        if os.path.lexists(self._lock):
            raise RepoBusyError(f"{self._lock} is held by another git process")
        runner = self._runner()
        store = self._store if self.copy is not None else None
        try:
            result = gitcommit.commit_paths(
                runner, paths, message, check, before_update=store, lock_record=self.lock_record
            )
            info = self._info(runner, result.sha) if result.sha else None
        except gitcommit.IndexBusy as exc:
            raise RepoBusyError(str(exc)) from None
        finally:
            self._give_to_owner()
        if result.sha:
            self._sync_refs()
        lost = self.keep(result.sha) if result.sha and keep else None
        return Committed(info, result.committed, result.held, lost)

    def _sync_refs(self) -> None:
        """The directories a commit's renames changed (the branch ref's, the index's), synced: git syncs
        the files, not the renames, and a commit is reported made only once a cut cannot undo it."""
        dot_git = self.path / ".git"
        dirs = [dot_git, dot_git / "refs" / "heads"]
        try:
            text = (dot_git / "HEAD").read_text(encoding="utf-8", errors="replace")[:512].strip()
        except OSError:
            text = ""
        name = text.removeprefix("ref: ")
        if text.startswith("ref: refs/") and ".." not in name.split("/"):
            dirs.append((dot_git / name).parent)
        sync_dirs(*dirs)

    def _info(self, runner: Git, sha: str) -> CommitInfo | None:
        commits = parse_log(runner.run("log", f"--format={LOG_FORMAT}", "-n1", sha).decode(errors="replace"))
        return commits[0] if commits else None

    # -- the copy out of the agent's reach

    def kept_elsewhere(self, rel: str | None = None, limit: int = 20) -> list[CommitInfo]:
        """Commits only :attr:`copy` still has: histories this workspace lost (empty without a readable copy)."""
        if self.copy is None or not self.copy.exists or not self.copy.lost():
            return []
        head = None
        if (self.path / ".git").is_dir():
            head = gitcommit.head_commit(self._runner())
        beyond = (self.path / ".git" / "objects", head) if head else None
        return self.copy.log(rel, limit, beyond)

    def _store(self, sha: str) -> None:
        """The new commit into :attr:`copy` before HEAD shows it: a ``.git`` removed right after loses nothing.
        A store that fails is logged; :meth:`keep` tries again once HEAD has moved."""
        assert self.copy is not None
        try:
            self.copy.store(self.path / ".git" / "objects", sha)
        except (GitFailed, OSError) as exc:
            log.warning("could not copy commit %s of %s to %s: %s", sha[:10], self.path, self.copy.path, exc)

    def keep(self, sha: str) -> str | None:
        """Copy commit ``sha`` to :attr:`copy`; the daemon's previous last commit when ``sha`` does not
        descend from it (the history was rewritten; the copy keeps the old one).  A copy that fails is
        logged: the commit stands, and the next one copies everything it reaches."""
        if self.copy is None:
            return None
        try:
            return self.copy.keep(self.path / ".git" / "objects", sha)
        except (GitFailed, OSError) as exc:
            log.warning("could not copy commit %s of %s to %s: %s", sha[:10], self.path, self.copy.path, exc)
            return None

    def history_check(self) -> Rewritten | None:
        """Whether the workspace's history still holds the daemon's last commit; what was lost when not.

        A rewrite found is recorded in the copy once (the lost history kept, the
        copy following the workspace from then on), so the next check is clean.
        A copy that has nothing yet is seeded with the workspace's history.
        """
        if self.copy is None or (os.path.lexists(self.copy.path) and not self.copy.exists):
            return None  # no copy, or one this process may not read
        last = self.copy.last()
        present = (self.path / ".git").is_dir() and not (self.path / ".git").is_symlink()
        head = gitcommit.head_commit(self._runner()) if present else None
        if last is None:
            if head is not None:
                self.keep(head)  # a copy to start: the history as it is now
            return None
        if head == last:
            return None
        # exit 128: the workspace no longer has the commit at all (gc'd after a reset)
        if head is not None and self._runner().status("merge-base", "--is-ancestor", last, head, fatal=False)[0] == 0:
            self.keep(head)  # the copy follows: commits made since (a person's, or ours a stop cut) are kept too
            return None
        if present and (found := self.damage()):
            # not a history someone rewrote but one a power cut broke: repaired, never recorded as lost
            raise RepositoryBroken("history check", 128, "the repository is broken: " + "; ".join(found))
        if not present:
            why = "the workspace's repository (.git) was removed or replaced"
        elif head is None:
            why = "the workspace's repository has no commits any more (emptied or made anew)"
        else:
            why = "the workspace's history no longer contains it (reset, rebased or rewritten)"
        commit = self.copy.info(last)
        if head is None:
            self.copy.forget_last()
        else:
            self.keep(head)
        return Rewritten(last, commit, head, why)

    def exclude(self, pattern: str) -> bool:
        """``pattern`` as a line of the repository's ``.git/info/exclude`` (added once; True when
        added): files of another tool's that the repository must never hold, kept out without a
        word in the user's own ``.gitignore``. Written without following a symlink (``.git/info``
        is the agent's to plant one); a refusal is the caller's to say."""
        rel = ".git/info/exclude"
        old = safefs.read_bytes(self.path, rel) or b""
        if pattern.encode() in old.splitlines():
            return False
        sep = b"" if not old or old.endswith(b"\n") else b"\n"
        safefs.write_atomic(self.path, rel, old + sep + pattern.encode() + b"\n", owner=safefs.owner_of(self.path))
        return True

    def _give_to_owner(self) -> None:
        """What git just wrote as root (objects, index, refs) goes to the workspace's owner, so an
        agent with its own Unix user can read its own history (nothing to do in root's workspaces)."""
        with contextlib.suppress(OSError):
            safefs.give_tree(self.path, ".git", safefs.owner_of(self.path))

    def move(self, src: str, dst: str, message: str) -> CommitInfo | None:
        """Move a file and commit the move on its own, as one rename (``git log --follow`` finds it).

        The move never follows a symlink (:mod:`layers.common.safefs`); only ``src`` and
        ``dst`` go into the commit, so other pending edits keep their own commit.
        """
        safefs.move(self.path, src, dst, owner=safefs.owner_of(self.path))
        return self.commit([src, dst], message)

    def restore(
        self, rel: str, rev: str, check: Callable[[str, bytes], None] | None = None, busy_retries: int = 10
    ) -> Restored:
        """Bring ``rel`` back as it was at ``rev``, as a new commit; nothing git does not hold is lost.

        Uncommitted content of ``rel`` is first committed on its own (message
        saying why), so the edits a restore replaces stay in history.  ``check``
        is called with ("uncommitted edits", content) and (sha, content) before
        anything is written; it raises to refuse (the daemon's secret guard).
        """
        try:
            sha = self.resolve(rev)
            content = self.read_at(sha, rel)
            from_copy = False
        except ValueError:
            if self.copy is None or not self.copy.exists:
                raise
            try:
                sha = self.copy.resolve(rev)  # a version the workspace's history no longer holds
            except ValueError:
                raise ValueError(f"no commit {rev!r} in {self.path} nor in the daemon's copy of it") from None
            content = self.copy.read_at(sha, rel)
            from_copy = True
        if check is not None:
            check(sha[:10], content)
        current = safefs.read_bytes(self.path, rel)
        kept = None
        if current is not None and self.changes([rel]):
            if check is not None:
                check("uncommitted edits", current)
            kept = self.commit(
                [rel],
                f"memstrata: keep uncommitted edits of {rel} before restoring it to {sha[:10]}\n\n"
                f"The file had changes no commit held; this commit keeps them.\n\nM {rel}\n",
            )
        if current == content:
            return Restored(rel, sha, False, None, kept, from_copy)
        safefs.write_atomic(self.path, rel, content, owner=safefs.owner_of(self.path))
        where = " (kept in the daemon's copy of this history)" if from_copy else ""
        message = f"memstrata: restore {rel} from {sha[:10]}{where}\n\nM {rel}\n"
        for attempt in range(busy_retries + 1):  # the file is written: its commit must not be given up lightly
            try:
                info = self.commit([rel], message)
                break
            except RepoBusyError:
                if attempt == busy_retries:
                    raise
                time.sleep(0.5)
        return Restored(rel, sha, True, info, kept, from_copy)


MESSAGE_LISTED = 100  # files a commit message names one per line; the others are counted
_NAME_CHARS = 160  # of one name in a message (a path may be 4 KiB)


def _name(path: str) -> str:
    name = printable(path)  # a name that is not UTF-8 is written escaped
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"


def commit_message(changes: Sequence[Change | StagedChange], verb: str = "update", part: str = "") -> str:
    """A subject that names the first files, a body that lists up to MESSAGE_LISTED and counts the rest.

    Bounded whatever the batch: 20,000 files listed one per line made a 640 KB
    message.  ``part`` (``2/10``) says which batch of a large change this is.
    """
    names = [_name(c.path) for c in changes]
    shown = ", ".join(names[:3])
    more = f" (+{len(names) - 3:,} more)" if len(names) > 3 else ""
    marks = {"added": "A", "modified": "M", "deleted": "D"}
    lines = [f"{marks.get(c.kind, '?')} {name}" for c, name in zip(changes[:MESSAGE_LISTED], names, strict=False)]
    if len(changes) > MESSAGE_LISTED:
        counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in marks}
        lines.append(f"… and {len(changes) - MESSAGE_LISTED:,} more")
        lines.append("")
        lines.append(f"{len(changes):,} files: " + ", ".join(f"{n:,} {kind}" for kind, n in counts.items() if n))
    suffix = f" [part {part}]" if part else ""
    return f"memstrata: {verb} {shown}{more}{suffix}\n\n" + "\n".join(lines) + "\n"
