"""``memstrata agent restore-from-remote ID``: an agent brought back from the central remote onto this host.

A host lost (its disk, its state directory) leaves every agent's history on the remote
(``refs/memstrata/<host>/<agent>/``, daemon/files/sync.py).  On a new host (or the old one rebuilt)
this rebuilds the agent's history copy under the state directory and its workspace, every file and
every commit (layers/daily/git/remote.py :func:`restore`); the CLI then registers the agent as
``agent add`` does, and the daemon finds the workspace and indexes its files (L3).  Its L4 memories
are the hub's and need nothing.

The workspace is checked out beside its place and renamed into it: a running daemon discovers it
whole, repository and all, never half written.  Nothing is overwritten: an agent this host already
has (a workspace with anything in it, a copy with a history) is refused before the remote is asked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from daemon.common.config import Config
from daemon.common.domain_errors import DaemonError
from daemon.common.workspaces import history_copy_path, make_agent
from layers.common.fsutil import fsync_dir
from layers.common.ids import MAIN_AGENT, check_id
from layers.daily.git import remote as fleet
from layers.daily.git.history_copy import HistoryCopy


class RestoreError(DaemonError):
    """Why an agent cannot be restored here; ``code`` for scripts: ``agent_exists``, ``not_on_remote``,
    ``remote_unreachable``, ``no_remote``, ``invalid``."""

    def __init__(self, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RestoredAgent:
    agent: str
    host: str
    workspace: Path
    copy: Path
    commit: str
    commits: int
    files: int
    lost: list[str]


def remote_of(config: Config) -> fleet.Remote:
    """``git.remote`` as the pusher reaches it; RestoreError when none is configured."""
    git = config.git
    if not git.remote:
        raise RestoreError("no git.remote in the configuration: there is no remote to restore from", "no_remote")
    try:
        return fleet.Remote(
            git.remote,
            key_file=config.config_file_path(git.remote_key_file),
            known_hosts=config.config_file_path(git.remote_known_hosts_file),
            host_keys=git.remote_host_keys,
            timeout_s=git.remote_timeout_s,
        )
    except ValueError as exc:
        raise RestoreError(f"git.remote: {exc}") from exc


def _used(path: Path) -> bool:
    return os.path.lexists(path) and not (path.is_dir() and not path.is_symlink() and not any(path.iterdir()))


def restore_agent(config: Config, agent_id: str, host: str | None = None) -> RestoredAgent:
    """Restore ``agent_id`` as host ``host`` (default: this host's name) left it on the remote."""
    check_id(agent_id)
    if agent_id == MAIN_AGENT:
        raise RestoreError("'main' is the main workspace's agent: `memstrata init` creates it; restore spoke agents")
    try:
        host = fleet.check_name(host or config.host_name, "host")
    except ValueError as exc:
        raise RestoreError(str(exc)) from None
    remote = remote_of(config)
    workspace = make_agent(config, agent_id).workspace
    if _used(workspace):
        raise RestoreError(
            f"agent {agent_id!r} exists here: {workspace} is not empty (nothing was changed)", "agent_exists"
        )
    copy = HistoryCopy(history_copy_path(config, agent_id))
    if copy.exists and copy.refs():
        raise RestoreError(
            f"agent {agent_id!r} has a history here already ({copy.path}): a restore starts from none "
            "(nothing was changed)",
            "agent_exists",
        )
    workspace.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".restore-{agent_id}-", dir=workspace.parent)) / "ws"
    try:
        try:
            done = fleet.restore(remote, host, agent_id, copy, staging)
        except fleet.NotOnRemote:
            what = f"nothing on the remote {remote.shown} for agent {agent_id!r} of host {host!r}"
            raise RestoreError(what, "not_on_remote") from None
        except fleet.Unreachable as exc:
            raise RestoreError(
                f"the remote {remote.shown} cannot be reached: {exc.reason}", "remote_unreachable"
            ) from None
        if os.path.isdir(workspace) and not os.path.islink(workspace):
            os.rmdir(workspace)  # empty (checked above): the restored one takes its place
        os.rename(staging, workspace)
        fsync_dir(workspace.parent)
    finally:
        shutil.rmtree(staging.parent, ignore_errors=True)
    return RestoredAgent(agent_id, host, workspace, copy.path, done.commit, done.commits, done.files, done.lost)
