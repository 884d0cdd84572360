"""SIGHUP and SIGTERM noted from the first moment of ``memstrata run``, before the CLI is imported.

Standard library only: :func:`install_for` runs first thing in the ``memstrata`` command
(daemon/__main__.py), so a reload or a stop sent while the command still imports its CLI (60 ms,
several hundred on a loaded host) is noted instead of ending the process by the signal's default
action; the daemon's loop (daemon/service/loop.py) takes what was noted at its first turn.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

EARLY_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


class EarlySignals:
    """SIGHUP and SIGTERM noted from the first moment of ``memstrata run`` until the loop takes them.

    Building the daemon takes a second or more before :meth:`Loop.run` installs its handlers; a
    SIGHUP's default action in that window ended the process (issue 45: a reload 0.3-0.8 s after the
    start killed the daemon).  Noted here instead, then handed to the loop: a reload, or a stop, at
    its first turn.  SIGINT keeps its default (Ctrl-C on a foreground start interrupts at once).
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.installed = False

    def install(self) -> None:
        """In the main thread, before anything slow; child processes get the defaults back at exec."""
        for sig in EARLY_SIGNALS:
            signal.signal(sig, self._note)
        self.installed = True

    def _note(self, signum: int, _frame: object) -> None:
        self.pending.append(signum)

    def take(self) -> list[int]:
        """The signals noted so far (each once), forgotten here."""
        taken, self.pending = self.pending, []
        return taken


early_signals = EarlySignals()


# the group's options that take a value (daemon/front/cli.py): the word after them is no command
_VALUED = ("--config",)


def install_for(args: Sequence[str]) -> None:
    """Install the early handlers when ``args`` (the command line after the program) run the daemon."""
    words = iter(args)
    for word in words:
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            if word == "run":
                early_signals.install()
            return
