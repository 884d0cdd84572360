"""The circuit breaker in front of the store.

After one failure (refused, timeout, 5xx) the store counts as down: callers stop
waiting on it at once and a background probe, with a short timeout, looks again
every ``probe_interval_s``.  One successful probe closes the breaker.  A single
failure is enough because a hung link costs every caller the full timeout; the
probe is cheap, so a false alarm costs a few seconds of answers from L3.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Breaker:
    def __init__(self, probe_interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.probe_interval_s = probe_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._open = True  # nothing is known about the store until it has answered once
        self.last_error = "not connected yet"
        self.opened_at: float | None = clock()
        self.failures = 0

    @property
    def closed(self) -> bool:
        """True while the store is believed reachable."""
        return not self._open

    @property
    def state(self) -> str:
        return "open" if self._open else "closed"

    def success(self) -> bool:
        """Record a good answer; True when this closed an open breaker."""
        with self._lock:
            was_open = self._open
            self._open = False
            self.opened_at = None
            if not self.failures:
                self.last_error = ""  # "not connected yet" was never an error
            return was_open

    def failure(self, error: str) -> bool:
        """Record a failure; True when this opened a closed breaker."""
        with self._lock:
            was_closed = not self._open
            self._open = True
            self.failures += 1
            self.last_error = error
            if was_closed:
                self.opened_at = self._clock()
            return was_closed

    def snapshot(self) -> dict:
        with self._lock:
            down_for = round(self._clock() - self.opened_at, 1) if self._open and self.opened_at else None
            return {
                "state": self.state,
                "down_for_s": down_for,
                "failures": self.failures,
                "last_error": self.last_error,
                "probe_interval_s": self.probe_interval_s,
            }
