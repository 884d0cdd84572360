"""One agent's commit as a job that runs off the loop thread: bounded batches, each staged blob checked.

The tracker decides *when* to commit and applies what a commit did
(:meth:`daemon.tracker.AgentTracker.begin_commit` / ``finish_commit``); this
module is the part in between, which runs git and may take a while (20,000 new
files: ten commits of 2,000, 2-5 s each on the 2-core reference host).  It reads only what does not
change while it runs (the workspace, the guard, the repository) and returns a
:class:`CommitOutcome` instead of touching the tracker, so the loop thread stays
the only writer of the tracker's state.

Bounded in every way a large change could make it unbounded: paths and messages
go to git on stdin (:mod:`layers.gitcommit`), a message lists at most
:data:`layers.daily.MESSAGE_LISTED` files, a batch holds at most
:data:`BATCH_FILES` files and :data:`BATCH_BYTES` of content, every git command
has a deadline, and the daemon's stop kills the running git
(:class:`layers.gitrun.Cancel`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import git

from daemon.guard import Finding, SecretGuard
from layers import daily
from layers.gitrun import Cancelled, GitFailed

log = logging.getLogger("daemon.tracker")

BATCH_FILES = 2000  # files per commit: `git add` of 2,000 small files takes about a second here
BATCH_BYTES = 64 << 20  # content per commit, so a batch of large files is as bounded as one of many
_BLOCK_BYTES = 1 << 20  # a staged blob is scanned in blocks of whole lines of about this size
_OVERLAP = 4096  # a block cut inside an endless line keeps this much of it, so no secret falls in the cut


def staged_secrets(guard: SecretGuard, read: Callable[[int], bytes]) -> list[Finding]:
    """never_store findings in a staged blob, read in bounded blocks of whole lines.

    A line longer than two blocks (a file without newlines) is cut where the
    block ends, and the last :data:`_OVERLAP` bytes are scanned again with the
    next block: memory stays bounded and a secret across the cut is still seen.
    """
    findings: set[Finding] = set()
    line = 1
    carry = b""
    while True:
        block = read(_BLOCK_BYTES)
        data = carry + block
        if block:
            cut = data.rfind(b"\n")
            if cut >= 0:
                data, carry = data[: cut + 1], data[cut + 1 :]
            elif len(data) >= 2 * _BLOCK_BYTES:
                carry = data[-_OVERLAP:]
            else:
                carry = data
                continue
        text = data.decode("utf-8", errors="replace")
        findings.update(guard.scan_text(text, line))
        line += text.count("\n")
        if not block:
            return sorted(findings, key=lambda f: (f.line, f.kind))


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
    def progress(self) -> dict[str, int]:
        """Files committed so far of those found (0 of 0 while it lists and scans them)."""
        with self._lock:
            return {"done": self.done, "total": self.total}

    def _check(self, rel: str, read: Callable[[int], bytes]) -> list[Finding]:
        return staged_secrets(self.guard(), read)

    def __call__(self) -> CommitOutcome:
        outcome = CommitOutcome()
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
                    lambda staged, part=part: daily.commit_message(staged, part=part),
                    self._check,
                    keep=False,  # the last commit is copied once, below: it reaches the others
                )
                for rel, findings in done.held.items():
                    outcome.held[rel] = findings  # type: ignore[assignment]
                if done.info is not None:
                    outcome.commits.append(done.info)
                    log.info("%s: committed %s %s", self.agent_id, done.info.short, done.info.subject)
                with self._lock:
                    self.done += len(batch)
                self.on_progress()
        except Cancelled:
            outcome.cancelled = True
        except (daily.RepoBusyError, daily.RepoRefusedError, git.GitCommandError, GitFailed, OSError) as exc:
            outcome.error = exc
        if outcome.commits and not outcome.cancelled:  # a stop leaves it to the next start's check
            newest = outcome.commits[-1].sha
            lost = self.repo.keep(newest)
            if lost is not None and outcome.rewritten is None:  # rewritten while this job ran
                outcome.rewritten = daily.Rewritten(lost, None, newest, "the workspace's history changed meanwhile")
        with self._lock:
            outcome.left = self.total - self.done
        return outcome
