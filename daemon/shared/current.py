"""The configuration in force, shared by the daemon's parts: a reload replaces it as a whole."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.shared.config import Config
from daemon.shared.guard import SecretGuard


@dataclass
class Current:
    """What every part reads at the moment it acts (never a copy taken at start)."""

    config: Config
    guard: SecretGuard  # made from config.guard.never_store
