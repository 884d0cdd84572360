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
from typing import TYPE_CHECKING, TypeVar

from layers import safefs
from layers.names import shown as printable

if TYPE_CHECKING:
    import git
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
    stays one markdown list item.  The file is opened without following symlinks
    (the caller may be root; the workspace is the agent's): a symlinked
    ``memory/`` or day file raises :class:`layers.safefs.UnsafePathError`.
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
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return workspace / rel


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


class RepoRefusedError(RuntimeError):
    """A repository git is not run in: its ``.git`` is a symlink or a gitfile pointing elsewhere."""


# Settings every git command gets on its command line, whatever the repository's
# own .git/config (which the agent can write) says: the daemon runs git as root
# in directories agents control, and none of these may make root run a program
# of the agent's choosing.  Command-line settings win over every config file.
_NEUTRAL_CONFIG = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("credential.helper", ""),
    ("submodule.recurse", "false"),
)
# Per driver named in any config file: a filter (run on every file ``git add`` or
# ``git status`` hashes) is emptied, which makes git use the content as it is.
_FILTER_KEYS = (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))


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


@dataclass(frozen=True)
class Restored:
    """What ``restore`` did: the commit that keeps the edits it replaced, and the restore commit."""

    file: str
    source: str  # full sha the content was taken from
    changed: bool  # whether the file's content changed
    commit: CommitInfo | None
    kept_edits_commit: CommitInfo | None


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
    ) -> None:
        self.path = path
        self.stale_lock_s = stale_lock_s
        self._author = author
        self._git: git.Git | None = None
        self._filters: tuple[str, ...] = ()

    # -- set-up

    @property
    def exists(self) -> bool:
        return os.path.lexists(self.path / ".git")

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
            log.info("initialised a git repository in %s", self.path)
            created = True
            self._git = None
            self._give_to_owner()
        self._check_git_dir()
        if self._git is None:
            cmd = git.Git(self.path)
            real = os.path.realpath(self.path)
            options = [f"safe.directory={real}", *(f"{k}={v}" for k, v in _NEUTRAL_CONFIG)]
            cmd.set_persistent_git_options(git_dir=os.path.join(real, ".git"), work_tree=real, c=options)
            name, email = self._author
            cmd.update_environment(
                GIT_AUTHOR_NAME=name,
                GIT_AUTHOR_EMAIL=email,
                GIT_COMMITTER_NAME=name,
                GIT_COMMITTER_EMAIL=email,
                GIT_TERMINAL_PROMPT="0",
                # status never rewrites the index (a root-owned copy in the agent's repository)
                GIT_OPTIONAL_LOCKS="0",
                GIT_PAGER="cat",
                GIT_EXTERNAL_DIFF=None,
                GIT_CONFIG_NOSYSTEM=None,
            )
            self._git = cmd
            self._filters = ()
        return created

    @property
    def git(self) -> git.Git:
        self.ensure()
        assert self._git is not None
        return self._git

    def _worktree_git(self) -> git.Git:
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
            self._filters = tuple(names)
        return cmd

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

    def _locked(self, action: Callable[[], T]) -> T:
        """Run a git command that takes the index lock; a crashed git's lock is removed once.

        A fresh lock means another git is at work: :class:`RepoBusyError` lets the
        caller retry later instead of failing in a loop.
        """
        self._clear_stale_lock()
        try:
            return action()
        except git.GitCommandError:
            if not os.path.lexists(self._lock):
                raise
            if self._clear_stale_lock():
                return action()
            raise RepoBusyError(f"{self._lock} is held by another git process") from None

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

    def is_tracked(self, rel: str) -> bool:
        try:
            self.git.ls_files("--error-unmatch", "--", rel)
        except git.GitCommandError:
            return False
        return True

    def _in_head(self, paths: list[str]) -> set[str]:
        """Which of ``paths`` the newest commit holds (a path removed from the index is still one)."""
        try:
            out = self.git.ls_tree("-z", "--name-only", "--full-tree", "HEAD", "--", *paths)
        except git.GitCommandError:
            return set()  # no commits yet
        return set(out.split("\0")) - {""}

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
        """Commit exactly ``paths`` (adds, edits, deletions, renames); None when nothing changed.

        Only these paths go into the commit (``git commit -- paths``), so anything
        a person has staged by hand stays staged and untouched.
        """
        paths = list(dict.fromkeys(paths))
        gone = [p for p in paths if not os.path.lexists(self.path / p)]
        in_head = self._in_head(gone) if gone else set()
        present = [p for p in paths if p not in gone or p in in_head or self.is_tracked(p)]
        if not present:
            return None
        cmd = self._worktree_git()
        try:
            self._locked(lambda: cmd.add("-A", "--", *present))
            staged = cmd.diff("--cached", "--name-only", "--no-renames", "-z", "--", *present)
            if not staged.strip("\0"):
                return None
            self._locked(lambda: cmd.commit("--no-edit", "--no-verify", "-m", message, "--", *present))
            return self.head()
        finally:
            self._give_to_owner()

    def _give_to_owner(self) -> None:
        """What git just wrote as root (objects, index, refs) goes to the workspace's owner, so an
        agent with its own Unix user can read its own history (nothing to do in root's workspaces)."""
        with contextlib.suppress(OSError):
            safefs.give_tree(self.path, ".git", safefs.owner_of(self.path))

    def move(self, src: str, dst: str, message: str) -> CommitInfo | None:
        """Move a file and commit the move on its own, as one rename (``git log --follow`` finds it).

        The move never follows a symlink (:mod:`layers.safefs`); only ``src`` and
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
        sha = self.resolve(rev)
        content = self.read_at(sha, rel)
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
            return Restored(rel, sha, False, None, kept)
        safefs.write_atomic(self.path, rel, content, owner=safefs.owner_of(self.path))
        message = f"memstrata: restore {rel} from {sha[:10]}\n\nM {rel}\n"
        for attempt in range(busy_retries + 1):  # the file is written: its commit must not be given up lightly
            try:
                info = self.commit([rel], message)
                break
            except RepoBusyError:
                if attempt == busy_retries:
                    raise
                time.sleep(0.5)
        return Restored(rel, sha, True, info, kept)


def commit_message(changes: list[Change], verb: str = "update") -> str:
    """A subject that names the files, and a body listing every one with its change."""
    names = [printable(c.path) for c in changes]  # a name that is not UTF-8 is written escaped
    shown = ", ".join(names[:3])
    more = f" (+{len(names) - 3} more)" if len(names) > 3 else ""
    marks = {"added": "A", "modified": "M", "deleted": "D"}
    body = "\n".join(f"{marks.get(c.kind, '?')} {printable(c.path)}" for c in changes)
    return f"memstrata: {verb} {shown}{more}\n\n{body}\n"
