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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import git

from layers.names import shown as printable

log = logging.getLogger(__name__)

MEMORY_DIR = "memory"
ARCHIVE_DIR = "memory/archive"
LONG_TERM_FILE = "MEMORY.md"
DAILY_NAME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\.md$")

T = TypeVar("T")


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
    stays one markdown list item.
    """
    now = now or datetime.now().astimezone()
    text = text.strip()
    if not text:
        raise ValueError("a note needs some text")
    first, *rest = text.splitlines()
    line = f"- {now:%H:%M:%S} {first}\n" + "".join(f"  {r}\n" for r in rest)
    path = workspace / daily_rel(now.date())
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:
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
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return path


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
    someone, and moving it would break their links.
    """
    root = workspace / MEMORY_DIR
    if not root.is_dir():
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
    if not root.is_dir():
        return []
    cutoff = today - timedelta(days=after_days)
    moves = []
    for path in sorted(root.glob("*.md")):
        day = parse_daily_name(path.name)
        if day is not None and day < cutoff and path.is_file():
            moves.append((f"{MEMORY_DIR}/{path.name}", f"{ARCHIVE_DIR}/{day.year:04d}/{path.name}"))
    return moves


# ---------------------------------------------------------------- git


class RepoBusyError(RuntimeError):
    """Another git process holds the repository's ``index.lock``; try again later."""


@dataclass(frozen=True)
class Change:
    """One uncommitted path and what happened to it."""

    path: str
    kind: str  # "added" | "modified" | "deleted"


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    time: str  # ISO 8601 with offset
    author: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


_LOG_FORMAT = "%H%x1f%aI%x1f%an%x1f%s"


def _parse_log(output: str) -> list[CommitInfo]:
    commits = []
    for line in output.splitlines():
        parts = line.split("\x1f")
        if len(parts) == 4:
            commits.append(CommitInfo(*parts))
    return commits


class WorkspaceRepo:
    """The git repository of one workspace, as the daemon and the CLI use it."""

    def __init__(
        self,
        path: Path,
        author: tuple[str, str] = ("memstrata", "memstrata@localhost"),
        stale_lock_s: float = 60.0,
    ) -> None:
        self.path = path
        self.stale_lock_s = stale_lock_s
        self._author = author
        self._git: git.Git | None = None

    # -- set-up

    @property
    def exists(self) -> bool:
        return (self.path / ".git").exists()

    def ensure(self) -> bool:
        """Initialise the repository if it is missing; True when one was created.

        Checked before every use: in a spoke workspace nested inside the main
        one, running git without its own ``.git`` would act on the main repo.
        """
        created = False
        if not self.exists:
            self.path.mkdir(parents=True, exist_ok=True)
            git.Repo.init(self.path)
            log.info("initialised a git repository in %s", self.path)
            created = True
            self._git = None
        if self._git is None:
            repo = git.Repo(self.path)
            cmd = repo.git
            name, email = self._author
            cmd.update_environment(
                GIT_AUTHOR_NAME=name,
                GIT_AUTHOR_EMAIL=email,
                GIT_COMMITTER_NAME=name,
                GIT_COMMITTER_EMAIL=email,
                GIT_TERMINAL_PROMPT="0",
            )
            self._git = cmd
        return created

    @property
    def git(self) -> git.Git:
        self.ensure()
        assert self._git is not None
        return self._git

    # -- lock handling

    @property
    def _lock(self) -> Path:
        return self.path / ".git" / "index.lock"

    def _clear_stale_lock(self) -> bool:
        try:
            age = time.time() - self._lock.stat().st_mtime
        except FileNotFoundError:
            return False
        if age < self.stale_lock_s:
            return False
        log.warning("removing stale %s (%.0f s old): a git process died without releasing it", self._lock, age)
        with contextlib.suppress(FileNotFoundError):
            self._lock.unlink()
        return True

    def _locked(self, action: Callable[[], T]) -> T:
        """Run a git command that takes the index lock; a crashed git's lock is removed once.

        A fresh lock means another git is at work: :class:`RepoBusyError` lets the
        caller retry later instead of failing in a loop.
        """
        self._clear_stale_lock()
        try:
            return action()
        except git.GitCommandError:
            if not self._lock.exists():
                raise
            if self._clear_stale_lock():
                return action()
            raise RepoBusyError(f"{self._lock} is held by another git process") from None

    # -- reading

    def changes(self, pathspecs: Iterable[str]) -> list[Change]:
        """Uncommitted paths under ``pathspecs`` (untracked files included)."""
        out = self.git.status("--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--", *pathspecs)
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

    def is_tracked(self, rel: str) -> bool:
        try:
            self.git.ls_files("--error-unmatch", "--", rel)
        except git.GitCommandError:
            return False
        return True

    def head(self) -> CommitInfo | None:
        """The newest commit, or None in a repository without commits."""
        commits = self.log(limit=1)
        return commits[0] if commits else None

    def log(self, rel: str | None = None, limit: int = 20) -> list[CommitInfo]:
        """Commits newest first; with ``rel``, the history of that file across renames."""
        args = [f"--format={_LOG_FORMAT}", f"-n{int(limit)}"]
        if rel:
            args += ["--follow", "--", rel]
        try:
            return _parse_log(self.git.log(*args))
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

    def commit(self, paths: list[str], message: str) -> CommitInfo | None:
        """Commit exactly ``paths`` (adds, edits and deletions); None when nothing changed.

        Only these paths go into the commit (``git commit -- paths``), so anything
        a person has staged by hand stays staged and untouched.
        """
        present = [p for p in paths if os.path.lexists(self.path / p) or self.is_tracked(p)]
        if not present:
            return None
        self._locked(lambda: self.git.add("-A", "--", *present))
        staged = self.git.diff("--cached", "--name-only", "-z", "--", *present)
        if not staged.strip("\0"):
            return None
        self._locked(lambda: self.git.commit("--no-edit", "-m", message, "--", *present))
        return self.head()

    def move(self, src: str, dst: str) -> None:
        """Move a file, through ``git mv`` when git already knows it."""
        (self.path / dst).parent.mkdir(parents=True, exist_ok=True)
        if self.is_tracked(src):
            self._locked(lambda: self.git.mv("--", src, dst))
        else:
            os.rename(self.path / src, self.path / dst)


def commit_message(changes: list[Change], verb: str = "update") -> str:
    """A subject that names the files, and a body listing every one with its change."""
    names = [printable(c.path) for c in changes]  # a name that is not UTF-8 is written escaped
    shown = ", ".join(names[:3])
    more = f" (+{len(names) - 3} more)" if len(names) > 3 else ""
    marks = {"added": "A", "modified": "M", "deleted": "D"}
    body = "\n".join(f"{marks.get(c.kind, '?')} {printable(c.path)}" for c in changes)
    return f"memstrata: {verb} {shown}{more}\n\n{body}\n"
