"""Where an agent's workspace may be: judged on where its path resolves, never on how it is spelled.

Why this exists: the daemon runs as root and, for every workspace it finds, runs ``git init``,
writes a token and the skill, commits the ``*.md`` there and serves them to that agent's token.
Workspace paths come from places an agent can reach (``openclaw.json``, which OpenClaw and any
agent driving it writes; a directory listing), and a path can reach another agent's workspace, a
directory holding one, the state directory or ``/etc`` through a symlinked *parent*, a ``..`` or
plain nesting. Comparing strings, or lstat-ing the last component, sees none of that (issue 44).

So a workspace path is resolved once (``realpath``; a symlink as its *last* component is still
refused, the daemon never follows a link to a workspace), every component of what it resolves
to is lstat-ed, and it is compared by (device, inode) with the places no workspace may be, hold,
or (for most) lie inside:

* another agent's workspace (the first one found keeps it; memstrata's own
  ``agents_dir/<id>-workspace`` may lie inside the main workspace through the agents directory,
  and so may a direct child of the main workspace that is none of main's own folders: where
  OpenClaw puts ``<agents.defaults.workspace>/<id>``);
* the agents directory (only its own ``<id>-workspace`` children lie inside it);
* the state directory; OpenClaw's state directory (``paths.root``: workspaces lie inside it,
  but none is it or holds it); the directory of memstrata's indexes (``paths.index`` up to
  ``{agent}``: OpenClaw's ``agents/<id>`` with its credentials, by default);
* the system directories of :data:`SYSTEM_DIRS` and every user's home directory itself
  (workspaces may lie inside a home, and inside ``/tmp``, ``/var``, ``/opt``…, but never inside
  :data:`SYSTEM_TREES`);
* and, for a path a file named (``openclaw.json``, the listing of OpenClaw's root), a directory
  not owned by that file's owner (root's file may name root's directories).

Standard library only: the front (``memstrata agent list``, a token lookup) judges too.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

Identity = tuple[int, int]  # (st_dev, st_ino): what a directory is, whatever the path that reached it

#: Directories no workspace may be or hold (``/`` holds everything, so it is refused as itself).
SYSTEM_DIRS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/snap",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/local",
    "/var",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/spool",
    "/var/tmp",
)
#: Of those, the ones no workspace may lie inside either: the system's own files and its kernel views.
SYSTEM_TREES = frozenset(
    ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr")
)


class WorkspaceRefusedError(ValueError):
    """A workspace path that resolves where no workspace may be; nothing was written there.

    A ``ValueError`` so that the CLI says it as an error of the input (daemon/front/failures.py)."""

    def __init__(self, agent_id: str, path: Path, reason: str) -> None:
        super().__init__(f"workspace {path} of agent {agent_id} refused: {reason}")
        self.agent_id = agent_id
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Namer:
    """Who named a workspace path (the owner of ``openclaw.json``): the directory must be theirs."""

    uid: int
    source: Path


@dataclass(frozen=True)
class Resolved:
    """A directory as it was found: its real path, what it is, who owns it and what holds it."""

    given: Path
    real: Path
    identity: Identity
    owner: int
    ancestors: tuple[Identity, ...]  # the parent first, ``/`` last

    def holds(self, other: Resolved) -> bool:
        return self.identity in other.ancestors

    def lies_inside(self, other: Resolved) -> bool:
        return other.identity in self.ancestors


def _identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino)


def _chain(real: str) -> list[tuple[str, os.stat_result]]:
    """Every component of a real path from ``/`` down, lstat-ed; anything but a directory among them
    (a symlink put there since ``realpath`` read the tree) raises ``OSError``."""
    parts = Path(real).parts
    out = []
    for i in range(1, len(parts) + 1):
        path = os.path.join(*parts[:i])
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{path} changed while it was looked at")
        out.append((path, st))
    return out


def resolve(path: Path) -> Resolved | None:
    """``path`` as it resolves now; None when there is no directory there (not made yet, a file).

    Raises :class:`ValueError` (a reason) when its last component is a symbolic link, or when the
    tree changed between ``realpath`` and the look at each component."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ValueError(f"cannot be looked at ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise ValueError("is a symbolic link (a workspace is never reached through one)")
    if not stat.S_ISDIR(st.st_mode):
        return None
    real = os.path.realpath(path)
    try:
        chain = _chain(real)
    except OSError:
        raise ValueError("changed while it was looked at") from None
    last = chain[-1][1]
    if _identity(last) != _identity(st):
        raise ValueError("changed while it was looked at")
    ancestors = tuple(_identity(s) for _, s in reversed(chain[:-1]))
    return Resolved(path, Path(real), _identity(last), last.st_uid, ancestors)


def _quiet_resolve(path: Path) -> Resolved | None:
    """A place to keep workspaces out of: as it resolves (through symlinks: it is configuration)."""
    try:
        real = os.path.realpath(path)
        return resolve(Path(real))
    except (ValueError, OSError):
        return None


@dataclass(frozen=True)
class Place:
    """A directory no workspace may be or hold; ``inside_ok``: one may lie inside it."""

    what: str
    where: Resolved
    inside_ok: bool


def _home_places() -> list[Place]:
    homes: dict[Identity, Place] = {}
    try:
        entries = pwd.getpwall()
    except OSError:
        return []
    for entry in entries:
        if not entry.pw_dir or not entry.pw_dir.startswith("/"):
            continue
        where = _quiet_resolve(Path(entry.pw_dir))
        if where is not None and where.identity not in homes:
            homes[where.identity] = Place(f"the home directory of {entry.pw_name} ({where.real})", where, True)
    return list(homes.values())


def system_places() -> list[Place]:
    places = []
    for name in SYSTEM_DIRS:
        where = _quiet_resolve(Path(name))
        if where is not None:
            places.append(Place(f"the system directory {name}", where, name not in SYSTEM_TREES))
    return places


@dataclass
class Places:
    """The places of one configuration, and the workspaces taken so far (the first found keeps one)."""

    main: Resolved | None = None
    agents_dir: Resolved | None = None
    fixed: list[Place] = field(default_factory=list)
    taken: dict[str, Resolved] = field(default_factory=dict)  # agent id → its workspace
    #: Folders of the main workspace that are main's own (its memory, skills, logs): no workspace
    #: nested one level inside main's may be one of them (nor a hidden one, ``.git``, ``.memstrata``).
    main_names: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        *,
        workspace: Path,
        agents_dir: Path,
        state_dir: Path,
        root: Path,
        index_template: str,
        main_names: Iterable[str] = (),
        extra: Iterable[Place] = (),
        homes: bool = True,
    ) -> Places:
        """The places of a configuration's ``paths`` (``extra`` and ``homes=False``: for tests)."""
        places = cls(
            main=_quiet_resolve(workspace), agents_dir=_quiet_resolve(agents_dir), main_names=frozenset(main_names)
        )
        for what, path, inside_ok in (
            ("the state directory", state_dir, False),
            ("OpenClaw's state directory", root, True),
        ):
            where = _quiet_resolve(path)
            if where is not None:
                places.fixed.append(Place(f"{what} {where.real}", where, inside_ok))
        if places.agents_dir is not None:
            places.fixed.append(Place(f"the agents directory {places.agents_dir.real}", places.agents_dir, False))
        index_dir = _index_dir(index_template)
        if index_dir is not None:
            where = _quiet_resolve(index_dir)
            guarded = [p.where for p in places.fixed] + ([places.main] if places.main else [])
            if where is not None and not any(where.identity == g.identity or where.holds(g) for g in guarded):
                places.fixed.append(Place(f"memstrata's index directory {where.real}", where, False))
        places.fixed.extend(system_places())
        if homes:
            places.fixed.extend(_home_places())
        places.fixed.extend(extra)
        return places

    def judge(
        self, agent_id: str, path: Path, named_by: Namer | None = None, *, follow_link: bool = False
    ) -> Resolved | None:
        """What ``path`` resolves to, when agent ``agent_id`` may have its workspace there; None when
        there is no directory there yet. Raises :class:`WorkspaceRefusedError` saying why not.

        ``follow_link``: the path may itself be a symbolic link (the main workspace, which the
        administrator's configuration names); any other workspace never is."""
        try:
            found = resolve(Path(os.path.realpath(path)) if follow_link else path)
        except ValueError as exc:
            raise WorkspaceRefusedError(agent_id, path, str(exc)) from None
        if found is None:
            return None
        reason = self._why_not(agent_id, found, named_by)
        if reason is not None:
            shown = "" if str(found.real) == os.path.normpath(path) else f" (it resolves to {found.real})"
            raise WorkspaceRefusedError(agent_id, path, reason + shown)
        return found

    def take(self, agent_id: str, found: Resolved) -> None:
        self.taken[agent_id] = found

    def _own_layout(self, agent_id: str, found: Resolved) -> bool:
        """memstrata's own ``agents_dir/<id>-workspace`` (a direct child, named for the agent)."""
        return (
            self.agents_dir is not None
            and found.ancestors[:1] == (self.agents_dir.identity,)
            and found.real.name == f"{agent_id}-workspace"
        )

    def _why_not(self, agent_id: str, found: Resolved, named_by: Namer | None) -> str | None:
        others = {theirs.identity: (other, theirs) for other, theirs in self.taken.items() if other != agent_id}
        if found.identity in others:  # the most telling first: the very same directory
            return f"is agent {others[found.identity][0]}'s workspace"
        for place in self.fixed:
            if found.identity == place.where.identity:
                return f"is {place.what}"
        for ancestor in found.ancestors:  # the nearest first
            if ancestor in others:
                other, theirs = others[ancestor]
                if self._own_layout(agent_id, found) and self._holds_agents_dir(theirs):
                    continue
                if not self._nested_in_main(found, theirs):
                    return f"lies inside agent {other}'s workspace {theirs.real}"
        for other, theirs in others.values():
            if not found.holds(theirs) or self._nested_in_main(theirs, found):
                continue
            if not (self._own_layout(other, theirs) and self._holds_agents_dir(found)):
                return f"holds agent {other}'s workspace {theirs.real}"
        is_main = self.main is not None and found.identity == self.main.identity
        for place in self.fixed:
            where = place.where
            own_child = where is self.agents_dir and self._own_layout(agent_id, found)
            if found.lies_inside(where) and not place.inside_ok and not own_child:
                return f"lies inside {place.what}"
            if found.holds(where) and not (is_main and where is self.agents_dir):
                return f"holds {place.what}"
        if named_by is not None and found.owner != named_by.uid:
            return (
                f"is owned by uid {found.owner}, not by uid {named_by.uid} who owns {named_by.source} "
                "(a file may name only its owner's directories)"
            )
        return None

    def _nested_in_main(self, found: Resolved, outer: Resolved) -> bool:
        """``found`` is a direct child of the main workspace ``outer``, in a folder main does not use
        for itself: where OpenClaw puts an agent added without a workspace
        (``<agents.defaults.workspace>/<id>``, main's workspace by default). Main's own files (its
        memory, skills, ``.git``, token) are none of it, and main's watcher, commits and index leave
        it to its own agent (daemon/files/routing.py, daemon/common/workspaces.py ``is_memory_path``)."""
        name = found.real.name
        return (
            self.main is not None
            and outer.identity == self.main.identity
            and found.ancestors[:1] == (outer.identity,)
            and not name.startswith(".")
            and name not in self.main_names
        )

    def _holds_agents_dir(self, where: Resolved) -> bool:
        """The main workspace holds memstrata's agents directory (``{workspace}/agents``, by default)."""
        return self.agents_dir is not None and where.holds(self.agents_dir)


def _index_dir(template: str) -> Path | None:
    """The directory every agent's index lies under (``paths.index`` up to ``{agent}``), if any."""
    head, marker, _ = template.partition("{agent}")
    if not marker:
        return None
    directory = Path(head) if head.endswith("/") else Path(head).parent
    return directory if directory.is_absolute() else None
