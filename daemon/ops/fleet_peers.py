"""The hosts the hub's peer API serves (issue 48): ``memstrata fleet add-host`` writes them, the API reads them.

``<state_dir>/fleet/peers.json`` holds, per host, the SHA-256 of its key and the agent ids it may act
as; never the key itself (a copy of the state directory then lets no one in).  The key is made here
(``secrets.token_urlsafe(32)``) and written once to the file the operator names, mode 0600, for the
spoke's ``conversation.hub.key_file``.  Running the command again for a host keeps its key (the file
named must hold it) and sets its agents; ``new_key`` gives it a new one (the old one stops working at
the hub's next request).  The file is written atomically and synced, under a lock, 0600 in a 0700
directory; the API re-reads it when it changes (:class:`PeerTable`), so no restart is needed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from daemon.ops.fleet_remote import RemoteError, Steps, check_host
from layers.common.fsutil import atomic_write, private_dirs
from layers.common.ids import InvalidIdError, check_id

PEERS_FILE = Path("fleet") / "peers.json"
KEY_MODE = 0o600


def peers_path(state_dir: Path) -> Path:
    return state_dir / PEERS_FILE


def key_hash(key: str) -> str:
    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()


def read_peers(path: Path) -> dict[str, dict]:
    """host → {"key_sha256", "agents", "added", "changed"}; {} when there is no file yet."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemoteError(f"{path} is not a peers file ({exc}): fix or remove it") from None
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, dict):
        raise RemoteError(f"{path} is not a peers file (no hosts object): fix or remove it")
    return hosts


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    private_dirs(path.parent)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write(path: Path, hosts: dict[str, dict]) -> None:
    text = json.dumps({"version": 1, "hosts": dict(sorted(hosts.items()))}, indent=2, sort_keys=True) + "\n"
    atomic_write(path, text, mode=0o600)


def _key_in(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def add_host(state_dir: Path, host: str, agents: Iterable[str], key_file: Path, new_key: bool = False) -> Steps:
    """Enrol ``host`` (or change its agents): its key in ``key_file`` (0600), its key's hash and agents recorded."""
    check_host(host)
    wanted = list(dict.fromkeys(agents))
    if not wanted:
        raise RemoteError("give at least one --agent: the agent ids this host may act as")
    for agent in wanted:
        try:
            check_id(agent)
        except InvalidIdError as exc:
            raise RemoteError(str(exc)) from None
    steps = Steps()
    path = peers_path(state_dir)
    with _locked(path):
        hosts = read_peers(path)
        entry = hosts.get(host)
        in_file = _key_in(key_file) if key_file.exists() or key_file.is_symlink() else None
        holds_current = (
            entry is not None
            and in_file is not None
            and hmac.compare_digest(key_hash(in_file), str(entry.get("key_sha256", "")))
        )
        if (key_file.exists() or key_file.is_symlink()) and not holds_current:
            raise RemoteError(
                f"{key_file} exists and does not hold {host}'s current key: name a new file (nothing was changed)"
            )
        if entry is not None and not holds_current and not new_key:
            raise RemoteError(
                f"{host} is enrolled already, its key not at {key_file}: name the file that holds it, "
                "or give --new-key to replace the key (the old one then stops working)"
            )
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        key = in_file if holds_current and not new_key else None
        if key is None:
            key = secrets.token_urlsafe(32)
        record = {
            "key_sha256": key_hash(key),
            "agents": wanted,
            "added": (entry or {}).get("added", now),
            "changed": now,
        }
        hosts[host] = record
        _write(path, hosts)  # first: a key written but not recorded would be refused at the next run
        if entry is None:
            steps.add("enrolled", f"{host} (agents {', '.join(wanted)})")
        elif entry.get("agents") != wanted:
            steps.add("agents", f"{host}: {', '.join(wanted)}")
        if key != in_file:
            atomic_write(key_file, key + "\n", mode=KEY_MODE)
            steps.add("key", f"{key_file} (mode 0600: copy it to {host}, its conversation.hub.key_file)")
        else:
            steps.add("kept", f"{host}'s key in {key_file}")
        steps.add("recorded", str(path))
    return steps


def remove_host(state_dir: Path, host: str) -> Steps:
    """Forget ``host``: its key stops working at the hub's next request (its memories stay on the hub)."""
    path = peers_path(state_dir)
    steps = Steps()
    with _locked(path):
        hosts = read_peers(path)
        if hosts.pop(host, None) is None:
            raise RemoteError(f"no host {host!r} is enrolled")
        _write(path, hosts)
        steps.add("removed", f"{host} (its memories stay on the hub, owned by {host}/...)")
    return steps


@dataclass(frozen=True)
class Peer:
    host: str
    agents: tuple[str, ...]


Signature = tuple[int, int, int, int]


class PeerTable:
    """The enrolled hosts as the peer API sees them, re-read when the file changes (an add-host takes effect at
    the next request); a file that cannot be read keeps the last good table and says why in ``error``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = peers_path(state_dir)
        self.error = ""
        self._lock = threading.Lock()
        self._seen: Signature | None = None
        self._peers: dict[str, tuple[str, Peer]] = {}  # host → (key hash, peer)

    def _signature(self) -> Signature | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _current(self) -> dict[str, tuple[str, Peer]]:
        signature = self._signature()
        if signature == self._seen and self._seen is not None:
            return self._peers
        with self._lock:
            signature = self._signature()
            if signature != self._seen or signature is None:
                try:
                    hosts = read_peers(self.path)
                    self._peers = {
                        host: (str(e["key_sha256"]), Peer(host, tuple(str(a) for a in e.get("agents") or ())))
                        for host, e in hosts.items()
                    }
                    self.error = ""
                except (OSError, ValueError, KeyError, TypeError, AttributeError, RemoteError) as exc:
                    self.error = f"{self.path}: cannot be read ({exc}); the hosts read before stay in force"
                self._seen = signature
        return self._peers

    def peer_of(self, key: str | None) -> Peer | None:
        """The host whose key this is (its hash compared in constant time with each), or None."""
        if not key:
            return None
        given = key_hash(key)
        found = None
        for digest, peer in self._current().values():
            if hmac.compare_digest(given, digest):
                found = peer
        return found

    def hosts(self) -> list[Peer]:
        return [peer for _, peer in self._current().values()]
