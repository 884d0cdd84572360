"""Configuration → settings of the parts, shared by the service and the front.

The CLI, the MCP server and ``status`` need a few of the service's settings
(the status snapshot's name, the secret guard, the store's deadline, the state
lock) without the service itself: importing ``daemon.service.memory_daemon`` or
``daemon.conversation.broker`` loads the API server, numpy, apsw and git, which costs a
command line call several times its own work (docs/facts.md).  So these helpers live here and
import what is heavy only inside the functions that need it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.common.domain_errors import DaemonError

if TYPE_CHECKING:
    from typing import IO

    from daemon.common.config import Config
    from daemon.common.contracts import Limits
    from daemon.common.guard import SecretGuard
    from layers.conversation.adapters.store import StoreSettings
    from layers.conversation.policy.decay import DecayRules

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "status.json"  # the last status, so `status` can tell when the daemon was last seen

# How long a request waits for a remote store past its own timeout, and for the embedded one.
REMOTE_BACKSTOP_S = 10.0
EMBEDDED_DEADLINE_S = 60.0

# Backups `memstrata backup` keeps (its --keep default, the API's, and the shipped timer's and cron line's).
DEFAULT_KEEP = 7

DAEMON_HOLDER = "memstrata daemon"
OFFLINE_LOCK_WAIT_S = 60.0  # a daemon starting while an offline backup/cleanup holds the state waits this long


# ---------------------------------------------------------------- settings


def max_file_bytes(config: Config) -> int:
    """``watch.max_file_mb`` in bytes: a larger file is never read (nor versioned, nor indexed)."""
    return int(config.watch.max_file_mb * 1024 * 1024)


def guard_from(config: Config) -> SecretGuard:
    from daemon.common.guard import SecretGuard  # `memstrata add` reads this module's settings, not the guard

    return SecretGuard(config.guard.never_store)


def limits_of(config: Config) -> Limits:
    """The settings `status` shows, the same whether or not the daemon runs."""
    return {
        "max_file_mb": config.watch.max_file_mb,
        "debounce_ms": config.watch.debounce_ms,
        "quiet_period_s": config.git.quiet_period_s,
        "max_delay_s": config.git.max_delay_s,
    }


def store_deadline(config: Config) -> float:
    """How long a request waits for the store before it is answered without it."""
    c = config.conversation
    if c.backend == "hub" and c.hub is not None:  # a spoke: one request to the hub, whole
        return c.hub.timeout_s + REMOTE_BACKSTOP_S
    return c.qdrant.timeout_s + REMOTE_BACKSTOP_S if c.backend == "remote" else EMBEDDED_DEADLINE_S


def client_timeout(config: Config) -> float:
    """How long a client waits for the daemon: past the store deadline, so it hears "queued"/"degraded"."""
    return store_deadline(config) + 30.0


def store_settings(config: Config) -> StoreSettings:
    from layers.conversation.adapters.store import StoreSettings

    c = config.conversation
    api_key = None
    if c.qdrant.api_key_env:
        api_key = os.environ.get(c.qdrant.api_key_env) or None
    elif c.qdrant.api_key_file:
        api_key = Path(c.qdrant.api_key_file).expanduser().read_text(encoding="utf-8").strip() or None
    llm = None
    if c.llm is not None:
        llm = {"base_url": c.llm.base_url, "model": c.llm.model, "api_key": os.environ.get(c.llm.api_key_env, "")}
    return StoreSettings(
        backend=c.backend,
        data_dir=config.paths.state_dir / "conversation",
        collection=c.qdrant.collection,
        url=c.qdrant.url if c.backend == "remote" else None,
        api_key=api_key,
        timeout_s=c.qdrant.timeout_s,
        llm=llm,
    )


def decay_rules(config: Config) -> DecayRules:
    """``conversation.decay`` as the L4 layer's rules (layers/conversation/policy/decay.py)."""
    from layers.conversation.policy.decay import HALF_LIFE_DAYS, DecayRules

    d = config.conversation.decay
    return DecayRules(
        half_life_days={**HALF_LIFE_DAYS, **d.half_life_days},
        cap=d.cap,
        archive_below=d.archive_below,
        rank_weight=d.rank_weight,
    )


# ---------------------------------------------------------------- the state directory


def lock_holder(state: Path) -> str:
    """Who holds the state lock, as its holder wrote it (``pid holder``); "" when unknown."""
    try:
        return (state / "memstrata.lock").read_text("utf-8").strip().partition(" ")[2]
    except (OSError, UnicodeDecodeError):
        return ""


def acquire_state_lock(state: Path, holder: str = DAEMON_HOLDER, wait_offline_s: float = 0.0) -> IO[str]:
    """The state directory's lock, held for as long as the returned file stays open.

    One process at a time owns the state (and the embedded store in it): the
    daemon, or an offline command (reindex, cleanup, backup) while it is down.
    ``wait_offline_s``: while an offline command (not another daemon) holds it,
    wait up to that long for it to finish (a timer's backup at boot can win the
    race with the daemon's start).
    """
    secure_state(state)
    lock = open(state / "memstrata.lock", "a+")  # noqa: SIM115 - the caller holds it
    deadline = time.monotonic() + wait_offline_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            other = lock_holder(state)
            if other and other != DAEMON_HOLDER and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            lock.close()
            raise DaemonError(
                f"another memstrata process ({other or 'a daemon, or an offline command'}) is already running with "
                f"state directory {state}; {holder} needs it to itself"
            ) from None
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()} {holder}\n")
        lock.flush()
    except OSError as exc:  # the pid is a courtesy; the flock is the lock (a full disk must not stop us)
        from daemon.common.storage import is_storage_error

        if not is_storage_error(exc):
            raise
        log.warning("could not write the pid into %s: %s", state / "memstrata.lock", exc.strerror)
    return lock


def secure_state(state: Path) -> None:
    """Tokens, per-agent records, the queue, the snapshot: the state directory is root's alone.

    New directories are made 0700; what an older version left wider (0750/0755
    directories, 0644 records and snapshot) is tightened here, at every start.
    """
    from layers.common.fsutil import PRIVATE_FILE, private_dirs, tighten  # the daemon's start, not a front call

    private_dirs(state)
    private_dirs(state / "agents")
    for record in (*(state / "agents").glob("*.json"), state / SNAPSHOT_FILE):
        tighten(record, PRIVATE_FILE)
