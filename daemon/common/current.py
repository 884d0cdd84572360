"""The configuration in force, shared by the daemon's parts: a reload replaces it as a whole."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.common.config import Config
from daemon.common.guard import SecretGuard
from daemon.common.settings import max_file_bytes


@dataclass
class Current:
    """What every part reads at the moment it acts (never a copy taken at start)."""

    config: Config
    guard: SecretGuard  # made from config.guard.never_store

    def guard_now(self) -> SecretGuard:
        """The never_store patterns in force now (for parts that keep a callable, not this object)."""
        return self.guard

    def max_index_bytes(self) -> int:
        """``watch.max_file_mb`` in force now, in bytes: a larger file is never read."""
        return max_file_bytes(self.config)
