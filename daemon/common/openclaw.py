"""OpenClaw's own agent layout: ``<state-dir>/workspace-<agentId>`` and the agents ``openclaw.json`` lists.

OpenClaw keeps its state in one directory (``~/.openclaw``, memstrata's ``paths.root``): the main
agent's workspace is ``<state-dir>/workspace``; in a multi-agent roster an agent without a
``workspace`` of its own gets ``<agents.defaults.workspace>/<agentId>`` when that root is set, else
``<state-dir>/workspace-<agentId>``; ``agents.list[].workspace`` pins one anywhere (OpenClaw's
documentation, "Agent workspace"; docs/openclaw.md has what memstrata relies on).
``openclaw.json`` is JSON5 (comments, unquoted keys, trailing commas).

Read-only, and as hostile as a workspace: the file is read through a no-follow descriptor and
only up to :data:`MAX_CONFIG_BYTES`; an id that is not a valid agent id or a path that is not
absolute is skipped with one log line; a file that does not parse costs its own agents only,
never the ones found by name. This module only says which paths are *named*, and by whom (the
owner of the file, or of the directory listed): where each path resolves is judged, with every
other source of workspaces at once, by daemon/common/workspaces.py (daemon/common/workspace_guard.py).
"""

from __future__ import annotations

import contextlib
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
    """OpenClaw's agents under state dir ``root`` (main excluded), in the order found: those named
    by a directory ``workspace-<id>`` first, then those ``openclaw.json`` lists (an id found by
    name keeps the directory named for it). Cached until the directory or the file changes.
    Nothing here says a path is usable: the caller judges where each one resolves."""
    stamp = _stamp(root)
    cached = _cache.get(root)
    if cached is not None and cached[0] == stamp:
        return list(cached[1])
    found = _by_name(root)
    named = {c.agent_id for c in found}
    found.extend(c for c in _listed(root) if c.agent_id not in named)
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
    data["__owner__"] = owner
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


def _listed(root: Path) -> list[Candidate]:
    data = _read_config(root)
    if data is None:
        return []
    home = data.get("__owner_home__")
    namer = Namer(int(data["__owner__"]), root / CONFIG_FILE)
    agents = data.get("agents")
    if not isinstance(agents, dict):
        return []
    defaults = agents.get("defaults")
    given_root = defaults.get("workspace") if isinstance(defaults, dict) else None
    shared_root = given_root if isinstance(given_root, str) else None
    entries = agents.get("list")
    if not isinstance(entries, list):
        return []
    found: dict[str, Candidate] = {}
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
        if workspace is None:
            _once("%s: %s: workspace %r is not an absolute path; skipped", CONFIG_FILE, agent_id, str(given)[:200])
            continue
        found[agent_id] = Candidate(agent_id, workspace, namer)
    return list(found.values())
