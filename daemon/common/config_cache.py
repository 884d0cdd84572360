"""The front's validated-configuration cache: the resolved paths, without PyYAML or pydantic.

``memstrata status`` and ``memstrata search`` with a daemon running need only
the configuration's resolved paths (the socket, the state directory for the
administrator's token, the workspaces for an agent's token).  Importing PyYAML
and pydantic and validating the file cost several times the rest of such a call
(bench/bench_front.py), so after a full validation the front keeps those paths
in a small JSON file and reuses them while nothing that decided them changed.

What keys an entry (any difference is a miss, and a miss is a full validation):
the configuration file's bytes (sha256), its absolute path, the environment
that path resolution reads (``HOME``, for ``~``), the effective uid, and the
code that validates (the bytes of daemon/common/config.py, protocol/locations.py,
layers/common/yamlfile.py, layers/conversation/policy/rules.py and this module).  A changed file therefore always
goes through daemon/common/config.py again and a bad one is refused with the usual
error naming file, key and line.

The last good validation: an entry also keeps the key of everything but the file's bytes (the
*context*).  When the file no longer validates (a typo, then SIGHUP: the daemon refuses it and runs
on, on its last good configuration), :func:`last_good` gives the paths of the last file that did,
for the same path, environment, user and code: the paths the running daemon uses (paths change
only with a restart, and a daemon starts only on a valid file).  So ``status``, ``search``, ``note``
and the skill's ``local_search.py`` keep working, and say that the file on disk is broken and why
(naming file and line), instead of failing on it.

Entries are per user and never shared: they live in ``$XDG_CACHE_HOME/memstrata``
(else ``~/.cache/memstrata``), a directory that must be owned by the caller and
closed to group and others (0700), in files owned by the caller with mode 0600,
opened without following symlinks.  An entry failing any check is ignored (and
rewritten after the full validation), so another user cannot plant one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from protocol import locations

FORMAT = 2  # 2: entries keep the context key (last_good)
MAX_BYTES = locations.MAX_CONFIG_BYTES  # a larger file is left to the full reader's error
_CODE = (
    Path(__file__).resolve().parent / "config.py",
    Path(__file__).resolve().parents[2] / "protocol" / "locations.py",
    Path(__file__).resolve(),
    Path(__file__).resolve().parents[2] / "layers" / "common" / "yamlfile.py",
    Path(__file__).resolve().parents[2] / "layers" / "conversation" / "policy" / "rules.py",
)
_PATH_FIELDS = ("root", "workspace", "agents_dir", "state_dir", "socket", "registry", "audit_dir")


@dataclass(frozen=True)
class Paths:
    """Absolute paths after templates and relative paths are resolved (see daemon/common/config.py)."""

    root: Path
    workspace: Path
    agents_dir: Path
    index_template: str
    state_dir: Path
    socket: Path
    registry: Path
    audit_dir: Path
    # Where the old default put the index, when paths.index is the default: an index of
    # ours found there moves to index_for() once.  None when paths.index is configured.
    legacy_index_template: str | None = None

    def index_for(self, agent: str) -> Path:
        return Path(self.index_template.replace("{agent}", agent))

    def legacy_index_for(self, agent: str) -> Path | None:
        if self.legacy_index_template is None:
            return None
        return Path(self.legacy_index_template.replace("{agent}", agent))


@dataclass(frozen=True)
class FrontConfig:
    """What a front call to a running daemon reads of the configuration: its resolved paths."""

    paths: Paths
    source: Path


@dataclass(frozen=True)
class ConfigBytes:
    """The configuration file the call names, as read once: what is validated is what is hashed."""

    path: Path
    raw: bytes

    def key(self) -> str:
        """What an entry for exactly these bytes must match: the context and the bytes."""
        digest = self._context()
        digest.update(hashlib.sha256(self.raw).digest())
        return digest.hexdigest()

    def context_key(self) -> str:
        """Everything that decides the paths but the file's bytes: its path, ``HOME``, the user, the code."""
        return self._context().hexdigest()

    def _context(self) -> hashlib._Hash:
        digest = hashlib.sha256()
        for part in (
            f"memstrata-config-cache/{FORMAT}".encode(),
            str(self.path).encode(),
            os.environ.get("HOME", "").encode(),
            str(os.geteuid()).encode(),
            *(_code_bytes(p) for p in _CODE),
        ):
            digest.update(len(part).to_bytes(8, "big") + part)
        return digest


def _code_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b"\0missing"


def config_path(path: Path | None) -> Path | None:
    """The file load_config would read (``path``, else ``$MEMSTRATA_CONFIG``, else the system file):
    protocol/locations.py's rule, which the skill's client follows too."""
    return locations.config_path(path)


def read_config_bytes(path: Path | None) -> ConfigBytes | None:
    """The named file's bytes; None (the full reader then says why) unless it is a readable regular file."""
    path = config_path(path)
    if path is None:
        return None
    try:
        return ConfigBytes(path, locations.read_bounded(path, MAX_BYTES))  # never blocks on a FIFO
    except (OSError, ValueError):
        return None


def cache_dir() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memstrata" if os.path.isabs(base) else None


def _entry_file(source: Path) -> Path | None:
    directory = cache_dir()
    if directory is None:
        return None
    name = hashlib.sha256(f"{os.geteuid()}:{source}".encode()).hexdigest()[:32]
    return directory / f"config-{name}.json"


def _private(st: os.stat_result, kind: int) -> bool:
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def load(config: ConfigBytes) -> FrontConfig | None:
    """The cached paths for exactly these bytes, path, environment and code; None on any doubt."""
    return _entry(config, "key", config.key())


def last_good(config: ConfigBytes) -> FrontConfig | None:
    """The paths of the last file at ``config``'s path that validated, for this environment, user and code
    (whatever its bytes were); None on any doubt.  For a file that no longer validates: see the module."""
    return _entry(config, "context", config.context_key())


def _entry(config: ConfigBytes, field: str, expected: str) -> FrontConfig | None:
    """The entry of ``config``'s path when its ``field`` is ``expected`` and every check passes."""
    entry = _entry_file(config.path)
    if entry is None:
        return None
    try:
        if not _private(os.lstat(entry.parent), stat.S_IFDIR):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _private(os.fstat(fd), stat.S_IFREG):
            return None
        data = json.loads(os.read(fd, 64 * 1024))
        if data.get(field) != expected or data.get("source") != str(config.path):
            return None
        p = data["paths"]
        paths = Paths(
            **{k: Path(p[k]) for k in _PATH_FIELDS},
            index_template=str(p["index_template"]),
            legacy_index_template=None if p["legacy_index_template"] is None else str(p["legacy_index_template"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    finally:
        os.close(fd)
    if not all(getattr(paths, k).is_absolute() for k in _PATH_FIELDS):
        return None
    return FrontConfig(paths, config.path)


def store(config: ConfigBytes, paths: Paths) -> None:
    """Record ``paths`` as the validated result of ``config``; best effort (no cache is only slower)."""
    entry = _entry_file(config.path)
    if entry is None:
        return
    data = {
        "key": config.key(),
        "context": config.context_key(),
        "source": str(config.path),
        "paths": {
            **{k: str(getattr(paths, k)) for k in _PATH_FIELDS},
            "index_template": paths.index_template,
            "legacy_index_template": paths.legacy_index_template,
        },
    }
    try:
        entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(os.lstat(entry.parent), stat.S_IFDIR):
            return
        import tempfile  # a cache miss only: the usual front call reads the entry and writes nothing

        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".config-", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return
