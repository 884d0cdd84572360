"""A host's report of itself on the central remote: ``refs/memstrata/<host>/status``, one small commit each time.

Each report is a commit whose tree holds one file, ``status.json`` (what the caller puts in it), the
child of the report before it: the ref only ever moves fast-forward, and the remote's reflog says
when the host was last heard from.  A host that finds its report refused (the remote's ref moved
without it) is not alone under its name: the refusal is the answer, never overwritten.

The reports are built in a small bare repository of the host's own (``mirror``); a fresh one (a new
state directory, a host rebuilt under its old name) first takes the remote's last report as the
parent, so the line goes on.
"""

from __future__ import annotations

from pathlib import Path

from layers.daily.git.history_copy import HistoryCopy
from layers.daily.git.remote import (
    REF_ROOT,
    RefUpdate,
    Remote,
    Unreachable,
    check_name,
    commit_and_push,
    remote_git,
    talk,
)
from layers.daily.git.run import Cancel, sync_dirs

LOCAL_REF = "refs/heads/report"
FILE = "status.json"


def report_ref(host: str) -> str:
    """``refs/memstrata/<host>/status``."""
    return f"{REF_ROOT}/{check_name(host, 'host')}/status"


def _last(mirror: HistoryCopy) -> str | None:
    status, out = mirror.runner().status("rev-parse", "--verify", "-q", f"{LOCAL_REF}^{{commit}}")
    return out.decode().strip() if status == 0 else None


def _adopt(mirror: HistoryCopy, remote: Remote, ref: str) -> str | None:
    """The remote's last report, fetched as the local one (None when the remote has none)."""
    git = remote_git(remote, mirror.path, mirror.cancel)
    status, _out, why = talk(
        git, remote, "fetch", "--no-tags", "--no-write-fetch-head", "--", remote.url, f"{ref}:{LOCAL_REF}"
    )
    if status != 0:
        if "couldn't find remote ref" in why:
            return None
        raise Unreachable(remote.shown, why)
    sync_dirs(mirror.path / "refs" / "heads", mirror.path / "refs")
    return _last(mirror)


def push_report(
    remote: Remote, mirror_path: Path, host: str, content: bytes, cancel: Cancel | None = None
) -> RefUpdate:
    """Commit ``content`` as ``status.json`` on top of the last report and push it, never forced.

    Raises Unreachable; a refusal (the remote's ref moved: another host under this name, or someone
    else) is in the answer, and the local line stays as it was.
    """
    ref = report_ref(host)
    mirror = HistoryCopy(mirror_path, cancel)
    mirror.ensure()
    runner = mirror.runner()
    parent = _last(mirror) or _adopt(mirror, remote, ref)
    blob = runner.run("hash-object", "-w", "--stdin", input=content).decode().strip()
    tree = runner.run("mktree", input=f"100644 blob {blob}\t{FILE}\n".encode()).decode().strip()
    return commit_and_push(mirror, remote, tree, parent, f"{host}: status\n", ref, LOCAL_REF, LOCAL_REF, cancel)
