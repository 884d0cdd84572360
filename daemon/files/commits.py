"""One agent's commit as a job that runs off the loop thread: bounded batches, each staged blob checked.

The tracker decides *when* to commit and applies what a commit did
(:meth:`daemon.files.tracker.AgentTracker.begin_commit` / ``finish_commit``); this
module is the part in between, which runs git and may take a while (20,000 new
files: ten commits of 2,000, 2-5 s each on the 2-core reference host).  It reads only what does not
change while it runs (the workspace, the guard, the repository) and returns a
:class:`CommitOutcome` instead of touching the tracker, so the loop thread stays
the only writer of the tracker's state.

Bounded in every way a large change could make it unbounded: paths and messages
go to git on stdin (:mod:`layers.daily.git.commit`), a message lists at most
:data:`layers.daily.workspace_repo.MESSAGE_LISTED` files, a batch holds at most
:data:`BATCH_FILES` files and :data:`BATCH_BYTES` of content, every git command
has a deadline, and the daemon's stop kills the running git
(:class:`layers.daily.git.run.Cancel`).
"""

from __future__ import annotations

import functools
import io
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import git

from daemon.common.contracts import CommitProgress
from daemon.common.guard import Finding, SecretGuard
from layers.daily import workspace_repo as daily
from layers.daily.git import repair as gitrepair
from layers.daily.git.run import Cancelled, GitFailed

log = logging.getLogger(__name__)

BATCH_FILES = 2000  # files per commit: `git add` of 2,000 small files takes about a second here
BATCH_BYTES = 64 << 20  # content per commit, so a batch of large files is as bounded as one of many


class _BlobStream(io.RawIOBase):
    """A staged blob's ``read(n)`` as a stream, for the guard's bounded block scan."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def staged_secrets(guard: SecretGuard, read: Callable[[int], bytes]) -> list[Finding]:
    """never_store findings in a staged blob, scanned as the edit flow scans a file (bounded blocks)."""
    return guard.scan_stream(io.BufferedReader(_BlobStream(read)))


def batches(changes: list[daily.Change], workspace: os.PathLike) -> list[list[daily.Change]]:
    """``changes`` cut into commits of at most BATCH_FILES files and BATCH_BYTES of content (in order)."""
    out: list[list[daily.Change]] = []
    current: list[daily.Change] = []
    size = 0
    for change in changes:
        try:
            length = 0 if change.kind == "deleted" else os.lstat(os.path.join(workspace, change.path)).st_size
        except OSError:
            length = 0
        if current and (len(current) >= BATCH_FILES or size + length > BATCH_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(change)
        size += length
    if current:
        out.append(current)
    return out


@dataclass
class CommitOutcome:
    """What a commit job did, for the tracker to apply on the loop thread."""

    commits: list[daily.CommitInfo] = field(default_factory=list)
    scanned: bool = False  # the changes were listed and scanned: ``held``/``skipped`` are the whole truth
    held: dict[str, list[Finding]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    rewritten: daily.Rewritten | None = None
    repaired: daily.Repaired | None = None  # the repository was found broken (a power cut) and repaired
    error: BaseException | None = None
    cancelled: bool = False
    left: int = 0  # eligible files not committed (a stop, or an error after some batches)


class CommitJob:
    """Commit an agent's pending L1/L2 changes (see the module docstring); ``progress`` is read by status."""

    def __init__(
        self,
        agent_id: str,
        repo: daily.WorkspaceRepo,
        guard: Callable[[], SecretGuard],
        scan: Callable[[], tuple[list[daily.Change], dict[str, list[Finding]], dict[str, str]]],
    ) -> None:
        self.agent_id = agent_id
        self.repo = repo
        #: The guard in force *when a blob is checked*: a reload (a new never_store pattern) while the
        #: job runs applies to every file staged after it, as it would to a commit started after it.
        self.guard = guard
        self.scan = scan
        self.marks: tuple[float | None, float | None, bool] = (None, None, False)  # the tracker's, while it runs
        self.done = 0
        self.total = 0
        self.on_progress: Callable[[], None] = lambda: None  # called from the worker after each batch
        self._lock = threading.Lock()

    @property
    def progress(self) -> CommitProgress:
        """Files committed so far of those found (0 of 0 while it lists and scans them)."""
        with self._lock:
            return {"done": self.done, "total": self.total}

    def _check(self, rel: str, read: Callable[[int], bytes]) -> list[Finding]:
        return staged_secrets(self.guard(), read)

    def __call__(self) -> CommitOutcome:
        outcome = CommitOutcome()
        self._run(outcome)
        if outcome.error is not None and outcome.repaired is None and gitrepair.looks_corrupt(outcome.error):
            # a repository a power cut broke fails every commit: repaired from the history copy, then again
            try:
                outcome.repaired = self.repo.repair(thorough=True)
            except (daily.RepoRefusedError, git.GitCommandError, GitFailed, OSError) as exc:
                log.error("%s: the repository looks broken and could not be repaired: %s", self.agent_id, exc)
            if outcome.repaired is not None and not outcome.repaired.left:
                outcome.error = None
                self._run(outcome)
        if outcome.commits and not outcome.cancelled:  # a stop leaves it to the next start's check
            newest = outcome.commits[-1].sha
            lost = self.repo.keep(newest)
            if lost is not None and outcome.rewritten is None:  # rewritten while this job ran
                outcome.rewritten = daily.Rewritten(lost, None, newest, "the workspace's history changed meanwhile")
        with self._lock:
            outcome.left = self.total - self.done
        return outcome

    def _run(self, outcome: CommitOutcome) -> None:
        """List, scan and commit in batches into ``outcome`` (an error or a stop ends it there)."""
        with self._lock:
            self.done = 0
        try:
            self.repo.ensure()
            outcome.rewritten = self.repo.history_check()
            eligible, outcome.held, outcome.skipped = self.scan()
            outcome.scanned = True
            parts = batches(eligible, self.repo.path)
            with self._lock:
                self.total = len(eligible)
            self.on_progress()
            for number, batch in enumerate(parts, 1):
                part = f"{number}/{len(parts)}" if len(parts) > 1 else ""
                done = self.repo.commit_checked(
                    [c.path for c in batch],
                    functools.partial(daily.commit_message, part=part),
                    self._check,
                    keep=False,  # the last commit is copied once, below: it reaches the others
                )
                for rel, findings in done.held.items():
                    outcome.held[rel] = findings  # type: ignore[assignment]
                if done.info is not None:
                    outcome.commits.append(done.info)
                    log.info(
                        "%s: committed %s %s",
                        self.agent_id,
                        done.info.short,
                        done.info.subject,
                        extra={"event": "committed"},
                    )
                with self._lock:
                    self.done += len(batch)
                self.on_progress()
        except Cancelled:
            outcome.cancelled = True
        except (daily.RepoBusyError, daily.RepoRefusedError, git.GitCommandError, GitFailed, OSError) as exc:
            outcome.error = exc
