"""The one back-off of the daemon: how long to wait before trying again after failures in a row.

A full disk (daemon/common/storage.py), a failing commit (daemon/files/tracker.py), an index that
cannot be written (daemon/local/indexer.py) and a git remote that cannot be reached (daemon/files/sync.py)
each wait ``first`` seconds after the first failure,
twice as long after each further one, never more than ``cap``.
"""

from __future__ import annotations

MAX_DOUBLINGS = 62  # past this the wait is the cap anyway; 2.0 ** 1024 would overflow a float


def backoff(failures: int, first: float, cap: float) -> float:
    """Seconds to wait after the ``failures``-th failure in a row: ``first``, doubling each time, at most ``cap``."""
    return min(cap, first * 2.0 ** min(failures - 1, MAX_DOUBLINGS))
