"""OpenClaw's own agent layout: ``<state-dir>/workspace-<agentId>`` and the agents ``openclaw.json`` lists.

OpenClaw keeps its state in one directory (``~/.openclaw``, memstrata's ``paths.root``): the main
agent's workspace is ``<state-dir>/workspace``; in a multi-agent roster an agent without a
``workspace`` of its own gets ``<agents.defaults.workspace>/<agentId>`` when that root is set, else
``<state-dir>/workspace-<agentId>``; ``agents.list[].workspace`` pins one anywhere (OpenClaw's
documentation, "Agent workspace"; docs/openclaw.md has what memstrata relies on).
``openclaw.json`` is JSON5 (comments, unquoted keys, trailing commas).

Read-only, and as hostile as a workspace: the file is read through a no-follow descriptor and
only up to :data:`MAX_CONFIG_BYTES`; an id that is not a valid agent id, a workspace that is a
symlink, not a directory, relative, or another agent's, is skipped with one log line; a file that
does not parse costs its own agents only, never the ones found by name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import stat
from pathlib import Path
from typing import Any

from layers.ids import MAIN_AGENT, is_valid_id

CONFIG_FILE = "openclaw.json"
WORKSPACE_PREFIX = "workspace-"
MAX_CONFIG_BYTES = 1 << 20  # a roster of thousands of agents is far below this
MAX_AGENTS = 10_000

log = logging.getLogger(__name__)
_cache: dict[Path, tuple[tuple[object, ...], dict[str, Path]]] = {}
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
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def workspaces(root: Path) -> dict[str, Path]:
    """OpenClaw's agents under state dir ``root`` (main excluded): id → workspace, cached until
    the directory or the file changes."""
    stamp = _stamp(root)
    cached = _cache.get(root)
    if cached is not None and cached[0] == stamp:
        return dict(cached[1])
    found = _by_name(root)
    for agent_id, workspace in _listed(root).items():
        if agent_id in found:
            continue  # listed where it is found by name, or elsewhere: the directory named for it wins
        if workspace in found.values():
            _once("%s: %s: workspace %s is another agent's; skipped", CONFIG_FILE, agent_id, workspace)
            continue
        found[agent_id] = workspace
    _cache[root] = (stamp, found)
    return dict(found)


def _usable(workspace: Path) -> bool:
    """A real directory (not a symlink, not a file): the daemon never follows a link to a workspace."""
    try:
        return stat.S_ISDIR(os.lstat(workspace).st_mode)
    except OSError:
        return False


def _by_name(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return found
    for name in names:
        if not name.startswith(WORKSPACE_PREFIX):
            continue
        agent_id = name[len(WORKSPACE_PREFIX) :]
        if is_valid_id(agent_id) and agent_id != MAIN_AGENT and _usable(root / name):
            found[agent_id] = root / name
    return found


def _read_config(root: Path) -> dict[str, Any] | None:
    """``openclaw.json`` as data, or None (absent, a symlink, too large, not JSON5: said once)."""
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
        return None
    data["__owner_home__"] = _home_of(owner)
    return data


def _home_of(uid: int) -> str | None:
    with contextlib.suppress(KeyError):
        return pwd.getpwuid(uid).pw_dir
    return None


def _expand(text: str, home: str | None) -> Path | None:
    """A configured path: ``~`` is the file owner's home; anything else must be absolute."""
    if text.startswith("~"):
        if home is None or not (text == "~" or text.startswith("~/")):
            return None
        text = home + text[1:]
    path = Path(os.path.normpath(text))
    return path if path.is_absolute() else None


def _listed(root: Path) -> dict[str, Path]:
    data = _read_config(root)
    if data is None:
        return {}
    home = data.get("__owner_home__")
    agents = data.get("agents")
    if not isinstance(agents, dict):
        return {}
    defaults = agents.get("defaults")
    given_root = defaults.get("workspace") if isinstance(defaults, dict) else None
    shared_root = given_root if isinstance(given_root, str) else None
    entries = agents.get("list")
    if not isinstance(entries, list):
        return {}
    found: dict[str, Path] = {}
    for entry in entries[:MAX_AGENTS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        agent_id = entry["id"]
        if not is_valid_id(agent_id):
            _once("%s: agent id %r is not a valid agent id; skipped", CONFIG_FILE, agent_id[:80])
            continue
        if agent_id == MAIN_AGENT or agent_id in found:
            continue
        given = entry.get("workspace")
        if isinstance(given, str):
            workspace = _expand(given, home)
        elif shared_root is not None:
            base = _expand(shared_root, home)
            workspace = base / agent_id if base is not None else None
        else:
            workspace = root / f"{WORKSPACE_PREFIX}{agent_id}"
        if workspace is not None and root.is_relative_to(workspace):
            _once("%s: %s: workspace %s holds the state directory itself; skipped", CONFIG_FILE, agent_id, workspace)
            continue
        if workspace is None:
            _once("%s: %s: workspace %r is not an absolute path; skipped", CONFIG_FILE, agent_id, str(given)[:200])
            continue
        if not _usable(workspace):
            if workspace.is_symlink():
                _once("%s: %s: workspace %s is a symbolic link; skipped", CONFIG_FILE, agent_id, workspace)
            continue  # not made yet: found once OpenClaw creates it
        found[agent_id] = workspace
    return found
