"""The memory skill inside an agent's workspace: ``{workspace}/skills/mem0-integration/``.

Agents call the skill's scripts from their own workspace with whatever ``python3``
they have (``cd skills/mem0-integration && python3 memory_cleanup.py --dry-run``).
A copied script cannot find memstrata by its own location, so every installed
copy gets a launcher file next to it (:data:`LAUNCHER`: the virtualenv's python,
the checkout, the configuration and the workspace's agent), which
``_memstrata_env.py`` and ``mem0_client.py`` read.

The skill's client imports memstrata's protocol package (standard library only), so
every copy also gets the package's ``.py`` files in ``protocol/`` beside the scripts
(:data:`PROTOCOL_DIR`); tests/daemon/common/test_skill_protocol.py checks each
installed copy equals the source, byte for byte.

The workspace is the agent's: every write goes through :mod:`layers.common.safefs`
(no symlink followed, created files handed to the workspace's owner, a refused
chown not fatal).  A code file the agent edited is backed up before it is
refreshed; ``project_registry.yaml`` is only ever created, never replaced.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from layers.common import safefs
from protocol.locations import LAUNCHER_FILE

CHECKOUT = Path(__file__).resolve().parents[2]
SKILL_REL = "skills/mem0-integration"
LAUNCHER = LAUNCHER_FILE  # the skill's client reads it beside itself (protocol/locations.py)
REGISTRY_NAME = "project_registry.yaml"
REGISTRY_EXAMPLE = "project_registry.yaml"  # at the top of the checkout: the commented example
# Files of the skill that are never copied (the registry is the operator's; caches are Python's).
_NOT_CODE = {REGISTRY_NAME, LAUNCHER}
_EXECUTABLE = {"local_search.py", "memory_cleanup.py", "mem0_client.py"}
PROTOCOL_DIR = "protocol"  # the protocol package's copy, inside the skill's folder


@dataclass(frozen=True)
class Launcher:
    """What an installed copy of the skill needs to find memstrata."""

    python: str
    checkout: str
    config: str | None
    agent: str

    @classmethod
    def current(cls, config: Path | None, agent: str, checkout: Path = CHECKOUT) -> Launcher:
        """The running interpreter's virtualenv and this checkout (what the daemon and the CLI run on)."""
        venv_python = Path(sys.prefix) / "bin" / "python"
        python = venv_python if venv_python.exists() else Path(sys.executable)
        return cls(str(python), str(checkout), str(config) if config else None, agent)


def source_dir(checkout: Path = CHECKOUT) -> Path:
    return checkout / SKILL_REL


def code_files(checkout: Path = CHECKOUT) -> dict[str, bytes]:
    """The skill's files as shipped (regular files of the skill folder, no caches, no registry), and the
    protocol package's ``.py`` files as ``protocol/NAME.py``."""
    files = {}
    for path in sorted(source_dir(checkout).iterdir()):
        if path.is_file() and not path.is_symlink() and path.name not in _NOT_CODE and not path.name.endswith(".pyc"):
            files[path.name] = path.read_bytes()
    for path in sorted((checkout / PROTOCOL_DIR).glob("*.py")):
        if path.is_file() and not path.is_symlink():
            files[f"{PROTOCOL_DIR}/{path.name}"] = path.read_bytes()
    return files


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(workspace: Path, rel: str) -> bytes | None:
    try:
        return safefs.read_bytes(workspace, rel)
    except NotADirectoryError:
        raise safefs.UnsafePathError(workspace, rel, "has a component that is not a directory") from None


def _installed_hashes(workspace: Path) -> dict[str, str]:
    data = _read(workspace, f"{SKILL_REL}/{LAUNCHER}")
    if data is None:
        return {}
    try:
        files = json.loads(data).get("files", {})
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def launcher_text(launcher: Launcher, files: dict[str, bytes]) -> bytes:
    """The launcher file: deterministic, so installing again changes nothing."""
    data = {
        "comment": "written by memstrata (install, init, agent add, the daemon); rewritten when they run again",
        "python": launcher.python,
        "checkout": launcher.checkout,
        "config": launcher.config,
        "agent": launcher.agent,
        "files": {name: _sha(content) for name, content in sorted(files.items())},
    }
    return (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode()


def sync_skill(workspace: Path, launcher: Launcher, *, dry_run: bool = False, checkout: Path = CHECKOUT) -> list[str]:
    """Install or refresh the skill in ``workspace``; the changes made (or, dry, to be made).

    A file is rewritten only when its content differs from the shipped one; when
    it also differs from what was installed last time (the agent edited it, or it
    is someone else's), it is first kept as ``NAME.bak-YYYYmmddHHMMSS``.
    Raises :class:`layers.common.safefs.UnsafePathError` when a component is a symlink.
    """
    files = code_files(checkout)
    installed = _installed_hashes(workspace)
    owner = safefs.owner_of(workspace)
    changes: list[str] = []
    stamp = time.strftime("%Y%m%d%H%M%S")
    if not dry_run:
        os.close(safefs.open_dir(workspace, SKILL_REL, create=True, owner=owner))
        if any(name.startswith(f"{PROTOCOL_DIR}/") for name in files):
            os.close(safefs.open_dir(workspace, f"{SKILL_REL}/{PROTOCOL_DIR}", create=True, owner=owner))
    for name, content in files.items():
        rel = f"{SKILL_REL}/{name}"
        current = _read(workspace, rel)
        if current == content:
            continue
        if current is not None and _sha(current) != installed.get(name):
            backup = f"{rel}.bak-{stamp}"
            changes.append(f"{rel} edited: kept as {backup}")
            if not dry_run:
                safefs.create_new(workspace, backup, current, mode=0o644, owner=owner)
        changes.append(f"{rel} ({'new' if current is None else 'changed'})")
        if not dry_run:
            mode = 0o755 if name in _EXECUTABLE else 0o644
            safefs.write_atomic(workspace, rel, content, mode=mode if current is None else None, owner=owner)
    text = launcher_text(launcher, files)
    rel = f"{SKILL_REL}/{LAUNCHER}"
    current = _read(workspace, rel)
    if current != text:
        changes.append(f"{rel} ({'new' if current is None else 'changed'}: python {launcher.python})")
        if not dry_run:
            safefs.write_atomic(workspace, rel, text, mode=0o644, owner=owner)
    return changes


def seed_registry(workspace: Path, registry: Path, *, dry_run: bool = False, checkout: Path = CHECKOUT) -> list[str]:
    """Copy the commented example registry to ``registry`` when nothing is there (never replaced)."""
    example = (checkout / REGISTRY_EXAMPLE).read_bytes()
    try:
        rel = registry.relative_to(workspace).as_posix()
    except ValueError:
        rel = None
    if rel is not None:
        if safefs.lstat(workspace, rel) is not None:
            return []
        if not dry_run and not safefs.create_new(workspace, rel, example, owner=safefs.owner_of(workspace)):
            return []
    else:
        if os.path.lexists(registry):
            return []
        if not dry_run:
            registry.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError), open(registry, "xb") as fh:
                fh.write(example)
    return [f"created  {registry} (the commented example)"]


def remove_skill(workspace: Path, *, dry_run: bool = False) -> list[str]:
    """Remove the skill files memstrata installed and left unedited; everything else stays.

    Kept: ``project_registry.yaml``, edited files, backups, whatever else is in
    the folder.  The folder goes only when nothing is left in it.
    """
    installed = _installed_hashes(workspace)
    if not installed and _read(workspace, f"{SKILL_REL}/{LAUNCHER}") is None:
        return []
    changes = []
    try:
        fd = safefs.open_dir(workspace, SKILL_REL)
    except FileNotFoundError:
        return []
    try:
        for name, digest in sorted(installed.items()):
            data = _read(workspace, f"{SKILL_REL}/{name}")
            if data is None:
                continue
            if _sha(data) != digest:
                changes.append(f"{SKILL_REL}/{name} kept: edited since it was installed")
                continue
            changes.append(f"{SKILL_REL}/{name}")
            if not dry_run:
                _unlink(workspace, f"{SKILL_REL}/{name}")
        changes.append(f"{SKILL_REL}/{LAUNCHER}")
        if not dry_run:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(LAUNCHER, dir_fd=fd)
            _remove_caches(fd, installed)
            with contextlib.suppress(OSError):
                sub = safefs.open_dir(workspace, f"{SKILL_REL}/{PROTOCOL_DIR}")
                try:
                    _remove_caches(sub, {n.split("/", 1)[1]: d for n, d in installed.items() if "/" in n})
                finally:
                    os.close(sub)
    finally:
        os.close(fd)
    if not dry_run:
        _rmdir_if_empty(workspace, f"{SKILL_REL}/{PROTOCOL_DIR}")
        _rmdir_if_empty(workspace, SKILL_REL)
        _rmdir_if_empty(workspace, "skills")
    return changes


def _unlink(workspace: Path, rel: str) -> None:
    """Remove the file ``workspace/rel``, its directories opened without following a symlink."""
    parent, _, name = rel.rpartition("/")
    fd = safefs.open_dir(workspace, parent)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _remove_caches(fd: int, installed: dict[str, str]) -> None:
    """``__pycache__`` entries of the modules memstrata installed (Python wrote them when they ran)."""
    modules = {name[:-3] for name in installed if name.endswith(".py")}
    try:
        cache = os.open("__pycache__", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        return
    try:
        for entry in os.listdir(cache):
            st = os.stat(entry, dir_fd=cache, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and entry.split(".")[0] in modules and entry.endswith(".pyc"):
                os.unlink(entry, dir_fd=cache)
    finally:
        os.close(cache)
    with contextlib.suppress(OSError):
        os.rmdir("__pycache__", dir_fd=fd)


def _rmdir_if_empty(workspace: Path, rel: str) -> None:
    parent, _, name = rel.rpartition("/")
    try:
        fd = safefs.open_dir(workspace, parent)
    except OSError:
        return
    try:
        os.rmdir(name, dir_fd=fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
            raise
    finally:
        os.close(fd)
