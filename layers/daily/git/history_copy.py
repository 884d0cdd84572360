"""A copy of what the daemon committed, in a bare repository under the state directory, out of the agents' reach.

An agent owns its workspace's ``.git``: ``git reset --hard HEAD~3`` followed by
``reflog expire`` and ``gc``, ``rm -rf .git``, or a history rewritten to one
orphan commit lose for good what the daemon committed there.  So after each of
its commits the daemon copies the commit, with everything it reaches, into
``state_dir/history/<agent>.git`` (0700, root's).  The copy is made by
``pack-objects`` run *in the copy*, reading the workspace's objects as an
alternate object directory for that one command: no configuration, hook or
remote of the agent's repository is consulted, and nothing in the copy depends
on the workspace afterwards.

Its references:

- ``refs/heads/daemon``: the daemon's last commit, which the workspace's history
  must contain; a history that does not (rewritten, removed) is detected by
  comparing the two (:meth:`HistoryCopy.follow`);
- ``refs/lost/<UTC time>-<sha>``: the daemon's last commit of a history the
  workspace no longer contains, kept (with everything before it) when the
  rewrite was found.  Nothing here is ever deleted or repacked away.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from layers.common.fsutil import private_dirs
from layers.daily.git.log import LOG_FORMAT, CommitInfo, parse_log
from layers.daily.git.run import NEUTRAL_CONFIG, Cancel, Git, GitFailed, sync_dirs, sync_tree

DAEMON_REF = "refs/heads/daemon"
LOST_PREFIX = "refs/lost/"
_MAX_PACKS = 32  # one pack per commit: past this many they are merged into one


@dataclass(frozen=True)
class LostHistory:
    """A history the workspace no longer holds: its last commit by the daemon, and when that was found."""

    ref: str
    found: str  # ISO 8601, UTC
    commit: CommitInfo


def _quoted(path: Path) -> str:
    """``path`` as one entry of GIT_ALTERNATE_OBJECT_DIRECTORIES (C-quoted: a ':' in it is then no separator)."""
    text = os.fsdecode(path).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


class HistoryCopy:
    """The daemon's copy of one workspace's history (see the module docstring)."""

    def __init__(self, path: Path, cancel: Cancel | None = None) -> None:
        self.path = path
        self.cancel = cancel
        self._stored: str | None = None  # the last commit this process stored: the next one's parent, as a rule

    def _git(self, alternate: Path | None = None) -> Git:
        options = [arg for key, value in NEUTRAL_CONFIG for arg in ("-c", f"{key}={value}")]
        env: dict[str, str | None] = {"GIT_TERMINAL_PROMPT": "0", "GIT_DIR": None, "GIT_INDEX_FILE": None}
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = _quoted(alternate) if alternate is not None else None
        return Git(["git", f"--git-dir={self.path}", *options], env, self.path, self.cancel)

    def runner(self) -> Git:
        """The copy's git, for a repair that reads from it (:mod:`layers.daily.git.repair`)."""
        return self._git()

    def refs(self) -> list[str]:
        """Every reference whose history the copy keeps: the daemon's, and those of lost histories."""
        return ([DAEMON_REF] if self.last() else []) + [lost.ref for lost in self.lost()]

    # -- reading

    @property
    def exists(self) -> bool:
        """True when the copy is there and this process may read it (the CLI run by an agent's user may not)."""
        try:
            return (self.path / "HEAD").is_file() and os.access(self.path / "objects", os.R_OK | os.X_OK)
        except OSError:
            return False

    def last(self) -> str | None:
        """The daemon's last commit, as the copy knows it."""
        if not self.exists:
            return None
        status, out = self._git().status("rev-parse", "--verify", "-q", f"{DAEMON_REF}^{{commit}}")
        return out.decode().strip() if status == 0 else None

    def info(self, sha: str) -> CommitInfo | None:
        commits = parse_log(self._git().run("log", f"--format={LOG_FORMAT}", "-n1", sha).decode(errors="replace"))
        return commits[0] if commits else None

    def lost(self) -> list[LostHistory]:
        """Every history found rewritten, newest first."""
        if not self.exists:
            return []
        out = self._git().run("for-each-ref", "--sort=-refname", "--format=%(refname)%00%(objectname)", LOST_PREFIX)
        found = []
        for line in out.decode(errors="replace").splitlines():
            ref, _, sha = line.partition("\0")
            commit = self.info(sha)
            stamp = ref[len(LOST_PREFIX) :].partition("-")[0]
            when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.strptime(stamp, "%Y%m%dT%H%M%SZ")) if stamp else ""
            if commit is not None:
                found.append(LostHistory(ref, when, commit))
        return found

    def resolve(self, rev: str) -> str:
        """The full sha of commit ``rev`` in the copy; ValueError when it holds no such commit."""
        if not rev or rev.startswith("-") or not self.exists:
            raise ValueError(f"no commit {rev!r} in the daemon's copy {self.path}")
        status, out = self._git().status("rev-parse", "--verify", "-q", f"{rev}^{{commit}}")
        if status != 0:
            raise ValueError(f"no commit {rev!r} in the daemon's copy {self.path}")
        return out.decode().strip()

    def read_at(self, sha: str, rel: str) -> bytes:
        try:
            return self._git().run("cat-file", "blob", f"{sha}:{rel}")
        except GitFailed:
            raise ValueError(f"{rel} does not exist in commit {sha[:10]}") from None

    def log(self, rel: str | None = None, limit: int = 20, beyond: tuple[Path, str] | None = None) -> list[CommitInfo]:
        """Commits of the copy (every history it keeps), newest first; with ``beyond``, only those it does not reach.

        ``beyond`` is (a workspace's object directory, its HEAD): the directory is
        read for this one command, to know which commits the workspace still has.
        """
        if not self.exists:
            return []
        refs = [DAEMON_REF] if self.last() else []
        refs += [lost.ref for lost in self.lost()]
        if not refs:
            return []
        args = [f"--format={LOG_FORMAT}", f"-n{int(limit)}", *refs]
        alternate = None
        if beyond is not None:
            alternate, head = beyond
            args.append(f"^{head}")
        out = self._git(alternate).run("log", *args, "--", *([rel] if rel else []))
        return parse_log(out.decode(errors="replace"))

    # -- writing

    def ensure(self) -> None:
        if (self.path / "HEAD").is_file():
            return
        private_dirs(self.path.parent)
        self._git().run("init", "--bare", "-q", str(self.path), killable=False)
        os.chmod(self.path, 0o700)
        sync_tree(self.path)  # git init syncs nothing it writes

    def store(self, objects: Path, sha: str) -> None:
        """Copy commit ``sha`` (and all it reaches) from the object directory ``objects``, moving no reference.

        Called before the workspace's HEAD moves to ``sha``: from the moment the
        agent can see the commit, the copy holds it, so a ``.git`` removed right
        after is no loss (:meth:`keep` then finds it here).
        """
        self.ensure()
        last = self.last()
        known = [lost.commit.sha for lost in self.lost()]
        # the commit stored just before is here too (DAEMON_REF moves once per batch of commits: without
        # it, each commit of a 10-part batch would pack every part before it again)
        stored = self._stored if self._stored is not None and self._has(self._stored) else None
        exclude = [c for c in dict.fromkeys((last, stored, *known)) if c and c != sha]
        revs = "".join([f"{sha}\n", *(f"^{c}\n" for c in exclude)])
        pack = str(self.path / "objects" / "pack" / "pack")
        self._git(objects).run("pack-objects", "--revs", "-q", pack, input=revs.encode())
        sync_dirs(self.path / "objects" / "pack")  # git synced the pack and its index, not their names
        self._stored = sha

    def _has(self, sha: str) -> bool:
        status, _ = self._git().status("cat-file", "-e", f"{sha}^{{commit}}", fatal=False)
        return status == 0

    def keep(self, objects: Path, sha: str) -> str | None:
        """Move DAEMON_REF to commit ``sha``, copied first from the object directory ``objects`` unless
        :meth:`store` already did.

        Returns the previous DAEMON_REF when ``sha`` does not descend from it: the
        workspace's history was rewritten, and that previous history is kept
        under ``refs/lost/``.
        """
        self.ensure()
        for _ in range(3):
            last = self.last()
            if last == sha:
                return None
            if not self._has(sha):
                self.store(objects, sha)
            lost = None
            if last is not None and last != sha and not self._descends(sha, last):
                lost = last
                self._record_lost(last)
            try:
                self._git().run("update-ref", "-m", "kept", DAEMON_REF, sha, last or "0" * 40, killable=False)
            except GitFailed as exc:
                if "cannot lock ref" in str(exc.stderr):
                    continue  # another memstrata process (the CLI's restore) moved it meanwhile: again
                raise
            self._sync_refs()
            self._merge_packs()
            return lost
        raise GitFailed("update-ref", 1, f"{DAEMON_REF} in {self.path} kept moving")

    def forget_last(self) -> str | None:
        """The workspace has no history at all any more: keep the last one as lost, and start again."""
        last = self.last()
        if last is not None:
            self._record_lost(last)
            self._git().run("update-ref", "-d", DAEMON_REF, last, killable=False)
            self._sync_refs()
        return last

    def _sync_refs(self) -> None:
        """The reference directories a ref update renamed into (git syncs the ref's file, not its name)."""
        sync_dirs(self.path, self.path / "refs" / "heads", self.path / "refs" / "lost")

    def _descends(self, sha: str, ancestor: str) -> bool:
        status, _ = self._git().status("merge-base", "--is-ancestor", ancestor, sha)
        return status == 0

    def _record_lost(self, sha: str) -> None:
        if any(lost.commit.sha == sha for lost in self.lost()):
            return
        ref = f"{LOST_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{sha[:12]}"
        self._git().run("update-ref", ref, sha, "0" * 40, killable=False)
        self._sync_refs()

    def _merge_packs(self) -> None:
        packs = list((self.path / "objects" / "pack").glob("*.pack"))
        if len(packs) > _MAX_PACKS:
            # every object stays, reachable or not: the copy exists to lose nothing
            self._git().run("repack", "-a", "-d", "-q", "--keep-unreachable", killable=False)
            sync_dirs(self.path / "objects" / "pack")
