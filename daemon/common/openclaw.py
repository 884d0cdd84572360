"""OpenClaw's own agent layout: the roster ``openclaw.json`` holds, and ``<state-dir>/workspace-<agentId>``.

OpenClaw keeps its state in one directory (``~/.openclaw``, memstrata's ``paths.root``); its
roster is ``agents.entries.<id>`` (a keyed map, what OpenClaw 2026.9 writes) or, where that is
absent, the older ``agents.list[]``. An agent without a ``workspace`` of its own gets
``<agents.defaults.workspace>/<agentId>`` when that root is set (``openclaw agents add research``
puts it inside main's workspace), else ``<state-dir>/workspace-<agentId>``; ``~`` in a path is
the home of the user OpenClaw runs as (:func:`home_of_state_dir`). The roster decides: a
``workspace-<id>`` directory is an agent by its name alone only where no ``openclaw.json`` can be
read. docs/openclaw.md has what memstrata relies on, as measured on the real package.
``openclaw.json`` is JSON5 (comments, unquoted keys, trailing commas).

Read-only, and as hostile as a workspace: the file is read through a no-follow descriptor and
only up to :data:`MAX_CONFIG_BYTES`; an id that is not a valid agent id, an entry that is not an
object or a path that is not absolute is skipped with one log line. This module only says which
paths are *named*, and by whom (the owner of the file, or of the directory listed): where each
path resolves is judged, with every other source of workspaces at once, by
daemon/common/workspaces.py (daemon/common/workspace_guard.py).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.common.workspace_guard import Namer
from layers.common.ids import MAIN_AGENT, is_valid_id

CONFIG_FILE = "openclaw.json"
WORKSPACE_PREFIX = "workspace-"
MAX_CONFIG_BYTES = 1 << 20  # a roster of thousands of agents is far below this
MAX_AGENTS = 10_000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """A workspace OpenClaw's layout names for an agent: the path as named, and who named it."""

    agent_id: str
    path: Path
    named_by: Namer
    #: Why the roster cannot place it (its two forms disagree): refused without a look at the path.
    conflict: str | None = None


_cache: dict[Path, tuple[tuple[object, ...], list[Candidate]]] = {}
_said: set[str] = set()


def _once(message: str, *args: object) -> None:
    """A warning about the same thing is said once per process, not at every look."""
    text = message % args
    if text not in _said:
        _said.add(text)
        log.warning("%s", text)


def _stamp(root: Path) -> tuple[object, ...]:
    out: list[object] = []
    for path in (root, root / CONFIG_FILE):
        try:
            st = os.lstat(path)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size, st.st_uid))
        except OSError:
            out.append(None)
    return tuple(out)


def candidates(root: Path) -> list[Candidate]:
    """OpenClaw's agents under state dir ``root`` (main excluded), in the order found.

    When ``openclaw.json`` is there and reads as an object, its roster decides (as it does for
    OpenClaw): ``agents.entries`` and ``agents.list``, each agent at its ``workspace``, else
    ``<agents.defaults.workspace>/<id>``, else ``root/workspace-<id>``; a ``workspace-<id>``
    directory no roster lists is nobody's. Without a readable file (none, a symlink, not JSON5),
    every ``root/workspace-<id>`` directory is an agent, as before rosters existed.
    Cached until the directory or the file changes. Nothing here says a path is usable: the
    caller judges where each one resolves."""
    stamp = _stamp(root)
    cached = _cache.get(root)
    if cached is not None and cached[0] == stamp:
        return list(cached[1])
    listed = _listed(root)
    found = _by_name(root) if listed is None else listed
    _cache[root] = (stamp, found)
    return list(found)


def _by_name(root: Path) -> list[Candidate]:
    """``root/workspace-<id>`` entries, named by whoever owns ``root`` (who may create them)."""
    try:
        names = sorted(os.listdir(root))
        owner = os.lstat(root).st_uid
    except OSError:
        return []
    found = []
    for name in names:
        if not name.startswith(WORKSPACE_PREFIX):
            continue
        agent_id = name[len(WORKSPACE_PREFIX) :]
        if is_valid_id(agent_id) and agent_id != MAIN_AGENT and os.path.lexists(root / name):
            found.append(Candidate(agent_id, root / name, Namer(owner, root)))
    return found


def _read_config(root: Path) -> tuple[dict[str, Any], int] | None:
    """``openclaw.json`` as data and the uid owning it, or None (absent, a symlink, too large, not
    a JSON5 object: said once)."""
    path = root / CONFIG_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _once("%s: not read (%s)", path, exc.strerror)
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            _once("%s: not a regular file; not read", path)
            return None
        raw = fh.read(MAX_CONFIG_BYTES + 1)
        owner = os.fstat(fh.fileno()).st_uid
    if len(raw) > MAX_CONFIG_BYTES:
        _once("%s: larger than %d bytes; not read", path, MAX_CONFIG_BYTES)
        return None
    import json5  # only when an OpenClaw file is there

    try:
        data = json5.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        _once("%s: not valid JSON5 (%s); its agents are not discovered", path, str(exc)[:200])
        return None
    if not isinstance(data, dict):
        _once("%s: not a JSON5 object; its agents are not discovered", path)
        return None
    return data, owner


def home_of_state_dir(root: Path) -> str | None:
    """The home ``~`` stands for in OpenClaw's paths: that of the user owning its state dir.

    OpenClaw expands ``~`` with its gateway's ``$HOME`` (``$OPENCLAW_HOME`` first); the daemon runs
    as root under systemd, so its own ``$HOME`` is root's, not OpenClaw's. The gateway runs as the
    user whose state dir it is (it creates it, mode 0700), so that user's home is the one meant.
    Not the file's owner: an agent that can rewrite ``openclaw.json`` does not choose the home."""
    try:
        uid = os.stat(root).st_uid
    except OSError:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwuid(uid).pw_dir
    return None


def _expand(text: str, home: str | None) -> Path | None:
    """A configured path as OpenClaw reads it (trimmed; a leading ``~`` or ``~/`` is ``home``); None
    when it is not absolute then (``~user``, ``~`` without a home, a relative path: OpenClaw would
    take those from its working directory, which the daemon does not know)."""
    text = text.strip()
    if text.startswith("~"):
        if home is None or not (text == "~" or text.startswith("~/")):
            return None
        text = home + text[1:]
    if "\0" in text:
        return None
    path = Path(os.path.normpath(text))
    return path if path.is_absolute() else None


@dataclass
class _Roster:
    """What ``openclaw.json`` says of its agents, read as OpenClaw reads it."""

    root: Path
    home: str | None
    base: Path | None  # agents.defaults.workspace, expanded
    namer: Namer

    def place(self, agent_id: str, given: object, where: str) -> Path | str:
        """Where an entry puts its agent, or why it cannot be used (a reason to skip it)."""
        if isinstance(given, str) and given.strip():
            path = _expand(given, self.home)
            return path if path is not None else f"workspace {given[:200]!r} is not an absolute path"
        if given is not None and not isinstance(given, str):
            return f"{where}.workspace is not a string"
        if self.base is not None:
            return self.base / agent_id
        return self.root / f"{WORKSPACE_PREFIX}{agent_id}"


def _entries_of(agents: dict[str, Any]) -> tuple[dict[str, object], dict[str, object], bool]:
    """The roster's two forms: ``agents.entries`` (id → entry) and ``agents.list`` (entries with an
    ``id``), each at most :data:`MAX_AGENTS`, as id → the entry's ``workspace`` (None when it gives
    none); and whether ``agents.entries`` is there (OpenClaw then reads it and not the list)."""
    keyed: dict[str, object] = {}
    entries = agents.get("entries")
    has_entries = "entries" in agents and entries is not None
    if has_entries and not isinstance(entries, dict):
        _once("%s: agents.entries is not an object; no agent of it is discovered", CONFIG_FILE)
    elif isinstance(entries, dict):
        if len(entries) > MAX_AGENTS:
            _once("%s: agents.entries has %d agents; only the first %d are read", CONFIG_FILE, len(entries), MAX_AGENTS)
        for key, entry in itertools.islice(entries.items(), MAX_AGENTS):
            if isinstance(entry, dict):
                keyed[key] = entry.get("workspace")
            else:
                _once("%s: agents.entries.%s is not an object; skipped", CONFIG_FILE, str(key)[:80])
    listed: dict[str, object] = {}
    items = agents.get("list")
    if isinstance(items, list):
        if len(items) > MAX_AGENTS:
            _once("%s: agents.list has %d agents; only the first %d are read", CONFIG_FILE, len(items), MAX_AGENTS)
        for entry in items[:MAX_AGENTS]:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                listed.setdefault(entry["id"], entry.get("workspace"))
    return keyed, listed, has_entries


def _listed(root: Path) -> list[Candidate] | None:
    """The agents ``openclaw.json`` names (main excluded), or None when there is no file to read.

    As OpenClaw 2026.9 reads it (``readAgentRosterProperty``): ``agents.entries`` when it is there,
    else ``agents.list``. An id in both is one agent; where the two give it different workspaces
    it is refused (``conflict``), since which one is meant cannot be told. An id only in the list
    while ``agents.entries`` is there is not an agent OpenClaw runs: skipped, said once."""
    read = _read_config(root)
    if read is None:
        return None
    data, owner = read
    agents = data.get("agents")
    if not isinstance(agents, dict):
        return []
    home = home_of_state_dir(root)
    defaults = agents.get("defaults")
    shared = defaults.get("workspace") if isinstance(defaults, dict) else None
    base = _expand(shared, home) if isinstance(shared, str) and shared.strip() else None
    if isinstance(shared, str) and shared.strip() and base is None:
        _once("%s: agents.defaults.workspace %r is not an absolute path", CONFIG_FILE, shared[:200])
        return []  # each agent without a workspace of its own would be there: none can be placed
    roster = _Roster(root, home, base, Namer(owner, root / CONFIG_FILE))
    keyed, listed, has_entries = _entries_of(agents)
    found: dict[str, Candidate] = {}
    for agent_id in [*keyed, *(i for i in listed if i not in keyed)]:
        if not is_valid_id(agent_id):
            _once("%s: agent id %r is not a valid agent id; skipped", CONFIG_FILE, agent_id[:80])
            continue
        if agent_id == MAIN_AGENT:
            continue
        if has_entries and agent_id not in keyed:
            _once(
                "%s: %s is in agents.list but not in agents.entries, which OpenClaw reads instead; not an agent",
                CONFIG_FILE,
                agent_id,
            )
            continue
        given = keyed[agent_id] if agent_id in keyed else listed[agent_id]
        workspace = roster.place(agent_id, given, f"agents.entries.{agent_id}" if agent_id in keyed else agent_id)
        if isinstance(workspace, str):
            _once("%s: %s: %s; skipped", CONFIG_FILE, agent_id, workspace)
            continue
        conflict = None
        if agent_id in keyed and agent_id in listed:
            other = roster.place(agent_id, listed[agent_id], f"agents.list's {agent_id}")
            if other != workspace:
                shown = other if isinstance(other, str) else f"agents.list gives it {other}"
                conflict = f"agents.entries gives it {workspace}, but {shown} (which one is meant cannot be told)"
        found[agent_id] = Candidate(agent_id, workspace, roster.namer, conflict)
    return list(found.values())
