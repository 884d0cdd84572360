"""Where the configuration is, where the daemon's socket is, and how the file is read: written once.

Three readers need these rules and must agree: the daemon's configuration loader
(daemon/common/config.py, PyYAML and pydantic), the front's cache of resolved paths
(daemon/common/config_cache.py, standard library) and the skill's client
(skills/mem0-integration/mem0_client.py, any ``python3``, often without PyYAML).  The
last runs a copy of this package, so everything here is standard library only; the
skill's PyYAML attempt stays in the skill, and :func:`parse_paths_block` is the reader
it falls back to (block style only, what ``memstrata init`` writes).

- :data:`CONFIG_ENV`, :data:`SYSTEM_CONFIG` and :func:`config_path`: which file is the configuration;
- :data:`DEFAULT_PATHS` and :func:`resolve_paths`: the ``paths:`` defaults and how templates,
  ``~`` and relative paths resolve (root first, then workspace, each from what came before);
- :func:`read_bounded`: a file's bytes, never blocking on a FIFO, never past :data:`MAX_CONFIG_BYTES`;
- :func:`find_socket`: the socket a client talks to (flag, ``$MEMSTRATA_SOCKET``, the configuration).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from protocol.errors import SetupError

CONFIG_ENV = "MEMSTRATA_CONFIG"  # names the configuration file when --config does not
SOCKET_ENV = "MEMSTRATA_SOCKET"  # the skill's client: the socket, when --socket does not name it
SYSTEM_CONFIG = Path("/etc/memstrata/memstrata.yaml")  # else this one, else the built-in defaults
OPENCLAW_ROOT = Path("/root/.openclaw")  # OpenClaw's own root: the defaults' and a new install's
LAUNCHER_FILE = "memstrata-install.json"  # beside a workspace's copy of the skill (daemon/common/skill.py)
MAX_CONFIG_BYTES = 256 * 1024  # a configuration or registry is a few KiB; anything larger is a mistake or an attack

# The ``paths:`` section's defaults (OpenClaw's layout), as daemon/common/config.py PathsConfig takes them.
# memstrata's L3 index is a file of its own (the old default, QMD's live index, is daemon/common/config.py's
# LEGACY_DEFAULT_INDEX: an index of ours found there is moved once).
DEFAULT_PATHS: Mapping[str, str] = {
    "root": str(OPENCLAW_ROOT),
    "workspace": "{root}/workspace",
    "agents_dir": "{workspace}/agents",
    "index": "{root}/agents/{agent}/memstrata/index.sqlite",
    "state_dir": "/var/lib/memstrata",
    "socket": "/run/memstrata/memstrata.sock",
    "registry": "{workspace}/skills/mem0-integration/project_registry.yaml",
    "audit_dir": "{workspace}/logs/security",
}
DEFAULT_SOCKET = Path(DEFAULT_PATHS["socket"])
TEMPLATED = ("root", "workspace")  # the paths another path may name as ``{root}`` / ``{workspace}``, in order


def config_path(explicit: str | Path | None = None, installed: Path | None = None) -> Path | None:
    """The configuration file: ``explicit`` (``--config``), else ``$MEMSTRATA_CONFIG``, else ``installed``
    (the skill's copy names the one it was installed with), else the system file when it exists; None:
    the built-in defaults apply."""
    if explicit:
        return Path(explicit).expanduser().absolute()
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser().absolute()
    if installed is not None:
        return installed
    return SYSTEM_CONFIG if SYSTEM_CONFIG.exists() else None


def installed_config(skill_dir: Path) -> Path | None:
    """The configuration named in the launcher file (:data:`LAUNCHER_FILE`) in ``skill_dir``, if any."""
    try:
        data = json.loads((skill_dir / LAUNCHER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = data.get("config") if isinstance(data, dict) else None
    return Path(config) if isinstance(config, str) and config else None


def resolve_paths(values: Mapping[str, str], base: Path, keys: Iterable[str]) -> dict[str, str]:
    """``values[key]`` for each of ``keys``, in that order, as an absolute normalised path.

    ``{root}`` and ``{workspace}`` are filled in from the keys resolved before (so ``keys`` starts with
    them), ``~`` is expanded, and a relative path is taken from ``base`` (the configuration file's
    directory: a demo root moves whole).  Other templates (``{agent}``) are left for the caller.
    """
    resolved: dict[str, str] = {}
    for key in keys:
        text = values[key]
        for name in TEMPLATED:
            if name in resolved:
                text = text.replace("{" + name + "}", resolved[name])
        text = os.path.expanduser(text)
        if not os.path.isabs(text):
            text = str(base / text)
        resolved[key] = os.path.normpath(text)
    return resolved


def resolve_socket(paths: Mapping[str, str], base: Path) -> Path:
    """``paths.socket`` of a ``paths:`` section (the defaults filling what it leaves out), resolved."""
    values = {**DEFAULT_PATHS, **paths}
    return Path(resolve_paths(values, base, (*TEMPLATED, "socket"))["socket"])


class NotRegularFileError(ValueError):
    """A FIFO, a device or a directory where a file was expected: refused, reading it could block."""


class TooLargeError(ValueError):
    """A file over the limit (or one that grew past it while being read)."""


def read_bounded(path: Path, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The file's bytes, read without ever blocking or reading without bound.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` before reading: a FIFO, a device or a
    directory raises :class:`NotRegularFileError` instead of hanging the reader; a file over ``limit``
    raises :class:`TooLargeError`; the open and the reads raise ``OSError`` (FileNotFoundError…).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError("not a regular file")
        if st.st_size > limit:
            raise TooLargeError(f"file is {st.st_size:,} bytes; the limit is {limit:,}")
        chunks, size = [], 0
        while size <= limit:
            block = os.read(fd, limit + 1 - size)
            if not block:
                break
            chunks.append(block)
            size += len(block)
    finally:
        os.close(fd)
    if size > limit:
        raise TooLargeError(f"file is over {limit:,} bytes, the limit")
    return b"".join(chunks)


def _unquote(value: str) -> str:
    """A YAML scalar as written on one line: quotes removed, a trailing ``# comment`` dropped."""
    value = value.strip()
    if value[:1] in ("'", '"'):
        quote_char = value[0]
        end = value.find(quote_char, 1)
        if end > 0:
            inner = value[1:end]
            return inner.replace("''", "'") if quote_char == "'" else inner
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def parse_paths_block(text: str) -> dict[str, str]:
    """The scalar keys of the top-level ``paths:`` mapping, without PyYAML.

    Only block style is understood (what ``memstrata init`` writes); anything
    else leaves the defaults in place, and a wrong socket shows up as a clear
    connection error naming the path tried.
    """
    found: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indented = line[:1] in (" ", "\t")
        if not indented:
            inside = re.match(r"^paths\s*:\s*(#.*)?$", line) is not None
            continue
        match = re.match(r"^\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$", line)
        if inside and match and match.group(2).strip():
            found[match.group(1)] = _unquote(match.group(2))
    return found


def read_config_text(path: Path, limit: int = MAX_CONFIG_BYTES) -> str:
    """The configuration's text (:func:`read_bounded`, then UTF-8): ``OSError`` or ``ValueError`` say why not."""
    return read_bounded(path, limit).decode("utf-8")


def socket_from_config(path: Path | None, parse: Callable[[str], Mapping[str, str]] = parse_paths_block) -> Path:
    """The daemon's socket per the configuration at ``path`` (None: the built-in default), its
    ``paths:`` section read by ``parse``; a file that cannot be read is a :class:`SetupError`."""
    if path is None:
        return DEFAULT_SOCKET
    try:
        text = read_config_text(path)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SetupError(
            f"cannot read the configuration {path} ({why}): pass --socket PATH or set ${SOCKET_ENV}"
        ) from None
    return resolve_socket(parse(text), path.parent)


def find_socket(
    explicit: str | None = None,
    config: str | None = None,
    installed: Path | None = None,
    parse: Callable[[str], Mapping[str, str]] = parse_paths_block,
) -> Path:
    """The socket a client talks to: ``explicit`` (``--socket``), else ``$MEMSTRATA_SOCKET``, else
    ``paths.socket`` of the configuration (:func:`config_path` of ``config`` and ``installed``), else
    the default."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV]).expanduser()
    path = config_path(config, installed)
    if path == SYSTEM_CONFIG and not os.access(path, os.R_OK):
        # The service's file is often root-only; an agent running as another user
        # still reaches the daemon when it uses the default socket.
        return DEFAULT_SOCKET
    return socket_from_config(path, parse)
