"""Reading the fleet's remote on the hub: each host's repository, its refs, a file at one of them.

The remote is one URL for every host, and one bare repository per host behind it
(``<repository>/hosts/<host>.git``, made by ``memstrata fleet authorize``): the gate serves a host
its own repository only, so no object of another host's is ever in reach of its key.  The hub
reads them all from its own disk: ``status --fleet`` (each host's ``refs/memstrata/<host>/status``
commit holds its ``status.json``) and a restore's help need the refs and their shas, and a blob at
a ref.  The top repository holds the hub's own agents' refs and the shared core, which the top's
``post-receive`` hook copies into every host's repository.

Read-only here: nothing writes a repository (daemon/ops/fleet_remote.py makes and repairs them).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from daemon.ops import fleet_gate

MEMSTRATA = "refs/memstrata/"
SHARED_CORE = "refs/memstrata/shared/core"
# a ref or a path given to read_blob: what git names, and nothing it would take as an option
SAFE_REF = re.compile(r"^refs/memstrata/[A-Za-z0-9._/-]+$")


class ReadError(Exception):
    """A repository that git cannot read (not one, or broken): said with git's own words."""


@dataclass(frozen=True)
class HostRefs:
    """One host's refs in its repository: ``refs/memstrata/<host>/…`` → sha (the shared core left out)."""

    host: str
    repository: Path
    refs: dict[str, str]


def host_repository(repository: Path, host: str) -> Path:
    """Where ``host``'s own repository is (the gate's rule: daemon/ops/fleet_gate.py)."""
    return Path(fleet_gate.host_repository(str(repository), host))


def host_names(repository: Path) -> list[str]:
    """The hosts that have a repository under ``repository``, sorted (a name the gate would not
    serve, or anything that is not a directory, is no host's)."""
    hosts = Path(repository) / fleet_gate.HOSTS
    if not hosts.is_dir():
        return []
    names = (entry.name.removesuffix(".git") for entry in hosts.iterdir() if entry.name.endswith(".git"))
    return sorted(
        name
        for name in names
        if fleet_gate.valid_host(name)
        and host_repository(repository, name).is_dir()
        and not host_repository(repository, name).is_symlink()
    )


def hosts(repository: Path) -> list[HostRefs]:
    """For each host's repository, its own refs and their shas, sorted by host."""
    return [host_refs(repository, host) for host in host_names(repository)]


def host_refs(repository: Path, host: str) -> HostRefs:
    path = host_repository(repository, host)
    return HostRefs(host, path, refs(path, f"{MEMSTRATA}{host}/"))


def refs(git_dir: Path, prefix: str = MEMSTRATA) -> dict[str, str]:
    """Every ref under ``prefix`` of the bare repository ``git_dir`` → its sha."""
    out = _git(git_dir, "for-each-ref", "--format=%(objectname) %(refname)", prefix)
    return {name: sha for sha, _, name in (line.partition(" ") for line in out.decode().splitlines())}


def read_blob(git_dir: Path, ref: str, path: str) -> bytes | None:
    """The file ``path`` of the commit at ``ref`` in ``git_dir`` (None when the ref, the path or a
    blob there is missing): e.g. ``status.json`` at a host's ``refs/memstrata/<host>/status``."""
    parts = path.split("/")
    if not SAFE_REF.match(ref) or not path or any(part in ("", ".", "..") for part in parts) or "\n" in path:
        raise ValueError(f"read_blob: {ref!r}:{path!r} is not a ref under {MEMSTRATA} and a relative path")
    proc = _run(git_dir, "cat-file", "blob", f"{ref}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def _git(git_dir: Path, *args: str) -> bytes:
    proc = _run(git_dir, *args)
    if proc.returncode != 0:
        raise ReadError(f"git --git-dir {git_dir} {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _run(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"}
    argv = ["git", "-c", f"safe.directory={git_dir}", "--git-dir", str(git_dir), *args]
    return subprocess.run(argv, capture_output=True, env=env, timeout=60)
