"""git as a child process the daemon can cut: input on stdin, a deadline, a cancel from another thread.

GitPython runs the repository's small read-only commands.  The commit pipeline
(:mod:`layers.daily.git.commit`) and the history copy (:mod:`layers.daily.git.history_copy`) run
git through here instead, for three reasons:

- paths and messages travel on stdin: 20,000 paths on a command line and their
  listing as one ``-m`` argument exceed the kernel's limits ("Argument list too
  long", E2BIG: one argument may not exceed 128 KiB);
- every command has a deadline, so a git that hangs ends as an error instead of
  holding its caller forever;
- a :class:`Cancel` set from another thread (SIGTERM) kills the running git at
  once, and every later command raises :class:`Cancelled` without starting.

Each git runs in a session of its own, so the kill reaches the programs it
started (``pack-objects`` under ``push``, say) too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from layers.common.fsutil import fsync_dir, fsync_file

# Settings every git command gets on its command line, whatever the repository's
# own .git/config (which the agent can write) says: the daemon runs git as root
# in directories agents control, and none of these may make root run a program
# of the agent's choosing.  Command-line settings win over every config file.
#
# The last two make what a command commits durable before it returns (docs/durability.md):
# git's default syncs neither loose objects nor refs, and a power cut within 30 s of a commit
# left HEAD's commit object an empty file (tests/powercut/).  ``all`` syncs objects, packs,
# refs and the index; ``batch`` syncs a command's loose objects with one flush instead of one
# each (20-file commit: 15-18 ms unsynced, 22-23 ms so, measured for issue 45).  Both need
# git 2.37 or later; an older git ignores them (and syncs nothing).
NEUTRAL_CONFIG = (
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
    ("core.fsync", "all"),
    ("core.fsyncMethod", "batch"),
)

# A single git command of the pipeline never needs this long (the slowest, ``git add`` of a
# batch of 2,000 files, takes about a second); past it, git is stuck and the commit is retried.
GIT_TIMEOUT_S = 120.0


def sync_dirs(*paths: Path) -> None:
    """fsync each directory of ``paths`` that exists: git syncs a file before renaming it into place,
    never the directory the rename changed, so a ref or index moved just before a cut could still
    name the old one.  A directory that is gone (or not ours to open) is passed over."""
    for path in dict.fromkeys(paths):
        fsync_dir(path)


def sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (not following symlinks), then ``root``'s parent.

    For what ``git init`` writes, which it never syncs (a few dozen small files): a repository
    made just before a cut must still be one after it.  Unlike :func:`layers.common.fsutil.sync_tree` a file
    that cannot be opened is passed over: this only hardens a repository git has already made.
    """
    for dirpath, _dirs, filenames in os.walk(root, topdown=False):
        for name in filenames:
            with contextlib.suppress(OSError):  # a symlink (hooks samples are files; nothing git makes is a link)
                fsync_file(Path(dirpath, name))
        fsync_dir(Path(dirpath))
    fsync_dir(root.parent)


class GitFailed(RuntimeError):
    """A git command run here failed: which one, its exit status, and the last line git said.

    Not GitPython's GitCommandError: importing GitPython costs a command line call
    ~60 ms, and the front (``status``, ``history``) imports this module.
    """

    def __init__(self, what: str, status: int, stderr: str) -> None:
        self.what = what
        self.status = status
        self.stderr = stderr
        lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
        super().__init__(f"git {what} failed: {lines[-1] if lines else f'exit {status}'}")


class Cancelled(RuntimeError):
    """The work was cut short by :meth:`Cancel.cancel` (the daemon is stopping)."""


class Cancel:
    """A stop signal for git commands running in other threads.

    Only commands started as ``killable`` are killed: a step that must not be
    interrupted once begun (the index update after a commit, a ref update) runs
    to its end, and the work stops after it.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Stop: kill every killable git running now; later commands raise :class:`Cancelled`."""
        self._event.set()
        with self._lock:
            running = list(self._running)
        for proc in running:
            _kill(proc)

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled("cancelled: the daemon is stopping")

    @contextlib.contextmanager
    def watching(self, proc: subprocess.Popen) -> Iterator[None]:
        with self._lock:
            self._running.add(proc)
        try:
            if self._event.is_set():
                _kill(proc)
            yield
        finally:
            with self._lock:
                self._running.discard(proc)


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _environment(env: Mapping[str, str | None]) -> dict[str, str]:
    """The process environment with ``env`` applied (a value of None removes the variable)."""
    merged = dict(os.environ)
    for key, value in env.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def popen(
    argv: Sequence[str],
    env: Mapping[str, str | None],
    *,
    stdin: int | None = subprocess.PIPE,
) -> subprocess.Popen:
    """Start ``argv`` with pipes, in a session of its own (the caller watches and reaps it)."""
    return subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(env),
        start_new_session=True,
        close_fds=True,
    )


def run(
    argv: Sequence[str],
    env: Mapping[str, str | None],
    *,
    input: bytes | None = None,
    timeout: float = GIT_TIMEOUT_S,
    cancel: Cancel | None = None,
    killable: bool = True,
    ok: tuple[int, ...] = (0,),
    what: str = "",
) -> tuple[int, bytes]:
    """Run ``argv`` to its end; (exit status, stdout).

    An exit status outside ``ok`` raises :class:`GitFailed` with git's stderr,
    naming the command as ``git WHAT`` (the options before the subcommand are
    noise there).  Past ``timeout`` the command is killed and reported as failed.
    """
    named = what or os.path.basename(argv[0])
    status, out, err = run_answer(argv, env, input=input, timeout=timeout, cancel=cancel, killable=killable, what=named)
    if status not in ok:
        raise GitFailed(named, status, os.fsdecode(err.strip()))
    return status, out


def run_answer(
    argv: Sequence[str],
    env: Mapping[str, str | None],
    *,
    input: bytes | None = None,
    timeout: float = GIT_TIMEOUT_S,
    cancel: Cancel | None = None,
    killable: bool = True,
    what: str = "",
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` to its end; (exit status, stdout, stderr), whatever the status.

    For a command whose failure is an answer to read (a push some refs of which the remote
    refused: the refusals are on stdout, why nothing was reached on stderr).  Past ``timeout``
    the command is killed and :class:`GitFailed` raised; a cancel raises :class:`Cancelled`.
    """
    named = what or os.path.basename(argv[0])
    if cancel is not None:
        cancel.check()
    proc = popen(argv, env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
    watch = cancel.watching(proc) if cancel is not None and killable else contextlib.nullcontext()
    with watch:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            proc.communicate()
            raise GitFailed(named, -9, f"timed out after {timeout:g} s and was killed") from None
        except BaseException:
            _kill(proc)
            proc.wait()
            raise
    if cancel is not None and cancel.cancelled and proc.returncode < 0:
        raise Cancelled("cancelled: the daemon is stopping")
    return proc.returncode, out, err


class Git:
    """One repository's git: the command-line prefix and environment every command of it gets.

    ``prefix`` is ``git`` with the options that name and neutralise the
    repository (see :class:`layers.daily.workspace_repo.WorkspaceRepo`); ``env`` the variables
    set (or, with None, removed) on top of this process's environment.
    """

    def __init__(
        self,
        prefix: Sequence[str],
        env: Mapping[str, str | None],
        work_tree: Path,
        cancel: Cancel | None = None,
    ) -> None:
        self.prefix = list(prefix)
        self.env = dict(env)
        self.work_tree = work_tree
        self.cancel = cancel

    def with_env(self, **env: str | None) -> Git:
        """The same repository with more variables (``GIT_INDEX_FILE`` of a private index, say)."""
        return Git(self.prefix, {**self.env, **env}, self.work_tree, self.cancel)

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        ok: tuple[int, ...] = (0,),
        killable: bool = True,
        timeout: float = GIT_TIMEOUT_S,
    ) -> bytes:
        """``git ARGS``; its stdout (see :func:`run`)."""
        return run(
            [*self.prefix, *args],
            self.env,
            input=input,
            timeout=timeout,
            cancel=self.cancel,
            killable=killable,
            ok=ok,
            what=args[0],
        )[1]

    def status(self, *args: str, input: bytes | None = None, fatal: bool = True) -> tuple[int, bytes]:
        """``git ARGS`` whose exit status is the answer (``merge-base --is-ancestor``, ``rev-parse -q``).

        Exit 128 (git's fatal error) raises, unless ``fatal`` is False: then it is an answer too
        (``merge-base`` on a commit the repository no longer has).
        """
        ok = tuple(range(128 if fatal else 129))
        return run([*self.prefix, *args], self.env, input=input, cancel=self.cancel, ok=ok, what=args[0])

    @contextlib.contextmanager
    def process(self, *args: str) -> Iterator[subprocess.Popen]:
        """A long-running ``git ARGS`` spoken to over its pipes (``cat-file --batch``), killed on cancel."""
        if self.cancel is not None:
            self.cancel.check()
        proc = popen([*self.prefix, *args], self.env)
        watch = self.cancel.watching(proc) if self.cancel is not None else contextlib.nullcontext()
        try:
            with watch:
                yield proc
        finally:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    if pipe is not None:
                        pipe.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill(proc)
                proc.wait()
