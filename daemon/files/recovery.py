"""A start after an unclean stop (SIGKILL, a power cut): what the daemon checks before its first reconcile.

The daemon writes ``state_dir/daemon.running`` (synced) when it starts and removes it when it
stops cleanly; found at a start, the previous run ended without a stop.  Then, and only then
(the checks cost a walk of each repository's loose objects and a ``git fsck --connectivity-only``):

- each workspace repository is checked and, when a cut broke it, repaired from the daemon's
  history copy (:mod:`layers.daily.git.repair`), said in the log, the audit log and ``memstrata status``;
- a memory file that is empty on disk while HEAD holds a version of it gets that version back
  (:func:`layers.daily.workspace_repo.refill_if_empty`): the agent's last write of it never reached the disk,
  and committing the empty file would record the cut as the agent's edit;
- lock files left in the history copies are removed (only the daemon writes there).

Whatever the previous stop, the ``index.lock`` files the daemon's own dead process left are
removed at once (:func:`clear_stale_git_locks`): each one is written down under
``state_dir/git-locks/`` while held, with the holder named so that a live process's lock (or
someone else's at the same path) is told apart and left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path

from layers.common import lockowner
from layers.common.fsutil import atomic_write
from layers.daily.git.commit import clear_recorded_lock
from layers.daily.git.run import sync_dirs

log = logging.getLogger(__name__)

RUNNING_MARKER = "daemon.running"
GIT_LOCKS_DIR = "git-locks"


def lock_record(state_dir: Path, agent_id: str) -> Path:
    """Where the index.lock an agent's commit holds is written down while held."""
    return state_dir / GIT_LOCKS_DIR / f"{agent_id}.json"


def begin_run(state_dir: Path) -> bool:
    """Mark the daemon running; True when the previous run ended without a clean stop."""
    marker = state_dir / RUNNING_MARKER
    unclean = marker.exists()
    try:
        atomic_write(marker, json.dumps({**lockowner.this_process(), "started": time.time()}), mode=0o600)
    except OSError as exc:  # a full state disk: the daemon runs; the next start checks whatever happens
        log.warning("could not write %s (%s): the next start will check every repository", marker, exc)
        return unclean
    sync_dirs(state_dir)
    return unclean


def end_run(state_dir: Path) -> None:
    """The stop was clean: the next start skips the checks."""
    with contextlib.suppress(FileNotFoundError):
        (state_dir / RUNNING_MARKER).unlink()
    sync_dirs(state_dir)


def clear_stale_git_locks(state_dir: Path) -> list[str]:
    """Remove the index.lock files (and the ref locks of the same commit) the daemon's dead processes left."""
    cleared = []
    folder = state_dir / GIT_LOCKS_DIR
    with contextlib.suppress(FileNotFoundError):
        for record in sorted(folder.glob("*.json")):
            removed = clear_recorded_lock(record)
            if removed:
                log.warning("removed %s: left by the daemon's own process, which is gone", removed)
                cleared.append(removed)
    return cleared


def clear_copy_locks(history_dir: Path) -> list[str]:
    """Lock files in the history copies after an unclean stop: only the daemon writes there, and it is starting."""
    cleared: list[str] = []
    if not history_dir.is_dir():
        return cleared
    for dirpath, _dirs, filenames in os.walk(history_dir):
        for name in filenames:
            if name.endswith(".lock"):
                path = Path(dirpath) / name
                with contextlib.suppress(OSError):
                    path.unlink()
                    cleared.append(str(path))
    for removed in cleared:
        log.warning("removed %s: left in the daemon's history copy by the previous run, which did not stop", removed)
    return cleared
