"""The thread a part that talks to the fleet's remote runs on: woken by the loop, stopped with a cut.

The pusher (daemon/files/sync.py) and the shared core (daemon/files/shared_sync.py) each wait on git
over the network, which must never hold the loop; both are woken by a word from the loop, and both
stop by cutting the git command under way (``cancel``), so what it did not deliver stays owed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from layers.daily.git.run import Cancel


class NetworkThread:
    """``_wake`` (the loop's word), ``_stop``, ``cancel`` (cuts a git command under way) and the thread."""

    def __init__(self) -> None:
        self.cancel = Cancel()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _begin(self, run: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """End the thread (a git command under way is cut); True when it ended within ``timeout``."""
        self._stop.set()
        self.cancel.cancel()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True
