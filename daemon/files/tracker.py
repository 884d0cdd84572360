"""One agent's workspace as the daemon tracks it: edit flow, commits, reconcile, report.

The same object serves the running daemon (with a persisted record of processed
files and listeners such as the L3 index) and ``memstrata status`` when the
daemon is down (with an in-memory record and no listeners), so both tell the
same story about held-back files, skipped files and naming.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol

import git

from daemon.common.backoff import backoff
from daemon.common.fileread import Identity, Inspection, peek, read_version
from daemon.common.guard import Finding, SecretGuard
from daemon.common.settings import max_file_bytes
from daemon.common.skill import SKILL_REL
from daemon.common.tokens import WORKSPACE_TOKEN
from daemon.common.workspaces import (
    MEMORY_DIRS,
    MEMORY_FILES,
    PATHSPECS,
    Agent,
    is_editor_temp,
    is_memory_path,
    workspace_repo,
)
from daemon.files.commits import CommitJob, CommitOutcome
from daemon.files.filestate import FileState
from layers.common import safefs
from layers.common.names import json_safe
from layers.daily import workspace_repo as daily
from layers.daily.git.run import GitFailed

if TYPE_CHECKING:
    from daemon.common.config import Config
    from daemon.common.contracts import AgentReport, LostHistory
    from daemon.common.storage import StorageHealth

log = logging.getLogger(__name__)


class EditListener(Protocol):
    """The seam where layers that follow markdown (the L3 index) plug into the edit flow.

    Called from the daemon's loop thread after a file settled (debounce) and its
    checksum changed; an exception is logged and does not stop versioning.
    """

    def file_changed(self, agent: Agent, rel: str, inspection: Inspection) -> None:
        """``inspection`` carries the bytes of the new version: the only read of it (never by name again)."""

    def file_removed(self, agent: Agent, rel: str) -> None: ...

    def file_withheld(self, agent: Agent, rel: str) -> None:
        """The file holds a secret: forget it and make sure no byte of it stays behind."""


@dataclass
class Settings:
    """The slice of configuration the tracker needs (replaced on reload)."""

    max_index_bytes: int
    quiet_period_s: float
    max_delay_s: float
    archive_after_days: int | None = None


WITHHELD = "holds a secret (never_store): held back from git and not indexed"
REPORT_LISTED = 100  # naming violations a report names; the total says how many there are


def list_memory_files(workspace: Path) -> list[str]:
    """Every L1/L2 file on disk, workspace-relative; symlinked directories are not entered."""
    found = [name for name in MEMORY_FILES if os.path.lexists(workspace / name)]
    for top in MEMORY_DIRS:
        base = workspace / top
        if not base.is_dir() or base.is_symlink():
            if base.is_symlink():
                found.append(top)
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            rel_dir = Path(dirpath).relative_to(workspace).as_posix()
            for d in dirnames:
                if os.path.islink(os.path.join(dirpath, d)):
                    found.append(f"{rel_dir}/{d}")
            found.extend(f"{rel_dir}/{n}" for n in sorted(filenames) if not is_editor_temp(n))
    return found


@dataclass
class AgentTracker:
    agent: Agent
    repo: daily.WorkspaceRepo
    files: FileState
    guard: SecretGuard
    settings: Settings
    listeners: Sequence[EditListener] = ()
    #: Called as ``audit(event, **fields)`` for what goes to the security audit log.
    audit: Callable[..., None] | None = None
    first_change: float | None = None
    last_change: float | None = None
    commit_now: bool = False
    retry_at: float | None = None
    failures: int = 0
    commits_total: int = 0  # commits made since the daemon started (the /metrics counter)
    commit_failures_total: int = 0  # failed commit attempts since the daemon started
    failing_since: float | None = None  # wall-clock time of the first failed attempt in a row
    last_commit: daily.CommitInfo | None = None
    #: HEAD's stamp when last_commit was read (daily.WorkspaceRepo.head_stamp): a commit made
    #: outside the daemon (the CLI's restore, the agent's own git) changes it.
    _head_stamp: tuple[object, ...] | None = field(default=None, repr=False)
    #: Whom the token and skill were last handed to (see _give_daemon_files)
    _daemon_files_owner: tuple[int, int] | None = field(default=None, repr=False)
    last_error: str | None = None
    held_back: dict[str, list[Finding]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    not_indexed: dict[str, str] = field(default_factory=dict)
    naming: set[str] = field(default_factory=set)
    #: Paths where the daemon expected a file or directory of its own and found a symlink.
    refused: dict[str, str] = field(default_factory=dict)
    _archive_refused: set[str] = field(default_factory=set)
    #: Files whose content matches never_store: never indexed (decided here, as each file is
    #: processed, not only at commit time), with the guard and checksum that decided it.
    withheld: dict[str, list[Finding]] = field(default_factory=dict)
    #: rel → the version last read (identity, checksum), the guard that scanned it and its findings:
    #: a version is read once, and its verdict serves the edit flow and the commit decision alike.
    _verdicts: dict[str, tuple[Identity, str, SecretGuard, list[Finding]]] = field(default_factory=dict, repr=False)
    _edited_at: float | None = field(default=None, repr=False)
    #: The commit running now on a worker thread (daemon/files/committer.py); None between commits.
    committing: CommitJob | None = None
    #: Histories of this workspace found rewritten (kept in the daemon's copy), newest first.
    history_lost: list[LostHistory] = field(default_factory=list)
    _history_read: bool = field(default=False, repr=False)
    #: What a power cut broke and the daemon put right (a repository repaired, an emptied file
    #: refilled from HEAD), one line each, newest last: shown in status until the daemon stops.
    recovered: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.agent.id

    @property
    def workspace(self) -> Path:
        return self.agent.workspace

    def reconfigure(self, guard: SecretGuard, settings: Settings, stale_lock_s: float) -> None:
        """A reload's new guard and settings (the next file processed and commit use them)."""
        self.guard = guard
        self.settings = settings
        self.repo.stale_lock_s = stale_lock_s

    # ------------------------------------------------------------ edit flow

    def mark_dirty(self, now: float | None = None, immediate: bool = False) -> None:
        if now is None:
            now = self._edited_at if self._edited_at is not None else time.monotonic()
        self.first_change = now if self.first_change is None else min(self.first_change, now)
        self.last_change = now if self.last_change is None else max(self.last_change, now)
        self.commit_now = self.commit_now or immediate

    def look(self, rel: str) -> tuple[Inspection, list[Finding]]:
        """The file's current version and its never_store findings, reading it only if it is new.

        A version already read and scanned by the current guard is recognised from its
        open fd (:func:`~daemon.common.fileread.read_version`'s ``known``) and not read again.
        """
        cached = self._verdicts.get(rel)
        known = (cached[0], cached[1]) if cached is not None and cached[2] is self.guard else None
        inspection = read_version(self.workspace, rel, self.settings.max_index_bytes, known)
        if not inspection.usable:
            self._verdicts.pop(rel, None)
            return inspection, []
        if inspection.data is None and cached is not None:
            return inspection, cached[3]
        assert inspection.data is not None and inspection.identity is not None and inspection.sha256 is not None
        findings = self.guard.scan_bytes(inspection.data)
        self._verdicts[rel] = (inspection.identity, inspection.sha256, self.guard, findings)
        return inspection, findings

    @contextlib.contextmanager
    def edited_at(self, when: float | None) -> Iterator[None]:
        """Changes found meanwhile are dated ``when`` (the file's last event), not when the loop got to them.

        In a burst the loop works through files for a while after the writing
        stopped; dated by the loop, the quiet period would start only then.
        """
        self._edited_at = when
        try:
            yield
        finally:
            self._edited_at = None

    def process(self, rel: str) -> bool:
        """Bring one file's record, listeners and commit schedule up to date; True if it changed."""
        inspection, findings = self.look(rel)
        previous = self.files.get(rel)
        self._update_naming(rel, inspection.exists)
        if inspection.skip:
            if self.skipped.get(rel) != inspection.skip:
                log.warning("%s: ignoring %s: %s", self.id, rel, inspection.skip)
            self.skipped[rel] = inspection.skip
            self.not_indexed.pop(rel, None)
            self.withheld.pop(rel, None)
            if previous is not None:
                self.files.remove(rel)
                self._notify_removed(rel)
                return True
            return False
        self.skipped.pop(rel, None)
        if not inspection.exists:
            self.not_indexed.pop(rel, None)
            self.held_back.pop(rel, None)
            self.withheld.pop(rel, None)
            self.mark_dirty()
            if previous is None:
                return False
            self.files.remove(rel)
            self._notify_removed(rel)
            return True
        assert inspection.sha256 is not None
        was_withheld = rel in self.withheld
        # never indexed when not indexable text; the commit decision still holds it back from git
        secrets = [] if inspection.index_skip else findings
        if secrets:
            if not was_withheld:
                log.warning("%s: %s holds a secret (%s): not indexed", self.id, rel, "; ".join(map(str, secrets)))
            self.withheld[rel] = secrets
            self.not_indexed[rel] = WITHHELD
        else:
            self.withheld.pop(rel, None)
            if inspection.index_skip:
                self.not_indexed[rel] = inspection.index_skip
            else:
                self.not_indexed.pop(rel, None)
        changed = inspection.sha256 != previous
        if not changed and bool(secrets) == was_withheld:
            return False  # a new guard (reload) may change the verdict of an unchanged file
        if inspection.data is None and not secrets:
            # the version read before, but the index must hear of it again (it left the index while
            # withheld): forget the verdict, so the version is read once more and its bytes passed on
            self._verdicts.pop(rel, None)
            return self.process(rel)
        self.files.set(rel, inspection.sha256)
        if changed:
            self.mark_dirty()
        for listener in self.listeners:
            try:
                if secrets:
                    listener.file_withheld(self.agent, rel)
                else:
                    listener.file_changed(self.agent, rel, inspection)
            except Exception:
                log.exception("%s: listener failed on %s", self.id, rel)
        return True

    def _update_naming(self, rel: str, exists: bool) -> None:
        if not rel.startswith(daily.MEMORY_DIR + "/"):
            return
        bad = exists and not daily.follows_convention(rel) and not is_editor_temp(rel.rpartition("/")[2])
        if bad:
            self.naming.add(rel)  # a set: 20,000 oddly named files of a burst cost no sorting per file
        else:
            self.naming.discard(rel)

    def _notify_removed(self, rel: str) -> None:
        for listener in self.listeners:
            try:
                listener.file_removed(self.agent, rel)
            except Exception:
                log.exception("%s: listener failed on removal of %s", self.id, rel)

    def paths_under(self, rel_dir: str) -> set[str]:
        """Known and on-disk memory files below ``rel_dir`` (for directory events)."""
        prefix = rel_dir.rstrip("/") + "/" if rel_dir else ""
        on_disk = {p for p in list_memory_files(self.workspace) if p.startswith(prefix)}
        known = {p for p in (*self.files.paths(), *self.skipped) if p.startswith(prefix)}
        return on_disk | known

    # ------------------------------------------------------------ reconcile

    def reconcile(
        self,
        commit_check: bool = True,
        on_file: Callable[[], None] | None = None,
        stopping: Callable[[], bool] | None = None,
        repair: Callable[[str], bool] | None = None,
    ) -> int:
        """Compare the disk with the record and repair what the watcher missed; count repairs.

        ``on_file`` is called after each file is checked (the start's progress in status); ``repair``
        is asked of each changed file whether it counts (not one whose event waits in the debounce)."""
        fresh = self.files.fresh
        repaired = self.refresh(on_file, stopping, repair)
        repaired = 0 if fresh else repaired
        if commit_check and self.first_change is None and self.committing is None:
            try:
                self.repo.ensure()
                self.check_history()
                if self.repo.changes(PATHSPECS):
                    self.mark_dirty(immediate=True)
            except (git.GitCommandError, GitFailed, daily.RepoRefusedError, OSError) as exc:
                # Not silently: commit() tries, fails, backs off and shows it in status until it works.
                self.last_error = _error_text(exc, self.workspace)
                self.mark_dirty(immediate=True)
        if self.committing is None:  # the running commit's repository is left to it
            self.archive()
        self.naming = set(daily.naming_violations(self.workspace))
        self.files.save()
        return repaired

    def refresh(
        self,
        on_file: Callable[[], None] | None = None,
        stopping: Callable[[], bool] | None = None,
        counts: Callable[[str], bool] | None = None,
    ) -> int:
        """Run every memory file through the edit flow; count those that changed (and ``counts`` counts).

        ``on_file`` is called after each file (the start's progress); ``stopping`` is asked
        between files: a SIGTERM while 20,000 new files are reconciled (a start after a
        burst) is not held up by them; the records of those not reached are unchanged, so
        the next start reconciles them.
        """
        changed = 0
        for rel in sorted(self.paths_under("")):
            if stopping is not None and stopping():
                break
            if self.process(rel) and (counts is None or counts(rel)):
                changed += 1
            if on_file is not None:
                on_file()
        return changed

    def survey(self) -> None:
        """A read-only look for ``status`` when the daemon is down: nothing is written or committed."""
        self.refresh()
        self.refresh_history_lost()
        self.first_change = self.last_change = None  # "pending" is git's answer, below
        self.naming = set(daily.naming_violations(self.workspace))
        if self.repo.exists:
            try:
                if self.scan_for_commit():
                    self.mark_dirty()
            except (git.GitCommandError, GitFailed, daily.RepoRefusedError) as exc:
                self.last_error = _error_text(exc, self.workspace)

    def archive(self) -> None:
        """Move old daily files into ``memory/archive/YYYY/`` when configured, each as one rename commit.

        The move never follows a symlink (a symlinked ``memory/archive`` is
        refused, audited and shown in status); a file holding a secret is left
        where it is (it is held back from git, and a move would hide that).
        """
        days = self.settings.archive_after_days
        refused: dict[str, str] = {}
        for src, dst in daily.archive_plan(self.workspace, days, date.today()) if days else []:
            try:
                inspection, findings = self.look(src)
                if not inspection.usable:
                    continue
                if findings:
                    log.debug("%s: not archiving %s: it holds what looks like a secret", self.id, src)
                    continue
                info = self.repo.move(src, dst, f"memstrata: archive {src} → {dst}\n\nR {src} → {dst}\n")
            except safefs.UnsafePathError as exc:
                refused[exc.rel] = f"{exc.why}; old daily files are not archived through it"
                continue
            except FileExistsError:
                log.warning("%s: not archiving %s: %s already exists", self.id, src, dst)
                continue
            except (git.GitCommandError, GitFailed, daily.RepoBusyError, daily.RepoRefusedError) as exc:
                # Moved but not committed: the next batch commits it (git sees the rename).
                log.warning("%s: archived %s, commit postponed: %s", self.id, src, _error_text(exc, self.workspace))
                info = None
                self.mark_dirty(immediate=True)
            except OSError as exc:
                log.warning("%s: could not archive %s: %s", self.id, src, exc)
                continue
            log.info("%s: archived %s → %s%s", self.id, src, dst, f" ({info.short})" if info else "")
            if info is not None:
                self.last_commit = info
            self.process(src)
            self.process(dst)
        for rel in self._archive_refused - set(refused):
            self.refused.pop(rel, None)
        for rel, why in refused.items():
            self.refuse(rel, why)
        self._archive_refused = set(refused)

    def refuse(self, rel: str, why: str, event: str = "symlink_refused") -> None:
        """Record a symlink (or, ``event``, another agent's file) where the daemon expected its own
        file: logged and audited once, shown in status."""
        if self.refused.get(rel) != why:
            log.warning("%s: refused %s: %s", self.id, rel, why, extra={"event": "refused"})
            if self.audit is not None:
                self.audit(event, agent=self.id, path=rel, reason=why)
        self.refused[rel] = why

    # ------------------------------------------------------------ commits

    def commit_deadline(self) -> float | None:
        if self.first_change is None or self.last_change is None or self.committing is not None:
            return None
        if self.commit_now:
            due = self.first_change
        else:
            due = min(
                self.last_change + self.settings.quiet_period_s,
                self.first_change + self.settings.max_delay_s,
            )
        return max(due, self.retry_at) if self.retry_at else due

    def scan_changes(
        self, known: dict[str, list[Finding]] | None = None
    ) -> tuple[list[daily.Change], dict[str, list[Finding]], dict[str, str]]:
        """Uncommitted L1/L2 changes that may be committed, those held back (a secret in the file) and those
        skipped (unsafe to open); reads the workspace and git only, so a commit job runs it off the loop.

        Without ``known``, each file's content is checked here (``status`` with the daemon down).  A
        commit job passes the verdicts the edit flow reached (``withheld``): those files are held back,
        and no other file is read here, because what git stages of each is checked before it is
        committed (daemon/files/commits.py), a secret written since the edit flow's look included.
        """
        eligible = []
        held: dict[str, list[Finding]] = {}
        skipped: dict[str, str] = {}
        cancel = self.repo.cancel
        for change in self.repo.changes(PATHSPECS):
            if cancel is not None:
                cancel.check()  # the daemon is stopping: a scan of 20,000 files is not waited for
            if not is_memory_path(change.path):
                continue
            if change.kind != "deleted":
                if known is None:
                    inspection, findings = self.look(change.path)
                else:  # off the loop thread: the file is opened and fstat'ed, not read (see above)
                    inspection = peek(self.workspace, change.path, self.settings.max_index_bytes)
                    findings = known.get(change.path, [])
                if not inspection.usable:
                    if inspection.skip:
                        skipped[change.path] = inspection.skip
                    continue
                if findings:
                    held[change.path] = findings
                    continue
            eligible.append(change)
        return eligible, held, skipped

    def scan_for_commit(self) -> list[daily.Change]:
        """Uncommitted L1/L2 changes that may be committed; records what is held back."""
        eligible, held, skipped = self.scan_changes()
        self.skipped.update(skipped)
        self._hold_back(held)
        return eligible

    def _hold_back(self, held: dict[str, list[Finding]]) -> None:
        for rel, findings in held.items():
            if self.held_back.get(rel) != findings:
                log.warning(
                    "%s: holding back %s from git: %s",
                    self.id,
                    rel,
                    "; ".join(str(f) for f in findings),
                    extra={"event": "held_back"},
                )
        self.held_back = held

    def begin_commit(self, now: float | None = None) -> CommitJob:
        """The commit of what is pending, as a job to run (off the loop thread); the pending marks wait in it."""
        scan = functools.partial(self.scan_changes, dict(self.withheld))
        job = CommitJob(self.id, self.repo, lambda: self.guard, scan)
        job.marks = (self.first_change, self.last_change, self.commit_now)
        self.first_change = self.last_change = None
        self.commit_now = False
        self.committing = job
        return job

    def finish_commit(
        self, job: CommitJob, outcome: CommitOutcome, now: float | None = None
    ) -> daily.CommitInfo | None:
        """Apply what ``job`` did (loop thread): commits, held-back files, a rewritten history, failures.

        Edits made while it ran keep their own marks; a failed, stopped or
        unfinished job gives its marks back, so nothing pending is forgotten.
        """
        now = time.monotonic() if now is None else now
        if self.committing is job:
            self.committing = None
        if outcome.scanned:
            self.skipped.update(outcome.skipped)
            self._hold_back(outcome.held)
        if outcome.commits:
            self.commits_total += len(outcome.commits)
            self.last_commit = outcome.commits[-1]
            self._head_stamp = self.repo.head_stamp()  # the daemon's own commit: no need to re-read it
            self._give_daemon_files()
        if outcome.rewritten is not None:
            self._rewritten(outcome.rewritten)
        if outcome.repaired is not None:
            self.repaired(outcome.repaired, "when a commit met the damage")
        if outcome.error is not None or outcome.cancelled or outcome.left:
            first, last, immediate = job.marks
            if first is not None:
                self.first_change = min(first, self.first_change if self.first_change is not None else first)
                self.last_change = max(last or first, self.last_change or first)
            self.mark_dirty(now, immediate=immediate or outcome.left > 0)
            if outcome.error is not None:
                self._failed(now, _error_text(outcome.error, self.workspace))
                return None
            return outcome.commits[-1] if outcome.commits else None
        self.retry_at = None
        if self.failures:
            log.info("%s: commits work again after %d failed attempt(s)", self.id, self.failures)
        self.failures = 0
        self.failing_since = None
        self.last_error = None
        return outcome.commits[-1] if outcome.commits else None

    def _give_daemon_files(self) -> None:
        """Hand what the daemon made in the workspace (the token, the skill) to its owner, again.

        Both were made for the owner the workspace had when it was found; a workspace
        made by hand (``mkdir``, then ``chown -R``) can be found between the two, and
        they would stay root's, unreadable by the agent.  After each commit its owner
        is the one a person meant (a commit follows the first write by seconds).
        """
        owner = safefs.owner_of(self.workspace)
        if owner is None or owner == self._daemon_files_owner:
            return  # not root, or handed to this owner already: no walk on every commit
        for rel in (WORKSPACE_TOKEN.parent.as_posix(), SKILL_REL):
            with contextlib.suppress(OSError, safefs.UnsafePathError):
                safefs.give_tree(self.workspace, rel, owner)
                for parent in PurePosixPath(rel).parents:  # skills/, made with the skill when it was missing
                    if parent.name:
                        safefs.give_dir(self.workspace, parent.as_posix(), owner)
        self._daemon_files_owner = owner

    def commit(self, now: float | None = None) -> daily.CommitInfo | None:
        """Commit pending L1/L2 changes now, in this thread; on failure, back off and keep them pending."""
        job = self.begin_commit(now)
        return self.finish_commit(job, job(), now)

    # ------------------------------------------------------------ after a power cut

    def recover_after_unclean_stop(self) -> None:
        """Before the first reconcile of a start after an unclean stop (daemon/files/recovery.py):
        repair the repository when a cut broke it, refill memory files the cut emptied."""
        try:
            repaired = self.repo.repair(thorough=True)
            if repaired is not None:
                self.repaired(repaired, "after an unclean stop")
            self._refill_emptied()
        except (git.GitCommandError, GitFailed, daily.RepoRefusedError, OSError, ValueError) as exc:
            self.last_error = _error_text(exc, self.workspace)
            log.error("%s: could not check the repository after an unclean stop: %s", self.id, self.last_error)

    def _refill_emptied(self) -> None:
        """A memory file empty on disk while HEAD has a version with content: that version back."""
        for change in self.repo.changes(PATHSPECS):
            if change.kind != "modified" or not is_memory_path(change.path):
                continue
            try:
                st = os.lstat(self.workspace / change.path)
            except OSError:
                continue
            if (
                st.st_size != 0
                or not os.path.isfile(self.workspace / change.path)
                or os.path.islink(self.workspace / change.path)
            ):
                continue
            try:
                content = self.repo.read_at("HEAD", change.path)
            except ValueError:
                continue
            if not content or not daily.refill_if_empty(self.workspace, change.path, content):
                continue
            head = self.repo.resolve("HEAD")[:10]
            line = (
                f"REFILLED after an unclean stop: {change.path} was empty (the agent's last write of it never "
                f"reached the disk); its committed version {head} ({len(content):,} bytes) is back"
            )
            self._said_recovered(line, "file_refilled", path=change.path, commit=head, size=len(content))

    def repaired(self, repaired: daily.Repaired, when: str) -> None:
        """A repository repaired (:meth:`recover_after_unclean_stop`, or a commit that met the damage)."""
        line = f"REPAIRED {when}: {'; '.join(repaired.damage)}; {'; '.join(repaired.actions)}"
        if repaired.left:
            line += f"; STILL BROKEN: {repaired.left}"
        self._said_recovered(
            line, "repository_repaired", damage=repaired.damage, actions=repaired.actions, left=repaired.left
        )
        self.last_commit = None  # read again: HEAD may be back

    def _said_recovered(self, line: str, event: str, **fields: object) -> None:
        log.warning("%s: %s", self.id, line, extra={"event": event})
        if self.audit is not None:
            self.audit(event, agent=self.id, **fields)
        self.recovered = [*self.recovered, line][-10:]

    # ------------------------------------------------------------ history

    def check_history(self) -> None:
        """Whether the workspace's history still holds the daemon's last commit (never while a commit runs)."""
        if self.committing is not None:
            return
        rewritten = self.repo.history_check()
        if rewritten is not None:
            self._rewritten(rewritten)
        elif not self._history_read:
            self.refresh_history_lost()  # what earlier runs found stays shown after a restart

    def _rewritten(self, found: daily.Rewritten) -> None:
        """A lost history, said once: logged, audited, shown in status; the last commit shown is git's again."""
        copy = self.repo.copy
        subject = found.commit.subject if found.commit else ""
        log.warning(
            "%s: HISTORY REWRITTEN: memstrata's last commit %s (%r) is gone from %s: %s; it and every version "
            "before it are kept in %s",
            self.id,
            found.lost[:10],
            subject,
            self.workspace,
            found.why,
            copy.path if copy else "no copy",
        )
        if self.audit is not None:
            self.audit("history_rewritten", agent=self.id, lost_commit=found.lost, head=found.head, reason=found.why)
        self.last_commit = None
        with contextlib.suppress(git.GitCommandError, GitFailed, daily.RepoRefusedError, OSError):
            if (self.workspace / ".git").is_dir():
                self.last_commit = self.repo.head()
        self.refresh_history_lost()
        self.mark_dirty(immediate=True)  # a removed .git is made anew and every file committed into it

    def refresh_history_lost(self) -> None:
        """What the copy keeps of histories the workspace lost (shown in status)."""
        copy = self.repo.copy
        if copy is None:
            return
        self._history_read = True
        with contextlib.suppress(GitFailed, OSError):
            self.history_lost = [
                {
                    "commit": lost.commit.short,
                    "subject": lost.commit.subject,
                    "time": lost.commit.time,
                    "found": lost.found,
                    "copy": str(copy.path),
                }
                for lost in copy.lost()
            ]

    def _failed(self, now: float, error: str) -> None:
        self.failures += 1
        self.commit_failures_total += 1
        if self.failing_since is None:
            self.failing_since = time.time()
        delay = backoff(self.failures, max(1.0, self.settings.quiet_period_s), 60.0)
        self.retry_at = now + delay
        if error != self.last_error:
            log.error(
                "%s: commit failed (will retry in %.0f s): %s", self.id, delay, error, extra={"event": "commit_failed"}
            )
        self.last_error = error
        return None

    @property
    def pending(self) -> bool:
        return self.first_change is not None or self.committing is not None

    # ------------------------------------------------------------ report

    def report(self) -> AgentReport:
        if self.repo.exists:
            stamp = self.repo.head_stamp()
            if self.last_commit is None or stamp != self._head_stamp:
                with contextlib.suppress(git.GitCommandError, GitFailed, daily.RepoRefusedError):
                    self.last_commit = self.repo.head()
                    self._head_stamp = stamp
        commit = self.last_commit
        report: AgentReport = {
            "id": self.id,
            "workspace": str(self.workspace),
            "files": len(self.files),
            "last_commit": ({"sha": commit.short, "time": commit.time, "subject": commit.subject} if commit else None),
            "pending_commit": self.pending,
            "held_back": [
                {"path": rel, "line": f.line, "kind": f.kind}
                for rel, findings in sorted(self.held_back.items())
                for f in findings
            ],
            "naming_violations": sorted(self.naming)[:REPORT_LISTED],
            "naming_violations_total": len(self.naming),
            "skipped": [{"path": p, "reason": r} for p, r in sorted(self.skipped.items())],
            "not_indexed": [{"path": p, "reason": r} for p, r in sorted(self.not_indexed.items())],
            "last_error": self.last_error,
            "commits_failing": (
                {
                    "reason": self.last_error,
                    "attempts": self.failures,
                    "since": datetime.fromtimestamp(self.failing_since, timezone.utc).isoformat(timespec="seconds"),
                }
                if self.failures and self.failing_since is not None
                else None
            ),
            "refused": [{"path": p, "reason": r} for p, r in sorted(self.refused.items())],
            "committing": self.committing.progress if self.committing else None,
            "history_lost": self.history_lost,
            "recovered": self.recovered,
            "commits_total": self.commits_total,
            "commit_failures_total": self.commit_failures_total,
        }
        # A name that is not UTF-8 is shown escaped (bad\xffname.md): it never breaks the report.
        safe: AgentReport = json_safe(report)  # the same keys, every string encodable
        return safe


def _error_text(exc: BaseException, workspace: Path) -> str:
    if isinstance(exc, git.GitCommandError):
        return _git_error(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc} ({exc.filename or workspace})"
    return str(exc)


def _git_error(exc: git.GitCommandError) -> str:
    stderr = (exc.stderr or "").strip().splitlines()
    detail = stderr[-1].strip() if stderr else str(exc)
    command = exc.command[1] if isinstance(exc.command, list) and len(exc.command) > 1 else "git"
    return f"git {command} failed: {detail.removeprefix('stderr: ').strip(chr(39))}"


def settings_from(config: Config) -> Settings:
    return Settings(
        max_index_bytes=max_file_bytes(config),
        quiet_period_s=config.git.quiet_period_s,
        max_delay_s=config.git.max_delay_s,
        archive_after_days=config.daily.archive_after_days,
    )


def make_tracker(
    config: Config,
    agent: Agent,
    guard: SecretGuard,
    record: Path | None,
    listeners: Sequence[EditListener] = (),
    audit: Callable[..., None] | None = None,
    storage: StorageHealth | None = None,
) -> AgentTracker:
    """A tracker for ``agent``; ``record`` None keeps the processed-files record in memory only."""
    files = FileState(record, storage, agent.id)
    repo = workspace_repo(config, agent.workspace, agent.id)
    if record is not None:  # the running daemon: its index.lock written down while held (recovery.py)
        from daemon.files.recovery import lock_record

        repo.lock_record = lock_record(config.paths.state_dir, agent.id)
    return AgentTracker(agent, repo, files, guard, settings_from(config), listeners, audit)
